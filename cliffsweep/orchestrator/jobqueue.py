"""Tune's queue of Train jobs (issue 33: it lived in refiner.py, where nobody looked for it).

`JobQueue` holds the Train jobs (JobRun: trials of one model) still to start; Tune takes
them through a `Searcher` (`sweep_searcher`), which answers "nothing yet" while more may come (a
running job can hand trials back; refinement can add a round) and "finished" once none can;
without a `refine:` section it is a plain queue of the grid.
"""

from __future__ import annotations

from collections import deque
from typing import Any, Callable

from cliffsweep.orchestrator.live import lookup, register
from cliffsweep.trainables.config import JOB_KEY, JobRun


class JobQueue:
    """Trial configs waiting for Tune, and whether more may come (`more`: a callable). `pump`
    runs the driver's tick: when nothing is running, Tune blocks in the searcher (asking once a
    second) and calls no callback, so the searcher itself must keep evaluations, settling and
    refinement moving, or a series waiting for its last evaluation would wait forever."""

    def __init__(self, configs: list[JobRun], more: Callable[[], bool], pump: Callable[[], None] = lambda: None,
                 hold: Callable[[], bool] = lambda: False, claim: Callable[[JobRun], JobRun | None] = lambda job: job):
        self.items: deque = deque(configs)
        self.more = more
        self.pump = pump
        self.hold = hold  # true while no new job should start (an evaluator waits for resources)
        self.claim = claim  # the job with the trials this driver could claim, or None (issue 53)

    def take(self) -> JobRun | None:
        """The next job to start, as far as this driver could claim its trials (a store shared with
        other drivers: storage/claims.py); None when no queued job keeps a trial."""
        while self.items:
            job = self.claim(self.items.popleft())
            if job is not None:
                return job
        return None

    def add(self, configs: list[JobRun]) -> None:
        self.items.extend(configs)

    def put_back(self, configs: list[JobRun]) -> None:
        """Jobs of points that were taken out of the line and never started (a failed job's later
        points, tunecallback.py) go back to its front, where they were, not behind later jobs:
        else another model's trials overtook them (in the failures sweep, a model whose base
        evaluation was failing that very second had a trial started)."""
        self.items.extendleft(reversed(configs))

    def drop_model(self, model: str) -> list[str]:
        """Takes out every queued job of `model` (its base evaluation failed: sweeprun.py);
        the ids of their trials, which never start."""
        dropped = [cfg for cfg in self.items if cfg.trials and cfg.trials[0].trial.model == model]
        gone = {id(cfg) for cfg in dropped}
        self.items = deque(cfg for cfg in self.items if id(cfg) not in gone)
        return [tid for cfg in dropped for tid in cfg.trial_ids]


def sweep_searcher(queue: JobQueue) -> Any:
    """A Tune Searcher that hands out `queue`'s configs (Tune pickles its search algorithm with
    the experiment state: the live queue stays here, the searcher carries only its key)."""
    from ray.tune.search import Searcher

    key = register(queue)

    class SweepSearcher(Searcher):
        def __reduce__(self):
            return (_searcher_from_key, (key,))

        def suggest(self, trial_id: str):
            if not queue.items or queue.hold():
                queue.pump()
            if queue.items and queue.hold():
                return None  # asked again in a second
            if queue.items:
                job = queue.take()
                if job is not None:
                    return {JOB_KEY: job}
            return None if queue.more() else Searcher.FINISHED

        def on_trial_complete(self, trial_id: str, result=None, error: bool = False) -> None:
            pass  # the driver's callback and the store keep the state

        def save(self, checkpoint_path: str) -> None:
            with open(checkpoint_path, "w") as f:
                f.write("{}")  # nothing to save: the store is the source of truth on resume

        def restore(self, checkpoint_path: str) -> None:
            pass

    return SweepSearcher()


def _searcher_from_key(key: int):
    return sweep_searcher(lookup(key))
