"""Crashes through the real sweep path: a model folder whose weights file is corrupt makes its
trial's worker crash on every attempt (retried, then recorded as failed, with the error) and its
evaluator actor crash at start (recorded in `errors`); the healthy model's trial, its
evaluations and the sweep itself carry on."""

from __future__ import annotations

import shutil

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
