"""Driver-side bookkeeping of evaluations: dispatch to the pool, collect, record failures.

Checkpoints reach the driver as Tune results; the tracker sends each to an evaluator of its
model (round-robin) without waiting, polls for completions, and records every failure in the
store's `errors` table, so no evaluation is silently dropped.
"""

from __future__ import annotations

import itertools
import time
from datetime import datetime, timezone
from typing import Any, Callable

from cliffsweep.orchestrator.pool import EvalRequest
from cliffsweep.orchestrator.store import Store, eval_key


class EvalTracker:
    def __init__(self, store: Store, start_pool: Callable[[], dict[str, list]], task_names: list[str]):
        self.store = store
        self._start_pool = start_pool  # engines start only when there is something to evaluate
        self.pool: dict[str, list] | None = None
        self.task_names = task_names
        self._rr: dict[str, Any] = {}
        self.pending: dict[Any, EvalRequest] = {}
        self.done = 0
        self.failed = 0
        self.seconds: list[float] = []
        self._started: dict[Any, float] = {}

    def already_done(self, trial_id: str, step: int) -> bool:
        return all(self.store.has("evals", eval_key(trial_id, step, t)) for t in self.task_names)

    def submit(self, req: EvalRequest, force: bool = False) -> bool:
        """Queue `req` unless its results are already in the store (resume / idempotence)."""
        if not force and self.already_done(req.trial_id, req.step):
            return False
        if self.pool is None:
            self.pool = self._start_pool()
            self._rr = {m: itertools.cycle(actors) for m, actors in self.pool.items()}
        actor = next(self._rr[req.model])
        ref = actor.evaluate.remote(req.to_dict())
        self.pending[ref] = req
        self._started[ref] = time.time()
        return True

    def poll(self, timeout: float = 0.0) -> list[tuple[EvalRequest, dict | None]]:
        import ray

        if not self.pending:
            return []
        ready, _ = ray.wait(list(self.pending), num_returns=len(self.pending), timeout=timeout)
        out = []
        for ref in ready:
            req = self.pending.pop(ref)
            started = self._started.pop(ref)
            try:
                result = ray.get(ref)
                self.done += 1
                self.seconds.append(time.time() - started)
                out.append((req, result))
            except Exception as e:  # noqa: BLE001 - every failure is recorded, never dropped
                self.failed += 1
                self.store.write("errors", f"eval__{req.trial_id}__{req.step:08d}", [{
                    "trial_id": req.trial_id, "step": req.step, "kind": "eval",
                    "message": f"{type(e).__name__}: {e}"[:4000], "at": datetime.now(timezone.utc)}])
                out.append((req, None))
        return out

    def wait_all(self, on_tick=None, tick: float = 1.0) -> None:
        while self.pending:
            self.poll(timeout=tick)
            if on_tick:
                on_tick()
