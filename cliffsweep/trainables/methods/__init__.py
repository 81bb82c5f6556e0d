"""Method registry: name -> Method class (one file per method, imported lazily)."""

from __future__ import annotations

import importlib

from cliffsweep.trainables.methods.base import Method, MethodParams

METHODS: dict[str, str] = {
    "sft": "cliffsweep.trainables.methods.sft:SFT",
    "lora": "cliffsweep.trainables.methods.lora:LoRA",
}


def method_class(name: str) -> type[Method]:
    if name not in METHODS:
        raise KeyError(f"unknown method {name!r}; valid: {sorted(METHODS)}")
    module, cls = METHODS[name].split(":")
    return getattr(importlib.import_module(module), cls)


def build_method(name: str, params: dict | None = None) -> Method:
    cls = method_class(name)
    return cls(cls.Params(**(params or {})))


__all__ = ["METHODS", "method_class", "build_method", "Method", "MethodParams"]
