"""What a Train worker reports back to the driver, typed and frozen (issue 24 part 3): the other
direction of trainables/config.py's `TrainConfig`.

A trial's training reports, in order: `Begin` when it starts (the driver marks it running and the
inbox counts its attempt), one `CheckpointReport` per evaluation point (its folder is complete in
storage: the driver records it in the ledger and hands it to the evaluators), and one
`EndReport` when its training ends (trained to the end, or stopped as diverged). Each crosses Ray
as the single value of `ray.train.report({REPORT_KEY: record})` (Ray Train takes a dict), is
stamped with `reported_at` by the job's Train controller (trainables/job.py,
`report_callback`), waits in the sweep's inbox (orchestrator/inbox.py), and is read by type on
the driver (orchestrator/sweeprun.py), never by string key.

Types only, and nothing of the orchestrator or the trainables: the controller and the inbox
actor unpickle these.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Union

REPORT_KEY = "cliffsweep"
"""The one key of every `ray.train.report` metrics dict."""


@dataclass(frozen=True)
class Begin:
    """A trial starts training (a job's first at the job's start, a later one when the trial
    before it ended)."""

    trial_id: str
    reported_at: float = 0.0


@dataclass(frozen=True)
class CheckpointReport:
    """A checkpoint folder, complete in storage (its meta file written last: trainables/resume.py)."""

    trial_id: str
    step: int
    epoch: float
    loss: float
    total_steps: int
    train_seconds: float
    """Seconds of the training loop so far in this attempt."""
    checkpoint_uri: str
    checkpoint_kind: str
    """'full' (an HF folder) or 'adapter' (LoRA): what the evaluator loads."""
    loop_started_at: float
    """When this attempt's training loop began (the driver derives setup seconds from it)."""
    resumed_from_step: int
    setup_marks: tuple[tuple[str, float], ...] = ()
    """The wall-clock marks of the attempt's setup phases, in order (trainables/loop.SETUP_PHASES)."""
    checkpoint_seconds: float = 0.0
    """Seconds the training loop has lost to checkpoints so far in this attempt (issue 21)."""
    checkpoint_bytes: int = 0
    """Bytes this attempt's checkpoints have written so far."""
    compute: str = ""
    """How the attempt computed (trainables/fastpath.py, FastPath.label): precision and kernels."""
    reported_at: float = 0.0

    @property
    def marks(self) -> dict[str, float]:
        return dict(self.setup_marks)


@dataclass(frozen=True)
class EndReport:
    """A trial's training ended: trained to its last step, or stopped at a non-finite loss or
    weights (`diverged`; its earlier checkpoints are kept). Resumed at its end (an earlier
    attempt wrote the final checkpoint, then died), it has no step left and says where it stands."""

    trial_id: str
    diverged: bool
    step: int
    epoch: float
    total_steps: int
    loss: float | None = None
    train_seconds: float | None = None
    """None when this attempt trained no step."""
    resumed_from_step: int | None = None
    checkpoint_seconds: float = 0.0
    checkpoint_bytes: int = 0
    reported_at: float = 0.0


Report = Union[Begin, CheckpointReport, EndReport]


def stamped(report: Report, at: float) -> Report:
    """The report as the driver receives it: with the controller's `reported_at`."""
    return replace(report, reported_at=at)


# The phases of a trial's setup (CheckpointReport.setup_marks), in order: (name, the mark that ends it). Each lasts from the end
# of the previous one; the first starts when the driver saw the trial start (its `started_at`).
SETUP_PHASES = (
    ("placement", "job_started"),          # Tune placed the trial, its actor started, imported
    ("train_workers", "worker_started"),        # Train controller, worker group, process group
    ("imports", "imported"),                    # torch, transformers, cliffsweep in the worker
    ("model_load", "model_loaded"),
    ("statistics", "statistics_loaded"),        # the method's statistics and prepare()
    ("resume_and_wrap", "resumed_and_wrapped"),  # a resume's state, DDP/FSDP wrapping
    ("data", "data_ready"),                     # tokenisation and the first epoch's batches
    ("optimizer", "loop_started"),              # head check, optimizer, schedule, resume state
    ("first_step", "first_step"),
)


def phase_seconds(started_at: float, marks: dict[str, float]) -> dict[str, float]:
    """Seconds per setup phase (SETUP_PHASES) from the driver's start time of the trial and the
    attempt's marks; a phase whose mark is missing is left out. Pure (tests/test_policies.py)."""
    out, prev = {}, started_at
    for name, mark in SETUP_PHASES:
        if mark in marks:
            out[name] = round(marks[mark] - prev, 3)
            prev = marks[mark]
    return out


@dataclass(frozen=True)
class TrialRecord:
    """What the driver knows of one trial's training from its reports (latest first): the
    fields of its `trials` row that come from the worker."""

    checkpoint: CheckpointReport | None = None
    """The latest checkpoint report (of any attempt in this run)."""
    end: EndReport | None = None

    def _pick(self, name: str):
        """The end report's value when it has one, else the latest checkpoint's."""
        v = getattr(self.end, name, None) if self.end is not None else None
        return v if v is not None else getattr(self.checkpoint, name, None)

    @property
    def step(self) -> int | None:
        return self._pick("step")

    @property
    def total_steps(self) -> int | None:
        return self._pick("total_steps")

    @property
    def loss(self) -> float | None:
        return self._pick("loss")

    @property
    def train_seconds(self) -> float | None:
        return self._pick("train_seconds")

    @property
    def resumed_from_step(self) -> int | None:
        return self._pick("resumed_from_step")

    @property
    def checkpoint_costs(self) -> tuple[float, int] | None:
        """(seconds the training loop lost to checkpoints, bytes they wrote) in the latest
        attempt, from its end report, else its latest checkpoint's; None before any."""
        src = self.end if self.end is not None else self.checkpoint
        return None if src is None else (src.checkpoint_seconds, src.checkpoint_bytes)
