"""Adaptive lr refinement as pure policy (style.md 5): which lrs to add to a series next.

A grid brackets a series' transition only to its lr step (the toy default: 3.3x). After the
grid (round 0), each series is classified from its own points (cliffsweep.analysis) and new lrs
are placed geometrically inside

- its **cliff bracket** (``critical_lr_low/high``) or, where a grid step wider than
  ``cliff_lr_ratio`` collapses, the **unresolved** step (classify.py rule 6): only lrs inside
  it can tell a cliff from a steep gradual decline;
- its **highest-safe-lr bracket** (``max_safe_lr`` -> ``max_safe_lr_next``, analysis/safe_lr.py):
  the cliff paper's closing question (seed 000, Sec. 6), "to what learning rate can the model
  learn while not forgetting?", answered to the bracket's factor.

A bracket whose upper lr is at most ``target_ratio`` times its lower one is resolved. New lrs
never repeat a known lr of the series, so refined trials are ordinary grid points with new ids.

The driver's contract (one series = model x series label x epochs, grid.series_key):

1. when every trial of round ``k - 1`` of a series is terminal (done / diverged / failed) and
   its model's base evaluation has landed, read the points
   (``cliffsweep.analysis.points.points_from_evals(evals, trials, learn, retain)``);
2. ``lrs = next_lrs(series_curve(points, *key), spec.refine, k, known_lrs=<lrs of every trial of
   the series in the store, any status>)``;
3. ``grid.refined_trials(spec, like, lrs, k)`` are the round-``k`` trials (record them pending,
   then run them as any other); ``[]`` ends the series' refinement.

Resume follows: a series' current round is the largest ``round`` among its stored trials; its
pending trials are re-run and nothing is recomputed until they are terminal, and since
``next_lrs`` is a function of the stored points, the same store gives the same new lrs.
"""

from __future__ import annotations

import math
from collections.abc import Iterable
from typing import TYPE_CHECKING

import pandas as pd

from cliffsweep.analysis.classify import Thresholds, classify_arrays, lr_curve
from cliffsweep.analysis.safe_lr import max_safe_lr_arrays
from cliffsweep.sweep.grid import is_base

if TYPE_CHECKING:
    from cliffsweep.sweep.spec import RefineSpec

LR_DIGITS = 3
"""Significant digits of a new lr: readable trial ids (lr0.000215), and a factor of at most
1.005 from the exact geometric point, far below any useful target_ratio."""


def round_lr(lr: float) -> float:
    return float(f"{lr:.{LR_DIGITS}g}")


def series_curve(points: pd.DataFrame, model: str, series: str, epochs: int) -> pd.DataFrame:
    """The classified points of one series plus its model's base point(s), from an analysis
    points table (cliffsweep.analysis.points: columns model, series, epochs, lr, L, R, classified)."""
    mine = (points["model"] == model) & points["classified"]
    return points[mine & (((points["series"] == series) & (points["epochs"] == epochs)) | is_base(points))]


def brackets(points: pd.DataFrame, thresholds: Thresholds | None = None) -> list[tuple[float, float]]:
    """The lr brackets refinement narrows for one series (``lr, L, R``; lr 0 = base), most
    important first: the cliff bracket or the unresolved collapse, then the highest-safe-lr
    bracket. Of two overlapping brackets the narrower is kept (it holds the transition)."""
    th = thresholds or Thresholds()
    curve = lr_curve(points)
    arrays = (curve["lr"].to_numpy(float), curve["L"].to_numpy(float), curve["R"].to_numpy(float))
    cls, safe = classify_arrays(*arrays, th), max_safe_lr_arrays(*arrays, th)
    found = [(cls.critical_lr_low, cls.critical_lr_high), (cls.unresolved_lr_low, cls.unresolved_lr_high),
             (safe.max_safe_lr, safe.max_safe_lr_next)]
    found = [(lo, hi) for lo, hi in found if lo is not None and hi is not None]
    kept: list[tuple[float, float]] = []
    for lo, hi in sorted(found, key=lambda b: b[1] / b[0]):
        if all(hi <= a or lo >= b for a, b in kept):
            kept.append((lo, hi))
    return [b for b in dict.fromkeys(found) if b in kept]


def _allocate(widths: list[float], n: int) -> list[int]:
    """n new lrs over brackets of these log-widths: evenly, the remainder to the widest."""
    counts = [n // len(widths)] * len(widths)
    for k in sorted(range(len(widths)), key=lambda k: -widths[k])[: n % len(widths)]:
        counts[k] += 1
    return counts


def next_lrs(points: pd.DataFrame, cfg: RefineSpec | None, round: int, *, known_lrs: Iterable[float] = (),
             thresholds: Thresholds | None = None) -> list[float]:
    """New lrs for refinement round ``round`` (1 = the first after the grid) of one series.

    ``points``: the series' final points of done trials and its base point (``lr, L, R``; lr 0
    = base; seeds at one lr are averaged), e.g. :func:`series_curve`. ``known_lrs``: lrs of
    every trial of the series already in the store, whatever its status (a failed or running
    lr is not in ``points`` but must not be proposed again). Returns sorted lrs, at most
    ``cfg.points_per_round``, each strictly inside a bracket wider than ``cfg.target_ratio``,
    geometrically spaced, rounded to LR_DIGITS significant digits; ``[]`` when refinement is
    off, the rounds are spent, or every bracket is resolved.
    """
    if cfg is None or not 1 <= round <= cfg.rounds:
        return []
    if not (points["lr"] == 0).any():
        raise ValueError("the series has no base point (lr 0): refine after the model's base evaluation landed")
    todo = [(lo, hi) for lo, hi in brackets(points, thresholds) if hi > cfg.target_ratio * lo * (1 + 1e-9)]
    if not todo:
        return []
    taken = {round_lr(x) for x in [*points["lr"], *known_lrs]}
    out: list[float] = []
    for (lo, hi), n in zip(todo, _allocate([math.log(hi / lo) for lo, hi in todo], cfg.points_per_round)):
        for k in range(1, n + 1):
            lr = round_lr(lo * (hi / lo) ** (k / (n + 1)))
            if lo < lr < hi and lr not in taken:
                taken.add(lr)
                out.append(lr)
    return sorted(out)
