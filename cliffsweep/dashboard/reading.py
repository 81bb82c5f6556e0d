"""The frontiers and regimes of the dashboard's stores, read as `cliffsweep analyze` reads them
(analysis/points.store_data, analysis/frontiers.frontiers), and the bill `plan` prices."""

from __future__ import annotations

import hashlib

import pandas as pd

from cliffsweep.analysis.frontiers import MIN_CONFIDENCE, frontiers
from cliffsweep.analysis.points import AnalysisInputError, store_data
from cliffsweep.dashboard.views import model_views
from cliffsweep.storage.store import SCHEMAS, SPEC_FILE


def frontier_views(tables: dict[str, list[pd.DataFrame]], specs: list[dict], uris: list[str],
                   samples: list[pd.DataFrame] | None, n_boot: int, reading, cache: dict | None = None) -> dict:
    """Per model its points and series (views.model_views), the tasks L and R are read on, and
    what analysis noted. Without `samples` (the first pass) no confidence is computed, and each
    model's part is kept in `cache` and recomputed only when that model's points changed."""
    empty = SCHEMAS["samples"].empty_table().to_pandas()
    read = {"evals": tables["evals"], "trials": tables["trials"], "steps": tables["steps"],
            "samples": samples if samples is not None else [empty for _ in uris]}
    try:
        data = store_data(read, [s for s in specs if s], uris)
    except AnalysisInputError as e:
        return {"models": [], "said": f"no frontier yet: {e}"}
    points = data.points.reset_index(drop=True)
    retain = list(data.retain_tasks)
    min_confidence = MIN_CONFIDENCE if reading.min_confidence is None else reading.min_confidence
    if n_boot > 0:
        from cliffsweep.analysis.confidence import replicate_accuracies

        reps = replicate_accuracies(points, data.samples, data.learn_task, retain, n_boot, reading.seed,
                                    data.suite or "share_of_base")
        table = frontiers(points, data.samples, learn_task=data.learn_task, retain_task=retain, n_boot=n_boot,
                          seed=reading.seed, models=data.models, replicates=reps, min_confidence=min_confidence)
        models = model_views(points, table, retain)
    else:
        models = regimes_by_model(points, data.models, retain, min_confidence, {} if cache is None else cache)
    return {"models": models, "learn_task": data.learn_task, "retain_task": data.retain_task,
            "retain_tasks": retain, "notes": data.notes, "said": None}


def regimes_by_model(points: pd.DataFrame, info: pd.DataFrame | None, retain: list[str], min_confidence: float,
                     cache: dict) -> list[dict]:
    """model_views of `frontiers` without the bootstrap, one model at a time: every column of a
    frontiers row is read within its model (series labels, Pareto columns, model info), so the
    rows equal one call over all models (tests/test_dashboard.py). `cache`: model -> (its
    inputs' fingerprint, its views), so a refresh after one trial lands recomputes one model."""
    out = []
    for model, mine in points.groupby("model", sort=True):
        facts = info[info["model"] == model] if info is not None else None
        key = (fingerprint(mine), fingerprint(facts), tuple(retain), min_confidence)
        if model not in cache or cache[model][0] != key:
            table = frontiers(mine, n_boot=0, models=facts, min_confidence=min_confidence)
            cache[model] = (key, model_views(mine, table, retain))
        out += cache[model][1]
    for gone in set(cache) - set(points["model"]):
        del cache[gone]
    return out


def fingerprint(frame: pd.DataFrame | None) -> str:
    """A digest of `frame`'s columns and values (pandas' row hashes: milliseconds for 7,000 rows)."""
    if frame is None:
        return ""
    rows = pd.util.hash_pandas_object(frame, index=False).to_numpy()
    return hashlib.sha1(repr(list(frame.columns)).encode() + rows.tobytes()).hexdigest()


def planned_hours(spec: dict) -> dict:
    """`plan`'s bill in H100-hours (training, evaluation, checkpoint waits, setup: planner/text.py's
    bill), or why there is none (a hub model's tokenizer or data not here)."""
    if not spec:
        return {"planned_hours": None, "planned_said": "the store keeps no sweep file"}
    try:
        from cliffsweep.sweep.specfile import parse_spec  # types alone: the run checked the rest when it started
        from cliffsweep.planner.mfu import GPUS
        from cliffsweep.planner.plan import plan_spec

        plans = plan_spec(parse_spec(spec, SPEC_FILE))
        hours = sum(sum(p.hours().values()) for p in plans)
    except Exception as e:  # plan's own errors say what is missing; the page shows the sentence
        return {"planned_hours": None, "planned_said": f"plan could not price it: {e}"[:300]}
    return {"planned_hours": hours, "planned_said": f"{GPUS[1].name}-hours, as `cliffsweep plan` prices the sweep file"}
