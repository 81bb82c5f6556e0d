"""The frontiers table: one row per series (model x method x epochs) with its regime, the
confidence of that regime, the cliff bracket, Pareto-optimal points and a frontier-area score.

Definitions are in :mod:`cliffsweep.analysis.classify` (regimes) and
:mod:`cliffsweep.analysis.pareto` (frontiers, area). The confidence of a regime is the share of
bootstrap replicates (:mod:`cliffsweep.analysis.confidence`) whose re-classification agrees
with the point estimate; below ``min_confidence`` the reported regime is ``inconclusive``
("the data cannot tell"), while ``regime_point_estimate`` keeps what the measured accuracies
alone say.
"""

from __future__ import annotations

import json

import numpy as np
import pandas as pd

from cliffsweep.analysis.classify import REGIMES, Thresholds, classify_arrays, lr_curve_arrays, paper_regime
from cliffsweep.analysis.confidence import replicate_accuracies
from cliffsweep.analysis.pareto import Dominance, dominates_all, frontier_area, margins, pareto_mask
from cliffsweep.analysis.runs import run_weights, runs_at, shortfall_se, unreproduced
from cliffsweep.analysis.safe_lr import max_safe_lr_arrays
from cliffsweep.analysis.within_noise import notes as noise_notes
from cliffsweep.sweep.grid import SERIES_KEY, is_base  # noqa: F401  (re-exported: the analysis' callers)
from cliffsweep.analysis.regimes import CLIFF, FORGETTING, GRADUAL, INCONCLUSIVE

MIN_CONFIDENCE = 0.6
"""Our default: a regime is reported when at least 60 % of bootstrap replicates agree."""

FRONTIER_COLUMNS = [
    "model", "family", "size_b", "pretrain_optimizer", "series", "method", "optimizer", "epochs", "label", "regime",
    "regime_paper",
    "learned_before_cliff", "learned_before_cliff_z", "kept_before_cliff", "learned_after_cliff", "regime_point_estimate",
    "confidence", "confidence_method", "regime_shares", "critical_lr_low", "critical_lr_high",
    "bracket_agreement", "drop_at_cliff", "drop_at_cliff_abs", "gain_at_cliff", "gain_at_cliff_share",
    "max_safe_lr", "max_safe_lr_next", "learn_at_max_safe_lr", "max_safe_lr_confidence", "max_forgetting", "max_learning", "base_L", "base_R", "frontier_area", "pareto_point_ids",
    "model_pareto_point_ids", "model_pareto_share", "dominated_by", "n_points", "n_lrs", "n_refined_lrs",
    "n_checkpoints", "runs_at_bracket", "confidence_over", "learned_after_cliff_z", "closest_lr_low",
    "closest_lr_high", "closest_drop", "closest_shortfall", "closest_shortfall_se", "deciding_lrs", "learn_only_lrs", "retain_only_lrs", "within_noise", "reason",
]
_CLIFF_FIELDS = ["critical_lr_low", "critical_lr_high", "drop_at_cliff", "drop_at_cliff_abs", "gain_at_cliff",
                 "gain_at_cliff_share", "learned_before_cliff", "learned_before_cliff_z", "kept_before_cliff",
                 "learned_after_cliff", "learned_after_cliff_z"]


def series_labels(points: pd.DataFrame) -> pd.Series:
    """Display label of each row's series: the method label, plus ' e<epochs>' where the
    model sweeps several epoch counts."""
    trained = points[~is_base(points)]
    multi = trained.groupby("model")["epochs"].nunique()
    many = points["model"].map(multi).fillna(1) > 1
    return points["series"].where(~many | is_base(points),
                                  points["series"] + " e" + points["epochs"].astype(str))


def _bootstrap(lr: np.ndarray, L_reps: np.ndarray, R_reps: np.ndarray, th: Thresholds,
               rng: np.random.Generator, n_L: np.ndarray | None = None) -> tuple[list, list] | None:
    """Re-classify each replicate and find its highest safe lr (seeds averaged per lr as in the
    point estimate); `lr`: the classified points' lrs, the replicates' rows. Where an lr has
    several runs, each replicate first draws them with replacement (runs.run_weights: the
    hierarchical bootstrap, issue 52), then their items (the replicates). ``n_L``: the learn
    task's items per lr (as the point estimate reads them), so that each replicate's learning
    tests are in standard errors as the point estimate's are (issue 59)."""
    if np.isnan(L_reps).any() or np.isnan(R_reps).any():
        return None
    lrs, inv = np.unique(lr, return_inverse=True)
    G = np.zeros((len(lrs), len(lr)))
    G[inv, np.arange(len(lr))] = 1.0
    W = run_weights(lr, L_reps.shape[1], rng)
    if W is None:
        G /= G.sum(1, keepdims=True)
        Lc, Rc = G @ L_reps, G @ R_reps
    else:
        Lc, Rc = G @ (W * L_reps), G @ (W * R_reps)
    B = L_reps.shape[1]
    return ([classify_arrays(lrs, Lc[:, b], Rc[:, b], th, n_L=n_L) for b in range(B)],
            [max_safe_lr_arrays(lrs, Lc[:, b], Rc[:, b], th).max_safe_lr for b in range(B)])


def _series_row(key: tuple, first: dict, n_rows: int, n_refined: int, cls: np.ndarray, n_base: int,
                columns: dict[str, np.ndarray], reps: tuple | None, th: Thresholds, min_confidence: float,
                rng: np.random.Generator) -> dict:
    """One series' row. `first`: its first point's method, optimizer and label; `n_rows` its
    points, `n_refined` its _refined_lrs. `cls`: positions (into `columns`, the points' lr, L, R
    and their item counts) of its model's classified base points (the first `n_base`) and its
    own classified points."""
    model, series, epochs = key
    lr, L, R = (columns[c][cls] for c in ("lr", "L", "R"))
    curve = lr_curve_arrays(lr, L, R)
    lrs, inv = np.unique(lr, return_inverse=True)
    n_L = np.bincount(inv, columns["n_L"][cls], len(lrs))
    point = classify_arrays(*curve, th, n_L=n_L)
    safe = max_safe_lr_arrays(*curve, th)
    out = {**point.as_dict(), **safe.as_dict()}
    for k in ("unresolved_lr_low", "unresolved_lr_high"):  # in the reason; next_lrs.py reads them
        out.pop(k)
    # every lr the verdict and the highest safe lr were read at (the top-up's fixpoint, issue 59)
    safe_lrs = {x for x in (safe.max_safe_lr, safe.max_safe_lr_next) if x is not None}
    out["deciding_lrs"] = sorted(set(point.deciding_lrs) | safe_lrs)
    # the axes each is read on, for its top-up (analysis/topup.py): the highest safe lr and the
    # next on retention, the regime's lrs as classify says
    out["learn_only_lrs"] = sorted(set(point.learn_only_lrs) - safe_lrs)
    out["retain_only_lrs"] = sorted(set(point.retain_only_lrs)
                                    | (safe_lrs - (set(point.deciding_lrs) - set(point.retain_only_lrs))))
    out.update(model=model, series=series, epochs=epochs, method=first["method"],
               optimizer=first["optimizer"], label=first["label"],
               regime_point_estimate=point.regime, n_lrs=int((curve[0] > 0).sum()),
               n_refined_lrs=n_refined,
               n_checkpoints=n_rows, base_L=float(L[:n_base].mean()) if n_base else np.nan,
               base_R=float(R[:n_base].mean()) if n_base else np.nan)
    # the lrs that decided the verdict: a cliff's bracket, else the closest call (issue 52)
    bracket = (point.critical_lr_low, point.critical_lr_high) if point.regime == CLIFF else (
        point.closest_lr_low, point.closest_lr_high)
    runs = runs_at(lr[n_base:], *bracket)
    out["runs_at_bracket"] = np.nan if runs is None else runs
    out["closest_shortfall_se"] = 0.0 if point.regime == CLIFF else shortfall_se(
        lr[n_base:], R[n_base:], columns["n_R"][cls][n_base:], float(curve[2][0]), point.closest_lr_low,
        point.closest_lr_high, point.closest_drop, th.cliff_drop)
    _confidence(out, point, safe, lr, cls, reps, th, min_confidence, rng, n_L)
    # what the bootstrap drew: runs too wherever some lr of the series has several (runs.run_weights)
    several = np.unique(lr[n_base:], return_counts=True)[1].max(initial=0) >= 2
    out["confidence_over"] = "none" if out["confidence_method"] == "none" else (
        "runs and items" if several else "items")
    if out["regime"] in (CLIFF, GRADUAL, FORGETTING) and all(x is not None for x in bracket):
        # runs checked both ways (issue 59 part 4): a cliff every run past its bracket must show,
        # a decline no run at its closest call may collapse on
        why = unreproduced(lr[n_base:], R[n_base:], columns["n_R"][cls][n_base:], float(curve[2][0]), *bracket,
                           th.cliff_drop, th.noise_z, cliff=out["regime"] == CLIFF,
                           names=columns["run"][cls][n_base:])
        if why:
            out.update(regime=INCONCLUSIVE, reason=why)
    if out["regime"] != CLIFF:
        out.update({f: np.nan for f in _CLIFF_FIELDS})
    n_R = np.bincount(inv, columns["n_R"][cls], len(lrs))
    out["within_noise"] = "; ".join(noise_notes(curve[0], curve[2], n_R, safe.max_safe_lr, safe.max_safe_lr_next,
                                                (point.critical_lr_low, point.critical_lr_high), th))
    out["regime_paper"] = paper_regime(out["regime"], out["learned_before_cliff"], th, out["kept_before_cliff"],
                                       out["learned_after_cliff"], out["learned_after_cliff_z"],
                                       out["learned_before_cliff_z"])
    return out


def _confidence(out: dict, point, safe, lr: np.ndarray, cls: np.ndarray, reps: tuple | None, th: Thresholds,
                min_confidence: float, rng: np.random.Generator, n_L: np.ndarray | None = None) -> None:
    """The bootstrap's columns of a series' row `out` (confidence, shares, agreement); a regime
    below `min_confidence` becomes inconclusive."""
    reps_cls = None
    if reps is not None:
        L_reps, R_reps, src = reps
        boot = _bootstrap(lr, L_reps[cls], R_reps[cls], th, rng, n_L)
        reps_cls, reps_safe = boot if boot is not None else (None, None)
        out["confidence_method"] = "none" if reps_cls is None else (
            "bootstrap" if (src[cls] == "samples").all() else "binomial" if (src[cls] == "binomial").all()
            else "bootstrap+binomial")
    else:
        out["confidence_method"] = "none"
    if reps_cls is None:
        out.update(confidence=np.nan, regime_shares="{}", bracket_agreement=np.nan, max_safe_lr_confidence=np.nan)
        return
    out["max_safe_lr_confidence"] = float(np.mean([x == safe.max_safe_lr for x in reps_safe]))
    regimes = [c.regime for c in reps_cls]
    shares = {r: regimes.count(r) / len(regimes) for r in REGIMES if regimes.count(r)}
    out["confidence"] = shares.get(point.regime, 0.0)
    out["regime_shares"] = json.dumps(shares, sort_keys=True)
    out["bracket_agreement"] = (np.mean([(c.critical_lr_low, c.critical_lr_high) == (
        point.critical_lr_low, point.critical_lr_high) for c in reps_cls]) if point.regime == CLIFF else np.nan)
    if out["confidence"] < min_confidence and point.regime != INCONCLUSIVE:
        out["regime"] = INCONCLUSIVE
        out["reason"] = (f"only {out['confidence']:.0%} of bootstrap replicates agree with the point "
                         f"estimate '{point.regime}' ({point.reason})")


def _one_per_run(pts: pd.DataFrame) -> np.ndarray:
    """The classified flags, one checkpoint per training run whatever the frame's flags say
    (issue 59 part 4: one trial's checkpoints at several epochs, without `final`/`classified`,
    read as several runs that disagree). Where a trial has several classified rows, only its
    last step stays; a frame with no trial ids keeps its flags (each row is a run)."""
    flags = pts["classified"].to_numpy(bool)
    if "trial_id" not in pts or "step" not in pts or not flags.any():
        return flags
    sub = pts.loc[flags, ["trial_id", "step"]]
    last = sub.groupby("trial_id", sort=False)["step"].transform("max")
    ok = sub["trial_id"].isna() | ((sub["step"] == last) & ~sub.duplicated(["trial_id", "step"]))
    keep = np.zeros(len(pts), bool)
    keep[np.flatnonzero(flags)[ok.to_numpy(bool)]] = True
    return keep


def _run_names(pts: pd.DataFrame) -> np.ndarray:
    """How a report names each row's training run: its trial id, else its seed, else its row."""
    if "trial_id" in pts:
        return pts["trial_id"].astype(str).to_numpy(object)
    if "seed" in pts:
        return np.array([f"seed {v:g}" if isinstance(v, (int, float)) and v == v else f"seed {v}"
                         for v in pts["seed"]], dtype=object)
    return np.array([f"row {i}" for i in range(len(pts))], dtype=object)


def _refined_lrs(pts: pd.DataFrame) -> dict[tuple, int]:
    """Per series (SERIES_KEY): its classified lrs that only refinement rounds (round > 0)
    brought, i.e. whose lowest round is above 0 (a row of unknown round counts for neither)."""
    if "round" not in pts:
        return {}
    done = pts.loc[pts["classified"].to_numpy(bool) & ~is_base(pts).to_numpy(), [*SERIES_KEY, "lr", "round"]]
    lowest = done.groupby([*SERIES_KEY, "lr"], sort=False)["round"].min()
    return (lowest > 0).groupby(level=list(range(len(SERIES_KEY))), sort=False).sum().astype(int).to_dict()


def _at(margin: tuple | None, pos: np.ndarray) -> tuple | None:
    return None if margin is None else (margin[0][pos], margin[1][pos])


def _pareto_columns(table: pd.DataFrame, points: pd.DataFrame, robust: float = 0.0) -> pd.DataFrame:
    """Per-series and per-model Pareto points (all checkpoints; ``robust``: pareto.pareto_mask),
    area score, dominance. On numpy arrays per model (a paper-sized store has ~100 series:
    frames per series cost most of `frontiers`' time, bench/bench_dashboard.py)."""
    extra = []
    for model, mpts in points.groupby("model", sort=False):
        L, R = mpts["L"].to_numpy(float), mpts["R"].to_numpy(float)
        margin = margins(mpts)
        ids, labels = mpts["point_id"].to_numpy(object), mpts["label"].to_numpy(object)
        base_rows = is_base(mpts).to_numpy()
        front = pareto_mask(L, R, robust, margin)
        n_front = max(int((front & ~base_rows).sum()), 1)
        base = np.flatnonzero(base_rows)
        L0 = float(L[base].mean()) if len(base) else np.nan
        R0 = float(R[base].mean()) if len(base) else np.nan
        trained = np.flatnonzero(~base_rows)
        groups = {k: trained[v] for k, v in mpts.iloc[trained].groupby(SERIES_KEY, sort=False).indices.items()}
        sorted_sets = {k: Dominance(L[o], R[o]) for k, o in groups.items()} if robust <= 0 else {}
        for key, pos in groups.items():
            both = np.concatenate([base, pos])
            mask = pareto_mask(L[both], R[both], robust, None if margin is None else (margin[0][both], margin[1][both]))
            mine = pos[front[pos]]
            extra.append({
                "model": key[0], "series": key[1], "epochs": key[2],
                "pareto_point_ids": ids[both[mask]].tolist(),
                "model_pareto_point_ids": ids[mine].tolist(),
                "model_pareto_share": len(mine) / n_front,
                "frontier_area": frontier_area(L[pos], R[pos], L0, R0) if len(base) else np.nan,
                "dominated_by": sorted(labels[o[0]] for k, o in groups.items() if k != key and (
                    sorted_sets[k].covers(L[pos], R[pos]) if robust <= 0 else
                    dominates_all(L[o], R[o], L[pos], R[pos], robust, _at(margin, o), _at(margin, pos)))),
            })
    return table.merge(pd.DataFrame(extra), on=SERIES_KEY, how="left")


def frontiers(points: pd.DataFrame, samples: pd.DataFrame | None = None, thresholds: Thresholds | None = None,
              *, learn_task: str | None = None, retain_task: str | list[str] | None = None, n_boot: int = 200,
              seed: int = 0, min_confidence: float = MIN_CONFIDENCE, models: pd.DataFrame | None = None,
              replicates: tuple | None = None, robust: float = 0.0) -> pd.DataFrame:
    """One row per series of ``points`` (columns FRONTIER_COLUMNS).

    ``points``: one row per checkpoint with ``model, series, epochs, lr, L, R, point_id`` and,
    for classification filters and confidence, optionally ``final``/``classified`` (default:
    every row is a classified final point), ``n_L``/``n_R`` (eval sizes, for the binomial
    fallback), ``trial_id``/``step`` (to match ``samples``), ``method``/``optimizer``, ``round``
    (0 = the grid, > 0 = a refinement round; counts ``n_refined_lrs``). Base rows
    have the base series (``sweep.grid.BASE``) and ``lr == 0`` and belong to every series of their model.
    ``samples``: per-example results (store schema) of ``learn_task`` and ``retain_task`` (a
    suite's tasks: a list, R their share_of_base aggregate; see confidence.replicate_accuracies).
    ``models``: analysis/model_info.py's table (family, size_b); without it both stay empty.
    ``replicates``: confidence.replicate_accuracies of these points, if already computed.
    ``robust``: seed 001's robust frontier margin c for the Pareto columns (pareto.pareto_mask).
    """
    th = thresholds or Thresholds()
    if samples is not None and (learn_task is None or retain_task is None):
        raise ValueError("samples need learn_task and retain_task to tell L's examples from R's")
    pts = points.reset_index(drop=True).copy()
    for col, default in (("classified", True), ("method", pts["series"]), ("optimizer", ""),
                         ("point_id", pts.index.astype(str))):
        if col not in pts:
            pts[col] = default
    if (is_base(pts) & (pts["lr"] != 0)).any():
        raise ValueError("base rows (series 'base') must have lr == 0")
    pts["classified"] = _one_per_run(pts)
    pts["label"] = series_labels(pts)
    reps = replicates if replicates is not None else (
        replicate_accuracies(pts, samples, learn_task, retain_task, n_boot, seed) if n_boot > 0 else None)
    columns = {c: pts[c].to_numpy(float) for c in ("lr", "L", "R")}
    for c in ("n_L", "n_R"):  # item counts: the strict paper reading and the runs' noise (issue 52)
        columns[c] = pts[c].astype("Float64").to_numpy(float, na_value=np.nan) if c in pts else np.full(len(pts), np.nan)
    columns["run"] = _run_names(pts)
    rng = np.random.default_rng(seed)
    base_rows, classified = is_base(pts).to_numpy(), pts["classified"].to_numpy(bool)
    bases = np.flatnonzero(base_rows & classified)
    base_of = {m: bases[v] for m, v in pts.iloc[bases].groupby("model").indices.items()}
    trained = np.flatnonzero(~base_rows)
    # what _series_row reads of a series' first row, as plain numpy columns (the store's
    # Arrow-backed text columns cost a take each per series)
    meta = {c: pts[c].to_numpy(object) for c in ("method", "optimizer", "label")}
    refined = _refined_lrs(pts)
    rows = []
    for key, at in pts.iloc[trained].groupby(SERIES_KEY, sort=True).indices.items():
        pos = trained[at]
        base = base_of.get(key[0], bases[:0])
        cls = np.concatenate([base, pos[classified[pos]]])
        first = {c: v[pos[0]] for c, v in meta.items()}
        rows.append(_series_row(key, first, len(pos), refined.get(key, 0), cls, len(base), columns, reps, th,
                                min_confidence, rng))
    table = pd.DataFrame(rows)
    if table.empty:
        return pd.DataFrame(columns=FRONTIER_COLUMNS)
    for col in ("max_safe_lr", "max_safe_lr_next", "learn_at_max_safe_lr", "learned_before_cliff",
                "learned_before_cliff_z", "kept_before_cliff",
                "learned_after_cliff", "learned_after_cliff_z", "closest_lr_low", "closest_lr_high", "closest_drop",
                "closest_shortfall", "closest_shortfall_se", "runs_at_bracket"):
        table[col] = table[col].astype(float)  # None -> NaN, a float column
    info = models if models is not None else pd.DataFrame(columns=["model", "family", "size_b"])
    info = info.reindex(columns=["model", "family", "size_b", "pretrain_optimizer"])  # older callers: no optimizer
    table = table.merge(info, on="model", how="left")
    table["size_b"] = table["size_b"].astype(float)
    return _pareto_columns(table, pts, robust)[FRONTIER_COLUMNS]


def model_frontier(points: pd.DataFrame, robust: float = 0.0) -> pd.DataFrame:
    """The Pareto-optimal checkpoints of each model across all its series (and the base)."""
    keep = []
    for _, mpts in points.groupby("model", sort=True):
        keep.append(mpts[pareto_mask(mpts["L"], mpts["R"], robust, margins(mpts))].sort_values("L"))
    return pd.concat(keep, ignore_index=True) if keep else points.iloc[0:0]
