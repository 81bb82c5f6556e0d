"""The evaluator pool as one object (issue 50 part 3): which evaluator actors each model has,
how many calls each has in flight, and since when it is idle.

One `Member` per actor. Only `add` and `drop` change who is in the pool, so an actor's record
cannot be half there (the tracker kept six dicts in step by hand: entries added in three places,
removed in two). What the rebalance rule reads of the pool is one `policies.ModelPool` per model
(`view`), which the simulator builds the same way from its own evaluators.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import Any, Callable

from cliffsweep.orchestrator.policies import ModelPool


@dataclass(eq=False)  # a member is itself: two idle members of a model compare unequal
class Member:
    actor: Any
    model: str
    inflight: int = 0
    """Calls sent to it and not yet collected."""
    idle_since: float = field(default_factory=time.time)
    """When its last call ended (or it started)."""


class EvaluatorPool:
    """The evaluator actors of every model. Engines start only when there is something to
    evaluate (`start`); before that the pool is empty."""

    def __init__(self, start_one: Callable[[str], Any], models: list[str]):
        self._start_one = start_one  # one evaluator actor of a model (pool.evaluator_starter)
        self.members: dict[str, list[Member]] = {m: [] for m in models}
        self.started = False
        self.placing: dict[Any, Member] = {}
        """ready() call -> a member started without free resources for it (the driver starts no
        new Train job meanwhile: orchestrator/refiner.JobQueue.hold)."""

    # --- membership: the only two places it changes -------------------------------------------
    def add(self, model: str, placing: bool = False) -> Member:
        """Start one evaluator of `model`; `placing`: one that waits for resources."""
        member = Member(self._start_one(model), model)
        self.members[model].append(member)
        if placing:
            self.placing[member.actor.ready.remote()] = member
        return member

    def drop(self, member: Member, kill: bool = True) -> bool:
        """Take `member` out (and end its actor, unless it is dead already); False if it was out."""
        if member not in self.members.get(member.model, []):
            return False
        self.members[member.model].remove(member)
        if kill:
            import ray

            ray.kill(member.actor)
        return True

    # --- what the tracker asks -----------------------------------------------------------------
    def start(self, base: int) -> None:
        self.started = True
        for model in self.members:
            for _ in range(base):
                self.add(model)

    def actors(self, model: str) -> list:
        return [m.actor for m in self.members.get(model, [])]

    def least_loaded(self, model: str) -> Member | None:
        return min(self.members.get(model, []), key=lambda m: m.inflight, default=None)

    def idle(self, model: str) -> list[Member]:
        """`model`'s members with nothing in flight, longest idle first (those stop first)."""
        return sorted((m for m in self.members[model] if m.inflight == 0), key=lambda m: m.idle_since)

    def idle_count(self) -> int:
        return sum(m.inflight == 0 for members in self.members.values() for m in members)

    def sizes(self) -> dict[str, int]:
        return {model: len(members) for model, members in self.members.items()}

    def view(self, model: str, backlog: int, linger_s: float, starved_at: int, now: float) -> ModelPool:
        """`model`'s evaluators as policies.evaluator_changes reads them."""
        idle = self.idle(model)
        return ModelPool(backlog=backlog, evaluators=len(self.members[model]), idle=len(idle),
                         lingered=sum(now - m.idle_since >= linger_s for m in idle), starved_at=starved_at)

    def still_placing(self) -> bool:
        """Whether an evaluator started without free resources still waits for them."""
        import ray

        if self.placing:
            ready, _ = ray.wait(list(self.placing), num_returns=len(self.placing), timeout=0)
            for ref in ready:
                self.placing.pop(ref)
        return bool(self.placing)

    def close(self) -> None:
        """End every evaluator actor: a finished sweep holds no GPU (or node) on a shared cluster."""
        for members in self.members.values():
            for m in list(members):
                self.drop(m)
