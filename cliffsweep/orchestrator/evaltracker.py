"""Driver-side dispatch of evaluations: send each checkpoint to an evaluator, collect, record failures.

Which checkpoints need evaluating is the ledger's call (ledger.py, from the store); this class
only makes sure each one is in flight at most once per run: a checkpoint already queued, or
already evaluated on every task in the store, is not sent again. A checkpoint waits in the
driver's backlog for its model until one of the model's evaluators has fewer than
`policies.EVAL_DEPTH` calls in flight (the least loaded takes it), so that any evaluator, a new
one included, can take waiting work; every failure is recorded in the store's `errors` table, so
no evaluation is silently dropped. An evaluation whose evaluator was lost beneath it (its process
or node died) is sent again, to a replacement if the evaluator is dead for good, at most
`policies.EVAL_SENDS` times (`policies.resend_evaluation`).

The pool follows the load (issue 22, `rebalance`, `policies.evaluator_changes`): it starts with
eval.evaluators_per_model actors per model; more, up to `policies.evaluator_cap`, start for a
backlog in resources that no Train job took, and stop when idle; a waiting Train job that would
fit in what idle evaluators hold gets it (they stop, never with a call in flight: nothing is
lost, their model's checkpoints wait in the backlog).
"""

from __future__ import annotations

import time
from collections import deque
from typing import Any, Callable

from cliffsweep.orchestrator.policies import EVAL_DEPTH, evaluator_changes, resend_evaluation
from cliffsweep.evaluator.request import EvalRequest
from cliffsweep.storage import ledger
from cliffsweep.storage.store import Store, eval_key


class EvalTracker:
    def __init__(self, store: Store, start_one: Callable[[str], Any], task_names: list[str], models: list[str],
                 base: int = 1, cap: int = 1, linger_s: float = 0.0):
        self.store = store
        self.linger_s = linger_s  # idle this long before giving way to a waiting job (policies)
        self.idle_since: dict[Any, float] = {}  # actor -> when its last call ended (or it started)
        self._placing: dict[Any, Any] = {}  # ready() call -> an evaluator started without room for it
        self._start_one = start_one  # one evaluator actor of a model (pool.evaluator_starter)
        self.models = models
        self.base, self.cap = base, cap
        self.pool: dict[str, list] = {m: [] for m in models}  # started on first use (`submit`)
        self.pool_started = False
        self.task_names = task_names
        self.backlog: dict[str, deque[EvalRequest]] = {}
        self.inflight: dict[Any, int] = {}  # actor -> calls in flight
        self.actor_of: dict[Any, Any] = {}  # call ref -> its actor
        self.pending: dict[Any, EvalRequest] = {}
        self.queued: set[tuple[str, int]] = set()  # (trial, step) waiting or in flight
        self.evaluated: set[tuple[str, int]] = set()  # evaluated by this run
        self.failed_keys: dict[tuple[str, int], str] = {}  # failed in this run -> error text
        self.sends: dict[tuple[str, int], int] = {}  # how often this run sent each evaluation
        self.resent = 0  # evaluations sent again after their evaluator was lost
        self.replaced = 0  # evaluators started in place of dead ones
        self.done = 0
        self.failed = 0
        self.started_extra = 0  # evaluators started beyond the initial pool
        self.stopped = 0
        self.seconds: list[float] = []
        self._started: dict[Any, float] = {}

    @property
    def elastic(self) -> bool:
        """Whether the pool may grow past eval.evaluators_per_model (policies.evaluator_cap)."""
        return self.cap > self.base

    @property
    def waiting(self) -> int:
        """Checkpoints waiting in the driver or in flight."""
        return len(self.queued)

    # --- questions the run asks (sweeprun.SweepRun) ---------------------------------------------
    def busy(self) -> bool:
        """Whether any checkpoint waits in the driver or is in flight."""
        return bool(self.queued)

    def error_of(self, trial_id: str, step: int) -> str | None:
        """The error of this run's failed evaluation of (trial, step), or None."""
        return self.failed_keys.get((trial_id, step))

    def was_evaluated(self, trial_id: str, step: int) -> bool:
        return (trial_id, step) in self.evaluated

    def note_evaluated(self, keys: set[tuple[str, int]]) -> None:
        """(trial, step) evaluated on every task, as the store says (ledger.evaluated_keys)."""
        self.evaluated |= keys

    def may_rebalance(self) -> bool:
        """Whether the pool has started and may change size (policies.evaluator_cap)."""
        return self.pool_started and self.elastic

    def live(self) -> dict:
        """The pool's part of the driver's live state (`cliffsweep status`)."""
        return {"evaluators": {m: len(a) for m, a in self.pool.items()},
                "extra_evaluators_started": self.started_extra, "evaluators_stopped": self.stopped}

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
        if not self.pool_started:  # engines start only when there is something to evaluate
            self.pool_started = True
            self.pool = {m: [self._start_one(m) for _ in range(self.base)] for m in self.models}
            self.inflight = {a: 0 for actors in self.pool.values() for a in actors}
            self.idle_since = {a: time.time() for a in self.inflight}
        self.backlog.setdefault(req.model, deque()).append(req)
        self.queued.add(key)
        self.dispatch()
        return True

    def dispatch(self) -> None:
        """Send waiting checkpoints to the least loaded evaluators of their model, up to EVAL_DEPTH each."""
        for model, waiting in self.backlog.items():
            actors = self.pool.get(model, [])
            while waiting and actors:
                actor = min(actors, key=lambda a: self.inflight[a])
                if self.inflight[actor] >= EVAL_DEPTH:
                    break
                req = waiting.popleft()
                key = (req.trial_id, req.step)
                self.sends[key] = self.sends.get(key, 0) + 1
                ref = actor.evaluate.remote(req.to_dict())
                self.pending[ref] = req
                self.actor_of[ref] = actor
                self.inflight[actor] += 1
                self._started[ref] = time.time()

    def rebalance(self, free_slots: int, job_waits_for_them: bool) -> dict[str, int]:
        """Start or stop evaluators as policies.evaluator_changes says; returns the changes."""
        import ray

        if not self.pool_started:
            return {}
        now = time.time()
        # idle ones, longest idle first (those stop first)
        idle = {m: sorted((a for a in actors if self.inflight[a] == 0), key=lambda a: self.idle_since.get(a, now))
                for m, actors in self.pool.items()}
        lingered = {m: sum(now - self.idle_since.get(a, now) >= self.linger_s for a in v) for m, v in idle.items()}
        changes = evaluator_changes({m: len(q) for m, q in self.backlog.items()},
                                    {m: len(a) for m, a in self.pool.items()}, {m: len(v) for m, v in idle.items()},
                                    self.base, self.cap, free_slots, job_waits_for_them, lingered,
                                    {m: self.starved_at() for m in self.pool})
        no_room = free_slots <= 0
        for model, k in changes.items():
            for actor in idle[model][:max(0, -k)]:  # nothing in flight: nothing is lost
                self.pool[model].remove(actor)
                self.inflight.pop(actor)
                self.idle_since.pop(actor, None)
                self.stopped += 1
                ray.kill(actor)
            for _ in range(max(0, k)):
                actor = self._start_one(model)
                self.pool[model].append(actor)
                self.inflight[actor] = 0
                self.idle_since[actor] = time.time()
                self.started_extra += 1
                if no_room:  # it waits for resources: new Train jobs wait until it has them
                    self._placing[actor.ready.remote()] = actor
        self.dispatch()
        return changes

    def placing(self) -> bool:
        """Whether an evaluator started without free resources for it still waits for them (the
        driver starts no new Train job meanwhile: orchestrator/refiner.JobQueue.hold)."""
        import ray

        if self._placing:
            ready, _ = ray.wait(list(self._placing), num_returns=len(self._placing), timeout=0)
            for ref in ready:
                self._placing.pop(ref)
        return bool(self._placing)

    def starved_at(self) -> int:
        """Checkpoints whose evaluation takes an engine start (policies.evaluator_changes), from
        the evaluations measured so far (1 before any)."""
        import math

        if not self.seconds:
            return 1
        return max(1, math.ceil(self.linger_s / (sum(self.seconds) / len(self.seconds))))

    def idle_count(self) -> int:
        return sum(1 for n in self.inflight.values() if n == 0)

    def poll(self, timeout: float = 0.0) -> list[tuple[EvalRequest, dict | None, str | None]]:
        """Finished calls: (request, result, None) or (request, None, error text)."""
        import ray

        if not self.pending:
            return []
        ready, _ = ray.wait(list(self.pending), num_returns=len(self.pending), timeout=timeout)
        out = []
        for ref in ready:
            req = self.pending.pop(ref)
            actor = self.actor_of.pop(ref)
            if actor in self.inflight:
                self.inflight[actor] -= 1
                if self.inflight[actor] == 0:
                    self.idle_since[actor] = time.time()
            key = (req.trial_id, req.step)
            self.queued.discard(key)
            started = self._started.pop(ref)
            try:
                result = ray.get(ref)
            except Exception as e:  # noqa: BLE001 - every failure is sent again or recorded, never dropped
                if self._resend(req, actor, e):
                    continue
                self.failed += 1
                text = f"{type(e).__name__}: {e}"
                self.failed_keys[key] = text
                self._error(req, "eval", text, f"eval__{req.trial_id}__{req.step:08d}")
                out.append((req, None, text))
                continue
            self.done += 1
            self.evaluated.add(key)
            self.seconds.append(time.time() - started)
            out.append((req, result, None))
        self.dispatch()
        return out

    def _resend(self, req: EvalRequest, actor, exc: Exception) -> bool:
        """An evaluation whose evaluator failed beneath it goes back to the front of its model's
        backlog (policies.resend_evaluation); a dead evaluator is replaced. Returns whether it
        was sent back (recorded as an `eval_resent` error: what happened stays visible)."""
        from ray.exceptions import ActorDiedError, RayActorError

        key = (req.trial_id, req.step)
        if isinstance(exc, ActorDiedError):  # gone for good (Ray's restarts spent): replace it
            self._replace(req.model, actor)
        if not resend_evaluation(isinstance(exc, RayActorError), self.sends.get(key, 0)):
            return False
        self.resent += 1
        self._error(req, "eval_resent", f"{type(exc).__name__}: {exc}",
                    f"eval_resent__{req.trial_id}__{req.step:08d}__{self.sends[key]}")
        self.backlog.setdefault(req.model, deque()).appendleft(req)
        self.queued.add(key)
        return True

    def _replace(self, model: str, actor) -> None:
        if actor not in self.pool.get(model, []):
            return  # stopped or replaced already
        self.pool[model].remove(actor)
        self.inflight.pop(actor, None)
        self.idle_since.pop(actor, None)
        new = self._start_one(model)
        self.pool[model].append(new)
        self.inflight[new] = 0
        self.idle_since[new] = time.time()
        self.replaced += 1

    def _error(self, req: EvalRequest, kind: str, text: str, key: str) -> None:
        ledger.record_error(self.store, key, kind, req.trial_id, text, req.step)

    def close(self) -> None:
        """End the evaluator actors: a finished sweep holds no GPU (or node) on a shared cluster."""
        import ray

        for actors in self.pool.values():
            for a in actors:
                ray.kill(a)
        self.pool = {m: [] for m in self.models}
