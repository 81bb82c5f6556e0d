"""Trial reports -> the driver, through one small actor that lives as long as the sweep.

Each report of a trial (sweep/reports.py: its start, each checkpoint, its end) is pushed into
the inbox: the start and end by the job's Train controller (`trainables/job.py`,
`report_callback`, which knows the actor by name and its `put`), each checkpoint by rank 0's
checkpoint writer once its folder is complete (`trainables/checkpoints.py`); the driver drains
it on every tick and hands checkpoints to the evaluator pool. Why not Tune's own route
(`TuneReportCallback`): it creates a fresh queue actor for every trial, one more Python process importing Ray per trial (about
2 core-s each on a 2-core machine, docs/benchmarks.md), and its queue holds one item, so a
trial's report waits until Tune's loop takes the previous one.

Every push is synchronous (the pusher waits for the inbox to hold the item), and a trial's
writer has pushed every checkpoint before the trial reports its end, so everything a trial
reported is in the inbox before its Tune trial can finish: `flush()` after a trial ends sees all
of its reports.
"""

from __future__ import annotations

import time

from cliffsweep.sweep.reports import Begin, EndReport, Report

POLL_EVERY_S = 0.5
"""Seconds between two drains of the inbox by `poll`: a report waits at most this long. Each drain
is an actor call, and the driver ticks several times a second (Tune's loop and the searcher's
pump): drained on every tick, the idle inbox took about a tenth of a core on a 2-core machine
(2026-12-07, /proc over a minute of a CI run). `flush` drains at once."""


class Inbox:
    """Body of the inbox actor: a list of (trial_id, report) in arrival order (sweep/reports.py),
    each trial's attempts in this run, and the trials whose training ended (an `EndReport`)."""

    def __init__(self):
        self._items: list[tuple[str, Report]] = []
        self._attempts: dict[str, int] = {}
        self._ended: set[str] = set()

    def begin_job(self, trial_ids: list[str]) -> dict[str, int]:
        """A Train job (one attempt of it) starts: for each of its trials whose training has not
        ended, the attempt it will be when it starts (1, then 2 after a retry, ...), the count the
        driver keeps too (the `attempt` of its `trials` and `steps` rows). A trial counts an
        attempt when it starts (its `begin` report), not when a job that never reached it did.
        Trials that ended in an earlier attempt of the job are left out: not trained again."""
        return {tid: self._attempts.get(tid, 0) + 1 for tid in trial_ids if tid not in self._ended}

    def put(self, trial_id: str, report: Report) -> None:
        self._items.append((trial_id, report))
        if isinstance(report, Begin):
            self._attempts[trial_id] = self._attempts.get(trial_id, 0) + 1
        if isinstance(report, EndReport):
            self._ended.add(trial_id)

    def drain(self) -> list[tuple[str, Report]]:
        items, self._items = self._items, []
        return items


def start_inbox(name: str):
    """The inbox actor, named so that trials find it (`ray.get_actor(name)`) without an actor
    handle in their Tune config (Tune writes configs to disk). It lives on the driver's node:
    needing no CPU, Ray would otherwise place it on any node, and a worker node that dies would
    take the sweep's reports with it (the rehearsal's node kills did)."""
    import ray
    from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy

    here = NodeAffinitySchedulingStrategy(ray.get_runtime_context().get_node_id(), soft=False)
    return ray.remote(num_cpus=0, max_restarts=0)(Inbox).options(name=name, scheduling_strategy=here).remote()


class InboxReader:
    """Driver side: non-blocking polls, and a flush that returns everything put so far."""

    def __init__(self, actor):
        self.actor = actor
        self._ref = None  # the drain call in flight, if any
        self._sent = float("-inf")  # when the last drain was sent (time.monotonic)

    def poll(self) -> list[tuple[str, Report]]:
        import ray

        if self._ref is None:
            if time.monotonic() - self._sent < POLL_EVERY_S:
                return []
            self._ref, self._sent = self.actor.drain.remote(), time.monotonic()
        ready, _ = ray.wait([self._ref], timeout=0)
        if not ready:
            return []
        items, self._ref = ray.get(self._ref), None
        return items

    def flush(self) -> list[tuple[str, Report]]:
        """All items put before this call: finish the drain in flight (it may have been sent
        before the latest puts), then drain once more."""
        import ray

        items = ray.get(self._ref) if self._ref is not None else []
        self._ref = None
        return items + ray.get(self.actor.drain.remote())
