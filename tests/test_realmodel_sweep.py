"""The real-task path on a real instruct model: SmolLM2-135M-Instruct (GQA 9/3 heads, tied
embeddings, its own chat template; cliffsweep/realmodels.py) finetuned on ChemL3 and evaluated on
ChemL3 + GSM8K from tests/data as shipped (gzipped JSONL, read as they are), with sib and lora, through a local Ray cluster,
Ray Train, vLLM CPU evaluators that reload each checkpoint's weights, and the Parquet store.

Sized for 2 CPU cores: 2 training examples of at most 256 tokens, one optimizer step per trial,
one checkpoint per trial, 3 evaluation examples per task, 48 generated GSM8K tokens. The model is
weak at both tasks (it tests code paths, not science), so no accuracy is asserted, only that
every metric and sample landed and that the served checkpoints were the trained ones (the
canary check in every load, and the tied embedding really changed).
"""

from __future__ import annotations

from pathlib import Path

import pytest
import torch

from cliffsweep.sweep.grid import base_trial_id, expand_grid
from cliffsweep.orchestrator.specfile import parse_spec

pytestmark = [pytest.mark.slow, pytest.mark.ray, pytest.mark.vllm]

# A full finetune (SIB: its statistics, then full-weight checkpoints and their reload) and an
# adapter (LoRA: peft folders, merged into the CPU engine's weights, on this model's tied
# embedding; a GPU engine's LoRARequest is test_evals_backends') cover the real model's two
# checkpoint paths; plain SFT and KL add nothing on this model that the toy sweeps do not check (cut for
# the CI budget, issue 38).
METHODS = ["sib", "lora"]
N_EVAL = 3


def spec_for(store: str, data: Path):
    return parse_spec({
        "name": "realmodel",
        "models": [{"name": "smollm2", "path": "smollm2:135m-instruct"}],
        # SIB's Fig. 2 spectra at a token size: each Hessian-vector product of this model is
        # ~10 s on 2 cores at these lengths, and CI's statistics job took 11 minutes beside the
        # other lane with 2 eigenvalues x 3 iterations: the top one, 2 iterations (the least the
        # method takes) is the path; the full measurement is test_realmodels.py's
        "methods": [{"name": m, **({"params": {"hessian_top_k": 1, "hessian_iters": 2}} if m == "sib" else {})}
                    for m in METHODS],
        "lrs": [1e-4],
        "epochs": [1],
        "tasks": {"learn": {"name": "chem_l3", "params": {"path": str(data / "sciknoweval-chem-l3"),
                                                          "n_train": 2, "n_eval": N_EVAL}},
                  # zero-shot: the code path is the point, and 5-shot chat prompts (up to 1,739
                  # tokens, docs/evals.md) would not fit max_model_len 1024 nor the CI budget
                  "retain": [{"name": "gsm8k", "params": {"path": str(data / "gsm8k"), "n_eval": N_EVAL,
                                                          "max_tokens": 48, "protocol": "zeroshot"}}]},
        # full lr from the first step, so that one step visibly moves the weights
        "recipe": {"batch_size": 2, "max_seq_len": 256, "warmup_steps": 0, "cooldown_steps": 0,
                   "stats_examples": 2},
        # ChemL3 prompts reach ~900 tokens; fp32 KV of this model: 46 KB/token (30 layers x 3 kv heads x 64)
        # every item, every metric: the real tasks' full path (the staged one is the toy sweeps')
        "eval": {"points_per_trial": 1, "backend": "vllm", "cpus_per_evaluator": 0.5, "kv_cache_mb": 96,
                 "max_model_len": 1024, "adaptive": False},
        "resources": {"workers_per_trial": 1, "cpus_per_worker": 2, "max_concurrent_trials": 1},
        "store": store,
    })


@pytest.fixture(scope="module")
def swept(tmp_path_factory, smollm2_folder):
    import ray

    from cliffsweep.orchestrator.driver import run_sweep

    shipped = Path(__file__).resolve().parent / "data"  # *.jsonl.gz, as the datasets distribute them
    spec = spec_for(str(tmp_path_factory.mktemp("realmodel") / "store"), shipped)
    store = run_sweep(spec)
    yield spec, store
    ray.shutdown()


def test_every_trial_trains_and_both_tasks_are_scored(swept):
    spec, store = swept
    trials = store.read("trials").set_index("trial_id")
    grid = expand_grid(spec)
    assert sorted(trials.loc[[t.trial_id for t in grid], "method"]) == sorted(METHODS)
    errors = store.read("errors")
    assert errors.empty, errors[["trial_id", "kind", "message"]].to_string()
    evals, samples = store.read("evals"), store.read("samples")
    for tid in [t.trial_id for t in grid] + [base_trial_id("smollm2")]:
        if tid in trials.index:
            assert trials.loc[tid, "status"] == "done", trials.loc[tid, "error"]
            assert torch.isfinite(torch.tensor(trials.loc[tid, "final_loss"]))
        mine = evals[evals["trial_id"] == tid]
        assert set(mine["metric"][mine["task"] == "chem_l3"]) >= {"accuracy"}
        assert set(mine["metric"][mine["task"] == "gsm8k"]) >= {"accuracy", "strict_match", "flexible_extract", "numeric_match"}
        assert (mine["n"] == N_EVAL).all()
        got = samples[samples["trial_id"] == tid]
        assert sorted(got.groupby("task").size().items()) == [("chem_l3", N_EVAL), ("gsm8k", N_EVAL)]


def test_served_checkpoints_hold_the_trained_tied_embedding(swept, smollm2_folder):
    """Every load passed the canary (no errors above); here: the full finetune's (SIB's) checkpoints
    really differ from the base in the tied embedding, the tensor whose reload vLLM's CPU
    backend used to miss (evals/backends/vllm_backend.py ReloadExtension)."""
    from safetensors.torch import load_file

    spec, store = swept
    base = load_file(str(Path(smollm2_folder) / "model.safetensors"))["model.embed_tokens.weight"]
    ckpts = sorted(Path(spec.checkpoint_uri).glob("smollm2-sib-*/step-*/model.safetensors"))
    assert ckpts, f"no sib checkpoint under {spec.checkpoint_uri}"
    tuned = load_file(str(ckpts[-1]))
    assert "lm_head.weight" not in tuned  # tied: the head is the embedding
    assert not torch.equal(tuned["model.embed_tokens.weight"], base)


def test_sib_statistics_of_the_sweep_preserve_function_and_lower_retain_grad_norm(swept, smollm2_folder, real_data):
    """000 Sec. 4 on a real GQA model, with the alphas the sweep computed and stored."""
    import copy

    from safetensors.torch import load_file

    from cliffsweep.chat import render_prompt
    from cliffsweep.models import load_model
    from cliffsweep.trainables.methods import build_method

    spec, store = swept
    files = sorted(Path(store.uri).glob("stats/smollm2/sib-*.safetensors"))
    assert len(files) == 1, files
    stats = load_file(str(files[0]))
    before, after = float(stats["sib:grad_sq_before"]), float(stats["sib:grad_sq_after"])
    print(f"SIB ||grad L(D_R)||^2: {before:.2f} -> {after:.2f} (measured after the rescale)")
    assert after < 0.9 * before
    assert after == pytest.approx(float(stats["sib:grad_sq_after_predicted"]), rel=1e-3)
    # Fig. 2 from the store: the spectra the sweep stored once for this model, as analyze reads them
    from cliffsweep.analysis.curvature import curvature_table

    curv = curvature_table([store.uri])
    assert curv["model"].tolist() == ["smollm2"] and curv[["eig_base", "eig_sib"]].notna().all().all()  # k = 1

    base, tok = load_model(smollm2_folder)
    model = build_method("sib").prepare(copy.deepcopy(base), stats)
    ids = tok(render_prompt(tok, "Natalia sold clips to 48 of her friends. How many?"),
              add_special_tokens=False, return_tensors="pt")["input_ids"]
    with torch.no_grad():
        ref, new = base(ids).logits, model(ids).logits
    assert float((new - ref).abs().max()) <= 1e-5 * float(ref.abs().max())
