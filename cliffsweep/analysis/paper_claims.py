"""The cliff paper's claims as numbers (seed 000; issue 16 part 4): pure functions of the
frontiers table and the points, each returning one table that `analyze` writes beside
frontiers.parquet (docs/analysis.md maps claim -> table -> column).

- :func:`matched_gain`: retention a method keeps over SFT at matched learning (Sec. 5.2: SIB
  "retaining up to 35pp GSM8K accuracy (Qwen2.5-3B)"; Fig. 5, 6, 8);
- :func:`regime_counts`: regimes over the grid, in our reading and the paper's ("two regimes
  emerge", Sec. 5.2);
- :func:`by_sft_regime`: method effects conditioned on SFT's regime (Sec. 5.2, Fig. 3-4: SIB
  Pareto-dominates SFT where SFT is gradual; CL methods do not help learning at a cliff);
- :func:`epochs_effect`: how epochs move the regime, the cliff and the highest safe lr (Fig. 7);
- :func:`size_effect`: steepness, critical lr and highest safe lr vs model size per family
  (Fig. 9, App. E);
- :func:`task_correlation`: the learn / retain accuracy correlation (Sec. 3: "GSM8K performance
  is uncorrelated to ChemL3").

Seeds are averaged per lr (as in classification); where bootstrap replicates of the points are
given, a number also gets its 5-95 % bootstrap interval (``*_lo``, ``*_hi``).
"""

from __future__ import annotations

import numpy as np
import pandas as pd

from cliffsweep.analysis.classify import lr_curve
from cliffsweep.sweep.grid import SERIES_KEY, is_base

REFERENCE = "sft"
"""The method every other one is compared with (plain SFT, the paper's dashed black line)."""
OWN_FIGURES = ("sft", "sib", "lora")
"""Methods with a figure of their own (Fig. 5: SIB, Fig. 8: LoRA); the others are Fig. 6's
continual-learning methods."""


_STEPS = r"@(\d+)steps$"
"""A step budget's suffix of a series label (sweep/grid.series_label: 'sft[muon]@800steps')."""


def budget(table: pd.DataFrame) -> pd.Series:
    """Each series' training budget: '800 steps' (recipe.max_steps, whose series have epochs 0)
    or '3 epochs'. Series are compared only within one budget (issue 52: keyed on epochs alone,
    every step budget shared one SFT reference)."""
    names = table["series"] if "series" in table else table["label"]
    steps = names.astype(str).str.extract(_STEPS, expand=False)
    return pd.Series(np.where(steps.notna(), steps.fillna("") + " steps", table["epochs"].astype(str) + " epochs"),
                     index=table.index)


def method_of(labels: pd.Series) -> pd.Series:
    """A series label without its epochs, its step budget and its optimizer: the method it runs
    with its params ('sft[muon]@800steps' -> 'sft')."""
    return (labels.str.replace(r" e\d+$", "", regex=True).str.replace(_STEPS, "", regex=True)
            .str.replace(r"\[[^\]]*\]$", "", regex=True))


def main_epochs(table: pd.DataFrame) -> int:
    """The epoch count the per-model figures use: 3 (the paper's default, Sec. 5.2: "the results
    reported had fixed three epochs") where swept, else the most common one."""
    eps = table["epochs"].dropna().astype(int)
    if (eps == 3).any():
        return 3
    return int(eps.mode().iloc[0]) if len(eps) else 1


def reference_series(table: pd.DataFrame) -> pd.DataFrame:
    """SFT's row per model x epochs: under the model's pretraining optimizer where the sweep file
    names it (models[].pretrain_optimizer: 001's claim is that finetuning with it beats the
    others) and SFT ran with it, else the series named 'sft' (where SFT runs with several
    settings)."""
    sft = table[table["method"] == REFERENCE].assign(budget=lambda t: budget(t))
    key = ["model", "epochs", "budget"]
    own = (sft["optimizer"] == sft["pretrain_optimizer"]) if "pretrain_optimizer" in sft.columns \
        else pd.Series(False, index=sft.index)
    named = sft["series"].str.replace(_STEPS, "", regex=True) == REFERENCE  # 'sft', 'sft@800steps'
    plain = pd.concat([sft[own], sft[named]]).drop_duplicates(key)
    rest = sft[~sft.set_index(key).index.isin(plain.set_index(key).index)]
    return pd.concat([plain, rest]).drop_duplicates(key).reset_index(drop=True)


def _final(points: pd.DataFrame, model: str, series: str, epochs) -> pd.DataFrame:
    """The series' classified final points and its model's base (lr 0)."""
    mp = points[points["model"] == model]
    base = mp[is_base(mp) & mp["classified"]]
    s = mp[(mp["series"] == series) & (mp["epochs"] == epochs) & mp["classified"]]
    return pd.concat([base, s])


def retention_gain(ref_L: np.ndarray, ref_R: np.ndarray, L: np.ndarray, R: np.ndarray,
                   tol: np.ndarray | float = 0.0) -> np.ndarray:
    """Retention of each (L, R) point over the reference at matched learning: ``R - R_ref(L)``
    where ``R_ref(L)`` is the best retention the reference reaches with at least ``L - tol``
    learning (its frontier, read as a step function; ``tol``: one standard error of L, so that a
    point learning 0.005 more than SFT's last safe lr is not "matched" only by SFT's collapsed
    ones). NaN where the point learns more than the reference ever does (nothing to match)."""
    order = np.argsort(-ref_L)
    best = np.maximum.accumulate(ref_R[order])  # best R among ref points with L >= each L, descending
    Ls = ref_L[order]
    tol = np.broadcast_to(np.asarray(tol, float), np.shape(L))
    out = np.full(len(L), np.nan)
    for k, (l, r) in enumerate(zip(L, R)):
        ok = np.flatnonzero(Ls >= l - tol[k] - 1e-12)
        if len(ok):
            out[k] = r - best[ok[-1]]
    return out


def matched_gain(points: pd.DataFrame, table: pd.DataFrame, reps: tuple | None = None) -> pd.DataFrame:
    """Per model x epochs x series other than SFT's own (other methods, and SFT under other
    optimizers: 001's optimizer-consistency claim): the largest and mean retention gain over SFT at
    matched learning, over the method's lrs that learn no more than SFT does; the learning where
    the largest gain is; whether the method Pareto-dominates SFT (frontiers ``dominated_by``);
    and its largest learning over SFT's. ``reps``: (L_reps, R_reps) bootstrap replicates
    aligned with ``points`` rows, for ``gain_max_lo`` / ``gain_max_hi``."""
    rows = []
    ref = reference_series(table).set_index(["model", "epochs", "budget"])
    for r in table.assign(budget=budget(table)).itertuples():
        if (r.model, r.epochs, r.budget) not in ref.index:
            continue
        sft = ref.loc[(r.model, r.epochs, r.budget)]
        if r.series == sft["series"]:
            continue  # SFT itself; SFT under another optimizer (sft[muon]) is compared (001's claim)
        # 001's claim (SFT under another optimizer) pools every checkpoint of every run, as 001
        # does (Sec. 2: "we evaluate intermediate checkpoints ... gather all the data points");
        # a method against SFT reads the seed-averaged final points, as the cliff paper plots
        pooled = r.method == REFERENCE
        pick = _pooled if pooled else _final
        a, b = pick(points, r.model, sft["series"], r.epochs), pick(points, r.model, r.series, r.epochs)
        b = b[~is_base(b)]
        if a.empty or b.empty:
            continue
        ca, cb = (a[["lr", "L", "R"]], b[["lr", "L", "R"]]) if pooled else (lr_curve(a), lr_curve(b))
        gains = retention_gain(ca["L"].to_numpy(), ca["R"].to_numpy(), cb["L"].to_numpy(), cb["R"].to_numpy(),
                               _se(cb["L"].to_numpy(), b))
        ok = np.isfinite(gains)
        row = {"model": r.model, "family": r.family, "size_b": r.size_b, "epochs": r.epochs, "budget": r.budget,
               "method": r.method,
               "series": r.series, "label": r.label, "reference": sft["label"],
               # in the paper's reading (issue 40): a cliff there is the paper's cliff, not rule 4's
               "sft_regime": sft["regime_paper"], "regime": r.regime_paper, "n_matched": int(ok.sum()),
               "gain_max": float(np.nanmax(gains)) if ok.any() else np.nan,
               "gain_mean": float(np.nanmean(gains)) if ok.any() else np.nan,
               "L_at_gain_max": float(cb["L"].to_numpy()[np.nanargmax(gains)]) if ok.any() else np.nan,
               "learning_over_sft": float(cb["L"].max() - ca["L"].max()),
               "dominates_sft": r.label in sft["dominated_by"], "dominated_by_sft": sft["label"] in r.dominated_by}
        row["pooled_checkpoints"] = pooled
        row.update(_gain_interval(reps, a, b, pooled) if reps is not None else {"gain_max_lo": np.nan,
                                                                                 "gain_max_hi": np.nan})
        rows.append(row)
    cols = ["model", "family", "size_b", "epochs", "budget", "method", "series", "label", "reference", "sft_regime",
            "regime", "n_matched", "gain_max", "gain_max_lo", "gain_max_hi", "gain_mean", "L_at_gain_max",
            "learning_over_sft", "dominates_sft", "dominated_by_sft", "pooled_checkpoints"]
    return pd.DataFrame(rows, columns=cols)


def _pooled(points: pd.DataFrame, model: str, series: str, epochs) -> pd.DataFrame:
    """Every checkpoint of the series (intermediate and final, every run) and its model's base."""
    mp = points[points["model"] == model]
    base = mp[is_base(mp) & mp["classified"]]
    return pd.concat([base, mp[(mp["series"] == series) & (mp["epochs"] == epochs)]])


def _se(L: np.ndarray, rows: pd.DataFrame) -> np.ndarray:
    """Binomial standard error of learn accuracies L of eval size n_L (0 without n_L)."""
    n = rows["n_L"].astype("Float64").max() if "n_L" in rows else np.nan
    return np.zeros_like(L) if not (n == n and n > 0) else np.sqrt(L * (1 - L) / float(n))


def _per_lr(rows: pd.DataFrame, values: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """lrs and per-lr means (seeds averaged) of ``values`` (len(rows), B)."""
    lrs, inv = np.unique(rows["lr"].to_numpy(float), return_inverse=True)
    G = np.zeros((len(lrs), len(rows)))
    G[inv, np.arange(len(rows))] = 1.0
    return lrs, (G / G.sum(1, keepdims=True)) @ values


def _gain_interval(reps: tuple, a: pd.DataFrame, b: pd.DataFrame, pooled: bool = False) -> dict:
    """5-95 % bootstrap interval of gain_max (each replicate re-scores both series; `pooled`:
    every checkpoint its own point, else seeds averaged per lr)."""
    L_reps, R_reps = reps
    ia, ib = a["_row"].to_numpy(), b["_row"].to_numpy()
    if np.isnan(L_reps[ia]).any() or np.isnan(L_reps[ib]).any():
        return {"gain_max_lo": np.nan, "gain_max_hi": np.nan}
    if pooled:
        La, Ra, Lb, Rb = L_reps[ia], R_reps[ia], L_reps[ib], R_reps[ib]
    else:
        _, La = _per_lr(a, L_reps[ia])
        _, Ra = _per_lr(a, R_reps[ia])
        _, Lb = _per_lr(b, L_reps[ib])
        _, Rb = _per_lr(b, R_reps[ib])
    best = []
    for k in range(L_reps.shape[1]):
        g = retention_gain(La[:, k], Ra[:, k], Lb[:, k], Rb[:, k], _se(Lb[:, k], b))
        best.append(np.nanmax(g) if np.isfinite(g).any() else np.nan)
    best = np.asarray(best)
    best = best[np.isfinite(best)]
    if not len(best):
        return {"gain_max_lo": np.nan, "gain_max_hi": np.nan}
    return {"gain_max_lo": float(np.quantile(best, 0.05)), "gain_max_hi": float(np.quantile(best, 0.95))}


def regime_counts(table: pd.DataFrame) -> pd.DataFrame:
    """How many series of each method fall in each regime, in our reading (``regime``) and the
    paper's (``regime_paper``: a cliff needs learning first); one row per view x method x regime,
    plus the ``all`` methods rows."""
    out = []
    for view, col in (("ours", "regime"), ("paper", "regime_paper")):
        for method, g in [("all", table), *table.groupby("method", sort=True)]:
            for regime, n in g[col].value_counts().sort_index().items():
                out.append({"view": view, "method": method, "regime": regime, "n_series": int(n),
                            "share": n / len(g), "n_models": int(g.loc[g[col] == regime, "model"].nunique())})
    return pd.DataFrame(out, columns=["view", "method", "regime", "n_series", "share", "n_models"])


def by_sft_regime(gains: pd.DataFrame) -> pd.DataFrame:
    """Method effects conditioned on SFT's regime (in the paper's reading, issue 40) at the same
    model x epochs: series count,
    share that Pareto-dominates SFT, share dominated by SFT, mean largest retention gain at
    matched learning, mean learning over SFT's."""
    gains = gains[gains["method"] != REFERENCE]  # methods' effects; SFT's optimizers: optimizer_consistency
    if gains.empty:
        return pd.DataFrame(columns=["sft_regime", "method", "n_series", "share_dominating_sft",
                                     "share_dominated_by_sft", "mean_gain_max", "mean_learning_over_sft"])
    g = gains.groupby(["sft_regime", "method"], sort=True)
    return pd.DataFrame({
        "n_series": g.size(), "share_dominating_sft": g["dominates_sft"].mean(),
        "share_dominated_by_sft": g["dominated_by_sft"].mean(), "mean_gain_max": g["gain_max"].mean(),
        "mean_learning_over_sft": g["learning_over_sft"].mean()}).reset_index()


def optimizer_consistency(gains: pd.DataFrame) -> pd.DataFrame:
    """001's claim, that the optimizer a model was pretrained with is the one to finetune it with:
    SFT under each other optimizer (`sft[muon]`, `sft[sgd]`) against SFT's reference series at
    the same model x epochs, from `matched_gain`'s rows (retention gain at matched learning,
    learning over it, Pareto dominance both ways). Empty when the sweep has one optimizer."""
    cols = ["model", "family", "epochs", "budget", "series", "reference", "sft_regime", "regime", "gain_max",
            "gain_max_lo", "gain_max_hi", "learning_over_sft", "dominates_sft", "dominated_by_sft", "pooled_checkpoints"]
    return gains.loc[gains["method"] == REFERENCE, cols].reset_index(drop=True)


def _kendall(a: list[str], b: list[str]) -> float:
    """Kendall's tau between two orders of the same items (1 = the same order, -1 = reversed)."""
    pos = {x: i for i, x in enumerate(b)}
    pairs = [(i, j) for i in range(len(a)) for j in range(i + 1, len(a))]
    if not pairs:
        return np.nan
    return sum(1 if pos[a[i]] < pos[a[j]] else -1 for i, j in pairs) / len(pairs)


def forgetting_order(table: pd.DataFrame, reference: str = "adamw") -> pd.DataFrame:
    """001's consistency claim read on methods: under each optimizer, the methods of a model x
    epochs ordered by frontier area (the larger, the less forgotten at matched learning), and
    whether that order is the one under `reference` (Kendall's tau over the methods both
    optimizers ran; 1 = the same order). Methods are the series labels without their
    `[optimizer]` suffix (sweep/grid.series_label). Empty with one optimizer."""
    cols = ["model", "epochs", "budget", "optimizer", "order", "n_methods", "reference", "kendall_tau", "same_order"]
    t = table.assign(optimizer=table["optimizer"].replace("", reference), base=method_of(table["label"]),
                     budget=budget(table))
    rows = []
    for (model, epochs, bud), g in t.groupby(["model", "epochs", "budget"], sort=True):
        if g["optimizer"].nunique() < 2:
            continue
        orders = {o: s.sort_values(["frontier_area", "base"], ascending=[False, True])["base"].tolist()
                  for o, s in g.groupby("optimizer", sort=True)}
        ref = reference if reference in orders else next(iter(orders))
        for opt, order in orders.items():
            shared = [m for m in order if m in orders[ref]]
            if len(shared) < 2:
                continue  # one method is no order: nothing to compare (a NaN tau said so before)
            tau = _kendall(shared, [m for m in orders[ref] if m in shared])
            rows.append({"model": model, "epochs": epochs, "budget": bud, "optimizer": opt, "order": " > ".join(order),
                         "n_methods": len(order), "reference": ref, "kendall_tau": tau,
                         "same_order": bool(tau == 1.0) if np.isfinite(tau) else None})
    return pd.DataFrame(rows, columns=cols)


def _log_slope(x: pd.Series, y: pd.Series) -> float:
    """Least-squares slope of log10 y on log10 x over the finite pairs (NaN with < 2 x values)."""
    ok = np.isfinite(x.to_numpy(float)) & np.isfinite(y.to_numpy(float)) & (y.to_numpy(float) > 0)
    if np.unique(x[ok]).size < 2:
        return np.nan
    return float(np.polyfit(np.log10(x[ok].astype(float)), np.log10(y[ok].astype(float)), 1)[0])


def epochs_effect(table: pd.DataFrame) -> pd.DataFrame:
    """Per model x series x epochs: regime, cliff bracket, highest safe lr; and per model x
    series the slopes of log10 critical lr and log10 max safe lr over log10 epochs (Fig. 7: more
    epochs act like a larger lr, so both move down: slope < 0)."""
    cols = ["model", "family", "size_b", "series", "method", "label", "epochs", "regime", "regime_paper",
            "critical_lr_low", "critical_lr_high", "max_safe_lr", "max_learning", "max_forgetting"]
    out = table[cols].assign(budget=budget(table))
    # one curve per series across budgets: epochs, or step budgets (the series label names them)
    steps = out["series"].astype(str).str.extract(_STEPS, expand=False).astype(float)
    out = out.assign(length=steps.fillna(out["epochs"].astype(float)),
                     across=out["series"].astype(str).str.replace(_STEPS, "", regex=True))
    out = out.sort_values(["model", "across", "length"]).reset_index(drop=True)
    slopes = []
    for (model, across), g in out.groupby(["model", "across"], sort=False):
        slopes.append({"model": model, "across": across, "n_epochs": g["length"].nunique(),
                       "critical_lr_slope": _log_slope(g["length"], g["critical_lr_high"]),
                       "max_safe_lr_slope": _log_slope(g["length"], g["max_safe_lr"])})
    return out.merge(pd.DataFrame(slopes, columns=["model", "across", "n_epochs", "critical_lr_slope",
                                                   "max_safe_lr_slope"]), on=["model", "across"], how="left"
                     ).drop(columns=["length", "across"])


def steepness(curve: pd.DataFrame) -> float:
    """Largest share of base retention lost per decade of lr between two trained lrs of a
    seed-averaged curve (lr 0 = base first): how abruptly the series forgets (App. E, Fig. 9:
    "steeper trade-offs"). NaN without a base or two trained lrs."""
    if len(curve) < 3 or curve["lr"].iloc[0] != 0 or curve["R"].iloc[0] <= 0:
        return np.nan
    lr, r = curve["lr"].to_numpy()[1:], curve["R"].to_numpy()[1:] / curve["R"].iloc[0]
    i, j = np.triu_indices(len(lr), 1)
    return float(np.max((r[i] - r[j]) / np.log10(lr[j] / lr[i])))


def size_effect(points: pd.DataFrame, table: pd.DataFrame) -> pd.DataFrame:
    """SFT at the main epoch count, one row per model with its family and size: regime,
    critical lr, highest safe lr, steepness, frontier area, largest learning; plus per family
    the Spearman rank correlation of steepness with size (``family_steepness_vs_size``; NaN
    below 3 sizes)."""
    ep = main_epochs(table)
    ref = reference_series(table)
    ref = ref[ref["epochs"] == ep]
    rows = []
    for r in ref.itertuples():
        curve = lr_curve(_final(points, r.model, r.series, r.epochs))
        rows.append({"model": r.model, "family": r.family, "size_b": r.size_b, "epochs": ep, "budget": r.budget,
                     "regime": r.regime,
                     "regime_paper": r.regime_paper, "critical_lr_high": r.critical_lr_high,
                     "max_safe_lr": r.max_safe_lr, "steepness": steepness(curve), "frontier_area": r.frontier_area,
                     "max_learning": r.max_learning, "base_L": r.base_L, "base_R": r.base_R})
    out = pd.DataFrame(rows, columns=["model", "family", "size_b", "epochs", "budget", "regime", "regime_paper",
                                      "critical_lr_high", "max_safe_lr", "steepness", "frontier_area",
                                      "max_learning", "base_L", "base_R"])
    rho = {}
    for fam, g in out.dropna(subset=["family", "size_b", "steepness"]).groupby("family"):
        rho[fam] = float(g["size_b"].rank().corr(g["steepness"].rank())) if len(g) >= 3 else np.nan
    out["family_steepness_vs_size"] = out["family"].map(rho).astype(float)
    return out.sort_values(["family", "size_b", "model"], na_position="last").reset_index(drop=True)


def _corr(L: pd.Series, R: pd.Series) -> tuple[float, float]:
    if len(L) < 3 or L.nunique() < 2 or R.nunique() < 2:
        return np.nan, np.nan
    return float(L.corr(R)), float(L.rank().corr(R.rank()))


def task_correlation(points: pd.DataFrame) -> pd.DataFrame:
    """Pearson and Spearman correlation of learn and retain accuracy: across the base models
    (the paper's "baseline models"), and per model across every checkpoint (base, intermediate
    and final: "in all of our experiments")."""
    rows = []
    base = points[is_base(points)].groupby("model")[["L", "R"]].mean()
    rows.append({"scope": "base models", "model": "", "n": len(base), **dict(zip(("pearson", "spearman"),
                                                                                 _corr(base["L"], base["R"])))})
    for model, g in points.groupby("model", sort=True):
        rows.append({"scope": "checkpoints", "model": model, "n": len(g),
                     **dict(zip(("pearson", "spearman"), _corr(g["L"], g["R"])))})
    return pd.DataFrame(rows, columns=["scope", "model", "n", "pearson", "spearman"])


def point_spread(points: pd.DataFrame, reps: tuple | None = None) -> pd.DataFrame:
    """Every series' final points per lr (seeds averaged, as plotted and classified) with their
    spread: seeds, the standard deviation across seeds, and the 5-95 % bootstrap interval of the
    seed mean (from ``reps``, aligned with ``points`` rows)."""
    fin = points[points["classified"]]
    rows = []
    for (model, series, epochs, lr), g in fin.groupby([*SERIES_KEY, "lr"], sort=True, dropna=False):
        row = {"model": model, "series": series, "epochs": epochs, "lr": lr, "n_seeds": g["seed"].nunique(),
               "n_L": int(g["n_L"].max()) if g["n_L"].notna().any() else np.nan,
               "n_R": int(g["n_R"].max()) if g["n_R"].notna().any() else np.nan}
        for k in ("L", "R"):
            row[k] = float(g[k].mean())
            row[f"{k}_sd"] = float(g[k].std(ddof=1)) if len(g) > 1 else np.nan
            idx = g["_row"].to_numpy()
            rep = None if reps is None else (reps[0] if k == "L" else reps[1])[idx].mean(axis=0)
            ok = rep is not None and np.isfinite(rep).all()
            row[f"{k}_lo"] = float(np.quantile(rep, 0.05)) if ok else np.nan
            row[f"{k}_hi"] = float(np.quantile(rep, 0.95)) if ok else np.nan
        rows.append(row)
    return pd.DataFrame(rows)


def sweep_counts(points: pd.DataFrame, trials: pd.DataFrame | None) -> dict:
    """What the report header states: seeds, evaluation sizes, trials by status, checkpoints."""
    trained = points[~is_base(points)]
    # a task's size is its base's (scored on every item): under eval.adaptive the checkpoints'
    # items scored vary, and the report's notes say how many (analysis/scored.scored_notes)
    sized = points[is_base(points)] if is_base(points).any() else points
    out = {"models": int(points["model"].nunique()), "series": int(trained.groupby(SERIES_KEY).ngroups), "seeds": sorted(int(s) for s in trained["seed"].dropna().unique()),
        "n_learn": sorted(int(n) for n in sized["n_L"].dropna().unique()),
        "n_retain": sorted(int(n) for n in sized["n_R"].dropna().unique()),
        "checkpoints": int(len(trained)), "final_checkpoints": int(trained["classified"].sum())}
    if trials is not None and len(trials):
        latest = trials.drop_duplicates("trial_id", keep="last")
        out["trials"] = {str(k): int(v) for k, v in latest["status"].value_counts().sort_index().items()}
    return out
