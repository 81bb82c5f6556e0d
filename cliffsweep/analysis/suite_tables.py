"""Per-task reading of a retention suite (issue 30 part 3): each retain task's own frontiers
beside the aggregate's, and which task falls first.

A task *falls* at the first trained lr where it is no longer kept: for a cliff, the first
collapsed lr (``critical_lr_high``); otherwise the lr after its highest safe lr
(``max_safe_lr_next``). The task that falls first in a series is the one falling at the lowest
lr (ties: the larger loss there first, then the suite's order); none when no task falls within
the swept lrs. Pure functions over the points table (analysis/points.py).
"""

from __future__ import annotations

import numpy as np
import pandas as pd

from cliffsweep.analysis.classify import Thresholds
from cliffsweep.analysis.frontiers import SERIES_KEY, frontiers
from cliffsweep.analysis.suite import n_column, task_column
from cliffsweep.analysis.regimes import CLIFF

SUITE_COLUMNS = ["model", "series", "epochs", "label", "task", "regime", "confidence", "critical_lr_low",
                 "critical_lr_high", "max_safe_lr", "max_safe_lr_next", "max_forgetting", "base_R", "falls_at",
                 "first_to_fall"]


def task_points(points: pd.DataFrame, task: str) -> pd.DataFrame:
    """The points with R (and n_R) read on one task of the suite."""
    return points.assign(R=points[task_column(task)], n_R=points[n_column(task)])


def per_task_table(points: pd.DataFrame, samples: pd.DataFrame | None, tasks: list[str], learn_task: str,
                   th: Thresholds, n_boot: int, seed: int, min_confidence: float) -> pd.DataFrame:
    """One row per series x retain task (SUITE_COLUMNS): the task's own regime, bracket, highest
    safe lr and largest loss, where it falls and whether it falls first in its series."""
    rows = []
    for task in tasks:
        t = frontiers(task_points(points, task), samples, th, learn_task=learn_task, retain_task=task,
                      n_boot=n_boot, seed=seed, min_confidence=min_confidence)
        rows.append(t.assign(task=task))
    table = pd.concat(rows, ignore_index=True)
    cliff = table["regime_point_estimate"] == CLIFF
    table["falls_at"] = np.where(cliff, table["critical_lr_high"], table["max_safe_lr_next"]).astype(float)
    order = {t: i for i, t in enumerate(tasks)}
    table["_order"] = table["task"].map(order)
    table["first_to_fall"] = False
    falling = table[np.isfinite(table["falls_at"])]
    if len(falling):
        first = falling.sort_values(["falls_at", "max_forgetting", "_order"], ascending=[True, False, True])
        first = first.drop_duplicates(SERIES_KEY)
        table.loc[first.index, "first_to_fall"] = True
    return table.sort_values(SERIES_KEY + ["_order"], ignore_index=True)[SUITE_COLUMNS]


def first_to_fall(per_task: pd.DataFrame) -> pd.DataFrame:
    """model, series, epochs -> the task that falls first and its lr (absent: none falls)."""
    first = per_task[per_task["first_to_fall"]]
    return first[SERIES_KEY + ["task", "falls_at"]].rename(columns={"task": "first_to_fall"})
