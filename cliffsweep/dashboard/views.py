"""What the dashboard page shows, as plain JSON-ready dicts built from a store's tables. Pure:
frames in, dicts out; the caching and the serving are refresh.py's and app.py's.

The sweep view answers "is it healthy, where is it spending" (counts over the grid, why pending
trials wait, evaluations, errors, evaluator pool, elapsed, ETA, GPU-hours against `plan`); the
model view draws the learning-forgetting frontier as it fills in, with each series' regime as
`cliffsweep analyze` reads it (analysis/frontiers.py); the trial view is one grid point's story.
"""

from __future__ import annotations

import json
import math
from typing import Any

import pandas as pd

from cliffsweep.storage.store import PRIMARY_METRICS, SCHEMAS
from cliffsweep.sweep.status import STATUSES, TrialStatus
from cliffsweep.sweep.grid import is_base

ERRORS_SHOWN = 50
GENERATIONS_SHOWN = 8


def clean(value: Any) -> Any:
    """A value JSON can carry: NaN, NA and NaT become None, numpy scalars Python's, times ISO text."""
    if isinstance(value, dict):
        return {str(k): clean(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [clean(v) for v in value]
    if value is None or value is pd.NA or value is pd.NaT:
        return None
    if isinstance(value, pd.Timestamp):
        return value.isoformat()
    if hasattr(value, "item") and not isinstance(value, (str, bytes)):
        value = value.item()
    if isinstance(value, float) and not math.isfinite(value):
        return None
    return value


def records(df: pd.DataFrame, columns: list[str]) -> list[dict]:
    """`df`'s rows as clean dicts (see `clean`) of those of `columns` it has. Through pandas' own
    JSON writer: a paper-sized store's ~7,000 points per refresh, ~10x faster than row by row."""
    part = df[[c for c in columns if c in df.columns]]
    return json.loads(part.to_json(orient="records", date_format="iso", double_precision=15)) if len(part) else []


GRID_COLUMNS = ["trial_id", "model", "method", "series", "optimizer", "epochs", "max_steps", "lr", "seed", "round",
                "status", "attempt", "steps", "total_steps", "error"]


def sweep_view(trials: pd.DataFrame, evals: pd.DataFrame | None, errors: pd.DataFrame, live: dict | None,
               spec: dict | None, planned_hours: dict, now: float) -> dict:
    """Counts by status, the grid's cells, evaluations, errors, the evaluator pool, time and cost.
    `evals` None: not read yet (the first page's grid comes from the trials alone, refresh.py);
    the evaluations' counts and hours then say "being read", not 0."""
    if evals is None:
        view = sweep_view(trials, EMPTY_EVALS, errors, live, spec, planned_hours, now)
        return {**view, "evals": {"reading": True}, "cost": {**view["cost"], "eval_hours": None}}
    latest = trials.drop_duplicates("trial_id", keep="last")
    grid = latest.sort_values(["model", "series", "epochs", "lr", "seed"])
    waiting = (live or {}).get("waiting", {})
    why = {t: waiting.get(t, "no driver's live state names it")
           for t in grid.loc[grid["status"] == TrialStatus.PENDING, "trial_id"]}
    folded = len(grid) > GRID_TRIALS_MAX
    cells = folded_cells(grid) if folded else records(grid, GRID_COLUMNS)
    for cell in () if folded else cells:
        if cell["trial_id"] in why:
            cell["waiting"] = why[cell["trial_id"]]
    progress = (live or {}).get("progress", {})
    points = evals[~is_base(evals)][["trial_id", "step"]].drop_duplicates() if len(evals) else evals
    eval_errors = errors[errors["kind"].str.startswith("eval")] if len(errors) else errors
    started = progress.get("started_at") or (latest["started_at"].min().timestamp()
                                             if latest["started_at"].notna().any() else None)
    waits: dict[str, int] = {}
    for reason in why.values():
        waits[reason] = waits.get(reason, 0) + 1
    return {
        "counts": clean(latest["status"].value_counts().to_dict()),
        "statuses": STATUSES,  # the page's order of the counts: the words are the server's, not a copy
        "waits": waits,
        "total": int(len(latest)),
        "grid_trials_max": GRID_TRIALS_MAX,
        "grid": cells,
        "evals": {"checkpoints_done": int(len(points)), "base_done": int(evals.loc[is_base(evals), "trial_id"].nunique())
                  if len(evals) else 0, "queued": progress.get("evals_queued"), "errors": int(len(eval_errors)),
                  **items_scored(evals)},
        "errors": records(errors.sort_values("at", ascending=False).head(ERRORS_SHOWN),
                          ["trial_id", "step", "kind", "message", "at"]),
        "n_errors": int(len(errors)),
        "live": live_state(live, now),
        "elapsed_s": None if started is None else (now - started if not _finished(live) else
                                                   _last_time(trials, evals) - started),
        "eta_s": progress.get("eta_s") if not _finished(live) else 0,
        "cost": cost_view(latest, evals, spec, planned_hours),
    }


EMPTY_EVALS = SCHEMAS["evals"].empty_table().to_pandas()

GRID_TRIALS_MAX = 5_000
"""Above this many trials the grid is sent folded, one cell per (model, series, length, lr) with
its trials counted by status: a 100,000-trial store's grid was 27 MB of JSON a refresh, which the
page took seconds to parse and draw (issue 62 part 3). The page draws one cell per lr either way."""

CELL_KEYS = ["model", "series", "epochs", "max_steps", "lr"]


def folded_cells(grid: pd.DataFrame) -> list[dict]:
    """One record per grid cell: the columns of its last trial (in `grid`'s order), the status the
    cell shows (its least advanced one, in STATUSES' order, so a cell is done only once all its
    trials are), and `folded`: how many trials it holds, by status."""
    keys = [k for k in CELL_KEYS if k in grid.columns]
    rank = grid["status"].map({s: i for i, s in enumerate(STATUSES)}).fillna(len(STATUSES)).astype(int)
    keyed = grid.assign(_rank=rank.to_numpy(), _cell=grid.groupby(keys, sort=False, dropna=False).ngroup().to_numpy())
    last = keyed.drop_duplicates("_cell", keep="last").sort_values("_cell")
    least = keyed.groupby("_cell")["_rank"].min().to_numpy()  # indexed 0 .. cells - 1, as `last`
    shown = [STATUSES[i] if i < len(STATUSES) else "unknown" for i in least]
    out = records(last.assign(status=shown), GRID_COLUMNS)
    tally: list[dict[str, int]] = [{} for _ in out]
    for (cell, status), n in keyed.groupby(["_cell", "status"], sort=False).size().items():
        tally[cell][status] = int(n)
    for cell, by_status in zip(out, tally):
        cell["folded"] = {"n": sum(by_status.values()), "by_status": by_status}
    return out


def items_scored(evals: pd.DataFrame) -> dict[str, int]:
    """The checkpoints' items scored and their tasks' items (eval.adaptive, issue 51: fewer where
    the stopping rule settled early); the base aside, scored in full."""
    if evals.empty or "n_items" not in evals:
        return {"items_scored": 0, "items": 0}
    ev = evals[~is_base(evals) & evals["metric"].isin(PRIMARY_METRICS)]
    n = ev["n_scored"].fillna(ev["n"])
    return {"items_scored": int(n.sum()), "items": int(ev["n_items"].fillna(n).sum())}


def merge_sweeps(runs: list[dict]) -> dict:
    """Several stores' sweep views as one (the paper grid's three stores): counts, grids, errors
    and hours added up; time and the driver's state from the store whose sweep ends last."""
    counts: dict[str, int] = {}
    for r in runs:
        for k, v in r["counts"].items():
            counts[k] = counts.get(k, 0) + v
    last = max(runs, key=lambda r: r["eta_s"] or 0)

    def summed(key: str, part: str) -> float | None:  # None where no store knows it
        known = [r[key][part] for r in runs if r[key][part] is not None]
        return sum(known) if known else None

    waits: dict[str, int] = {}
    for r in runs:
        for reason, n in r["waits"].items():
            waits[reason] = waits.get(reason, 0) + n
    return {**last, "counts": counts, "waits": waits, "total": sum(r["total"] for r in runs),
            "grid": [c for r in runs for c in r["grid"]],
            "errors": sorted((e for r in runs for e in r["errors"]), key=lambda e: e["at"] or "", reverse=True)[:ERRORS_SHOWN],
            "n_errors": sum(r["n_errors"] for r in runs),
            "evals": {k: summed("evals", k) for k in last["evals"]},
            "cost": {**last["cost"], **{k: summed("cost", k) for k in ("train_hours", "eval_hours", "planned_hours")}}}


def missing_parts(tables: dict[str, pd.DataFrame | None], live: list[dict | None], samples) -> list[str]:
    """What a store written by an older version (or a run not started by `cliffsweep run`) lacks,
    named so that the page says why a part of it is empty."""
    trials, steps = tables.get("trials"), tables.get("steps")
    out = []
    if trials is not None and (trials["status"] == TrialStatus.DONE).any() and (steps is None or steps.empty):
        out.append("training curves: no `steps` table (the store predates it)")
    if not any(live):
        out.append("the driver's live state (live.json): queue, evaluator pool and why trials wait")
    elif not all(lv and "progress" in lv for lv in live if lv):
        out.append("the evaluation queue and ETA (live.json written before it carried them)")
    if samples and any(len(s) for s in samples) and all(s["reference"].isna().all() for s in samples if len(s)):
        out.append("reference answers beside generations (samples written before they were kept)")
    return out


def _finished(live: dict | None) -> bool:
    return bool(live) and live.get("phase") == "finished"


def _last_time(trials: pd.DataFrame, evals: pd.DataFrame) -> float:
    times = [t for t in (trials["finished_at"].max() if len(trials) else None,
                         evals["evaluated_at"].max() if len(evals) else None) if t is not None and t == t]
    return max(t.timestamp() for t in times) if times else 0.0


def live_state(live: dict | None, now: float) -> dict:
    """The driver's last word (live.json): its phase, age and evaluator pool, or that none wrote."""
    if not live:
        return {"phase": None, "said": "no driver has written its live state to this store"}
    from datetime import datetime

    age = now - datetime.fromisoformat(live["at"]).timestamp()
    stale = live.get("phase") != "finished" and age > 60
    said = ("finished" if live.get("phase") == "finished" else
            f"the driver last wrote {age:.0f} s ago: it has probably stopped" if stale else live.get("phase"))
    return {"phase": live.get("phase"), "age_s": age, "stale": stale, "said": said, "pid": live.get("pid"),
            "evaluators": live.get("evaluators", {}), "running_jobs": len(live.get("running_jobs", {})),
            "queued_jobs": live.get("queued_jobs"), "extra_evaluators_started": live.get("extra_evaluators_started", 0),
            "evaluators_stopped": live.get("evaluators_stopped", 0)}


def cost_view(trials: pd.DataFrame, evals: pd.DataFrame, spec: dict | None, planned_hours: dict) -> dict:
    """Device-hours spent so far (each trial's recorded setup, training, checkpoint and teardown
    seconds times its devices; evaluations' seconds times an evaluator's) against `plan`'s bill."""
    res, ev = (spec or {}).get("resources", {}), (spec or {}).get("eval", {})
    gpus = float(res.get("gpus_per_worker", 0) or 0) * int(res.get("workers_per_trial", 1) or 1)
    unit = "GPU" if gpus > 0 else "CPU worker"
    per_trial = gpus if gpus > 0 else int(res.get("workers_per_trial", 1) or 1)
    cols = [c for c in ("setup_seconds", "train_seconds", "checkpoint_seconds", "teardown_seconds") if c in trials]
    train_h = float(trials[cols].fillna(0).to_numpy().sum()) * per_trial / 3600 if cols else 0.0
    # an evaluation holds its evaluator's GPUs; on CPUs it holds one evaluator process, counted as
    # one worker (a CPU sweep's evaluations cost time too: it read 0 until 2026-11-28)
    eval_devices = float(ev.get("gpus_per_evaluator", 0) or 0) if gpus > 0 else 1.0
    eval_s = evals.drop_duplicates(["trial_id", "step", "task"])["eval_seconds"].fillna(0).sum() if len(evals) else 0.0
    planned = dict(planned_hours)
    if gpus <= 0 and planned.get("planned_hours") is not None:
        # plan prices GPU-hours; a CPU sweep's worker-hours are another unit (issue 63: "0.51
        # CPU-worker-hours used" beside "planned 0.037 H100-SXM-hours")
        planned = {"planned_hours": None, "planned_said": f"{planned['planned_hours']:.3g} H100-hours on GPUs, not "
                   "comparable with a CPU sweep's worker-hours (plan prices GPU clusters)"}
    return {"unit": unit, "train_hours": train_h, "eval_hours": float(eval_s) * eval_devices / 3600, **planned}


POINT_COLUMNS = ["point_id", "trial_id", "series", "method", "optimizer", "epochs", "lr", "seed", "round", "step",
                 "final", "classified", "status", "L", "R"]
SERIES_COLUMNS = ["series", "method", "optimizer", "epochs", "label", "regime", "regime_paper", "confidence",
                  "critical_lr_low", "critical_lr_high", "max_safe_lr", "max_safe_lr_next", "n_lrs", "base_L",
                  "base_R", "runs_at_bracket", "confidence_over", "within_noise", "is_cliff", "reason"]


def model_views(points: pd.DataFrame, table: pd.DataFrame, retain_tasks: list[str]) -> list[dict]:
    """Per model: every evaluated checkpoint (intermediate ones too), each retain task's score when
    R is a suite's, and each series' regime row (`table`: analysis.frontiers.frontiers)."""
    from cliffsweep.analysis.regimes import CLIFF
    from cliffsweep.analysis.suite import task_column

    if len(table):  # the page reads whether a row is a cliff from here, never spelling the word itself
        table = table.assign(is_cliff=table["regime"] == CLIFF)
    out = []
    task_cols = {t: task_column(t) for t in retain_tasks if task_column(t) in points}
    for model, pts in points.groupby("model", sort=True):
        rows = records(pts, POINT_COLUMNS)
        scores = records(pts[list(task_cols.values())].set_axis(list(task_cols), axis=1), list(task_cols)) \
            if task_cols else [{} for _ in rows]
        for row, by_task, base in zip(rows, scores, is_base(pts)):
            row["R_tasks"] = by_task
            row["is_base"] = bool(base)  # the page never spells the base series' name
        out.append({"model": model, "points": rows,
                    "series": records(table[table["model"] == model], SERIES_COLUMNS) if len(table) else []})
    return out


def trial_view(tid: str, trials: pd.DataFrame, evals: pd.DataFrame, errors: pd.DataFrame, steps: pd.DataFrame,
               samples: pd.DataFrame, checkpoints: pd.DataFrame) -> dict | None:
    """One grid point: its settings, status and retries, training curve, every checkpoint's scores,
    and a handful of its final checkpoint's generations beside right or wrong."""
    rows = trials[trials["trial_id"] == tid]
    if rows.empty and not (evals["trial_id"] == tid).any():
        return None
    trial = clean(rows.iloc[-1].to_dict()) if len(rows) else {"trial_id": tid, "status": "base model"}
    for key in ("config", "method_params", "setup_phases"):
        if isinstance(trial.get(key), str):
            try:
                trial[key] = json.loads(trial[key])
            except ValueError:
                pass
    mine = evals[evals["trial_id"] == tid]
    scores = mine.pivot_table(index="step", columns=["task", "metric"], values="value", aggfunc="last")
    # the engine's canary check at each checkpoint's load (half precision's noise on a GPU); the
    # column is read as null from files written before it
    canary = mine.dropna(subset=["canary_distance"]).groupby("step")["canary_distance"].max()
    # a staged evaluation's items scored of each task's (eval.adaptive): shown where fewer than all
    staged = mine[mine["metric"].isin(PRIMARY_METRICS) & (mine["n_scored"] < mine["n_items"])] \
        if "n_items" in mine else mine.iloc[:0]
    items = {(int(r.step), r.task): f"{int(r.n_scored)} of {int(r.n_items)}" for r in staged.itertuples()}
    gens = samples[(samples["trial_id"] == tid)]
    if len(gens):
        gens = gens[gens["step"] == gens["step"].max()].head(GENERATIONS_SHOWN)
    return {
        "trial": trial,
        "history": records(errors[errors["trial_id"] == tid].sort_values("at"), ["at", "kind", "step", "message"]),
        "curve": records(steps[steps["trial_id"] == tid].sort_values(["step", "attempt"]).drop_duplicates("step", keep="last"),
                         ["step", "loss", "lr", "grad_norm", "epoch"]),
        "checkpoints": records(checkpoints[checkpoints["trial_id"] == tid].sort_values("step"), ["step", "epoch", "kind", "reported_at"]),
        "scores": [{"step": clean(step), "values": {**{f"{t} {m}": clean(v) for (t, m), v in row.items() if v == v},
                                                     **({"canary distance": clean(canary[step])} if step in canary.index else {}),
                                                     **{f"{t} items scored": n for (st, t), n in items.items() if st == step}}}
                   for step, row in scores.iterrows()],
        "generations": records(gens, ["task", "example_id", "correct", "prediction", "reference", "score"]),
    }
