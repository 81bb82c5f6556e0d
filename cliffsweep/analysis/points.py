"""Read a sweep's Parquet store (docs/store.md) into a table of (learning, retention) points.

One point = one evaluated checkpoint: (trial_id, step) with the learn-task accuracy ``L`` and
the retain-task accuracy ``R`` (with several retain tasks, a suite: each task's accuracy in its
column ``R[<task>]`` and R their aggregate, analysis/suite.py). The base model (series ``sweep.grid.BASE``, lr 0, step 0) is the
lr = 0 point of every series of its model. The final checkpoint of a trial is its max step;
only final checkpoints of finished (``done``) trials are classified, while every checkpoint
(intermediate ones and those of diverged / running trials, which are real models too) counts
for the Pareto frontiers.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import pandas as pd

from cliffsweep.analysis.learnsuite import with_learn_suite
from cliffsweep.analysis.suite import n_column, suite_label, suite_retention, task_column
from cliffsweep.analysis.scored import scored_notes, within_evaluations
from cliffsweep.storage.health import ensure_readable
from cliffsweep.storage.store import LIKELIHOOD, SPEC_FILE, Store
from cliffsweep.sweep.status import TrialStatus
from cliffsweep.sweep.grid import is_base

POINT_COLUMNS = ["point_id", "trial_id", "model", "series", "method", "optimizer", "lr", "epochs", "seed",
                 "round", "step", "epoch", "final", "classified", "status", "L", "R", "n_L", "n_R"]


class AnalysisInputError(ValueError):
    """The store cannot be analysed as asked (missing tasks, mixed scorer versions, ...)."""


@dataclass(frozen=True)
class StoreData:
    points: pd.DataFrame
    """One row per (trial_id, step); columns POINT_COLUMNS."""
    samples: pd.DataFrame
    """Per-example results of the learn and retain evaluations (may be empty)."""
    learn_task: str
    retain_task: str
    """The retain task, or the suite's label (analysis/suite.suite_label)."""
    notes: list[str]
    """What was left out and why (e.g. a checkpoint evaluated on one task only)."""
    trials: pd.DataFrame | None = None
    """The stores' trials rows (statuses, for the report's counts)."""
    models: pd.DataFrame | None = None
    """One row per model: spec path, family and size (analysis/model_info.py)."""
    curves: pd.DataFrame | None = None
    """The training curves: the store's `steps` rows with their trial's model, series, epochs,
    lr and status (empty for stores written before the `steps` table existed)."""
    retain_tasks: tuple[str, ...] = ()
    """The retain tasks R is read on: one, or a suite's (then ``retain_task`` names the suite)."""
    suite: str | None = None
    """The suite's aggregate (analysis/suite.AGGREGATES); None for one retain task."""


def _one_task(evals: pd.DataFrame, role: str, chosen: str | None) -> str:
    tasks = sorted(evals.loc[evals["role"] == role, "task"].unique())
    if chosen is not None:
        if chosen not in tasks:
            raise AnalysisInputError(f"{role} task {chosen!r} not in the store; {role} tasks there: {tasks}")
        return chosen
    if not tasks:
        raise AnalysisInputError(f"the store has no accuracy evals with role {role!r}")
    if len(tasks) == 1:
        return tasks[0]
    raise AnalysisInputError(f"several {role} tasks {tasks}; choose one (--{role}-task)")


def _retain_tasks(evals: pd.DataFrame, chosen: str | None, spec_order: list[str]) -> list[str]:
    """The retain task chosen, else every retain task of the store (a suite: analysis/suite.py),
    in the spec's order where the spec names them."""
    if chosen is not None:
        return [_one_task(evals, "retain", chosen)]
    tasks = sorted(evals.loc[evals["role"] == "retain", "task"].unique())
    if not tasks:
        raise AnalysisInputError("the store has no accuracy evals with role 'retain'")
    rank = {t: i for i, t in enumerate(spec_order)}
    return sorted(tasks, key=lambda t: (rank.get(t, len(rank)), t))


def _specs(stores: list[Store]) -> list[dict]:
    """The sweep files the stores keep (spec.json), read once, in the stores' order."""
    return [store.read_json(SPEC_FILE) for store in stores if store.exists(SPEC_FILE)]


def _spec_tasks(spec: dict, key: str) -> list[str]:
    """A sweep file's `tasks.<key>` (retain, learn_suite) by their names in the store (lm_eval:<task>)."""
    from cliffsweep.evals.tasks import task_label

    def label(t: dict) -> str:
        try:
            return task_label(t["name"], t.get("params") or {})
        except (KeyError, ValueError):  # a task this installation does not know: its name then
            return t["name"]

    return [label(t) for t in spec["tasks"].get(key) or []]


def _pretrain_optimizers(specs: list[dict]) -> dict[str, str]:
    """model -> models[].pretrain_optimizer of the sweep files (the first that says)."""
    out: dict[str, str] = {}
    for spec in specs:
        for m in spec.get("models") or []:
            if m.get("pretrain_optimizer"):
                out.setdefault(m["name"], m["pretrain_optimizer"])
    return out


def check_scorer_versions(evals: pd.DataFrame, tasks: list[str]) -> None:
    """Refuse to compare accuracies scored by different scorer versions (style.md 8)."""
    for task in tasks:
        versions = sorted(evals.loc[evals["task"] == task, "scorer_version"].fillna("<none>").unique())
        if len(versions) > 1:
            raise AnalysisInputError(f"task {task!r} mixes scorer versions {versions}; re-evaluate with one "
                                     "scorer or analyse a store holding one version")


def scores_of(evals: pd.DataFrame, metric: str = "accuracy") -> pd.DataFrame:
    """The row analysis classifies on for every evaluation, as metric "accuracy": a task's
    accuracy (or `metric`, another higher-is-better row it stores: a sampled task's avg@n or
    pass@k, issue 40 part 2), or for a loss task (lower is better, evals/tasks/loss.py) its
    `likelihood`, the mean over items of exp(-item NLL). A loss thus reads as a higher-is-better
    score in (0, 1], and its retention as a share of the base model's (docs/analysis.md "Loss
    tasks"). Idempotent for the default metric."""
    loss_tasks = set(evals.loc[evals["metric"] == "loss", "task"])
    keep = ((evals["metric"] == _metric_of(evals, metric)) & ~evals["task"].isin(loss_tasks)) | \
        ((evals["metric"] == LIKELIHOOD) & evals["task"].isin(loss_tasks))
    return evals[keep].assign(metric="accuracy")


def _metric_of(evals: pd.DataFrame, metric: str) -> pd.Series | str:
    """`metric` as each row's metric name: itself, or for `avg` / `pass` each task's own
    avg@n / pass@k with its largest k (004 samples k = 16, 8 or 4 by benchmark, Table 2)."""
    if metric not in ("avg", "pass"):
        return metric
    k = evals["metric"].str.extract(rf"^{metric}@(\d+)$")[0].astype(float)
    top = k.groupby(evals["task"]).transform("max")
    return pd.Series(f"{metric}@", index=evals.index) + top.fillna(-1).astype(int).astype(str)


def sample_scores(samples: pd.DataFrame, evals: pd.DataFrame) -> pd.DataFrame:
    """Samples with each loss-task item's likelihood exp(-NLL) as its `correct` (a float), so the
    item bootstrap (confidence.py) draws the same mean that `scores_of` reads."""
    loss_tasks = set(evals.loc[evals["metric"] == "loss", "task"])
    if not loss_tasks or samples.empty:
        return samples
    out = samples.copy()
    mine = out["task"].isin(loss_tasks)
    out["correct"] = out["correct"].astype(float)
    out.loc[mine, "correct"] = np.exp(-out.loc[mine, "score"].astype(float))
    return out


def with_margins(points: pd.DataFrame, raw: pd.DataFrame, learn: str, retain: list[str]) -> pd.DataFrame:
    """`points` with ``L_margin`` / ``R_margin``: what seed 001's robust frontier measures its c
    on (pareto.pareto_mask). An axis read from one loss task: its mean loss, negated (001 applies
    c to the loss, not to the likelihood analysis classifies on); any other axis: L or R itself."""
    loss = raw[raw["metric"] == "loss"].drop_duplicates(["trial_id", "step", "task"]) \
        .set_index(["trial_id", "step", "task"])["value"]
    out = points.copy()
    for axis, task in (("L", learn), ("R", retain[0] if len(retain) == 1 else None)):
        keys = pd.MultiIndex.from_arrays([out["trial_id"], out["step"], [task] * len(out)])
        neg = -loss.reindex(keys).to_numpy(float) if task is not None and task in set(loss.index.get_level_values(2)) \
            else np.full(len(out), np.nan)
        out[f"{axis}_margin"] = np.where(np.isfinite(neg), neg, out[axis].to_numpy(float))
    return out


def _pivot(acc: pd.DataFrame, learn_task: str, retain: list[str], notes: list[str]) -> pd.DataFrame:
    """One row per checkpoint evaluated on every task: L, R (one retain task) or each task's
    ``R[<task>]`` (a suite), their sizes, and the trial's metadata."""
    acc = acc[acc["task"].isin([learn_task, *retain])]
    dup = acc.duplicated(["trial_id", "step", "task"], keep=False)
    if dup.any():
        first = acc[dup].iloc[0]
        raise AnalysisInputError(f"duplicate accuracy rows for trial {first.trial_id!r} step {first.step} "
                                 f"task {first.task!r}")
    keys = ["trial_id", "step"]
    columns = {"R": retain[0]} if len(retain) == 1 else {task_column(t): t for t in retain}
    sides = []
    for name, task in (("L", learn_task), *columns.items()):
        part = acc[acc["task"] == task].set_index(keys)
        sides.append(part[["value", "n"]].rename(columns={"value": name, "n": f"n_{name}"}))
    meta = acc[acc["task"] == learn_task].set_index(keys)[["model", "series", "method", "optimizer", "lr", "epochs",
                                                          "seed", "epoch"]]
    both = sides[0].join(sides[1:], how="outer")
    values = ["L", *columns]
    half = both[both[values].isna().any(axis=1)]
    tasks = "/".join([learn_task, *retain])
    if len(half):
        notes.append(f"{len(half)} checkpoint(s) evaluated on only some of {tasks} "
                     f"left out, e.g. {half.index[0][0]}@{half.index[0][1]}")
    pts = both.dropna(subset=values).join(meta).reset_index()
    if pts.empty:
        raise AnalysisInputError(f"no checkpoint has accuracies of all of {tasks}")
    return pts


CHECKPOINT_PICKS = ("final", "best_learn")
"""Which checkpoint of a done trial is classified: its last (the cliff paper), or the one with the
highest learn accuracy, the earliest of ties (003's "best-target checkpoint": each run is read at
its best on the target task)."""


def points_from_evals(evals: pd.DataFrame, trials: pd.DataFrame, learn_task: str, retain_task: str | list[str],
                      pick: str = "final", suite: str = "share_of_base") -> tuple[pd.DataFrame, list[str]]:
    """Pivot accuracy evals into one row per checkpoint with L and R (pure; see module doc);
    `pick` (CHECKPOINT_PICKS) chooses the classified checkpoint of each done trial. Several
    retain tasks are a suite: each keeps its column ``R[<task>]`` and R is their `suite`
    aggregate (analysis/suite.py)."""
    if pick not in CHECKPOINT_PICKS:
        raise AnalysisInputError(f"checkpoint pick {pick!r}; valid: {list(CHECKPOINT_PICKS)}")
    retain = [retain_task] if isinstance(retain_task, str) else list(retain_task)
    notes: list[str] = []
    pts = _pivot(scores_of(evals), learn_task, retain, notes)
    pts["point_id"] = pts["trial_id"] + "@" + pts["step"].astype(str)
    latest = trials.drop_duplicates("trial_id", keep="last").set_index("trial_id")
    pts["status"] = pts["trial_id"].map(latest["status"]).astype(object)
    # Refinement round of the trial (0 = the grid); stores written before rounds existed read as 0.
    pts["round"] = pts["trial_id"].map(latest["round"]).fillna(0) if "round" in latest else 0
    base_rows = is_base(pts)
    pts.loc[base_rows, "status"] = TrialStatus.DONE.value
    unknown = pts["status"].isna()
    if unknown.any():
        # Evals whose trial row is missing: the evals are real measurements; say so and use them.
        notes.append(f"{pts.loc[unknown, 'trial_id'].nunique()} trial(s) have evals but no trials row; "
                     "their last checkpoint is treated as final")
        pts.loc[unknown, "status"] = TrialStatus.DONE.value
    pts["final"] = pts["step"] == pts.groupby("trial_id")["step"].transform("max")
    chosen = pts["final"]
    if pick == "best_learn":
        best = pts["L"] == pts.groupby("trial_id")["L"].transform("max")
        first = pts[best].groupby("trial_id")["step"].transform("min")
        chosen = pd.Series(False, index=pts.index)
        chosen.loc[first.index] = pts.loc[first.index, "step"] == first
        notes.append("each done trial is classified at its checkpoint with the highest learn accuracy "
                     "(--checkpoint best_learn, 003's best-target checkpoint), not its last")
    pts["classified"] = chosen & (pts["status"] == TrialStatus.DONE)
    skipped = pts.loc[chosen & ~pts["classified"], "trial_id"].unique()
    if len(skipped):
        notes.append(f"{len(skipped)} trial(s) not done (e.g. {skipped[0]}) left out of classification; "
                     "their checkpoints still count for the Pareto frontiers")
    if len(retain) > 1:
        pts["R"], more = suite_retention(pts, retain, suite)
        pts["n_R"] = pts[[n_column(t) for t in retain]].sum(axis=1)
        notes += more
        pts = pts.dropna(subset=["R"]).reset_index(drop=True)
        if pts.empty:
            raise AnalysisInputError(f"no model has a retention suite aggregate: {'; '.join(more)}")
    for col in ("n_L", "n_R", "step", "epochs", "seed", "round", *(n_column(t) for t in retain if len(retain) > 1)):
        pts[col] = pts[col].astype("Int64")
    extra = [c for t in retain if len(retain) > 1 for c in (task_column(t), n_column(t))]
    return pts[POINT_COLUMNS + extra].sort_values(["model", "series", "epochs", "lr", "seed", "step"],
                                          ignore_index=True), notes


def load_store(uri: str, learn_task: str | None = None, retain_task: str | None = None,
               pick: str = "final", suite: str = "share_of_base", metric: str = "accuracy") -> StoreData:
    """Read evals, trials and samples of the store at ``uri`` into :class:`StoreData`.

    Retention is read on ``retain_task`` if given, else on every retain task of the store: one
    task as it is, several as a suite (their ``suite`` aggregate, analysis/suite.py). The learn
    task defaults to the only learn task. Mixed scorer versions of any task raise
    :class:`AnalysisInputError`.
    """
    return load_stores([uri], learn_task, retain_task, pick, suite, metric)


# What identifies a row of each table across stores (the first store's row is kept).
_KEYS = {"evals": ["trial_id", "step", "task", "metric"], "trials": ["trial_id"],
         "samples": ["trial_id", "step", "task", "example_id"], "steps": ["trial_id", "step"]}


def merge_tables(frames: list[pd.DataFrame], table: str, uris: list[str], notes: list[str]) -> pd.DataFrame:
    """One table from several stores. A row in more than one store (a model's base evaluation,
    which every store of that model holds; a grid point run in two stores) is taken from the
    first store that has it, and the notes say so: a base model evaluated again, or a trial run
    twice, is the same measurement taken twice, never two points."""
    empty = frames[0].iloc[:0]  # the table's columns (Store.read), for a table no store has rows of
    frames = [f.assign(_store=i) for i, f in enumerate(frames) if len(f)]
    if not frames:
        return empty
    both = pd.concat(frames, ignore_index=True)
    if len(frames) == 1:
        return both.drop(columns="_store")
    # rows of a key that an earlier store already holds (within one store, rows stay as they are)
    first = both.groupby(_KEYS[table], dropna=False)["_store"].transform("min")
    dup = both["_store"] > first
    if dup.any() and table in ("evals", "trials"):
        ids = sorted(both.loc[dup, "trial_id"].unique())
        later = sorted({uris[i] for i in both.loc[dup, "_store"]})
        notes.append(f"{table}: {len(ids)} trial id(s) in more than one store (e.g. {ids[0]}); the rows of the "
                     f"first store listed are used, not those of {', '.join(later)}")
    return both[~dup].drop(columns="_store").reset_index(drop=True)


def load_stores(uris: list[str], learn_task: str | None = None, retain_task: str | None = None,
                pick: str = "final", suite: str = "share_of_base", metric: str = "accuracy") -> StoreData:
    """:func:`load_store` over several stores as one (the paper grid is three: issue 16), tasks
    and scorer versions checked across all of them; see :func:`merge_tables` for rows that
    several stores hold. `metric`: the stored metric L and R are read on (a sampled task's avg@n
    or pass@k); its per-item rows are not the greedy samples, so its confidence comes from n."""
    stores = [Store(u) for u in uris]
    for store in stores:  # every damaged file named before anything is read (issue 29)
        ensure_readable(store, ("evals", "trials", "samples", "steps"))
    return store_data({t: [s.read(t) for s in stores] for t in READ_TABLES}, _specs(stores), uris,
                      learn_task, retain_task, pick, suite, metric)


READ_TABLES = ("evals", "trials", "samples", "steps")


def points_only(evals: pd.DataFrame, trials: pd.DataFrame, spec: dict, uri: str) -> StoreData:
    """:func:`store_data` of one store without its per-item samples and training curves: the points
    and tasks a verdict without the bootstrap reads (the driver's top-ups, which read the store
    every time a series is in, from tables it keeps: issue 62 part 2)."""
    from cliffsweep.storage.store import SCHEMAS

    empty = {t: SCHEMAS[t].empty_table().to_pandas() for t in ("samples", "steps")}
    return store_data({"evals": [evals], "trials": [trials], "samples": [empty["samples"]], "steps": [empty["steps"]]},
                      [spec] if spec else [], [uri])


def store_data(tables: dict[str, list[pd.DataFrame]], specs: list[dict], uris: list[str], learn_task: str | None = None,
               retain_task: str | None = None, pick: str = "final", suite: str = "share_of_base",
               metric: str = "accuracy") -> StoreData:
    """:func:`load_stores` on tables already read: READ_TABLES' frames, one per store in `uris`'
    order, and each store's spec.json (or {}). Pure: the live dashboard (cliffsweep/dashboard/)
    keeps the stores' files cached and calls this on what changed."""
    notes: list[str] = []
    read = {t: merge_tables(tables[t], t, uris, notes) for t in READ_TABLES}
    raw = read["evals"]
    evals = scores_of(raw, metric) if len(raw) else raw
    if evals.empty:
        where = f"store {uris[0]!r} has" if len(uris) == 1 else f"stores {uris} have"
        what = "accuracy evals (evals/ is empty or missing)" if metric == "accuracy" else \
            f"evals of metric {metric!r}; metrics there: {sorted(raw['metric'].unique())[:20]}"
        raise AnalysisInputError(f"{where} no {what}")
    learn_suite = next(filter(None, (_spec_tasks(s, "learn_suite") for s in specs)), [])
    samples = sample_scores(within_evaluations(read["samples"], raw), raw)
    notes += scored_notes(raw)
    if metric != "accuracy":  # the stored items are greedy replies: only a loss task's still fit
        samples = samples[samples["task"].isin(set(raw.loc[raw["metric"] == "loss", "task"]))]
        notes.append(f"learning and retention read on metric {metric!r}, not greedy accuracy; its confidence "
                     "is drawn from each evaluation's n (binomial), not from per-item samples")
    if learn_suite and learn_task is None:  # L is the suite's mean (analysis/learnsuite.py)
        evals, samples, learn_task = with_learn_suite(evals, samples, learn_suite)
    learn = _one_task(evals, "learn", learn_task)
    retain = _retain_tasks(evals, retain_task, next(filter(None, (_spec_tasks(s, "retain") for s in specs)), []))
    check_scorer_versions(evals, [learn, *learn_suite, *retain])
    points, more = points_from_evals(evals, read["trials"], learn, retain, pick, suite)
    points = with_margins(points, raw, learn, retain)
    samples = samples[samples["task"].isin([learn, *retain])].reset_index(drop=True)
    trials = read["trials"][["trial_id", "model", "series", "epochs", "lr", "status"]]
    # the trial's peak lr names the line; the schedule's lr at each step becomes step_lr
    curves = read["steps"].rename(columns={"lr": "step_lr"}).merge(trials, on="trial_id", how="inner")
    from cliffsweep.analysis.model_info import model_table

    models = model_table(read["trials"], sorted(points["model"].unique()), _pretrain_optimizers(specs))
    label = retain[0] if len(retain) == 1 else suite_label(retain, suite)
    return StoreData(points, samples, learn, label, notes + more, trials=read["trials"], models=models,
                     curves=curves, retain_tasks=tuple(retain), suite=suite if len(retain) > 1 else None)
