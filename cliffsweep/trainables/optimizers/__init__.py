"""Optimizer registry (the optimizer axis of 001): name -> builder(model, lr, weight_decay).

Every builder returns a torch optimizer whose param groups all follow the recipe's lr schedule
(the schedule multiplies each group's initial lr)."""

from __future__ import annotations

from typing import Callable

import torch

from cliffsweep.registry import lookup

OPTIMIZERS: dict[str, str] = {
    "adamw": "cliffsweep.trainables.optimizers.adamw:build",
    "muon": "cliffsweep.trainables.optimizers.muon:build",
    "sgd": "cliffsweep.trainables.optimizers.sgd:build",
}


def build_optimizer(name: str, model: torch.nn.Module, lr: float, weight_decay: float) -> torch.optim.Optimizer:
    builder: Callable = lookup(OPTIMIZERS, name, "optimizer")
    return builder(model, lr=lr, weight_decay=weight_decay)
