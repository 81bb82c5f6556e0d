"""Backend registry: name -> Backend class, imported lazily (vllm is heavy and optional)."""

from __future__ import annotations

from cliffsweep.registry import lookup
from cliffsweep.evals.backends.base import Backend, CheckpointRef
from cliffsweep.evals.canary import CANARY_FILE, StaleWeightsError

BACKENDS: dict[str, str] = {
    "vllm": "cliffsweep.evals.backends.vllm_backend:VLLMBackend",
    "hf": "cliffsweep.evals.backends.hf_backend:HFBackend",
}


def build_backend(name: str, base_path: str, **options) -> Backend:
    return lookup(BACKENDS, name, "eval backend")(base_path, **options)


__all__ = ["BACKENDS", "build_backend", "Backend", "CheckpointRef", "StaleWeightsError", "CANARY_FILE"]
