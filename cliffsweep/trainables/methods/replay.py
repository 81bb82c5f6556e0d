"""Replay (002, "Replay (data mixing)"): a fraction r of every batch is drawn from the retain
task's train split (D_R = GSM8K train, 000), the loss is plain CE over all rows.

The mixing itself lives in `trainables.data.epoch_batches` (it reads `retain_fraction`); this
method only sets it. r default 0.15, the middle of 002's 10-20 % (our default within it).
"""

from __future__ import annotations

from pydantic import Field

from cliffsweep.trainables.methods.base import Method, MethodParams
from cliffsweep.trainables.methods.costs import Costs


class ReplayParams(MethodParams):
    retain_fraction: float = Field(0.15, gt=0.0, lt=1.0)
    """Share r of each batch drawn from the retain data (002: 0.10-0.20)."""


class Replay(Method):
    name = "replay"
    fsdp_safe = True  # changes the batches only
    costs = Costs()  # retain rows replace learn rows in the same batch
    Params = ReplayParams

    def __init__(self, params: ReplayParams | None = None):
        super().__init__(params)
        self.retain_fraction = self.params.retain_fraction
