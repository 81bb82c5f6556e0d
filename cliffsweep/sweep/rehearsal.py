"""A rehearsal's planned work, as it crosses Ray (issue 22 part 2).

A rehearsal runs the real orchestration (driver, Tune, Train jobs, evaluator pool, inbox, store,
ledger) on a local cluster of fake GPU nodes, with every piece of work replaced by a timed wait
of its planned length: `plan` prices each piece (plan.plan_spec, bill.TrialCost), a rehearsal
scales it down (cliffsweep/simulate/rehearsal.py), and the Train workers
(trainables/rehearsal.py), the statistics tasks and the evaluators (evaluator/actor.py) wait
that long instead of computing. What it checks is what a schedule simulation leaves out: the
real scheduler, the real per-job start, the real retries after a node dies.

Types only: a Train worker unpickles `TrialWork` inside its TrainConfig.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class TrialWork:
    """One grid point's planned work, in seconds of rehearsal wall time."""

    setup_s: float
    """Its setup (model read, imports, data: bill.setup_seconds), on top of the real job start."""
    train_s: float
    """Its training, checkpoint waits included, spread evenly over its steps."""
    steps: tuple[int, ...]
    """The steps of its checkpoints, the last one its final step."""
    stats_s: float = 0.0
    """Its method's once-per-model statistics task (0: none)."""


@dataclass(frozen=True)
class Rehearsal:
    """The whole sweep's planned work, scaled (`scale`: rehearsal seconds per planned second)."""

    scale: float
    trials: dict[str, TrialWork]
    """trial id -> its work."""
    eval_s: dict[str, float]
    """model -> one checkpoint's evaluation on every task."""
    base_eval_s: dict[str, float]
    """model -> its base model's evaluation."""
    engine_start_s: float
    """An evaluator's engine start."""
