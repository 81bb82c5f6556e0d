"""The one lookup behind every name -> class registry (methods, tasks, backends, optimizers).

Tables map a name to "module:attribute" so that heavy optional imports (vllm, peft) happen
only when that entry is used; an unknown name raises with the list of valid names."""

from __future__ import annotations

import importlib
from typing import Any


def lookup(table: dict[str, str], name: str, kind: str) -> Any:
    if name not in table:
        raise KeyError(f"unknown {kind} {name!r}; valid: {sorted(table)}")
    module, attr = table[name].split(":")
    return getattr(importlib.import_module(module), attr)
