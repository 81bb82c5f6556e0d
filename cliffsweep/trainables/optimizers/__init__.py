"""Optimizer registry (the optimizer axis of 001): name -> builder(model, lr, weight_decay, settings),
each optimizer's `Settings` (recipe.optimizer_settings.<name>) in its own file.

Every builder returns a torch optimizer whose param groups all follow the recipe's lr schedule
(the schedule multiplies each group's initial lr)."""

from __future__ import annotations

from typing import TYPE_CHECKING, Callable

from cliffsweep.registry import lookup

if TYPE_CHECKING:
    import torch

OPTIMIZERS: dict[str, str] = {
    "adamw": "cliffsweep.trainables.optimizers.adamw:build",
    "muon": "cliffsweep.trainables.optimizers.muon:build",
    "sgd": "cliffsweep.trainables.optimizers.sgd:build",
}


def settings_class(name: str):
    """The named optimizer's Settings model (its file's `Settings`)."""
    import importlib

    lookup(OPTIMIZERS, name, "optimizer")  # unknown names raise with the valid list
    return importlib.import_module(OPTIMIZERS[name].split(":")[0]).Settings


def optimizer_costs(name: str):
    """The named optimizer's declared state costs (its file's `costs`: optimizers/costs.py)."""
    import importlib

    lookup(OPTIMIZERS, name, "optimizer")
    return importlib.import_module(OPTIMIZERS[name].split(":")[0]).costs


def build_optimizer(name: str, model: torch.nn.Module, lr: float, weight_decay: float,
                    master_weights: bool = True, settings: dict | None = None) -> torch.optim.Optimizer:
    """The named optimizer over `model`'s trainable parameters, with its `settings`
    (recipe.optimizer_settings.<name>); for bf16/fp16 weights, with fp32 master weights unless
    `master_weights` is off (optimizers/master.py)."""
    from cliffsweep.trainables.optimizers.master import add_master_weights, needs_master_weights

    builder: Callable = lookup(OPTIMIZERS, name, "optimizer")
    opt = builder(model, lr=lr, weight_decay=weight_decay, settings=settings_class(name)(**(settings or {})))
    return add_master_weights(opt) if master_weights and needs_master_weights(model) else opt
