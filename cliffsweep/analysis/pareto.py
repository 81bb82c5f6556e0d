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
    gt = ge & ((L_a[None, :] > L_b[:, None]) | (R_a[None, :] > R_b[:, None]))
    return bool(ge.any(axis=1).all() and gt.any())


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
