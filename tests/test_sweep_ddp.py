"""Two Ray Train workers per trial through the real sweep path: FSDP2 over gloo, a stats method
(SIB) and a frozen-base method (KL), evaluated by vLLM.

DDP's own sweep (EWC and MIGU on 2 workers, hf evaluation) was cut for the CI budget (issue 38,
fifth round): DDP's training loop with checkpointing runs through Ray Train in
tests/test_microbatch_loop.py, every penalty and mask method under DDP equals one process in
tests/test_methods_ddp.py and tests/test_methods_loss.py, and the 2-worker sweep path (statistics,
rank 0's checkpoint, evaluation) is the FSDP sweep's here."""

from __future__ import annotations

import pytest

from cliffsweep.orchestrator.specfile import parse_spec

pytestmark = [pytest.mark.ray, pytest.mark.slow]


def two_worker_spec(store: str, methods: list[str], eval_: dict, strategy: str):
    """qwen2-tiny, one lr, 64 learn examples (4 steps of 16), 2 workers per trial."""
    return parse_spec({
        "name": strategy, "models": [{"name": "q", "path": "toy:qwen2-tiny"}],
        "methods": [{"name": m} for m in methods], "lrs": [1e-3], "epochs": [1],
        "tasks": {"learn": {"name": "toy_facts", "params": {"n_eval": 20, "n_train": 64}},
                  "retain": [{"name": "toy_arith", "params": {"n_eval": 20}}]},
        "recipe": {"batch_size": 16, "max_seq_len": 128, "stats_examples": 32},
        "eval": {"cpus_per_evaluator": 0.5, **eval_},
        "resources": {"workers_per_trial": 2, "cpus_per_worker": 1, "max_concurrent_trials": 1,
                      "strategy": strategy},
        "store": store,
    })


def run_all_done(spec):
    """Run the sweep; every trial must be done after 4 steps (64 examples / global batch 16,
    whatever the number of workers) with no recorded error. Returns (store, trials, evals)."""
    import ray

    from cliffsweep.orchestrator.driver import run_sweep

    try:
        store = run_sweep(spec, num_cpus=3)
    finally:
        ray.shutdown()
    trials = store.read("trials")
    assert (trials["status"] == "done").all(), trials[["trial_id", "status", "error"]]
    assert (trials["steps"] == 4).all()
    assert len(store.read("errors")) == 0, store.read("errors")["message"].tolist()
    return store, trials, store.read("evals")


def test_two_worker_fsdp_trials_evaluated_by_vllm(tmp_path):
    """FSDP2 over gloo through the real sweep path: a stats method (SIB) and a frozen-base method
    (KL); the checkpoint gathered mid-training and the final one are served by vLLM, whose
    canary check proves it serves what rank 0 rebuilt and saved."""
    spec = two_worker_spec(str(tmp_path / "store"), ["sib", "kl"],
                           {"points_per_trial": 2, "backend": "vllm", "kv_cache_mb": 32,
                            "max_model_len": 256}, "fsdp")
    _, trials, evals = run_all_done(spec)
    for tid in trials["trial_id"]:
        assert sorted(set(evals.loc[evals["trial_id"] == tid, "step"])) == [2, 4], tid
