"""The training curve and the tracker mirror without a cluster (issue 17): the `steps` table's
write units under resume, what the sync sends and what it does not send again, validation of
the `tracking:` section, a real tracker written twice without duplicates, and a tracker that is
down recorded instead of raised. The sweeps themselves: tests/test_tracking_sweep.py (slow)."""

from __future__ import annotations

import json
import subprocess
import sys
from datetime import datetime, timedelta, timezone

import pandas as pd
import pytest

from cliffsweep.sweep.spec import SpecError

from cliffsweep.orchestrator.specfile import parse_spec
from cliffsweep.storage.store import Store
from cliffsweep.tracking.sync import Syncer, behind, deltas, marks_of
from cliffsweep.trainables.steplog import StepLog, log_every, should_log
from objectstore import free_port

T0 = datetime(2026, 11, 24, tzinfo=timezone.utc)


def spec_data(store: str, tracking: dict | None = None) -> dict:
    return {"name": "unit", "models": [{"name": "q", "path": "toy:qwen2-tiny"}], "methods": [{"name": "sft"}],
            "lrs": [1e-3], "epochs": [1],
            "tasks": {"learn": {"name": "toy_facts"}, "retain": [{"name": "toy_arith"}]},
            "store": store, "tracking": tracking or {}}


def test_long_trials_keep_a_bounded_curve_and_every_checkpoint_step():
    assert log_every(40, 1000) == 1
    total, ckpts = 25_000, {8_333, 16_666, 25_000}
    every = log_every(total, 1000)
    kept = [s for s in range(1, total + 1) if should_log(s, total, every, ckpts)]
    assert len(kept) <= 1000 + len(ckpts) and ckpts <= set(kept) and kept[-1] == total


def test_a_resumed_attempt_rewrites_its_stretch_instead_of_adding_rows(tmp_path):
    store = Store(str(tmp_path / "store"))

    def train(attempt: int, start: int, upto: int, dies_after: int | None = None) -> None:
        log = StepLog(store, "t", attempt, start, total_steps=8, max_rows=1000, checkpoint_steps={4, 8})
        for step in range(start + 1, upto + 1):
            log.add(step, step / 4, 10 * step, 1.0 / step, {"ce": 1.0 / step}, 0.5, 1e-3, float(step))
            if step == dies_after:
                log.flush()  # a periodic flush, then the worker dies mid-stretch
                return
            if step in (4, 8):
                log.close_stretch(step)

    train(1, 0, 8, dies_after=6)   # checkpoint at 4; steps 5-6 flushed, then killed
    train(2, 4, 8)                 # resumed from the checkpoint at 4
    steps = store.read("steps").sort_values("step")
    assert steps["step"].tolist() == list(range(1, 9))  # each step once
    assert steps.set_index("step")["attempt"].to_dict() == {1: 1, 2: 1, 3: 1, 4: 1, 5: 2, 6: 2, 7: 2, 8: 2}
    assert json.loads(steps["terms"].iloc[0]) == {"ce": 1.0}
    train(1, 0, 8)  # a trial restarted from scratch (FSDP) rewrites every stretch
    assert sorted(store.read("steps")["step"]) == list(range(1, 9))


def tables(steps_upto: int, eval_steps: list[int], status: str):
    trials = pd.DataFrame([{"trial_id": "t1", "model": "q", "model_path": "toy:qwen2-tiny", "method": "sft",
                            "method_params": "{}", "optimizer": "adamw", "series": "sft", "lr": 1e-3, "epochs": 1,
                            "seed": 0, "round": 0, "status": status},
                           {"trial_id": "t2", "model": "q", "model_path": "toy:qwen2-tiny", "method": "sft",
                            "method_params": "{}", "optimizer": "adamw", "series": "sft", "lr": 1e-2, "epochs": 1,
                            "seed": 0, "round": 0, "status": "pending"}])
    steps = pd.DataFrame([{"trial_id": "t1", "attempt": 1, "step": s, "epoch": s / 4, "tokens": 10 * s,
                           "loss": 1.0 / s, "terms": json.dumps({"ce": 1.0 / s}), "grad_norm": 0.5, "lr": 1e-3,
                           "seconds": float(s), "logged_at": pd.Timestamp(T0 + timedelta(seconds=s))}
                          for s in range(1, steps_upto + 1)])
    evals = pd.DataFrame([{"trial_id": tid, "model": "q", "method": m, "step": s, "task": task, "metric": "accuracy",
                           "value": 0.25 + s / 100, "evaluated_at": pd.Timestamp(T0 + timedelta(seconds=100 + s))}
                          for tid, m, steps in (("q-base", "base", [0]), ("t1", "sft", eval_steps))
                          for s in steps for task in ("toy_facts", "toy_arith")])
    return trials, steps, evals


def _sent(spec, d, marks):
    """What the sync thread writes to the `tracking` table after sending `d`."""
    old = marks.get(d.trial_id, {})
    marks[d.trial_id] = {"run_id": "r", "status": d.status or old.get("status"),
                         "steps_to": max([p.step for p in d.steps] + [old.get("steps_to") or 0]),
                         "evals": json.dumps(sorted(set(json.loads(old.get("evals") or "[]")) | d.eval_labels))}


def test_the_sync_sends_what_is_new_and_nothing_twice(tmp_path):
    spec = parse_spec(spec_data(str(tmp_path / "s")))
    marks: dict = {}
    first = deltas(spec, *tables(3, [2], "running"), marks)
    assert [d.trial_id for d in first] == ["_sweep:unit", "t1"]  # t2: pending with nothing yet -> no run
    sweep, t1 = first
    assert sweep.parent and sweep.evals[0].values == {"base/q/toy_facts/accuracy": 0.25, "base/q/toy_arith/accuracy": 0.25}
    assert [p.step for p in t1.steps] == [1, 2, 3] and t1.status == "running"
    assert t1.steps[2].values["train/loss"] == pytest.approx(1 / 3) and t1.steps[2].values["train/ce"] == pytest.approx(1 / 3)
    assert [(p.step, sorted(p.values)) for p in t1.evals] == [(2, ["eval/toy_arith/accuracy", "eval/toy_facts/accuracy"])]
    assert t1.params["lr"] == 1e-3 and t1.params["workers_per_trial"] == 1
    for d in first:
        _sent(spec, d, marks)
    assert deltas(spec, *tables(3, [2], "running"), marks) == []  # nothing new: nothing sent
    (later,) = deltas(spec, *tables(4, [2, 4], "done"), marks)
    assert [p.step for p in later.steps] == [4] and [p.step for p in later.evals] == [4] and later.status == "done"


def test_the_tracking_section_is_checked_with_everything_else():
    data = spec_data("x", {"mlflow": {"tracking_uri": "http://h:5000", "api_key": "abc"},
                           "wandb": {"project": "p", "mode": "sometimes"}, "tensorboard": {}})
    data["lrs"] = [-1]
    with pytest.raises(SpecError) as e:
        parse_spec(data)
    text = str(e.value)
    for expected in ("tracking.mlflow.api_key: credentials are never read from the sweep file", "tracking.wandb.mode",
                     "tracking.tensorboard.dir", "lrs"):
        assert expected in text, text


def _store_with(tmp_path, tracking: dict, **kw) -> tuple[object, Store]:
    spec = parse_spec(spec_data(str(tmp_path / "store"), tracking))
    store = Store(spec.store_uri)
    store.write_json("spec.json", spec.model_dump())
    trials, steps, evals = tables(**kw)
    for tid, g in trials.groupby("trial_id"):
        store.write("trials", tid, g.to_dict("records"))
    store.write("steps", "t1__00000001", steps)
    for (tid, s), g in evals.groupby(["trial_id", "step"]):
        store.write("evals", f"{tid}__{s}", g.to_dict("records"))
    return spec, store


def test_tensorboard_gets_each_point_once_across_rounds_and_reruns(tmp_path):
    from trackers import tensorboard_scalars

    tb = tmp_path / "tb"
    spec, store = _store_with(tmp_path, {"tensorboard": {"dir": str(tb)}}, steps_upto=3, eval_steps=[2], status="running")
    syncer = Syncer(spec, store.uri)
    syncer.sync_once()
    syncer.sync_once()  # a second round with nothing new
    assert syncer.close() == {"tensorboard": None}
    _, store = _store_with(tmp_path, {"tensorboard": {"dir": str(tb)}}, steps_upto=4, eval_steps=[2, 4], status="done")
    again = Syncer(spec, store.uri)  # a re-run: what was sent is read from the store's `tracking` table
    again.sync_once()
    again.close()
    got = tensorboard_scalars(str(tb / "t1"))  # asserts no step twice per tag
    assert got["train/loss"] == pytest.approx({1: 1.0, 2: 0.5, 3: 1 / 3, 4: 0.25})
    assert got["eval/toy_facts/accuracy"] == pytest.approx({2: 0.27, 4: 0.29})
    assert behind(spec, store, store.read("trials"), store.read("evals")) == {"tensorboard": 0}
    assert marks_of(store.read("tracking"), "tensorboard")["t1"]["status"] == "done"


def test_a_tracker_that_is_down_is_recorded_not_raised(tmp_path, capsys):
    dead = f"http://127.0.0.1:{free_port()}"  # nothing listens there: connections are refused
    spec, store = _store_with(tmp_path, {"mlflow": {"tracking_uri": dead}}, steps_upto=2, eval_steps=[2], status="done")
    syncer = Syncer(spec, store.uri)
    syncer.sync_once()
    syncer.close()
    errors = store.read("errors")
    assert (errors["kind"] == "tracking").sum() == 1 and errors["message"].iloc[0].startswith("mlflow:")
    assert behind(spec, store, store.read("trials"), store.read("evals")) == {"mlflow": 2}  # the sweep's run and t1
    assert "mlflow failed" in capsys.readouterr().err
    from cliffsweep.orchestrator.summary import status_text

    assert "tracking mlflow: 2 run(s) behind the store; last error" in status_text(store)


def test_validate_warns_about_an_mlflow_server_that_does_not_answer(tmp_path):
    import yaml

    path = tmp_path / "sweep.yaml"
    path.write_text(yaml.safe_dump(spec_data(str(tmp_path / "store"), {
        "mlflow": {"tracking_uri": f"http://127.0.0.1:{free_port()}"}})))
    out = subprocess.run([sys.executable, "-m", "cliffsweep.cli", "validate", str(path)], capture_output=True,
                         text=True, timeout=300)
    assert out.returncode == 0, out.stderr
    assert "warning: tracking.mlflow.tracking_uri" in out.stderr and "does not answer" in out.stderr


def test_export_tracking_replays_a_store_into_a_tracker_its_sweep_did_not_name(tmp_path):
    """`cliffsweep export-tracking STORE --tracking FILE`: a store written without trackers,
    sent to TensorBoard afterwards; a second export sends nothing new."""
    import yaml

    from trackers import tensorboard_scalars

    spec, store = _store_with(tmp_path, {}, steps_upto=4, eval_steps=[2, 4], status="done")
    section = tmp_path / "tracking.yaml"
    section.write_text(yaml.safe_dump({"tensorboard": {"dir": str(tmp_path / "tb")}}))
    cmd = [sys.executable, "-m", "cliffsweep.cli", "export-tracking", store.uri, "--tracking", str(section)]
    for _ in range(2):
        out = subprocess.run(cmd, capture_output=True, text=True, timeout=300)
        assert out.returncode == 0 and "tensorboard: up to date with the store" in out.stdout, out.stdout + out.stderr
    got = tensorboard_scalars(str(tmp_path / "tb" / "t1"))  # no step twice
    assert got["train/loss"] == pytest.approx({1: 1.0, 2: 0.5, 3: 1 / 3, 4: 0.25})
    assert tensorboard_scalars(str(tmp_path / "tb" / "_sweep"))["base/q/toy_facts/accuracy"] == pytest.approx({0: 0.25})
    # the store's own sweep file names no tracker: said clearly, nothing sent
    bare = subprocess.run([sys.executable, "-m", "cliffsweep.cli", "export-tracking", store.uri],
                          capture_output=True, text=True, timeout=300)
    assert bare.returncode == 2 and "has no tracking section" in bare.stderr


def test_stores_without_trackers_are_left_alone(tmp_path):
    """`analyze` and `status` on a store whose spec.json names no tracker (an older store, or
    the analysis' synthetic one with a partial spec.json) send nothing and raise nothing."""
    from cliffsweep.orchestrator.summary import tracking_lines
    from cliffsweep.tracking.sync import log_analysis

    store = Store(str(tmp_path / "store"))
    store.write_json("spec.json", {"name": "synthetic", "lrs": [1e-3]})  # partial, as analysis/synthetic.py
    assert log_analysis(store.uri, pd.DataFrame(), str(tmp_path)) == {}
    assert tracking_lines(store, store.read("trials"), store.read("evals"), store.read("errors")) == []
