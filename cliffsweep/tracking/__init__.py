"""Experiment trackers that mirror the store (issue 17): MLflow, Weights & Biases, TensorBoard.

The store stays the source of truth: trackers are fed from it by a thread of the driver
(sync.py), a tracker that is down never slows or fails the sweep, and a re-run or
`cliffsweep export-tracking STORE` sends whatever a tracker missed. Each tracker's official
client is imported lazily, by the tracker that needs it.
"""

from __future__ import annotations

from cliffsweep.tracking.base import Tracker

TRACKERS = {
    "mlflow": "cliffsweep.tracking.mlflow_tracker:MlflowTracker",
    "wandb": "cliffsweep.tracking.wandb_tracker:WandbTracker",
    "tensorboard": "cliffsweep.tracking.tensorboard_tracker:TensorboardTracker",
}


def build_tracker(name: str, cfg, sweep: str) -> Tracker:
    import importlib

    if name not in TRACKERS:
        raise ValueError(f"unknown tracker {name!r}; valid: {sorted(TRACKERS)}")
    module, cls = TRACKERS[name].split(":")
    return getattr(importlib.import_module(module), cls)(cfg, sweep)


__all__ = ["TRACKERS", "Tracker", "build_tracker"]
