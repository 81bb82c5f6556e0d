"""Where a toy model's pretrained folder comes from: the weights packaged with cliffsweep
(toy/weights/), or, when they are missing (a stripped install), a build (toy/build.py) cached
under CACHE_DIR once."""

from __future__ import annotations

import os
from pathlib import Path

from cliffsweep.toy.models import WEIGHTS_DIR, check_name

CACHE_DIR = Path(os.environ.get("CLIFFSWEEP_TOY_CACHE", Path.home() / ".cache" / "cliffsweep" / "toy"))


def packaged_path(name: str) -> Path:
    return WEIGHTS_DIR / name


def ensure_model(name: str) -> str:
    """Folder of the pretrained toy model `name`: the packaged weights, or (if they are
    missing, e.g. a stripped install) a build cached under CACHE_DIR."""
    check_name(name)
    folder = packaged_path(name)
    if (folder / "model.safetensors").exists():
        return str(folder)
    cached = CACHE_DIR / name
    if not (cached / "model.safetensors").exists():
        from cliffsweep.toy.build import build_model

        build_model(name, str(cached))
    return str(cached)
