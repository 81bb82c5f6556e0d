"""When a checkpoint's evaluation may stop (issue 51 part 2): an interval per task that stays
valid however often it is looked at, and the rule that stops once every decision the analysis
takes from the checkpoint is settled. Pure functions, numpy only.

Invariant: an interval computed here after any number of stages covers the task's accuracy on
all its items with probability at least 1 - error, simultaneously over every stage (anytime
valid), so stopping at the first stage where it settles keeps the stated error.

**The interval.** The hedged capital confidence sequence of Waudby-Smith & Ramdas, "Estimating
means of bounded random variables by betting" (JRSS-B 2023), Theorem 3, for observations X_i in
[0, 1]. For a candidate mean m, two bettors grow their capital on X against m:

    K+_t(m) = prod_i (1 + l+_i(m) (X_i - m)),   K-_t(m) = prod_i (1 - l-_i(m) (X_i - m))
    K_t(m)  = max(theta K+_t(m), (1 - theta) K-_t(m)),   theta = 1/2
    l+_i(m) = min(l_i, c / m),  l-_i(m) = min(l_i, c / (1 - m)),  c = 1/2
    l_t     = sqrt(2 log(2 / alpha) / (sigma^2_{t-1} t log(1 + t)))    (predictable, eq. 13)
    mu^_t = (1/2 + sum_{i<=t} X_i) / (t + 1),  sigma^2_t = (1/4 + sum_{i<=t} (X_i - mu^_i)^2) / (t + 1)

At the true mean each capital is a nonnegative martingale, so by Ville's inequality K_t(m*)
reaches 1/alpha at any t with probability at most alpha: {m : K_t(m) < 1/alpha for every look}
is an interval valid at every look at once. It is found on a grid of m (GRID points, widened by a
grid step on each side, so the grid never makes it narrower than the set it stands for).

Why this one: it is valid at every look (a fixed-n Wilson or bootstrap interval looked at after
each stage is not), and it adapts to the variance. Its plug-in empirical-Bernstein sibling (the
same paper's Theorem 2) is closed-form, but its width never falls below log(2/alpha) / (c t):
on a checkpoint that agrees with its base on 97 % of 420 items, paired, it stayed twice as wide
(+-0.058 against +-0.028 in accuracy after 256 items), and such a checkpoint could not settle
before its last item. Items are drawn without replacement from a task's fixed set; a
with-replacement sequence is valid for that, conservatively.

**Pairing.** Checkpoints of one model are scored on the same items in the same order, and so is
its base. The difference D_i = X_i(checkpoint) - X_i(base), in [-1, 1], is mapped to (D + 1) / 2
in [0, 1]: where the checkpoint agrees with its base on most items the differences vary little
and the interval on the retention change is much narrower than one on the accuracy alone.

**The decisions** (analysis/classify.py `Thresholds`): a checkpoint's retention share R / R0 is
read against 1 - forget_min (no meaningful forgetting; the highest safe lr) and 1 - near_base /
1 - cliff_drop (the start and the depth of a collapse). A retain task is settled when no such cut
lies inside its interval on R / R0; the learn task's when its own cut (paper_min_learning) is
outside its interval. Either may also stop once its interval is narrower than `width`, and then
a cut may still lie inside it: such a reading is *open* (issue 59 part 3). The store says so
(`evals.settled` false), and the analysis scores an open checkpoint on every item wherever a
verdict reads it (analysis/topup.py), so the decisions a verdict rests on are each at `error`,
while the checkpoints no verdict reads (mid-training ones) stop at the width: on the paper-sized
stores two in three.
"""

from __future__ import annotations

import hashlib
import math
from dataclasses import dataclass
from typing import ClassVar, Protocol

import numpy as np

TRUNCATION = 0.5
"""c of Theorem 3: the largest share of its capital a bettor stakes (the paper's default)."""
JUMP = 0.9
"""A stage that would end past this share of the items ends at the last one."""
REACH = 2.5
"""A stage ends at most this many times the items scored before it (a forecast from few items
is rough). JUMP and REACH as replayed (bench/bench_adaptive.py, docs/benchmarks.md): on the
largest paper-sized store, 33.9 % of the items in 2.6 generation calls per checkpoint and task,
where growth alone took 3.6 calls (32.8 %) and the forecast uncapped, with every item past
60 %, 1.9 calls but 57 % of the items."""
GRID = 2001
"""Candidate means on [0, 1]: a step of 0.0005, far below any width the rule stops at."""


@dataclass(frozen=True)
class Interval:
    low: float
    high: float

    @property
    def width(self) -> float:
        return self.high - self.low

    def settles(self, cuts, width: float) -> bool:
        """No cut lies strictly inside, or the interval is narrower than `width`."""
        return self.width <= width or not any(self.low < c < self.high for c in cuts)


def _bets(x: np.ndarray, error: float) -> np.ndarray:
    """l_t of eq. 13: predictable (uses X_1..X_{t-1} only), before truncation."""
    t = np.arange(1, x.size + 1, dtype=float)
    mu_hat = (0.5 + np.cumsum(x)) / (t + 1)
    sigma2 = (0.25 + np.cumsum((x - mu_hat) ** 2)) / (t + 1)
    sigma2_prev = np.concatenate(([0.25], sigma2[:-1]))
    return np.sqrt(2 * math.log(2 / error) / (sigma2_prev * t * np.log1p(t)))


def log_capital(x, means, error: float) -> np.ndarray:
    """log K_t(m) (module docstring) after each observation of `x` (values in [0, 1]), for each
    candidate mean of `means`: shape (len(x), len(means))."""
    x = np.asarray(x, dtype=float)
    if np.any((x < 0) | (x > 1)):
        raise ValueError("a confidence sequence of this kind needs values in [0, 1]")
    m = np.asarray(means, dtype=float)[None, :]
    lam = _bets(x, error)[:, None]
    d = x[:, None] - m
    up = np.cumsum(np.log1p(np.minimum(lam, TRUNCATION / np.maximum(m, 1e-12)) * d), axis=0)
    down = np.cumsum(np.log1p(-np.minimum(lam, TRUNCATION / np.maximum(1 - m, 1e-12)) * d), axis=0)
    return np.maximum(math.log(0.5) + up, math.log(0.5) + down)


def mean_interval(x, error: float) -> Interval:
    """The means no look has ruled out after `x`: {m : K_t(m) < 1/error for every t}."""
    x = np.asarray(x, dtype=float)
    if x.size == 0:
        return Interval(0.0, 1.0)
    grid = np.linspace(0.0, 1.0, GRID)
    kept = grid[(log_capital(x, grid, error) < math.log(1 / error)).all(axis=0)]
    if kept.size == 0:  # only where the grid skips over the whole set: the nearest point, widened
        kept = grid[[np.argmin(log_capital(x, grid, error).max(axis=0))]]
    step = 1.0 / (GRID - 1)
    return Interval(max(0.0, float(kept.min()) - step), min(1.0, float(kept.max()) + step))


def change_interval(scores, base_scores, error: float) -> Interval:
    """An interval on mean(scores - base_scores), the two paired item by item (module
    docstring, "Pairing"); each score in [0, 1]."""
    d = (np.asarray(scores, dtype=float) - np.asarray(base_scores, dtype=float) + 1) / 2
    inner = mean_interval(d, error)
    return Interval(2 * inner.low - 1, 2 * inner.high - 1)


def retention_cuts(forget_min: float, near_base: float, cliff_drop: float) -> tuple[float, ...]:
    """The retention shares R / R0 the classifier reads a checkpoint against (Thresholds)."""
    return tuple(sorted({1 - forget_min, 1 - near_base, 1 - cliff_drop}))


def share_interval(change: Interval, base_accuracy: float) -> Interval:
    """The paired change in accuracy as an interval on the retention share R / R0 (R0: the base's
    accuracy on every item, scored once per model)."""
    if base_accuracy <= 0:
        return Interval(-math.inf, math.inf)  # no retention to lose: nothing to read against
    return Interval(1 + change.low / base_accuracy, 1 + change.high / base_accuracy)


def stages(n_items: int, first: int = 64, growth: float = 2.0) -> list[int]:
    """Cumulative item counts after each stage: `first`, then `growth` times more each stage, the
    last stage every item. No item is scored twice: stage k scores items [stages[k-1], stages[k])."""
    if n_items <= 0:
        return []
    out, n = [], max(1, first)
    while n < n_items:
        out.append(n)
        n = max(n + 1, int(round(n * growth)))
    return out + [n_items]


def item_order(n_items: int, seed: int, label: str) -> np.ndarray:
    """One seeded order of a task's items, shared by every checkpoint of a model and by its base
    (so that they are paired), and the same in every run: a permutation of range(n_items)."""
    digest = int.from_bytes(hashlib.sha256(label.encode()).digest()[:8], "little")
    return np.random.default_rng([seed, digest, n_items]).permutation(n_items)


@dataclass(frozen=True)
class Reading:
    """Where a checkpoint's staged evaluation of one task stands: the interval on its accuracy on
    every item (paired with its base where the base's items are at hand), and whether every
    decision read from it is settled."""

    interval: Interval
    settled: bool
    need: float = math.inf
    """Items at which it would settle if its interval keeps narrowing as 1 / sqrt(n) around the
    mean read now: where the next stage ends (`StopRule.next_total`). A forecast, never a
    decision: the interval decides, and it is valid whatever the stages' sizes."""
    open: bool = True
    """Some cut still lies inside the interval (or the mean read lies on the other side of one than
    the interval): a reading that stops here (by its width) settles no decision at that cut, and
    the analysis tops it up where a verdict reads it (issue 59 part 3)."""


class Rule(Protocol):
    """A stopping rule (issue 60 part 6): what the evaluator asks after each stage, and what the
    planner prices. One frozen dataclass per rule (it crosses Ray in the request), built from
    the sweep file's `eval.adaptive` and the classifier's cuts, named in RULES."""

    ITEMS: ClassVar[float]
    """The share of a checkpoint's items the rule scores, top-ups included, as measured by
    replaying full evaluations (bench/bench_adaptive.py --paper): what `plan` prices."""
    CALLS: ClassVar[float]
    """Generation calls per checkpoint and task (its stages and top-ups), measured the same way:
    each costs a call's fixed part and its decode steps (planner/evalcost.py)."""

    def read(self, role: str, scores, base_scores=None) -> Reading:
        """The reading after `scores` (settled or not, and how many items it forecasts)."""

    def next_total(self, done: int, n_items: int, reading: Reading | None, label: str = "") -> int:
        """Where task `label`'s next stage ends."""


RULES = {"hedged_cs": "cliffsweep.evals.stopping:StopRule"}
"""name -> "module:attribute" of each stopping rule (registry.py); `eval.adaptive.rule` names one."""


def rule_class(name: str) -> type:
    from cliffsweep.registry import lookup

    return lookup(RULES, name, "stopping rule")


@dataclass(frozen=True)
class StopRule:
    """The rule an evaluator stops by (issue 51), typed across Ray in the request: the error, the
    width (in accuracy), the stages, and the cuts the analysis reads a checkpoint against, as
    shares of its base (analysis/classify.py `Thresholds`, turned into cuts by the driver, which
    may read the analysis; the evaluator may not). RULES' "hedged_cs": the hedged capital
    confidence sequence (module docstring)."""

    ITEMS: ClassVar[float] = 0.42
    """Measured by bench/bench_adaptive.py --paper --floors (2026-12-07: 40.2 %, 43.7 % and 47.8 % of
    the items of the three paper-sized synthetic stores, 41.8 % of them all), with the stage
    floors a GPU's costs give (`call_items`: what `plan` prices); without floors 38.9 / 41.2 /
    45.5 % (docs/benchmarks.md). The base is scored on every item. Items, not seconds: each
    stage is one more generation call, which a GPU's decode batches less well (CALLS)."""
    CALLS: ClassVar[float] = 1.6
    """The same replay: 1.55, 1.61 and 1.81 calls per checkpoint and task, the top-up's call
    included (2.65-2.86 without the floors: the floors halve the modeled seconds, 85.7 % of the
    full evaluation's to 45.1 % on the paper store)."""

    error: float
    width: float
    first: int
    growth: float
    retain_cuts: tuple[float, ...]
    """Retention shares R / R0 (`retention_cuts`)."""
    learn_gain: float
    """Thresholds.paper_min_learning: a learn task's cut is L0 + learn_gain (1 - L0)."""
    call_items: tuple[tuple[str, float], ...] = ()
    """(task label, items) of each task: the items whose tokens cost what one generation call's
    fixed part does on the evaluators' device (planner/evalcost.stage_floors, issue 61 part 1).
    No stage is smaller, and a stage that would leave fewer items than that takes them all: a
    call spends no more on being a call than on its items. A task not named: no floor."""

    def cuts(self, role: str, base_accuracy: float) -> tuple[float, ...]:
        """The shares of the base's accuracy a task of `role` is read against."""
        if role == "retain":
            return self.retain_cuts
        return (1 + self.learn_gain * (1 - base_accuracy) / max(base_accuracy, 1e-9),)

    def read(self, role: str, scores, base_scores=None) -> Reading:
        """The reading after `scores` (the checkpoint's first items in the model's order, each in
        [0, 1]); `base_scores`: the base's scores on every item in that order, or None when the
        base is not evaluated yet (then only the width can stop it, and the reading stays open).

        Settled by its cuts, for a task read against its base: no cut lies inside the share's
        interval, and the mean of the items scored (what the store keeps and the analysis reads)
        lies on the same side of every cut as the interval, so that the value read agrees with
        the decision the interval settled. Else it may still stop by its width, open: issue 59
        measured such stops read on the wrong side of the 0.9 cut 37-47 % of the time within
        0.01 of it, so an open reading is never what a verdict is read from (analysis/topup.py
        scores it in full first); a mid-training checkpoint, which no verdict reads, keeps it."""
        x = np.asarray(scores, dtype=float)
        if base_scores is None:
            inner = mean_interval(x, self.error)
            return Reading(inner, inner.width <= self.width, x.size * (inner.width / self.width) ** 2)
        base = np.asarray(base_scores, dtype=float)
        b0 = float(base.mean())
        change = change_interval(x, base[: x.size], self.error)
        accuracy = Interval(max(0.0, b0 + change.low), min(1.0, b0 + change.high))
        by_width = x.size * (accuracy.width / self.width) ** 2
        if b0 <= 0:
            return Reading(accuracy, accuracy.width <= self.width, by_width, open=False)
        share = share_interval(change, b0)
        cuts = self.cuts(role, b0)
        plain = float(x.mean()) / b0
        # each cut outside the interval: the mean read lies on the interval's side of it
        agrees = all((plain - c) * (share.low - c) > 0 for c in cuts if not share.low < c < share.high)
        inside = [abs(plain - c) for c in cuts if share.low < c < share.high]
        gap = min(inside, default=math.inf)
        by_cut = x.size * (share.width / 2 / gap) ** 2 if gap > 0 else math.inf
        by_cuts = agrees and not inside
        return Reading(accuracy, by_cuts or accuracy.width <= self.width, min(by_width, by_cut), open=not by_cuts)

    def next_total(self, done: int, n_items: int, reading: Reading | None, label: str = "") -> int:
        """Where task `label`'s next stage ends, `done` items scored: the first stage's size; then
        `growth` times `done`, or further (up to REACH times) where the reading forecasts it
        settles only further; every item once that is past JUMP of them. A stage costs a
        generation call whatever its size, so a few large stages beat many small ones
        (docs/design.md): none is smaller than the task's `call_items`, and none leaves fewer
        than that behind it."""
        floor = math.ceil(dict(self.call_items).get(label, 0.0))
        if done == 0 or reading is None:
            target = max(self.first, floor)
            return n_items if target > n_items or n_items - target < floor else target
        grown = max(done + 1, int(round(done * self.growth)), done + floor)
        target = max(grown, int(min(reading.need, REACH * done, n_items)))
        return n_items if target >= JUMP * n_items or n_items - target < floor else target


def stageable(task) -> bool:
    """Whether `task` can be scored a stage at a time (issue 51): cliffsweep's own greedy tasks,
    whose items are scored one by one, right or wrong. lm-eval builds its own requests and
    metrics over its whole document set, a loss task's value is a mean NLL (unbounded, where the
    interval needs [0, 1]), and a sampled task's avg@n and pass@k are read from n samples per
    item: those are scored in full (docs/tasks.md)."""
    return task.harness not in ("lm_eval", "loss") and getattr(task.params, "sampling", None) is None
