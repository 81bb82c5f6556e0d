"""The evaluator actor's body (evaluator/actor.py) after a load that raised: the load is tried
once more on a fresh engine, and after a second failure the next request gets a fresh engine
too. On an H200 (docs/gpu.md, 2026-11-28) a vLLM reload that raised halfway left the engine's
layers on the meta device; the evaluator kept that engine, and every later evaluation on it
failed. Real parts: the hf backend and a vLLM engine on a random toy model, a real store."""

from __future__ import annotations

import shutil

import pytest

from cliffsweep.evaluator.actor import Evaluator
from cliffsweep.evaluator.request import EvalRequest
from cliffsweep.storage.store import Store
from cliffsweep.sweep.gpushare import GpuShare


def _request(path: str, step: int) -> EvalRequest:
    return EvalRequest(trial_id="t", model="toy", method="sft", series="sft", optimizer="adamw", lr=1e-3,
                       epochs=1, seed=0, step=step, epoch=1.0, checkpoint=path)


@pytest.mark.parametrize("backend", ["hf", pytest.param("vllm", marks=pytest.mark.vllm)])
def test_a_load_that_raised_is_retried_on_a_fresh_engine_and_the_engine_is_not_kept(tmp_path, backend, monkeypatch):
    """vllm: the old engine is shut down (close) before the fresh one starts, and the fresh one
    serves the good checkpoint, which its canary proves. Its engine core runs in-process, as in
    tests/test_evals_backends.py (the whole test 16 s instead of 92 s with a spawned core, in
    .ci/run; the same close and reload)."""
    monkeypatch.setenv("VLLM_ENABLE_V1_MULTIPROCESSING", "0")
    from test_evals_backends import (
        _perturbed,  # a full checkpoint with changed weights and its canary
    )

    from cliffsweep.toy.models import random_model

    base = random_model("qwen2-tiny", str(tmp_path / "base"), seed=0)
    good = _perturbed(base, str(tmp_path / "good"), seed=1, scale=0.1)
    broken = str(tmp_path / "broken")  # its weights file unreadable: every load of it raises
    shutil.copytree(good, broken)
    (tmp_path / "broken" / "model.safetensors").write_bytes(b"not a safetensors file")
    store = str(tmp_path / "store")
    options = {"kv_cache_mb": 32, "max_model_len": 256, "enable_lora": False, "enforce_eager": True} \
        if backend == "vllm" else {}
    ev = Evaluator(base, "float32", backend, options, [("learn", "toy_facts", {"n_eval": 4})], store, "",
                   GpuShare(0, None, "evaluator", "eval.gpus_per_evaluator"))
    assert ev.engine_starts == 1

    with pytest.raises(Exception, match="(?i)safetensors|header"):
        ev.evaluate(_request(broken, 1))
    assert ev.engine_starts == 2  # tried once more, on a fresh engine

    assert len(ev.evaluate(_request(good, 2))) == 1
    assert ev.engine_starts == 3  # the engine the failure left was replaced before this request
    ev.evaluate(_request(good, 3))
    assert ev.engine_starts == 3  # after a good load the engine is kept
    evals = Store(store).read("evals")
    assert sorted(evals["step"].unique()) == [2, 3]  # nothing of the failed one
    # each evaluation keeps the canary distance its load measured: fp32, the same weights
    assert evals["canary_distance"].notna().all() and (evals["canary_distance"] < 1e-4).all()
    ev.close()
