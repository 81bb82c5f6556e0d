"""Checks from the models' own configs, before anything starts (orchestrator/preflight.py)."""

from __future__ import annotations

import subprocess
import sys

import yaml

from cliffsweep.models import context_length, engine_context
from cliffsweep.orchestrator.preflight import preflight_problems
from cliffsweep.orchestrator.specfile import parse_spec


def spec(**over):
    data = {"name": "t", "models": [{"name": "m", "path": "toy:qwen2-tiny"}], "methods": [{"name": "sft"}],
            "lrs": [1e-3], "tasks": {"learn": {"name": "toy_facts"}, "retain": [{"name": "toy_arith"}]}}
    data.update(over)
    return data


def test_max_model_len_above_the_models_context_is_a_problem_for_vllm():
    s = parse_spec(spec(eval={"max_model_len": 1024}))
    cfgs = {"m": {"max_position_embeddings": 256}}
    (p,) = preflight_problems(s, cfgs, "vllm")
    assert p.startswith("eval.max_model_len: 1024 exceeds the context of model 'm' (256 tokens")
    assert preflight_problems(s, cfgs, "hf") == []  # the HF backend has no such limit
    assert preflight_problems(s, {"m": None}, "vllm") == []  # a hub id: checked at run time
    assert preflight_problems(parse_spec(spec(eval={"max_model_len": 256})), cfgs, "vllm") == []


def test_custom_code_is_refused():
    s = parse_spec(spec())
    (p,) = preflight_problems(s, {"m": {"auto_map": {"AutoModel": "x.Y"}}}, "vllm")
    assert "never runs remote code" in p


def test_context_length_and_engine_default(tmp_path):
    assert context_length({"text_config": {"max_position_embeddings": 99}}) == 99
    assert context_length({}) is None
    from cliffsweep.toy.cache import ensure_model

    assert engine_context(None, ensure_model("qwen2-tiny")) == 256  # the toy's own context
    assert engine_context(128, ensure_model("qwen2-tiny")) == 128


def test_run_with_an_impossible_context_starts_nothing(tmp_path):
    """Measured on main before: validate said OK and run trained every trial, then every
    evaluation failed. Now both refuse at once, and nothing is written."""
    path = tmp_path / "s.yaml"
    path.write_text(yaml.safe_dump(spec(eval={"max_model_len": 1024}, store=str(tmp_path / "store"))))
    for cmd in ("validate", "run"):
        r = subprocess.run([sys.executable, "-m", "cliffsweep.cli", cmd, str(path)],
                           capture_output=True, text=True, timeout=120)
        assert r.returncode == 2 and "eval.max_model_len: 1024 exceeds the context" in r.stderr, r.stderr
    assert not (tmp_path / "store").exists()


def test_preflight_reads_no_hub_data_for_a_method_that_draws_retain_data(monkeypatch):
    """The paper grid's EWC draws D_R from the hub's GSM8K: preflight must not download it (CI
    has no hub; stop 35's cluster run failed here). Hub data is read by the trial, at run time."""
    import huggingface_hub.constants

    from cliffsweep.orchestrator.preflight import task_data_problems

    monkeypatch.setattr(huggingface_hub.constants, "HF_HUB_OFFLINE", True)  # a download raises at once
    s = parse_spec(spec(methods=[{"name": "sft"}, {"name": "ewc"}],
                        tasks={"learn": {"name": "toy_facts"}, "retain": [{"name": "gsm8k"}]}))
    assert task_data_problems(s) == []
