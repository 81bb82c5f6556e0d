"""Pareto frontiers and the frontier-area score in the (learning, retention) plane.

Both axes are maximised (cliff paper, seed 000, Sec. 5.2: the optimal corner is top-right:
full learning, no forgetting). A point is Pareto-optimal if no other point is at least as good
on both axes and strictly better on one; identical points do not dominate each other, so ties
are all kept.
"""

from __future__ import annotations

import numpy as np


def pareto_mask(L: np.ndarray, R: np.ndarray, robust: float = 0.0, margin: tuple | None = None) -> np.ndarray:
    """Boolean mask of the Pareto-optimal points (maximising L and R).

    ``robust = c > 0``: seed 001's robust frontier (Sec. 6, "Evaluation"): a frontier point is
    kept only if it beats every other point by at least c on one axis, ``L_i >= L_j + c or
    R_i >= R_j + c`` for all j ("only the points with a significant improvement compared to
    others"; 001 uses c = 0.001). Points identical to i count as i, not as others. ``margin``:
    the (L, R) values that c is measured on, where they are not L and R themselves: 001 measures
    it on the loss, so an axis read from a loss task passes its negated mean loss (points.py
    ``L_margin`` / ``R_margin``), higher still better."""
    L, R = np.asarray(L, float), np.asarray(R, float)
    if robust <= 0:
        return _maxima(L, R)
    ge = (L[None, :] >= L[:, None]) & (R[None, :] >= R[:, None])
    gt = (L[None, :] > L[:, None]) | (R[None, :] > R[:, None])
    # row i is dominated if some column j is >= on both and > on one
    keep = ~(ge & gt).any(axis=1)
    if robust > 0:
        same = (L[None, :] == L[:, None]) & (R[None, :] == R[:, None])
        Lm, Rm = (L, R) if margin is None else (np.asarray(margin[0], float), np.asarray(margin[1], float))
        clear = (Lm[:, None] >= Lm[None, :] + robust) | (Rm[:, None] >= Rm[None, :] + robust) | same
        keep &= clear.all(axis=1)
    return keep


def dominates_all(L_a: np.ndarray, R_a: np.ndarray, L_b: np.ndarray, R_b: np.ndarray, robust: float = 0.0,
                  margin_a: tuple | None = None, margin_b: tuple | None = None) -> bool:
    """True if every point of set b is weakly dominated by some point of set a, and at least
    one strictly: set a's frontier lies on or above set b's everywhere b has points.

    ``robust = c > 0`` (seed 001's margin, as in :func:`pareto_mask`; issue 52): every point of b
    is dominated by a point of a that is also better by at least c on one axis, "absolutely
    better" beyond a difference 001 would not plot; c is measured on ``margin_a`` / ``margin_b``
    where given (a loss axis: negated mean loss)."""
    if len(L_a) == 0 or len(L_b) == 0:
        return False
    L_a, R_a, L_b, R_b = (np.asarray(x, float) for x in (L_a, R_a, L_b, R_b))
    ge = (L_a[None, :] >= L_b[:, None]) & (R_a[None, :] >= R_b[:, None])
    if robust > 0:
        (La, Ra), (Lb, Rb) = margin_a or (L_a, R_a), margin_b or (L_b, R_b)
        clear = (np.asarray(La, float)[None, :] >= np.asarray(Lb, float)[:, None] + robust) | (
            np.asarray(Ra, float)[None, :] >= np.asarray(Rb, float)[:, None] + robust)
        return bool((ge & clear).any(axis=1).all())
    return Dominance(L_a, R_a).covers(L_b, R_b)


class Dominance:
    """A set of points a, sorted once by L, asked of other sets b whether a dominates every point
    of b (`dominates_all` without a margin). `frontiers` asks it of every other series of a
    model: 1,560 pairs a model on a 100,000-trial store, each an n x n comparison before
    (issue 62 part 3). NaNs compare false, as in the pairwise form: a NaN point of a dominates
    nothing, a NaN point of b is dominated by nothing."""

    def __init__(self, L_a: np.ndarray, R_a: np.ndarray):
        L_a, R_a = np.asarray(L_a, float), np.asarray(R_a, float)
        ok = ~(np.isnan(L_a) | np.isnan(R_a))
        order = np.argsort(L_a[ok], kind="stable")
        self.L, R = L_a[ok][order], R_a[ok][order]
        self.best = np.r_[np.maximum.accumulate(R[::-1])[::-1], -np.inf]  # the highest R from index k on
        new = np.r_[True, self.L[1:] != self.L[:-1]] if len(R) else np.zeros(0, bool)
        # the highest R among a's points of each one's L
        self.run_top = np.maximum.reduceat(R, np.flatnonzero(new))[np.cumsum(new) - 1] if len(R) else R

    def covers(self, L_b: np.ndarray, R_b: np.ndarray) -> bool:
        L_b, R_b = np.asarray(L_b, float), np.asarray(R_b, float)
        if not len(self.L) or not len(L_b) or np.isnan(L_b).any() or np.isnan(R_b).any():
            return False
        lo, hi = np.searchsorted(self.L, L_b, "left"), np.searchsorted(self.L, L_b, "right")  # L_a >= L_b; > L_b
        if not (self.best[lo] >= R_b).all():
            return False
        same = (hi > lo) & (self.run_top[np.minimum(lo, len(self.L) - 1)] > R_b)  # equal L, higher R
        return bool(((self.best[hi] >= R_b) | same).any())


def _maxima(L: np.ndarray, R: np.ndarray) -> np.ndarray:
    """`pareto_mask` without a margin, by one sort instead of an n x n comparison (a model of a
    100,000-trial store has 6,000 points: 36 M pairs, seconds per model; issue 62 part 3). Point
    i is dominated iff a point of larger L has R >= R_i, or one of the same L has R > R_i. A NaN
    coordinate compares false, as in the pairwise form: such a point is kept and dominates none."""
    keep = np.ones(len(L), bool)
    idx = np.flatnonzero(~(np.isnan(L) | np.isnan(R)))
    if len(idx) == 0:
        return keep
    order = np.lexsort((-R[idx], -L[idx]))  # L descending, then R descending
    ls, rs = L[idx][order], R[idx][order]
    starts = np.flatnonzero(np.r_[True, ls[1:] != ls[:-1]])  # each distinct L, its highest R first
    level = np.cumsum(np.r_[True, ls[1:] != ls[:-1]]) - 1
    top = rs[starts]
    above = np.r_[-np.inf, np.maximum.accumulate(top)[:-1]]  # the highest R among larger L
    keep[idx[order[(above[level] >= rs) | (top[level] > rs)]]] = False
    return keep


def frontier_area(L: np.ndarray, R: np.ndarray, L0: float, R0: float) -> float:
    """Area dominated by the points in the unit square of (learning share of headroom
    ``(L - L0) / (1 - L0)``, retention share of base ``R / R0``), both clipped to [0, 1].

    Our default score (the paper plots frontiers but gives no scalar): 1 = the task fully
    learned with no forgetting, 0 = nothing learned. It is the hypervolume indicator with
    reference point (L0, 0), comparable across methods of one model and across models.
    """
    if R0 <= 0 or L0 >= 1:
        return float("nan")
    x = np.clip((np.asarray(L, float) - L0) / (1.0 - L0), 0.0, 1.0)
    y = np.clip(np.asarray(R, float) / R0, 0.0, 1.0)
    keep = pareto_mask(x, y)
    x, y = x[keep], y[keep]
    order = np.argsort(-x)  # sweep from high learning to low; retention rises along the front
    area, best_y = 0.0, 0.0
    xs = np.append(x[order], 0.0)
    for k, i in enumerate(order):
        best_y = max(best_y, y[i])
        area += (xs[k] - xs[k + 1]) * best_y
    return float(area)


def margins(pts) -> tuple | None:
    """The (L, R) values a robust frontier's c is measured on (pareto_mask), from a points
    frame's ``L_margin`` / ``R_margin`` columns; None when it has none (older callers)."""
    if "L_margin" not in pts or "R_margin" not in pts:
        return None
    return pts["L_margin"].to_numpy(float), pts["R_margin"].to_numpy(float)
