"""The analysis's side of evaluating until the verdict is settled (issue 51 parts 2-3): the rule
an evaluator stops by, made from the classifier's thresholds, and the checkpoints a series'
verdict hinges on, which are then scored on every item (a top-up). Pure functions.

Why a top-up at all: the rule settles each checkpoint on its own, against the cuts on its own
retention share (evals/stopping.py). A series' verdict also compares checkpoints with each other:
the critical bracket is the lr pair with the largest collapse, the highest safe lr is the last lr
within forget_min of the base and the one after it is the first that is not. Those few points are
where a verdict turns, so they are read from every item, as a full evaluation reads them. So is
every checkpoint a verdict reads (a done trial's classified one) that the rule stopped by its
width with a cut still inside its interval (`evals.settled` false) where its value at one end of
that interval would change the verdict: no verdict rests on a decision the rule left open (issue
59 part 3). The rest keep what the rule scored: mid-training checkpoints (no verdict reads them),
classified ones settled at `error` against every cut, and open ones whose whole interval reads
the same verdict.
"""

from __future__ import annotations

from typing import NamedTuple

import numpy as np
import pandas as pd

from cliffsweep.analysis.classify import Thresholds
from cliffsweep.analysis.frontiers import frontiers
from cliffsweep.evals.stopping import Rule, retention_cuts, rule_class
from cliffsweep.sweep.grid import SERIES_KEY, is_base
from cliffsweep.sweep.spec import AdaptiveSpec

SERIES = SERIES_KEY
HINGES = ("critical_lr_low", "critical_lr_high", "max_safe_lr", "max_safe_lr_next")
"""The frontier table's lrs (analysis/frontiers.py) at which a series' verdict is read."""


def stop_rule(adaptive: AdaptiveSpec | None, th: Thresholds | None = None,
              call_items: tuple[tuple[str, float], ...] = ()) -> Rule | None:
    """The rule an evaluator stops by (None: score every item), its cuts the classifier's, its
    stages no smaller than `call_items` (planner/evalcost.stage_floors)."""
    if adaptive is None:
        return None
    th = th or Thresholds()
    return rule_class(adaptive.rule)(error=adaptive.error, width=adaptive.width, first=adaptive.first, growth=adaptive.growth,
                    retain_cuts=retention_cuts(th.forget_min, th.near_base, th.cliff_drop),
                    learn_gain=th.paper_min_learning, call_items=call_items)


def _lrs(row: pd.Series, column: str) -> list[float]:
    v = row[column] if column in row else None
    return [float(x) for x in v] if isinstance(v, (list, tuple, np.ndarray)) else []


def hinging(points: pd.DataFrame, table: pd.DataFrame) -> dict[tuple[str, int], frozenset[str]]:
    """(trial, step) -> the axes ({"L", "R"}) it is read on, of the points each series' verdict is
    read at (HINGES and deciding_lrs), among `points` (the analysis's points; the one each trial
    is classified on) and `table` (frontiers' table, one row per series). A hinge listed in
    `learn_only_lrs` or `retain_only_lrs` (frontiers.py) is read on that axis alone, the bracket
    and every other one on both."""
    out: dict[tuple[str, int], set[str]] = {}
    pts = points[~is_base(points) & points["classified"].astype(bool)]  # the checkpoint read per trial
    for _, row in table.iterrows():
        lrs = [float(row[c]) for c in HINGES if c in row and pd.notna(row[c])] + _lrs(row, "deciding_lrs")
        if not lrs:
            continue
        both = [float(row[c]) for c in ("critical_lr_low", "critical_lr_high") if c in row and pd.notna(row[c])]
        alone = {"L": _lrs(row, "learn_only_lrs"), "R": _lrs(row, "retain_only_lrs")}
        mine = pts[(pts[SERIES] == row[SERIES].to_numpy()).all(axis=1)]
        hit = mine[np.isclose(mine["lr"].to_numpy(float)[:, None], lrs, rtol=1e-9).any(axis=1)]
        for t, s, lr in zip(hit["trial_id"], hit["step"], hit["lr"].to_numpy(float)):
            axes = {a for a, at in alone.items() if np.isclose(lr, at, rtol=1e-9).any()}
            if len(axes) != 1 or np.isclose(lr, both, rtol=1e-9).any():
                axes = {"L", "R"}
            out.setdefault((str(t), int(s)), set()).update(axes)
    return {k: frozenset(v) for k, v in sorted(out.items())}


def short_tasks(evals: pd.DataFrame) -> dict[tuple[str, int], frozenset[str]]:
    """(trial, step) -> the tasks that scored it on fewer than all their items."""
    if evals.empty or "n_items" not in evals:
        return {}
    short = evals[evals["n_items"].notna() & (evals["n_scored"] < evals["n_items"])]
    out: dict[tuple[str, int], set[str]] = {}
    for t, s, task in zip(short["trial_id"], short["step"], short["task"] if "task" in short else [""] * len(short)):
        out.setdefault((str(t), int(s)), set()).add(str(task))
    return {k: frozenset(v) for k, v in out.items()}


def partial(evals: pd.DataFrame) -> set[tuple[str, int]]:
    """(trial, step) of checkpoints that some task scored on fewer than all its items."""
    return set(short_tasks(evals))


VERDICT = ("regime", "regime_paper", "critical_lr_low", "critical_lr_high", "max_safe_lr")
"""What a series' verdict is (the frontiers table's columns): its regime in both readings, its
bracket and its highest safe lr; what a top-up must leave as a full evaluation reads it."""


def verdict(row: pd.Series) -> tuple:
    """`row`'s VERDICT, NaN as None (so that two verdicts compare equal)."""
    return tuple(None if isinstance(row[c], float) and row[c] != row[c] else row[c] for c in VERDICT)


def opened(evals: pd.DataFrame) -> pd.DataFrame:
    """The `evals` rows a staged evaluation stopped open: by its width, a cut still inside its
    interval (`settled` false, evals/stopping.py `Reading.open`), scored in part."""
    if evals.empty or "settled" not in evals:
        return evals.iloc[:0]
    return evals[evals["settled"].eq(False) & (evals["n_scored"] < evals["n_items"])]


def _frontiers_row(series_points: pd.DataFrame, th: Thresholds | None) -> pd.Series:
    """The frontiers row of the one series among `series_points` (its base's points too)."""
    return frontiers(series_points, thresholds=th, n_boot=0).iloc[0]


def _moves(series_points: pd.DataFrame, at, column: str, ends: tuple[float, float], now: tuple,
           th: Thresholds | None) -> bool:
    """Whether the series' verdict (`now`) differs with point `at`'s `column` at either end of
    its interval, all else as read."""
    for value in ends:
        probe = series_points.copy()
        probe.loc[at, column] = float(np.clip(value, 0.0, 1.0))
        if verdict(_frontiers_row(probe, th)) != now:
            return True
    return False


def open_deciding(points: pd.DataFrame, table: pd.DataFrame, evals: pd.DataFrame, tasks: dict[str, str] | None = None,
                  th: Thresholds | None = None, skip: dict | None = None) -> dict[tuple[str, int], set[str]]:
    """(trial, step) -> its tasks read open (not among `skip`'s tasks of it), of the classified checkpoints whose
    interval on that task leaves the verdict undecided: their value at one end of it changes their
    series' verdict, all else as read (issue 59 part 3: no decision a verdict rests on is left
    open). `tasks`: a points column -> the task it is read from ({"L": learn task, "R": retain
    task}); an open task with no column of its own (a suite's retain tasks, or `tasks` not given)
    is topped up wherever it is classified."""
    open_ = opened(evals)
    if open_.empty:
        return {}
    column = {t: c for c, t in (tasks or {}).items()}
    out: dict[tuple[str, int], set[str]] = {}
    pts = points[is_base(points) | points["classified"].astype(bool)]
    for _, row in table.iterrows():
        mine = pts[(pts[SERIES] == row[SERIES].to_numpy()).all(axis=1)
                   | (is_base(pts) & (pts["model"] == row["model"]))]
        at = {(str(t), int(s)): i for i, t, s, b in zip(mine.index, mine["trial_id"], mine["step"],
                                                        is_base(mine)) if not b}
        mine_open = open_[open_["trial_id"].astype(str).isin({t for t, _ in at})]
        now = None
        for r in mine_open.itertuples():
            key = (str(r.trial_id), int(r.step))
            if key not in at or str(r.task) in (skip or {}).get(key, ()) or str(r.task) in out.get(key, ()):
                continue
            now = verdict(_frontiers_row(mine, th)) if now is None else now
            col = column.get(r.task)
            if col is None or col not in mine or not np.isfinite([r.ci_low, r.ci_high]).all() or \
                    _moves(mine, at[key], col, (r.ci_low, r.ci_high), now, th):
                out.setdefault(key, set()).add(str(r.task))
    return out


class TopUp(NamedTuple):
    """One checkpoint to score on every item of `tasks` (its other tasks keep what they scored)."""

    trial_id: str
    step: int
    tasks: frozenset[str]


def top_ups(points: pd.DataFrame, table: pd.DataFrame, evals: pd.DataFrame, tasks: dict[str, str] | None = None,
            th: Thresholds | None = None) -> list[TopUp]:
    """The checkpoints to score on every item, and on which tasks: those the verdict hinges on
    that were scored in part (each task scored in part that the hinge is read on: the highest
    safe lr and the next only on retention, the others on both axes), and
    every classified checkpoint read open whose interval leaves the verdict undecided, on the task
    read open alone (issue 59 part 3; a checkpoint topped up for its open retain reading does not
    pay for its learn task's items)."""
    short = short_tasks(evals)
    learn = (tasks or {}).get("L")
    hinge = {}
    for k, axes in hinging(points, table).items():
        need = short.get(k, frozenset())
        if learn is not None and axes == {"R"}:  # every short task but the learn one (a suite's retain tasks too)
            need -= {learn}
        elif learn is not None and axes == {"L"}:
            need &= {learn}
        if need:
            hinge[k] = need
    out = dict(hinge)
    for key, open_tasks in open_deciding(points, table, evals, tasks, th, skip=hinge).items():
        out[key] = hinge.get(key, frozenset()) | frozenset(open_tasks)
    return [TopUp(t, s, out[(t, s)]) for t, s in sorted(out)]
