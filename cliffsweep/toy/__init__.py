"""The embedded toy world: small base models cliffsweep builds itself, and synthetic tasks
that go through the same code paths as GSM8K (retain) and ChemL3 (learn)."""

from __future__ import annotations

# Architectures: toy/models.py; folders: toy/cache.py (ensure_model). Listed here, importing
# nothing, so that spec validation is cheap.
TOY_MODELS: tuple[str, ...] = ("qwen2-tiny", "llama-tiny")
