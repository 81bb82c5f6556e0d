"""Real sweeps mirrored to real trackers (issue 17): an MLflow tracking server on loopback, W&B
in offline mode, TensorBoard event files; each read back with the tool's own reader and
compared with the store, which stays the source of truth (a killed MLflow server never stops
the sweep; a re-run fills in what it missed)."""

from __future__ import annotations

import math
import os
import subprocess
import sys
import time
from pathlib import Path

import pandas as pd
import pytest
import yaml

from cliffsweep.sweep.grid import base_trial_id, expand_grid
from cliffsweep.orchestrator.specfile import parse_spec
from cliffsweep.storage.store import Store
from cliffsweep.tracking.base import run_key, sweep_run_id
from invariant import assert_invariant
from trackers import MlflowServer, mlflow_runs, tensorboard_scalars, wandb_history

pytestmark = [pytest.mark.ray, pytest.mark.slow]

SECRETS = {"WANDB_API_KEY": "wandb-secret-0123456789abcdef0123456789abcdef",
           "MLFLOW_TRACKING_TOKEN": "mlflow-secret-token-5f1c2d"}


def sweep(tmp: Path, lrs, tracking: dict) -> dict:
    """Trials of 4 steps (32 examples, batch 16, 2 epochs), checkpoints at steps 2 and 4."""
    return {
        "name": "trk", "models": [{"name": "q", "path": "toy:qwen2-tiny"}], "methods": [{"name": "sft"}],
        "lrs": list(lrs), "epochs": [2],
        "tasks": {"learn": {"name": "toy_facts", "params": {"n_eval": 20, "n_train": 32}},
                  "retain": [{"name": "toy_arith", "params": {"n_eval": 20}}]},
        "recipe": {"batch_size": 16, "max_seq_len": 128},
        "eval": {"points_per_trial": 2, "backend": "hf", "cpus_per_evaluator": 0.5},
        "resources": {"max_concurrent_trials": 1, "max_retries": 1},
        "store": str(tmp / "store"),
        "tracking": {"interval_s": 1, **tracking},
    }


def cli(*args, **kw) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "cliffsweep.cli", *map(str, args)], capture_output=True, text=True,
                          env={**os.environ, **SECRETS}, timeout=900, **kw)


def _same(a: float, b: float) -> bool:
    return (math.isnan(a) and math.isnan(b)) or math.isclose(a, b, rel_tol=1e-6, abs_tol=1e-9)


def expected(store: Store) -> dict[str, dict[str, dict[int, float]]]:
    """trial id (and the sweep's run) -> metric key -> {step: value}, from the store alone."""
    out: dict = {}
    for r in store.read("steps").itertuples(index=False):
        m = out.setdefault(r.trial_id, {})
        m.setdefault("train/loss", {})[r.step] = r.loss
        m.setdefault("train/lr", {})[r.step] = r.lr
        m.setdefault("train/tokens", {})[r.step] = float(r.tokens)
    for r in store.read("evals").itertuples(index=False):
        if r.method == "base":
            out.setdefault(sweep_run_id("trk"), {}).setdefault(f"base/{r.model}/{r.task}/{r.metric}", {})[0] = r.value
        else:
            out.setdefault(r.trial_id, {}).setdefault(f"eval/{r.task}/{r.metric}", {})[r.step] = r.value
    return out


def assert_metrics_equal(got: dict[str, dict[int, float]], want: dict[str, dict[int, float]], who: str) -> None:
    for key, points in want.items():
        assert key in got, f"{who}: {key} missing; has {sorted(got)}"
        assert set(got[key]) == set(points), f"{who} {key}: steps {sorted(got[key])} != store's {sorted(points)}"
        for step, value in points.items():
            assert _same(got[key][step], value), f"{who} {key} step {step}: {got[key][step]} != store's {value}"


def test_sweep_mirrored_to_mlflow_wandb_and_tensorboard_through_an_mlflow_outage(tmp_path):
    """One sweep for both stories (the two used to be a sweep each): MLflow dies with the sweep's
    first checkpoint, the sweep goes on (the store is the source of truth, W&B and TensorBoard
    keep mirroring), and a re-run once MLflow is back fills in what it missed; then every
    tracker holds exactly what the store holds."""
    server = MlflowServer(tmp_path / "mlflow").start()
    try:
        data = sweep(tmp_path, [1e-3, 1e30], {  # 1e30 diverges: its curve ends in a NaN loss
            "mlflow": {"tracking_uri": server.uri}, "close_timeout_s": 30,
            "wandb": {"project": "trk", "mode": "offline", "dir": str(tmp_path / "wandb")},
            "tensorboard": {"dir": str(tmp_path / "tb")}})
        spec = parse_spec(data)
        path = tmp_path / "sweep.yaml"
        path.write_text(yaml.safe_dump(data))
        proc = subprocess.Popen([sys.executable, "-m", "cliffsweep.cli", "run", str(path)], stdout=subprocess.PIPE,
                                stderr=subprocess.STDOUT, text=True, env={**os.environ, **SECRETS})
        store = Store(str(tmp_path / "store"))
        deadline = time.time() + 600
        while store.read("checkpoints").empty and proc.poll() is None and time.time() < deadline:
            time.sleep(0.5)
        server.kill()  # the tracker dies with the sweep's first checkpoint
        out, _ = proc.communicate(timeout=900)
        assert proc.returncode == 0, out[-4000:]
        assert "tracking: mlflow failed" in out, out[-4000:]
        diverged = frozenset(t.trial_id for t in expand_grid(spec) if t.lr == 1e30)
        assert_invariant(store, spec, diverged=diverged)  # every grid point and evaluation is in the store regardless
        assert {base_trial_id("q")} <= set(store.read("evals")["trial_id"])
        status = cli("status", tmp_path / "store")
        assert "tracking mlflow:" in status.stdout and "behind the store" in status.stdout, status.stdout
        assert "last error" in status.stdout, status.stdout

        server.start()  # back, same port and database: the re-run sends what it missed
        rerun = cli("run", path)
        assert rerun.returncode == 0, rerun.stdout[-3000:] + rerun.stderr[-3000:]
        assert "tracking mlflow: up to date with the store" in cli("status", tmp_path / "store").stdout
        analyze = cli("analyze", tmp_path / "store", "--out", tmp_path / "report", "--n-boot", "20")
        assert analyze.returncode == 0, analyze.stdout[-3000:] + analyze.stderr[-3000:]
        assert "mlflow: regimes tagged, report attached" in analyze.stdout, analyze.stdout
        assert "q: training curves" in (tmp_path / "report" / "report.html").read_text()  # loss vs step, in the report

        store = Store(str(tmp_path / "store"))
        trials = store.read("trials").set_index("trial_id")
        assert sorted(trials["status"]) == ["diverged", "done"]
        steps = store.read("steps")
        assert not steps.duplicated(["trial_id", "step"]).any()
        want = expected(store)
        frontiers = pd.read_parquet(tmp_path / "report" / "frontiers.parquet")
        regime = frontiers.set_index("series")["regime"]["sft"]

        # MLflow: one run per trial under the sweep's run, params, curves and evaluations as in the store
        runs = mlflow_runs(server.uri, "trk")
        assert set(runs) == set(trials.index) | {sweep_run_id("trk")}
        parent = runs[sweep_run_id("trk")]
        assert {"report.html", "frontiers.parquet"} <= set(parent["artifacts"]), parent["artifacts"]
        for tid, r in runs.items():
            assert_metrics_equal(r["metrics"], want[tid], f"mlflow {tid}")
            if tid == sweep_run_id("trk"):
                continue
            row = trials.loc[tid]
            assert r["tags"]["mlflow.parentRunId"] == parent["run"].info.run_id
            assert float(r["params"]["lr"]) == row["lr"] and r["params"]["method"] == "sft"
            assert r["params"]["workers_per_trial"] == "1" and r["params"]["epochs"] == "2"
            assert r["tags"]["cliffsweep.status"] == row["status"]
            assert r["run"].info.status == ("FINISHED" if row["status"] == "done" else "FAILED")
            assert r["tags"]["cliffsweep.regime"] == regime

        # W&B offline runs, read with wandb's own reader: same ids from the trial ids, same numbers
        wb = wandb_history(str(tmp_path / "wandb"))
        assert set(wb) == {run_key("trk", t) for t in [*trials.index, sweep_run_id("trk")]}
        for tid in [*trials.index, sweep_run_id("trk")]:
            r = wb[run_key("trk", tid)]
            assert r["group"] == "trk"
            got: dict = {}
            for item in r["history"]:
                axis = item.get("train/step", item.get("eval/step"))
                for k, v in item.items():
                    if k.startswith(("train/", "eval/", "base/")) and not k.endswith("/step"):
                        got.setdefault(k, {})[axis] = float("nan") if v in ("NaN", "nan") else v
            assert_metrics_equal(got, want[tid], f"wandb {tid}")
            if tid != sweep_run_id("trk"):
                assert r["summary"]["status"] == trials.loc[tid, "status"]
                assert r["summary"]["regime"] == regime
                assert r["config"]["lr"] == trials.loc[tid, "lr"]

        # TensorBoard event files, read with tensorboard's EventAccumulator
        for tid in trials.index:
            assert_metrics_equal(tensorboard_scalars(str(tmp_path / "tb" / tid)), want[tid], f"tensorboard {tid}")
        assert_metrics_equal(tensorboard_scalars(str(tmp_path / "tb" / "_sweep")), want[sweep_run_id("trk")],
                             "tensorboard sweep")

        # credentials come from the environment and are written nowhere
        for text in (out, rerun.stdout, rerun.stderr, analyze.stdout, analyze.stderr):
            assert not any(s in text for s in SECRETS.values())
        for root in ("store", "wandb", "tb", "report"):
            for f in (tmp_path / root).rglob("*"):
                if f.is_file():
                    blob = f.read_bytes()
                    assert not any(s.encode() in blob for s in SECRETS.values()), f"a credential in {f}"
    finally:
        server.kill()
