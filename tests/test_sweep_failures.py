"""Crashes through the real sweep path: a model folder whose weights file is corrupt makes its
trial's worker crash on every attempt (retried, then recorded as failed, with the error) and its
evaluator actor crash at start (recorded in `errors`); the healthy model's trial, its
evaluations and the sweep itself carry on."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from cliffsweep.orchestrator.grid import base_trial_id, expand_grid
from cliffsweep.orchestrator.spec import parse_spec

pytestmark = [pytest.mark.ray]


@pytest.fixture(scope="module")
def swept(tmp_path_factory):
    import ray

    from cliffsweep.orchestrator.driver import run_sweep
    from cliffsweep.toy import ensure_model

    root = tmp_path_factory.mktemp("failures")
    broken = root / "broken-model"
    shutil.copytree(ensure_model("qwen2-tiny"), broken)
    (broken / "model.safetensors").write_bytes(b"not a safetensors file")
    spec = parse_spec({
        "name": "failures",
        "models": [{"name": "ok", "path": "toy:qwen2-tiny"}, {"name": "broken", "path": str(broken)}],
        "methods": [{"name": "sft"}], "lrs": [1e-3], "epochs": [1],
        "tasks": {"learn": {"name": "toy_facts", "params": {"n_eval": 20, "n_train": 32}},
                  "retain": [{"name": "toy_arith", "params": {"n_eval": 20}}]},
        "recipe": {"batch_size": 16, "max_seq_len": 128},
        "eval": {"points_per_trial": 1, "backend": "hf", "cpus_per_evaluator": 0.5},
        "resources": {"workers_per_trial": 1, "cpus_per_worker": 1, "max_retries": 1},
        "store": str(root / "store"),
    })
    try:
        store = run_sweep(spec, num_cpus=3)
    finally:
        ray.shutdown()
    return spec, store


def test_crashing_trial_is_retried_then_recorded_as_failed(swept):
    spec, store = swept
    ids = {t.model: t.trial_id for t in expand_grid(spec)}
    trials = store.read("trials").set_index("trial_id")
    assert trials.loc[ids["ok"], "status"] == "done"
    bad = trials.loc[ids["broken"]]
    assert bad["status"] == "failed"
    assert bad["attempt"] == 2  # the first run and one retry (max_retries: 1)
    assert "safetensors" in bad["error"].lower() or "header" in bad["error"].lower(), bad["error"]
    errors = store.read("errors")
    retries = errors[(errors["trial_id"] == ids["broken"]) & (errors["kind"] == "trial_retry")]
    assert len(retries) == 1 and retries["message"].str.len().min() > 0


def test_crashing_evaluator_is_recorded_and_the_rest_evaluated(swept):
    spec, store = swept
    ids = {t.model: t.trial_id for t in expand_grid(spec)}
    errors = store.read("errors")
    assert (errors[errors["trial_id"] == base_trial_id("broken")]["kind"] == "eval").any(), errors
    evals = store.read("evals")
    assert {base_trial_id("ok"), ids["ok"]} <= set(evals["trial_id"])
    assert set(evals.loc[evals["trial_id"] == ids["ok"], "role"]) == {"learn", "retain"}
    assert not (evals["model"] == "broken").any()


def test_interrupted_run_leaves_pending_trials_and_resumes(tmp_path):
    """Ctrl-C during `cliffsweep run`: trials Tune stopped go back to pending (none is left
    'running'), the command says how to resume and exits 1; running it again finishes the grid
    without duplicating a row."""
    import os
    import signal
    import subprocess
    import sys
    import time

    import yaml

    from cliffsweep.orchestrator.store import Store

    store_dir = tmp_path / "store"
    sweep = tmp_path / "sweep.yaml"
    sweep.write_text(yaml.safe_dump({
        "name": "interrupt", "models": [{"name": "q", "path": "toy:qwen2-tiny"}],
        "methods": [{"name": "sft"}], "lrs": [1e-3, 3e-3, 1e-2], "epochs": [1],
        "tasks": {"learn": {"name": "toy_facts", "params": {"n_eval": 20, "n_train": 64}},
                  "retain": [{"name": "toy_arith", "params": {"n_eval": 20}}]},
        "recipe": {"batch_size": 16, "max_seq_len": 128},
        "eval": {"points_per_trial": 1, "backend": "hf", "cpus_per_evaluator": 0.5},
        "resources": {"max_concurrent_trials": 1},
        "store": str(store_dir),
    }))
    cmd = [sys.executable, "-m", "cliffsweep.cli", "run", str(sweep)]
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    deadline = time.time() + 240
    while time.time() < deadline:  # interrupt once a trial runs (Tune's loop is live)
        trials = Store(str(store_dir)).read("trials")
        if not trials.empty and (trials["status"] == "running").any():
            break
        time.sleep(0.5)
    else:
        proc.kill()
        pytest.fail("no trial started within 240 s")
    os.kill(proc.pid, signal.SIGINT)
    out, _ = proc.communicate(timeout=240)
    trials = Store(str(store_dir)).read("trials")
    assert proc.returncode == 1, out[-3000:]
    assert "Interrupted:" in out and "Run the same command again to resume" in out
    assert not (trials["status"] == "running").any(), trials[["trial_id", "status"]]
    assert (trials["status"] == "pending").any()

    again = subprocess.run(cmd, capture_output=True, text=True, timeout=600)
    assert again.returncode == 0, again.stdout[-3000:] + again.stderr[-3000:]
    store = Store(str(store_dir))
    trials, evals = store.read("trials"), store.read("evals")
    assert len(trials) == 3 and (trials["status"] == "done").all()
    assert not evals.duplicated(["trial_id", "step", "task", "metric"]).any()
    assert set(evals["trial_id"]) == set(trials["trial_id"]) | {"q-base"}


def _kill_train_worker_after(checkpoint: Path, stop) -> None:
    """SIGKILL the Ray Train worker (a crash, as an OOM kill or a lost node would be) once Ray
    Train has registered `checkpoint` (its folder appears earlier, when the upload starts)."""
    import json
    import os
    import signal
    import time

    import psutil

    snapshot = checkpoint.parent / "checkpoint_manager_snapshot.json"

    def registered() -> bool:
        try:
            results = json.loads(snapshot.read_text())["checkpoint_results"]
        except (OSError, ValueError, KeyError):  # not written yet, or being written
            return False
        return checkpoint.name in {r["checkpoint_dir_name"] for r in results}

    while not stop.is_set() and not registered():
        time.sleep(0.02)
    # only this test's Ray cluster: its raylet, and so its workers, descend from this process
    for p in psutil.Process().children(recursive=True):
        try:
            if p.cmdline() and p.cmdline()[0].startswith("ray::RayTrainWorker"):
                os.kill(p.pid, signal.SIGKILL)
        except psutil.NoSuchProcess:
            continue


@pytest.mark.slow
def test_killed_worker_resumes_from_its_checkpoint_to_the_same_weights(tmp_path):
    """A trial whose worker is killed after its first checkpoint is retried and continues from
    that checkpoint (weights, optimizer, schedule, data position: trainables/resume.py): it ends
    with exactly the weights of an uninterrupted run, and only its two last checkpoints keep
    the training state."""
    import threading

    import ray
    from safetensors.torch import load_file

    from cliffsweep.orchestrator.driver import run_sweep

    def spec(store):
        return parse_spec({
            "name": "resume", "models": [{"name": "q", "path": "toy:qwen2-tiny"}],
            "methods": [{"name": "sft"}], "lrs": [1e-3], "epochs": [4],  # 400 examples: 100 steps
            "tasks": {"learn": {"name": "toy_facts", "params": {"n_eval": 20}},
                      "retain": [{"name": "toy_arith", "params": {"n_eval": 20}}]},
            "recipe": {"batch_size": 16, "max_seq_len": 128},
            "eval": {"points_per_trial": 4, "backend": "hf", "cpus_per_evaluator": 0.5},
            "resources": {"max_retries": 1},
            "store": str(store),
        })

    reference, crashed = spec(tmp_path / "reference"), spec(tmp_path / "crashed")
    (tid,) = [t.trial_id for t in expand_grid(crashed)]
    try:
        ref_store = run_sweep(reference, num_cpus=3)
    finally:
        ray.shutdown()
    ckpts = tmp_path / "crashed" / "checkpoints" / tid
    stop = threading.Event()
    killer = threading.Thread(target=_kill_train_worker_after, args=(ckpts / "step-000025", stop))
    killer.start()
    try:
        store = run_sweep(crashed, num_cpus=3)
    finally:
        stop.set()
        killer.join()
        ray.shutdown()

    row = store.read("trials").set_index("trial_id").loc[tid]
    assert row["status"] == "done" and row["attempt"] == 2, row
    assert 25 <= row["resumed_from_step"] < row["steps"] == 100, row
    errors = store.read("errors")
    assert (errors["kind"] == "trial_retry").sum() == 1
    final = f"checkpoints/{tid}/step-000100/model.safetensors"
    got, want = load_file(tmp_path / "crashed" / final), load_file(tmp_path / "reference" / final)
    assert all(ref_store.read("trials")["resumed_from_step"] == 0)
    assert got.keys() == want.keys() and all((got[k] == want[k]).all() for k in want)
    with_state = sorted(p.parent.name for p in ckpts.glob("step-*/train_state.pt"))
    assert with_state == ["step-000075", "step-000100"]
    evals = store.read("evals")
    assert sorted(set(evals.loc[evals["trial_id"] == tid, "step"])) == [25, 50, 75, 100]
    assert not evals.duplicated(["trial_id", "step", "task", "metric"]).any()
