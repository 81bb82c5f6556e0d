"""What crosses Ray to an evaluator: one checkpoint to evaluate on every task."""

from __future__ import annotations

from dataclasses import asdict, dataclass
from typing import Any

from cliffsweep.evals.stopping import StopRule
from cliffsweep.sweep.grid import base_trial_id


@dataclass(frozen=True)
class EvalRequest:
    """One checkpoint to evaluate on every task, with the trial fields its rows carry."""

    trial_id: str
    model: str
    method: str
    series: str
    optimizer: str
    lr: float
    epochs: int
    seed: int
    step: int
    epoch: float
    checkpoint: str | None  # None = the base model
    kind: str = "full"  # "full" | "lora"
    rule: StopRule | None = None
    """Score in stages until this rule settles (issue 51, evaluator/staged.py); None: every item.
    The base is always scored on every item: every checkpoint of its model is read against it."""
    at_least: int = 0
    """Score at least this many items of each staged task, whatever the rule says: a top-up of a
    checkpoint the verdict hinges on (analysis/topup.py); a number past the task's size means
    every item."""

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


def base_request(model: str) -> EvalRequest:
    """The base model's evaluation (step 0, no checkpoint), once per model."""
    return EvalRequest(trial_id=base_trial_id(model), model=model, method="base", series="base",
                       optimizer="", lr=0.0, epochs=0, seed=0, step=0, epoch=0.0, checkpoint=None)
