"""Many drivers on one store (issue 53), in one room (issue 60 part 2): which trials and base
evaluations this driver holds, which another live driver holds, and what this driver adopts
when another goes.

The invariant is storage/claims.py's: **a piece of work is done by the one driver that holds its
claim**. This module decides, from claims and the store's statuses, what the run does about it;
`SweepRun` (sweeprun.py) applies the answers (records, queues, evaluations). Nothing here
imports Ray: `adoption` and `releasable` are pure, and `Sharing` wraps only the claims.
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from enum import Enum
from typing import Callable, Iterable

from cliffsweep.storage.claims import Claims, base_key, round_key, trial_key, trial_of
from cliffsweep.sweep.grid import Trial, series_key
from cliffsweep.sweep.status import TERMINAL, TrialStatus

ADOPT_EVERY_S = 10.0
"""How often a driver that waits on other drivers reads what they did (`Sharing.adoption_due`)."""

_TERMINAL = frozenset(s.value for s in TERMINAL)
_GIVEN_UP = frozenset({TrialStatus.FAILED, TrialStatus.DIVERGED})


class Take(Enum):
    """What claiming a trial gave: held already, claimed just now, or another driver's."""
    HELD = "held"
    NEW = "new"
    ELSEWHERE = "elsewhere"


@dataclass(frozen=True)
class Adoption:
    """What another driver did or left, as read from the store (`adoption`)."""
    observe: dict[str, str]
    """Statuses other drivers wrote, of trials this driver does not hold."""
    settled: frozenset[str]
    """Trials held elsewhere that reached a terminal status: no longer waited for."""
    orphans: tuple[str, ...]
    """Trials held elsewhere whose holder is gone: to claim and train here."""
    bases_done: frozenset[str]
    """Models whose base evaluation another driver stored."""
    bases_orphaned: tuple[str, ...]
    """Models whose base evaluation's holder is gone: to evaluate here."""


def adoption(latest: dict[str, str], known: Iterable[str], mine: set[str], others: set[str],
             elsewhere: set[str], bases_elsewhere: set[str], bases_evaluated: set[str]) -> Adoption:
    """What to adopt. `latest`: each trial's last stored status; `known`: this run's trial ids;
    `mine`, `others`: the claim keys this driver and the other live drivers hold; `elsewhere`,
    `bases_elsewhere`: the trials and models this driver waits on; `bases_evaluated`: models
    whose base evaluation is stored."""
    known = set(known)
    settled = frozenset(tid for tid in elsewhere if latest.get(tid) in _TERMINAL)
    done = frozenset(m for m in bases_elsewhere if m in bases_evaluated)
    return Adoption(
        observe={tid: s for tid, s in latest.items() if tid in known and trial_key(tid) not in mine},
        settled=settled,
        orphans=tuple(sorted(tid for tid in elsewhere - settled if trial_key(tid) not in others)),
        bases_done=done,
        bases_orphaned=tuple(sorted(m for m in bases_elsewhere - done if base_key(m) not in others)))


def releasable(held: Iterable[str], status: Callable[[str], TrialStatus | None],
               evaluated: Callable[[str], bool]) -> list[str]:
    """The held trial claims whose work is over: failed or diverged for good (`status(tid)`), and
    every checkpoint they reported evaluated (`evaluated(tid)`). Held claims stay few (issue 62)."""
    out = []
    for key in held:
        tid = trial_of(key)
        if tid is not None and status(tid) in _GIVEN_UP and evaluated(tid):
            out.append(key)
    return out


def round_of(t: Trial, seeds: list[int]) -> str:
    """The claim of the refinement round or verification runs `t` belongs to (one driver adds them)."""
    model, series, epochs = series_key(t)
    return round_key(t.seed not in seeds, model, series, epochs, t.max_steps, t.round)


class Sharing:
    """This driver's side of a shared store: its claims, and what it waits on elsewhere."""

    def __init__(self, claims: Claims):
        self.claims = claims
        self.elsewhere: set[str] = set()  # trials another live driver holds, not yet terminal
        self.bases_elsewhere: set[str] = set()  # models whose base evaluation another driver holds
        self._adopted_at = 0.0

    @property
    def shared(self) -> bool:
        return self.claims.shared

    @property
    def label(self) -> str:
        return self.claims.driver.label

    def waits(self) -> bool:
        """Whether another driver holds work this run waits for."""
        return bool(self.elsewhere or self.bases_elsewhere)

    def adoption_due(self) -> bool:
        if time.time() - self._adopted_at < ADOPT_EVERY_S or not self.waits():
            return False
        self._adopted_at = time.time()
        return True

    def others(self) -> set[str]:
        """The claim keys other live drivers hold."""
        return set(self.claims.others())

    def mine(self) -> set[str]:
        return set(self.claims.held())

    def holds_trial(self, tid: str) -> bool:
        return self.claims.holds(trial_key(tid))

    def held_elsewhere(self, tids: Iterable[str]) -> set[str]:
        """Of `tids`, the trials another live driver holds now (a re-run's start)."""
        others = self.others()
        return {tid for tid in tids if trial_key(tid) in others}

    def take_trial(self, tid: str) -> Take:
        key = trial_key(tid)
        if self.claims.holds(key):
            return Take.HELD
        if not self.claims.take(key):
            self.elsewhere.add(tid)
            return Take.ELSEWHERE
        self.elsewhere.discard(tid)
        return Take.NEW

    def release_trial(self, tid: str) -> None:
        self.claims.release(trial_key(tid))

    def release_done(self, status: Callable[[str], TrialStatus | None], evaluated: Callable[[str], bool]) -> None:
        for key in releasable(self.claims.held(), status, evaluated):
            self.claims.release(key)

    def take_base(self, model: str) -> bool:
        if self.claims.take(base_key(model)):
            self.bases_elsewhere.discard(model)
            return True
        self.bases_elsewhere.add(model)
        return False

    def take_rounds(self, trials: list[Trial], seeds: list[int]) -> list[Trial]:
        """Of refinement's new `trials`, those whose round this driver claims; the others are
        waited for like any trial another driver holds."""
        rounds: dict[str, list[Trial]] = {}
        for t in trials:
            rounds.setdefault(round_of(t, seeds), []).append(t)
        mine = [t for key, ts in rounds.items() if self.claims.take(key) for t in ts]
        self.elsewhere.update(t.trial_id for t in trials if t not in mine)
        return mine
