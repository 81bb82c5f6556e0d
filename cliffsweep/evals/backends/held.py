"""A full checkpoint's weights held in memory (issue 61 part 2), as `HeldWeights`: from a live
model (what a trainer beside its evaluator hands over instead of a folder) or from a folder
(the same weights as the file path serves them: tests, bench/bench_reload.py).

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


def held_from_folder(folder: str | Path) -> HeldWeights:
    """The weights of a full checkpoint folder (every safetensors shard) and its canary."""
    from safetensors.torch import load_file

    tensors: dict[str, torch.Tensor] = {}
    for shard in sorted(Path(folder).glob("*.safetensors")):
        tensors.update(load_file(str(shard)))
    if not tensors:
        raise FileNotFoundError(f"{folder}: no safetensors weights")
    return HeldWeights(tensors, read_canary(folder))
