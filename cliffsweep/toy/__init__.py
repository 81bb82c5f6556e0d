"""The embedded toy world: small base models cliffsweep builds itself, and synthetic tasks
that go through the same code paths as GSM8K (retain) and ChemL3 (learn)."""

from __future__ import annotations

# name -> builder config lives in cliffsweep.toy.models; listed here so spec validation is cheap.
TOY_MODELS: tuple[str, ...] = ("qwen2-tiny", "llama-tiny")


def ensure_model(name: str) -> str:
    """Local HF folder of toy model `name`, built and cached on first use."""
    from cliffsweep.toy.models import ensure_model as _ensure

    return _ensure(name)
