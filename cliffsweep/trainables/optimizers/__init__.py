"""Optimizer registry (the optimizer axis of 001): name -> builder(model, lr, weight_decay).

Every builder returns a torch optimizer whose param groups all follow the recipe's lr schedule
(the schedule multiplies each group's initial lr)."""

from __future__ import annotations

import importlib
from typing import Callable

import torch

OPTIMIZERS: dict[str, str] = {
    "adamw": "cliffsweep.trainables.optimizers.adamw:build",
    "muon": "cliffsweep.trainables.optimizers.muon:build",
    "sgd": "cliffsweep.trainables.optimizers.sgd:build",
}


def build_optimizer(name: str, model: torch.nn.Module, lr: float, weight_decay: float) -> torch.optim.Optimizer:
    if name not in OPTIMIZERS:
        raise KeyError(f"unknown optimizer {name!r}; valid: {sorted(OPTIMIZERS)}")
    module, fn = OPTIMIZERS[name].split(":")
    builder: Callable = getattr(importlib.import_module(module), fn)
    return builder(model, lr=lr, weight_decay=weight_decay)
