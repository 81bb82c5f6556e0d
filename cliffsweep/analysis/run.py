"""`analyze_store`: store(s) -> frontiers.parquet/.csv, the claims' tables, points.parquet,
report.html/.md and PNGs in an output folder (what `cliffsweep analyze` runs)."""

from __future__ import annotations

import os

import pandas as pd

from cliffsweep.analysis import paper_claims as claims
from cliffsweep.analysis.classify import Thresholds
from cliffsweep.analysis.confidence import replicate_accuracies
from cliffsweep.analysis.frontiers import MIN_CONFIDENCE, frontiers, model_frontier
from cliffsweep.analysis.paper_tables import paper_tables
from cliffsweep.analysis.points import load_stores
from cliffsweep.analysis.refinement_gain import refinement_table
from cliffsweep.analysis.report import write_report
from cliffsweep.analysis.suite_tables import per_task_table

_LIST_COLUMNS = ("pareto_point_ids", "model_pareto_point_ids", "dominated_by")


def analyze_store(store_uri: str | list[str], out_dir: str, *, learn_task: str | None = None, retain_task: str | None = None,
                  thresholds: Thresholds | dict | None = None, n_boot: int = 200, seed: int = 0,
                  min_confidence: float = MIN_CONFIDENCE, report: bool = True, pick: str = "final",
                  suite: str = "share_of_base", robust_frontier: float = 0.0, metric: str = "accuracy") -> pd.DataFrame:
    """Analyse the store at ``store_uri`` (docs/store.md), or several stores as one (a list: the
    paper grid's three, points.load_stores), and write the results to ``out_dir``.

    Returns the frontiers table (one row per model x series x epochs; columns documented in
    docs/analysis.md). ``thresholds``: a :class:`Thresholds` or a dict of its fields.
    List columns stay lists in Parquet and are ';'-joined in the CSV. Beside it: one Parquet
    table per claim (:func:`paper_tables`). Several retain tasks are read as a suite (``suite``:
    analysis/suite.AGGREGATES; ``retain_task`` reads one), and suite.parquet holds each task's own
    regime beside the aggregate's. ``robust_frontier``: seed 001's margin c (0.001 there) for
    the Pareto columns and model_frontier.parquet (pareto.pareto_mask); 0 = the plain frontier.
    ``metric``: the stored metric read as L and R (points.load_stores), greedy accuracy by default.
    """
    th = thresholds if isinstance(thresholds, Thresholds) else Thresholds(**(thresholds or {}))
    uris = [store_uri] if isinstance(store_uri, str) else list(store_uri)
    data = load_stores(uris, learn_task, retain_task, pick, suite, metric)
    points = data.points.reset_index(drop=True)
    retain = list(data.retain_tasks)
    reps = replicate_accuracies(points, data.samples, data.learn_task, retain, n_boot, seed, suite) \
        if n_boot > 0 else None
    table = frontiers(points, data.samples, th, learn_task=data.learn_task, retain_task=retain,
                      n_boot=n_boot, seed=seed, min_confidence=min_confidence, models=data.models, replicates=reps,
                      robust=robust_frontier)
    extra = paper_tables(points, table, reps, uris)
    if data.suite is not None:
        extra["suite"] = per_task_table(points, data.samples, retain, data.learn_task, th, n_boot, seed,
                                        min_confidence)
    os.makedirs(out_dir, exist_ok=True)
    table.to_parquet(os.path.join(out_dir, "frontiers.parquet"), index=False)
    flat = table.copy()
    for col in _LIST_COLUMNS:
        flat[col] = flat[col].map(";".join)
    flat.to_csv(os.path.join(out_dir, "frontiers.csv"), index=False)
    for name, df in extra.items():
        df.to_parquet(os.path.join(out_dir, f"{name}.parquet"), index=False)
    if data.suite is None and os.path.exists(os.path.join(out_dir, "suite.parquet")):
        os.remove(os.path.join(out_dir, "suite.parquet"))  # an earlier analysis's: not of this reading
    points.to_parquet(os.path.join(out_dir, "points.parquet"), index=False)
    model_frontier(points, robust_frontier).to_parquet(os.path.join(out_dir, "model_frontier.parquet"), index=False)
    if report:
        write_report(table, points, out_dir, store_uri=", ".join(uris), learn_task=data.learn_task,
                     retain_task=data.retain_task, thresholds=th, min_confidence=min_confidence, n_boot=n_boot,
                     notes=data.notes, refinement=refinement_table(points, th), curves=data.curves,
                     paper=extra, counts=claims.sweep_counts(points, data.trials), models=data.models)
    return table
