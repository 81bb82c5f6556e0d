"""What crosses Ray to an evaluator: one checkpoint to evaluate on every task."""

from __future__ import annotations

from dataclasses import asdict, dataclass
from typing import Any

from cliffsweep.evals.stopping import StopRule
from cliffsweep.sweep.grid import BASE, base_trial_id


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
    top_up: tuple[str, ...] = ()
    """The tasks (labels) `at_least` applies to; () every task. A checkpoint topped up for its
    open retain reading alone scores no more learn items (analysis/topup.py `TopUp`)."""

    def at_least_on(self, label: str) -> int:
        """Items of task `label` to score at least, whatever the rule says."""
        return self.at_least if not self.top_up or label in self.top_up else 0

    def skips(self, label: str) -> bool:
        """Whether this is a top-up that leaves task `label` as it was scored."""
        return bool(self.at_least and self.top_up and label not in self.top_up)

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


def base_request(model: str) -> EvalRequest:
    """The base model's evaluation (step 0, no checkpoint), once per model."""
    return EvalRequest(trial_id=base_trial_id(model), model=model, method=BASE, series=BASE,
                       optimizer="", lr=0.0, epochs=0, seed=0, step=0, epoch=0.0, checkpoint=None)
