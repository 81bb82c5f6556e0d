"""The paper's claims and figures' data for a frontiers table: one table each, written by
`analyze` beside frontiers.parquet and drawn by the report (docs/analysis.md maps them)."""

from __future__ import annotations

import pandas as pd

from cliffsweep.analysis import paper_claims as claims
from cliffsweep.analysis.curvature import curvature_table


def paper_tables(points: pd.DataFrame, table: pd.DataFrame, reps: tuple | None, uris: list[str]) -> dict[str, pd.DataFrame]:
    """The paper's claims and figures' data, one table each (analysis/paper_claims.py,
    analysis/curvature.py; docs/analysis.md maps them to the paper)."""
    pts = points.assign(_row=range(len(points)))
    pair = None if reps is None else (reps[0], reps[1])
    gains = claims.matched_gain(pts, table, pair)
    return {"matched_gain": gains, "regime_counts": claims.regime_counts(table),
            "by_sft_regime": claims.by_sft_regime(gains), "optimizers": claims.optimizer_consistency(gains),
            "forgetting_order": claims.forgetting_order(table),
            "epochs_effect": claims.epochs_effect(table),
            "size_effect": claims.size_effect(pts, table), "task_correlation": claims.task_correlation(pts),
            "point_spread": claims.point_spread(pts, pair), "curvature": curvature_table(uris)}
