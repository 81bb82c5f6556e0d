"""What refinement rounds bought, per series: its regime and brackets on the grid alone (trials
of round 0) and with the refined lrs (every round). Point estimates, no bootstrap: the report's
"before / after" table (docs/analysis.md, Refinement)."""

from __future__ import annotations

import numpy as np
import pandas as pd

from cliffsweep.analysis.classify import Classification, Thresholds, classify_arrays, lr_curve
from cliffsweep.analysis.safe_lr import max_safe_lr_arrays
from cliffsweep.analysis.regimes import CLIFF
from cliffsweep.sweep.grid import SERIES_KEY, is_base

REFINEMENT_COLUMNS = [
    "model", "series", "epochs", "n_grid_lrs", "n_refined_lrs", "grid_regime", "regime",
    "grid_max_safe_lr", "grid_max_safe_lr_next", "max_safe_lr", "max_safe_lr_next",
    "grid_transition_low", "grid_transition_high", "transition_low", "transition_high",
]


def _transition(c: Classification) -> tuple[float, float]:
    """The cliff bracket, else a collapse the grid could not resolve, else (NaN, NaN)."""
    lo, hi = (c.critical_lr_low, c.critical_lr_high) if c.regime == CLIFF else (
        c.unresolved_lr_low, c.unresolved_lr_high)
    return (np.nan, np.nan) if lo is None else (lo, hi)


def _nan(x: float | None) -> float:
    return np.nan if x is None else x


def _state(rows: pd.DataFrame, th: Thresholds) -> dict:
    curve = lr_curve(rows)
    arrays = (curve["lr"].to_numpy(float), curve["L"].to_numpy(float), curve["R"].to_numpy(float))
    c, s = classify_arrays(*arrays, th), max_safe_lr_arrays(*arrays, th)
    lo, hi = _transition(c)
    return {"regime": c.regime, "max_safe_lr": _nan(s.max_safe_lr), "max_safe_lr_next": _nan(s.max_safe_lr_next),
            "transition_low": lo, "transition_high": hi, "n_lrs": int((curve["lr"] > 0).sum())}


def refinement_table(points: pd.DataFrame, thresholds: Thresholds | None = None) -> pd.DataFrame:
    """One row per series that has classified points from a refinement round (``round > 0``);
    columns REFINEMENT_COLUMNS (``grid_*``: from round 0 alone). ``points``: the analysis points
    table (cliffsweep.analysis.points) or any frame with model, series, epochs, lr, L, R, round
    and optionally classified."""
    th = thresholds or Thresholds()
    if "round" not in points or not (points["round"] > 0).any():
        return pd.DataFrame(columns=REFINEMENT_COLUMNS)
    pts = points[points["classified"]] if "classified" in points else points
    rows = []
    for (model, series, epochs), s in pts[~is_base(pts)].groupby(SERIES_KEY, sort=True):
        if not (s["round"] > 0).any():
            continue
        base = pts[(pts["model"] == model) & is_base(pts)]
        grid, full = _state(pd.concat([base, s[s["round"] == 0]]), th), _state(pd.concat([base, s]), th)
        rows.append({"model": model, "series": series, "epochs": epochs, "n_grid_lrs": grid["n_lrs"],
                     "n_refined_lrs": full["n_lrs"] - grid["n_lrs"], "grid_regime": grid["regime"],
                     **{f"grid_{k}": grid[k] for k in ("max_safe_lr", "max_safe_lr_next", "transition_low",
                                                         "transition_high")},
                     **{k: full[k] for k in ("regime", "max_safe_lr", "max_safe_lr_next", "transition_low",
                                             "transition_high")}})
    return pd.DataFrame(rows, columns=REFINEMENT_COLUMNS)
