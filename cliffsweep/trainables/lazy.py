"""torch, and the training modules that import it, loaded on first use by the methods' files.

Why: a method's file holds its facts (its Params, its declared costs, how many weights it trains:
what `cliffsweep plan` prices a sweep from) beside its training code, which needs torch (docs/
style.md: one method, one file). `plan` runs where torch may not be installed, a laptop with a
cluster's sweep file (issue 38 part 4), so importing a method's file must not import torch; its
training code loads torch the first time it runs. Nothing here changes what runs: the first
attribute read imports the real module, and later reads find the attribute cached here."""

from __future__ import annotations

import functools
import importlib
import types
from typing import Any, Callable


class LazyModule(types.ModuleType):
    """A module imported on its first attribute read."""

    def __init__(self, name: str):
        super().__init__(name)
        self.__dict__["_lazy_target"] = name

    def __getattr__(self, attr: str) -> Any:
        value = getattr(importlib.import_module(self.__dict__["_lazy_target"]), attr)
        setattr(self, attr, value)  # the next read is a plain attribute
        return value


def lazy_function(module: str, name: str) -> Callable:
    """`module.name`, a function, imported on its first call."""

    def call(*args, **kwargs):
        return getattr(importlib.import_module(module), name)(*args, **kwargs)

    call.__name__ = call.__qualname__ = name
    return call


def no_grad(fn: Callable) -> Callable:
    """`@torch.no_grad()` that imports torch when `fn` runs, not when it is defined."""

    @functools.wraps(fn)
    def run(*args, **kwargs):
        with torch.no_grad():
            return fn(*args, **kwargs)

    return run


torch = LazyModule("torch")
nn = LazyModule("torch.nn")
dist = LazyModule("torch.distributed")
penalties = LazyModule("cliffsweep.trainables.penalties")
