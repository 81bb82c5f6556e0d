"""Driver-side dispatch of evaluations: send each checkpoint to an evaluator, collect, record failures.

Which checkpoints need evaluating is the ledger's call (ledger.py, from the store); this class
only makes sure each one is in flight at most once per run: a checkpoint already queued, or
already evaluated on every task in the store, is not sent again. Calls go to an evaluator of
the checkpoint's model (round-robin) without waiting; every failure is recorded in the store's
`errors` table, so no evaluation is silently dropped.
"""

from __future__ import annotations

import itertools
import time
from datetime import datetime, timezone
from typing import Any, Callable

from cliffsweep.orchestrator.pool import EvalRequest
from cliffsweep.storage.store import Store, eval_key


class EvalTracker:
    def __init__(self, store: Store, start_pool: Callable[[], dict[str, list]], task_names: list[str]):
        self.store = store
        self._start_pool = start_pool  # engines start only when there is something to evaluate
        self.pool: dict[str, list] | None = None
        self.task_names = task_names
        self._rr: dict[str, Any] = {}
        self.pending: dict[Any, EvalRequest] = {}
        self.queued: set[tuple[str, int]] = set()  # (trial, step) in flight
        self.evaluated: set[tuple[str, int]] = set()  # evaluated by this run
        self.failed_keys: dict[tuple[str, int], str] = {}  # failed in this run -> error text
        self.done = 0
        self.failed = 0
        self.seconds: list[float] = []
        self._started: dict[Any, float] = {}

    def in_store(self, trial_id: str, step: int) -> bool:
        return all(self.store.has("evals", eval_key(trial_id, step, t)) for t in self.task_names)

    def submit(self, req: EvalRequest, known_unevaluated: bool = False) -> bool:
        """Queue `req` unless it is in flight, or evaluated already (in this run, or in the store
        unless the caller read the store and knows it is not). Returns whether it was queued."""
        key = (req.trial_id, req.step)
        if key in self.queued or key in self.evaluated:
            return False
        if not known_unevaluated and self.in_store(*key):
            self.evaluated.add(key)
            return False
        if self.pool is None:
            self.pool = self._start_pool()
            self._rr = {m: itertools.cycle(actors) for m, actors in self.pool.items()}
        ref = next(self._rr[req.model]).evaluate.remote(req.to_dict())
        self.pending[ref] = req
        self.queued.add(key)
        self._started[ref] = time.time()
        return True

    def poll(self, timeout: float = 0.0) -> list[tuple[EvalRequest, dict | None, str | None]]:
        """Finished calls: (request, result, None) or (request, None, error text)."""
        import ray

        if not self.pending:
            return []
        ready, _ = ray.wait(list(self.pending), num_returns=len(self.pending), timeout=timeout)
        out = []
        for ref in ready:
            req = self.pending.pop(ref)
            key = (req.trial_id, req.step)
            self.queued.discard(key)
            started = self._started.pop(ref)
            try:
                result = ray.get(ref)
            except Exception as e:  # noqa: BLE001 - every failure is recorded, never dropped
                self.failed += 1
                text = f"{type(e).__name__}: {e}"
                self.failed_keys[key] = text
                self.store.write("errors", f"eval__{req.trial_id}__{req.step:08d}", [{
                    "trial_id": req.trial_id, "step": req.step, "kind": "eval", "message": text,
                    "at": datetime.now(timezone.utc)}])
                out.append((req, None, text))
                continue
            self.done += 1
            self.evaluated.add(key)
            self.seconds.append(time.time() - started)
            out.append((req, result, None))
        return out


    def close(self) -> None:
        """End the evaluator actors: a finished sweep holds no GPU (or node) on a shared cluster."""
        import ray

        for actors in (self.pool or {}).values():
            for a in actors:
                ray.kill(a)
        self.pool = None
