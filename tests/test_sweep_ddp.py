"""Two Ray Train workers per trial (DDP over gloo): a stats method (EWC) and a gradient-mask
method (MIGU) train and get evaluated through the real sweep path."""

from __future__ import annotations

import pytest

from cliffsweep.orchestrator.spec import parse_spec

pytestmark = [pytest.mark.ray, pytest.mark.slow]


def test_two_worker_trials(tmp_path):
    import ray

    from cliffsweep.orchestrator.driver import run_sweep

    spec = parse_spec({
        "name": "ddp", "models": [{"name": "q", "path": "toy:qwen2-tiny"}],
        "methods": [{"name": "ewc"}, {"name": "migu"}], "lrs": [1e-3], "epochs": [1],
        "tasks": {"learn": {"name": "toy_facts", "params": {"n_eval": 20, "n_train": 64}},
                  "retain": [{"name": "toy_arith", "params": {"n_eval": 20}}]},
        "recipe": {"batch_size": 16, "max_seq_len": 128, "stats_examples": 32},
        "eval": {"points_per_trial": 1, "backend": "hf", "cpus_per_evaluator": 0.5},
        "resources": {"workers_per_trial": 2, "cpus_per_worker": 1, "max_concurrent_trials": 1},
        "store": str(tmp_path / "store"),
    })
    try:
        store = run_sweep(spec)
    finally:
        ray.shutdown()
    trials = store.read("trials")
    assert (trials["status"] == "done").all(), trials[["trial_id", "status", "error"]]
    # 64 examples / global batch 16 = 4 steps, whatever the number of workers
    assert (trials["steps"] == 4).all()
    evals = store.read("evals")
    assert set(evals["trial_id"]) == set(trials["trial_id"]) | {"q-base"}
    assert len(store.read("errors")) == 0


def test_two_worker_fsdp_trials_evaluated_by_vllm(tmp_path):
    """FSDP2 over gloo through the real sweep path: a stats method (SIB) and a frozen-base method
    (KL); the checkpoint gathered mid-training and the final one are served by vLLM, whose
    canary check proves it serves what rank 0 rebuilt and saved."""
    import ray

    from cliffsweep.orchestrator.driver import run_sweep

    spec = parse_spec({
        "name": "fsdp", "models": [{"name": "q", "path": "toy:qwen2-tiny"}],
        "methods": [{"name": "sib"}, {"name": "kl"}], "lrs": [3e-3], "epochs": [1],
        "tasks": {"learn": {"name": "toy_facts", "params": {"n_eval": 20, "n_train": 64}},
                  "retain": [{"name": "toy_arith", "params": {"n_eval": 20}}]},
        "recipe": {"batch_size": 16, "max_seq_len": 128, "stats_examples": 32},
        "eval": {"points_per_trial": 2, "backend": "vllm", "cpus_per_evaluator": 0.5, "kv_cache_mb": 32,
                 "max_model_len": 256},
        "resources": {"workers_per_trial": 2, "cpus_per_worker": 1, "max_concurrent_trials": 1,
                      "strategy": "fsdp"},
        "store": str(tmp_path / "store"),
    })
    try:
        store = run_sweep(spec, num_cpus=3)
    finally:
        ray.shutdown()
    trials = store.read("trials")
    assert (trials["status"] == "done").all(), trials[["trial_id", "status", "error"]]
    assert (trials["steps"] == 4).all()
    evals = store.read("evals")
    assert len(store.read("errors")) == 0, store.read("errors")["message"].tolist()
    for tid in trials["trial_id"]:
        assert sorted(set(evals.loc[evals["trial_id"] == tid, "step"])) == [2, 4], tid
