"""What a tracker is sent, and the interface each tracker implements (one file each, style.md 1).

A tracker mirrors the store; it never holds anything the store does not. Everything it is sent
comes from store rows (tracking/sync.py), with the store's own timestamps, so sending the same
rows twice is recognisable as a repeat (MLflow drops identical metric points).

Runs: one per trial, named and keyed by the trial id, plus one per sweep (the parent: base
model evaluations, the analysis' report). A trial run carries its params, its training curve
(`train/*` by optimizer step), its evaluations (`eval/<task>/<metric>` by checkpoint step), its
status and, after `cliffsweep analyze`, its series' regime and max safe lr.
"""

from __future__ import annotations

import hashlib
from abc import ABC, abstractmethod
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any, ClassVar

def run_key(sweep: str, trial_id: str) -> str:
    """A stable run id from the sweep and trial ids, short and in W&B's id alphabet: a re-run
    resumes the same run instead of creating another."""
    return hashlib.sha1(f"{sweep}/{trial_id}".encode()).hexdigest()[:16]


def sweep_run_id(sweep: str) -> str:
    """The trial id under which the sweep's own (parent) run is kept in the `tracking` table."""
    return f"_sweep:{sweep}"


@dataclass(frozen=True)
class StepPoint:
    step: int
    values: dict[str, float]  # train/loss, train/grad_norm, train/lr, train/tokens, train/<term>
    at: datetime


@dataclass(frozen=True)
class EvalPoint:
    step: int
    values: dict[str, float]  # eval/<task>/<metric> (base model: base/<model>/<task>/<metric>)
    at: datetime


@dataclass
class RunDelta:
    """What one run has not been sent yet."""

    trial_id: str
    name: str
    params: dict[str, Any]
    steps: list[StepPoint] = field(default_factory=list)
    evals: list[EvalPoint] = field(default_factory=list)
    status: str | None = None  # a status not sent yet, if any
    parent: bool = False
    eval_labels: set[str] = field(default_factory=set)  # the (trial/step/task) units in `evals`


class Tracker(ABC):
    """One experiment tracker. Called from the sync thread only (never from a trial or an
    evaluator); any exception is caught there, recorded, and retried later."""

    name: ClassVar[str]

    def __init__(self, cfg, sweep: str):
        self.cfg, self.sweep = cfg, sweep

    @abstractmethod
    def open(self, delta: RunDelta, run_id: str | None) -> str:
        """Create the run (with its params), or reopen `run_id` / the run keyed by the trial id;
        return its id (what the `tracking` table keeps)."""

    @abstractmethod
    def send(self, run_id: str, delta: RunDelta) -> None:
        """Log the delta's training points, evaluation points and status to the open run."""

    def finish(self, run_id: str, status: str | None) -> None:
        """The run will get nothing more in this process: flush and release it."""

    @abstractmethod
    def annotate(self, run_id: str, delta: RunDelta, tags: dict[str, str]) -> None:
        """After `cliffsweep analyze`: tags on a trial run (regime, max safe lr)."""

    @abstractmethod
    def attach(self, run_id: str, paths: list[str]) -> None:
        """After `cliffsweep analyze`: the report's files as artifacts of the sweep's run."""

    def close(self) -> None:
        """Release every run still open."""
