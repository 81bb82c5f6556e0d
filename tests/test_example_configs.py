"""The seeds' example files stay valid (issue 40 part 7): each is rewritten for this offline
machine, then `validate` and `plan` run on it, as a researcher would before a cluster run.

The rewrite: data paths (and a hub dataset id) to small fixtures written here in the files'
formats; hub models to local folders (the published config.json, the real SmolLM2 tokenizer);
lm-eval's GSM8K to the real GSM8K shipped in tests/data (lm-eval's own task YAML, its data
overridden). lm-eval's other hub tasks cannot load their data here: `validate` must name each of
them and nothing else (so the task names, the memory checks and every other field hold); then
they are swapped for the toy lm-eval task (one: a task may appear once) and `validate` and `plan`
must pass."""

from __future__ import annotations

import contextlib
import io
import json
import shutil
from pathlib import Path

import pytest
import yaml

ROOT = Path(__file__).resolve().parents[1]
EXAMPLES = ["seed001_optimizers", "seed003_talr", "seed004_rpsft"]
LOCAL_LM_TASKS = {"gsm8k"}  # lm-eval tasks whose data this repository ships (tests/data)
TOY_LM = {"task": "toy_arith_lm", "include_path": str(ROOT / "cliffsweep/toy/lm_eval_tasks"),
          "apply_chat_template": True}


def cli(*args: str) -> tuple[int, str]:
    from cliffsweep.cli import main

    out = io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(out):
        code = main(list(args))
    return code, out.getvalue()


def model_folder(hub: str, root: Path, tokenizer: str) -> str:
    """A local folder standing for hub model `hub`: its published config and a real tokenizer."""
    from transformers import GPT2Config

    from cliffsweep.planner.archs import PUBLISHED

    folder = root / hub.replace("/", "--")
    cfg = GPT2Config() if hub == "openai-community/gpt2" else PUBLISHED[hub].hf_config()
    cfg.save_pretrained(folder)
    for f in Path(tokenizer).iterdir():
        if f.name.startswith(("tokenizer", "special_tokens", "vocab", "merges")):
            shutil.copy(f, folder / f.name)
    return str(folder)


def fixture(root: Path, name: str, rows: list[dict]) -> str:
    path = root / name
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return str(path)


def is_hub_lm(task: dict) -> bool:
    return task["name"] == "lm_eval" and task["params"]["task"] not in LOCAL_LM_TASKS


def rewrite_data(task: dict, root: Path, gsm8k: Path) -> dict:
    """`task` with its data on this machine."""
    params = dict(task.get("params", {}))
    if task["name"] == "lm_eval" and params["task"] in LOCAL_LM_TASKS:
        params["overrides"] = {"dataset_path": "json", "dataset_name": None, "dataset_kwargs": {"data_files": {
            "train": str(gsm8k / "train.jsonl"), "test": str(gsm8k / "test.jsonl")}}}
        params["limit"] = 20
    if task["name"] == "loss" and "path" in params:
        params["path"] = fixture(root, "docs.jsonl", [{"text": f"Document {i}: the sky is blue, {i} times."} for i in range(60)])
    if task["name"] == "loss" and "of" in params:
        params["of"] = rewrite_data(params["of"], root, gsm8k)
    if task["name"] == "dataset":
        numeric = params.get("metric") == "number"
        rows = [{"prompt": f"What is {i} + {i}?", "completion": str(2 * i) if numeric else f"Answer {i}."}
                for i in range(200)]
        params["path"] = fixture(root, f"{Path(params['path']).stem}.jsonl", rows)
        if "eval_path" in params:
            params["eval_path"] = fixture(root, "eval.jsonl", rows[:50])
        params["n_eval"] = min(params.get("n_eval", 50), 50)
    return {**task, "params": params}


def rewritten(name: str, root: Path, tokenizer: str, gsm8k: Path, toy_lm: bool) -> Path:
    data = yaml.safe_load((ROOT / "cliffsweep/configs" / f"{name}.yaml").read_text())
    data["models"] = [{**m, "path": model_folder(m["path"], root, tokenizer)} for m in data["models"]]
    tasks = data["tasks"]
    tasks["learn"] = rewrite_data(tasks["learn"], root, gsm8k)
    tasks["retain"] = [rewrite_data(t, root, gsm8k) for t in tasks["retain"]]
    tasks["learn_suite"] = [rewrite_data(t, root, gsm8k) for t in tasks.get("learn_suite", [])]
    if toy_lm:  # the hub tasks become one local task per list (a task may appear once)
        for key, local in (("retain", {"name": "lm_eval", "params": {**TOY_LM, "limit": 20}}),
                           ("learn_suite", {"name": "toy_facts", "params": {"n_eval": 20}})):
            hub = [t for t in tasks[key] if is_hub_lm(t)]
            tasks[key] = [t for t in tasks[key] if t not in hub] + ([local] if hub else [])
    if "retain_data" in tasks:
        tasks["retain_data"] = rewrite_data(tasks["retain_data"], root, gsm8k)
    data["store"] = str(root / "store")
    relabel(data)
    path = root / f"{name}{'-toy' if toy_lm else ''}.yaml"
    path.write_text(yaml.safe_dump(data, sort_keys=False))
    return path


FIXTURE = "ours (this test's local stand-in)"


def relabel(data: dict) -> None:
    """The file's `sources:` kept valid after the rewrite: labels of settings the rewrite removed
    are dropped, and the settings it added are labelled as the test's."""
    from cliffsweep.sweep import sources
    from cliffsweep.sweep.spec import SweepSpec

    labels = data["sources"]["settings"]
    paths = [p for p, _ in sources.settings(SweepSpec.model_validate({**data, "sources": None}))]
    kept = {k: v for k, v in labels.items() if any(sources._covers(k, p) for p in paths)}
    added = {p: FIXTURE for p in paths if sources.label_of(p, kept) is None}
    data["sources"]["settings"] = {**kept, **added}


def offline(monkeypatch) -> None:
    """As on an air-gapped machine: a hub dataset fails at once instead of after retries (the
    libraries read their settings at import, so the environment alone is too late here)."""
    import datasets.config
    import huggingface_hub.constants

    monkeypatch.setattr(huggingface_hub.constants, "HF_HUB_OFFLINE", True)
    monkeypatch.setattr(datasets.config, "HF_HUB_OFFLINE", True)


@pytest.mark.parametrize("name", EXAMPLES)
def test_each_seed_example_validates_and_plans_on_local_data(name, tmp_path, smollm2_folder, real_data, monkeypatch):
    offline(monkeypatch)
    original = yaml.safe_load((ROOT / "cliffsweep/configs" / f"{name}.yaml").read_text())
    hub_lm = [t["params"]["task"] for key in ("learn_suite", "retain") for t in original["tasks"].get(key, [])
              if is_hub_lm(t)]
    as_is = rewritten(name, tmp_path, smollm2_folder, real_data / "gsm8k", toy_lm=False)
    code, out = cli("validate", str(as_is))
    problems = [line for line in out.splitlines() if line.startswith("  - ")]
    # every problem left is an lm-eval hub task's data, one per task: nothing else is wrong
    assert len(problems) == len(hub_lm) and (code != 0) == bool(hub_lm), out[-4000:]
    for task, line in zip(hub_lm, problems):
        assert f"lm_eval task '{task}': its data did not load" in line, out[-4000:]
    local = rewritten(name, tmp_path, smollm2_folder, real_data / "gsm8k", toy_lm=True)
    code, out = cli("validate", str(local))
    assert code == 0, out[-4000:]
    code, out = cli("plan", str(local))
    assert code == 0 and "exact lengths" in out, out[-4000:]
    assert "Settings (paper: 00" in out and "[ours]" in out and "[paper]" in out, out[:4000]


def test_plan_prices_a_hub_models_local_data_with_a_stand_in_tokenizer_and_says_so(tmp_path, smollm2_folder,
                                                                                    real_data, monkeypatch):
    """Local data, a hub model offline (issue 63 part 1): `plan` once refused ("is not a local
    folder, so its tokenizer cannot measure"); it measures the data with the packaged stand-in
    tokenizer, and the bill's notes say the lengths are a proxy."""
    offline(monkeypatch)
    path = rewritten("seed004_rpsft", tmp_path, smollm2_folder, real_data / "gsm8k", toy_lm=True)
    data = yaml.safe_load(path.read_text())
    data["models"][0]["path"] = "Qwen/Qwen2.5-1.5B-Instruct"
    path.write_text(yaml.safe_dump(data, sort_keys=False))
    code, out = cli("plan", str(path))
    assert code == 0, out
    assert "with a stand-in tokenizer, since 'Qwen/Qwen2.5-1.5B-Instruct' is not on this machine" in out, out
    assert "SmolLM2-135M-Instruct tokenizer + chat template (proxy)" in out, out
