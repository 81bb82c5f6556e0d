"""Backend registry: name -> Backend class, imported lazily (vllm is heavy and optional)."""

from __future__ import annotations

import importlib

from cliffsweep.evals.backends.base import Backend, CheckpointRef, StaleWeightsError, CANARY_FILE

BACKENDS: dict[str, str] = {
    "vllm": "cliffsweep.evals.backends.vllm_backend:VLLMBackend",
    "hf": "cliffsweep.evals.backends.hf_backend:HFBackend",
}


def build_backend(name: str, base_path: str, **options) -> Backend:
    if name not in BACKENDS:
        raise KeyError(f"unknown eval backend {name!r}; valid: {sorted(BACKENDS)}")
    module, cls = BACKENDS[name].split(":")
    return getattr(importlib.import_module(module), cls)(base_path, **options)


__all__ = ["BACKENDS", "build_backend", "Backend", "CheckpointRef", "StaleWeightsError", "CANARY_FILE"]
