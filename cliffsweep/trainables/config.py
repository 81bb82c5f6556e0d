"""What one trial needs on the other side of the Ray boundary, typed and frozen (issue 15 part 5).

The driver (orchestrator/driver.py) builds a `JobRun` per group of trials of one model; Tune
hands it to the trial's function (trainables/job.py), which starts the Ray Train job; each
Train worker gets the trials' `TrainConfig`s and trains them in turn (trainables/loop.py). Both are frozen dataclasses of the spec's own typed
pieces (the grid point, RecipeSpec, TaskSpec, ResourcesSpec), pickled across Ray: a misspelt
field is an AttributeError at the line that misspells it, not a KeyError deep in a worker, and
what a trial reads is listed here. Ray Train wants its `train_loop_config` to be a dict (its
state export walks it as one), so the TrainConfigs travel as its single value (`WORKER_KEY`), a tuple.

Types only: nothing here imports the orchestrator at run time.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, fields, is_dataclass, replace
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from cliffsweep.sweep.gpushare import GpuShare
    from cliffsweep.sweep.grid import Trial
    from cliffsweep.sweep.rehearsal import TrialWork
    from cliffsweep.sweep.spec import RecipeSpec, ResourcesSpec, TaskSpec

WORKER_KEY = "train"
JOB_KEY = "job"
"""The one key of a Tune trial's config: its JobRun (Tune wants a dict)."""


@dataclass(frozen=True)
class TrainConfig:
    """One trial's training, as every Train worker runs it (trainables/loop.py)."""

    trial: Trial
    recipe: RecipeSpec
    learn: TaskSpec
    retain: TaskSpec
    """The first retain task: replay rows come from its train split."""
    store_uri: str
    checkpoint_root: str
    stats_uri: str | None
    """The method's once-per-model statistics (trainables/stats.py); None: it has none."""
    eval_points: int
    every_epoch: bool
    strategy: str
    torch_threads: int | None
    max_step_rows: int
    """The training curve's rows per trial at most (trainables/steplog.py)."""
    inbox: str
    """The sweep's inbox actor, by name: rank 0's checkpoint writer reports there (checkpoints.py)."""
    resume_every_s: float
    """Training seconds between checkpoints that also save the training state (spec)."""
    async_checkpoints: bool
    """Write checkpoints off the training thread (spec; trainables/checkpoints.py)."""
    gpu_share: GpuShare
    """The worker's GPU memory budget (sweep/gpushare.py), applied where CUDA is present."""
    attempt: int = 1
    """Set per attempt by the trial's function (trainables/job.py): 1, 2 after a retry, ..."""
    job_started: float = 0.0
    """When this attempt's trial function started (the setup's first phase ends there)."""
    rehearsal: TrialWork | None = None
    """A rehearsal's timed wait instead of training (sweep/rehearsal.py, trainables/rehearsal.py)."""

    def for_attempt(self, attempt: int, started: float) -> TrainConfig:
        return replace(self, attempt=attempt, job_started=started)

    def to_json(self) -> str:
        """The resolved config, as the store's `trials.config` keeps it (style.md 7); without the
        per-attempt fields (the `trials` row has its attempt)."""
        plain = {k: v for k, v in _plain(self).items()
                 if k not in ("attempt", "job_started", "inbox", "rehearsal", "gpu_share")}
        return json.dumps(plain, sort_keys=True, default=str)


@dataclass(frozen=True)
class JobRun:
    """One job, as it crosses Ray (Tune runs it as one Tune trial): a Ray Train job that trains one
    or more trials of one model, one after the other in the same workers (issue 15 part 2: the
    job's start-up, Ray Train's controller and worker processes, imports and the process group, is
    paid once for all of them). Each trial keeps its own attempts, resume and evaluations."""

    job_id: str
    trials: tuple[TrainConfig, ...]
    resources: ResourcesSpec
    resources_per_worker: tuple[tuple[str, float], ...]
    """Ray resources of each Train worker, placement roles included (the driver's policies)."""
    checkpoint_root: str
    local_cluster: bool
    inbox: str
    """The sweep's inbox actor (orchestrator/inbox.py), by name."""

    @property
    def trial_ids(self) -> tuple[str, ...]:
        return tuple(p.trial.trial_id for p in self.trials)


@dataclass(frozen=True)
class StatsJob:
    """One once-per-model statistics task (trainables/stats.py: compute_stats), as the driver
    sends it to a Ray task: the model, the method and its params, the tasks whose train splits
    feed it, and the recipe's batching (the statistic's definition and its memory)."""

    model_path: str
    dtype: str
    method: str
    method_params: dict
    learn: TaskSpec
    retain: TaskSpec
    recipe: RecipeSpec


def _plain(value: Any) -> Any:
    from pydantic import BaseModel

    if is_dataclass(value):
        return {f.name: _plain(getattr(value, f.name)) for f in fields(value)}
    if isinstance(value, BaseModel):  # the spec's pieces
        return value.model_dump()
    return value
