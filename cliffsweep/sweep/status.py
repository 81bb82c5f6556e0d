"""The words a sweep's state is said in, once (issue 50 part 1): a trial's status, the sets of
statuses the rest of the code asks about, and a run's phases. Every layer reads them from here
(the driver records them, the tracker, the analysis, `status` and the dashboard read them back
from the store's `trials.status` column); nothing else spells them.
"""

from __future__ import annotations

from enum import Enum


class TrialStatus(str, Enum):
    """A grid point's status, as the `trials` table records it (storage/ledger.py)."""

    PENDING = "pending"
    RUNNING = "running"
    TRAINED = "trained"  # training finished; some of its checkpoints still await evaluation
    DONE = "done"  # trained, and every checkpoint it reported is evaluated (ledger.py)
    DIVERGED = "diverged"  # non-finite loss: stopped, earlier evals kept
    FAILED = "failed"  # crashed after every retry; error recorded

    def __str__(self) -> str:
        return self.value

    @property
    def terminal(self) -> bool:
        return self in TERMINAL


TERMINAL = frozenset({TrialStatus.DONE, TrialStatus.DIVERGED, TrialStatus.FAILED})
"""Nothing more will happen to the trial in this run: done, diverged or failed for good."""
UNFINISHED = frozenset({TrialStatus.PENDING, TrialStatus.RUNNING})
"""Training has not ended: a re-run trains it (a stopped run left these)."""
NEEDS_RERUN = frozenset({TrialStatus.FAILED, TrialStatus.TRAINED})
"""Ended, but not well: failed, or trained with an evaluation that never landed."""
STATUSES = tuple(s.value for s in TrialStatus)
"""Every status, in the order a trial passes them (the dashboard's counts follow it)."""


class Phase(str, Enum):
    """A run's phases, in order (driver.py, sweeprun.py): what the progress line and the live
    state that `cliffsweep status` reads say the run is doing. No trial trains before TRAINING."""

    STARTING = "starting"
    STATISTICS = "statistics"
    BASE_EVALUATION = "base evaluation"
    TRAINING = "training"
    EVALUATING = "evaluating"
    FINISHED = "finished"

    def __str__(self) -> str:
        return self.value

    @property
    def before_training(self) -> bool:
        return self in (Phase.STARTING, Phase.STATISTICS, Phase.BASE_EVALUATION)
