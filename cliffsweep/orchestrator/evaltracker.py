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
lost, their model's checkpoints wait in the backlog). Who is in the pool, and what each has in
flight, is orchestrator/evalpool.py's; this class keeps one record per call (`Call`) and the
run's counts (`Counts`).
"""

from __future__ import annotations

import math
import time
from collections import deque
from dataclasses import dataclass, field
from typing import Any, Callable

from cliffsweep.evaluator.request import EvalRequest
from cliffsweep.orchestrator.evalpool import EvaluatorPool, Member
from cliffsweep.orchestrator.policies import EVAL_DEPTH, PoolSize, evaluator_changes, resend_evaluation
from cliffsweep.storage import ledger
from cliffsweep.storage.store import Store, eval_key

Key = tuple[str, int]
"""(trial id, step): one checkpoint."""


@dataclass(frozen=True)
class Call:
    """One evaluation in flight: what was asked, of which evaluator, since when."""

    req: EvalRequest
    member: Member
    started: float


@dataclass
class Counts:
    """What this run's evaluations and its pool came to (the live state, `status`, tests)."""

    done: int = 0
    failed: int = 0
    resent: int = 0  # evaluations sent again after their evaluator was lost
    replaced: int = 0  # evaluators started in place of dead ones
    started_extra: int = 0  # evaluators started beyond the initial pool
    stopped: int = 0
    seconds: list[float] = field(default_factory=list)
    """Each evaluation's wall time, call to result."""


class EvalTracker:
    def __init__(self, store: Store, start_one: Callable[[str], Any], task_names: list[str], models: list[str],
                 base: int = 1, cap: int = 1, linger_s: float = 0.0):
        self.store = store
        self.task_names = task_names
        self.pool = EvaluatorPool(start_one, models)
        self.size = PoolSize(base, cap)
        self.linger_s = linger_s  # idle this long before giving way to a waiting job (policies)
        self.backlog: dict[str, deque[EvalRequest]] = {}
        self.calls: dict[Any, Call] = {}  # call ref -> its call
        self.queued: set[Key] = set()  # waiting or in flight
        self.evaluated: set[Key] = set()  # evaluated by this run, or found so in the store
        self.failed_keys: dict[Key, str] = {}  # failed in this run -> error text
        self.sends: dict[Key, int] = {}  # how often this run sent each evaluation
        self.counts = Counts()

    @property
    def elastic(self) -> bool:
        """Whether the pool may grow past eval.evaluators_per_model (policies.evaluator_cap)."""
        return self.size.cap > self.size.base

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

    def in_flight(self, trial_id: str, step: int) -> bool:
        """Whether (trial, step) waits in the driver or is being evaluated."""
        return (trial_id, step) in self.queued

    def was_evaluated(self, trial_id: str, step: int) -> bool:
        return (trial_id, step) in self.evaluated

    def note_evaluated(self, keys: set[Key]) -> None:
        """(trial, step) evaluated on every task, as the store says (ledger.evaluated_keys)."""
        self.evaluated |= keys

    def may_rebalance(self) -> bool:
        """Whether the pool has started and may change size (policies.evaluator_cap)."""
        return self.pool.started and self.elastic

    def live(self) -> dict:
        """The pool's part of the driver's live state (`cliffsweep status`)."""
        return {"evaluators": self.pool.sizes(), "extra_evaluators_started": self.counts.started_extra,
                "evaluators_stopped": self.counts.stopped}

    def in_store(self, trial_id: str, step: int) -> bool:
        return all(self.store.has("evals", eval_key(trial_id, step, t)) for t in self.task_names)

    def placing(self) -> bool:
        """Whether an evaluator started without free resources for it still waits for them."""
        return self.pool.still_placing()

    def idle_count(self) -> int:
        return self.pool.idle_count()

    def starved_at(self) -> int:
        """Checkpoints whose evaluation takes an engine start (policies.ModelPool), from the
        evaluations measured so far (1 before any)."""
        seconds = self.counts.seconds
        return 1 if not seconds else max(1, math.ceil(self.linger_s / (sum(seconds) / len(seconds))))

    # --- sending and collecting ------------------------------------------------------------------
    def submit(self, req: EvalRequest, known_unevaluated: bool = False) -> bool:
        """Queue `req` unless it is in flight, or evaluated already (in this run, or in the store
        unless the caller read the store and knows it is not). A top-up (`req.at_least`) of an
        evaluated checkpoint is queued: it scores only the items not yet scored (evaluator/staged.py).
        Returns whether it was queued."""
        key = (req.trial_id, req.step)
        if key in self.queued or (key in self.evaluated and not req.at_least):
            return False
        if not known_unevaluated and not req.at_least and self.in_store(*key):
            self.evaluated.add(key)
            return False
        if not self.pool.started:  # engines start only when there is something to evaluate
            self.pool.start(self.size.base)
        self.backlog.setdefault(req.model, deque()).append(req)
        self.queued.add(key)
        self.dispatch()
        return True

    def dispatch(self) -> None:
        """Send waiting checkpoints to the least loaded evaluators of their model, up to EVAL_DEPTH
        each. The request crosses Ray as itself (evaluator/actor.py `EvaluatorActor`)."""
        for model, waiting in self.backlog.items():
            while waiting and (member := self.pool.least_loaded(model)) is not None:
                if member.inflight >= EVAL_DEPTH:
                    break
                req = waiting.popleft()
                key = (req.trial_id, req.step)
                self.sends[key] = self.sends.get(key, 0) + 1
                self.calls[member.actor.evaluate.remote(req)] = Call(req, member, time.time())
                member.inflight += 1

    def rebalance(self, free_slots: int, job_waits_for_them: bool) -> dict[str, int]:
        """Start or stop evaluators as policies.evaluator_changes says; returns the changes."""
        if not self.pool.started:
            return {}
        now = time.time()
        views = {m: self.pool.view(m, len(self.backlog.get(m, ())), self.linger_s, self.starved_at(), now)
                 for m in self.pool.members}
        changes = evaluator_changes(views, self.size, free_slots, job_waits_for_them)
        for model, k in changes.items():
            for member in self.pool.idle(model)[:max(0, -k)]:  # nothing in flight: nothing is lost
                self.pool.drop(member)
                self.counts.stopped += 1
            for _ in range(max(0, k)):  # without room, it waits for resources: new Train jobs wait too
                self.pool.add(model, placing=free_slots <= 0)
                self.counts.started_extra += 1
        self.dispatch()
        return changes

    def poll(self, timeout: float = 0.0) -> list[tuple[EvalRequest, dict | None, str | None]]:
        """Finished calls: (request, result, None) or (request, None, error text)."""
        import ray

        if not self.calls:
            return []
        ready, _ = ray.wait(list(self.calls), num_returns=len(self.calls), timeout=timeout)
        out = []
        for ref in ready:
            call = self.calls.pop(ref)
            req, member = call.req, call.member
            member.inflight -= 1
            if member.inflight == 0:
                member.idle_since = time.time()
            key = (req.trial_id, req.step)
            self.queued.discard(key)
            try:
                result = ray.get(ref)
            except Exception as e:  # noqa: BLE001 - every failure is sent again or recorded, never dropped
                if self._resend(req, member, e):
                    continue
                self.counts.failed += 1
                text = f"{type(e).__name__}: {e}"
                self.failed_keys[key] = text
                self._error(req, "eval", text, f"eval__{req.trial_id}__{req.step:08d}")
                out.append((req, None, text))
                continue
            self.counts.done += 1
            self.evaluated.add(key)
            self.counts.seconds.append(time.time() - call.started)
            out.append((req, result, None))
        self.dispatch()
        return out

    def _resend(self, req: EvalRequest, member: Member, exc: Exception) -> bool:
        """An evaluation whose evaluator failed beneath it goes back to the front of its model's
        backlog (policies.resend_evaluation); a dead evaluator is replaced. Returns whether it
        was sent back (recorded as an `eval_resent` error: what happened stays visible)."""
        from ray.exceptions import ActorDiedError, RayActorError

        key = (req.trial_id, req.step)
        if isinstance(exc, ActorDiedError) and self.pool.drop(member, kill=False):  # gone for good: replace it
            self.pool.add(req.model)
            self.counts.replaced += 1
        if not resend_evaluation(isinstance(exc, RayActorError), self.sends.get(key, 0)):
            return False
        self.counts.resent += 1
        self._error(req, "eval_resent", f"{type(exc).__name__}: {exc}",
                    f"eval_resent__{req.trial_id}__{req.step:08d}__{self.sends[key]}")
        self.backlog.setdefault(req.model, deque()).appendleft(req)
        self.queued.add(key)
        return True

    def _error(self, req: EvalRequest, kind: str, text: str, key: str) -> None:
        ledger.record_error(self.store, key, kind, req.trial_id, text, req.step)

    def close(self) -> None:
        """End the evaluator actors: a finished sweep holds no GPU (or node) on a shared cluster."""
        self.pool.close()
