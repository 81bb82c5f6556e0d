"""The cliff paper's figures (seed 000) drawn from the stores, one function per figure, each
returning a matplotlib Figure (the report saves it; the layout test reads its text boxes).

Small multiples, one panel per model, so the paper grid (5-12 models x 7 methods x 3 epochs)
stays readable: each method keeps one colour everywhere (layout.METHOD_COLORS, never the cliff's
red or the safe lr's green); a series is drawn as its points (marker size grows with lr) and its
own Pareto frontier as a thin step line, never as a line through lrs in order (which loops back
and reads as a training trajectory); lr labels go where they overlap nothing
(layout.place_labels); the legend sits below the panels. Points are seed means with their
5-95 % bootstrap interval (claims.point_spread).
"""

from __future__ import annotations

import numpy as np
import pandas as pd
from matplotlib.lines import Line2D

from cliffsweep.analysis import layout
from cliffsweep.analysis.classify import PAPER_REGIMES, lr_curve
from cliffsweep.analysis.paper_claims import OWN_FIGURES, REFERENCE, main_epochs
from cliffsweep.analysis.pareto import pareto_mask
from cliffsweep.analysis.regimes import CLIFF, INCONCLUSIVE
from cliffsweep.sweep.grid import is_base

REGIME_ORDER = {r: k for k, r in enumerate(PAPER_REGIMES)}
FAMILY_COLORS = ["#1f77b4", "#ff7f0e", "#9467bd", "#8c564b", "#e377c2", "#17becf", "#7f7f7f", "#bcbd22"]


def regime_text(row) -> str:
    """'cliff (78 %)', 'cliff (one run) (78 %)' where its bracket has one training run,
    'gradual (no bootstrap)', or 'inconclusive (point estimate: cliff, 55 % agree)': never a bare
    'inconclusive (100%)' that reads as confident."""
    conf = row["confidence"]
    if row["regime"] == INCONCLUSIVE:
        est = row["regime_point_estimate"]
        if est != INCONCLUSIVE and np.isfinite(conf):
            return f"inconclusive (point estimate {est}: {conf:.0%} agree)"
        return "inconclusive (data cannot tell)"
    regime = row["regime"]
    if regime == CLIFF and row.get("runs_at_bracket") == 1:
        regime = "cliff (one run)"  # its confidence saw evaluation items only, not training runs (issue 52)
    return f"{regime} ({conf:.0%})" if np.isfinite(conf) else regime


def _model_title(rows: pd.DataFrame, model: str) -> str:
    r = rows.iloc[0] if len(rows) else None
    size = "" if r is None or not np.isfinite(r["size_b"]) else f", {r['size_b']:.2g}B"
    fam = "" if r is None or not isinstance(r["family"], str) else f" ({r['family']}{size})"
    return f"{model}{fam}"


def _series_points(points: pd.DataFrame, spread: pd.DataFrame, row) -> tuple[pd.DataFrame, pd.DataFrame, pd.DataFrame]:
    """(curve with base, per-lr spread of the trained lrs, intermediate checkpoints) of a series."""
    mp = points[points["model"] == row["model"]]
    base = mp[is_base(mp) & mp["classified"]]
    s = mp[(mp["series"] == row["series"]) & (mp["epochs"] == row["epochs"])]
    curve = lr_curve(pd.concat([base, s[s["classified"]]]))
    sp = spread[(spread["model"] == row["model"]) & (spread["series"] == row["series"])
                & (spread["epochs"] == row["epochs"])]
    return curve, sp, s[~s["classified"]]


def frontier_panel(ax, points: pd.DataFrame, spread: pd.DataFrame, rows: pd.DataFrame, styles: dict,
                   label_lrs: bool = True) -> None:
    """One model's series in the (learning, retention) plane: seed means with bootstrap
    intervals, each series' frontier as a thin step line, intermediate checkpoints hollow, the
    base star, cliffs (red arrow and cross) and the highest safe lr (green ring); lr labels."""
    items, obstacles_xy = [], []
    for _, row in rows.iterrows():
        st = styles[row["series"]]
        curve, sp, inter = _series_points(points, spread, row)
        trained = curve[curve["lr"] > 0]
        ax.scatter(inter["L"], inter["R"], s=14, facecolors="none", edgecolors=st["color"], alpha=0.45,
                   linewidths=0.8, zorder=2)
        front = curve[pareto_mask(curve["L"], curve["R"])].sort_values("L")
        ax.step(front["L"], front["R"], where="post", color=st["color"], lw=0.9, alpha=0.55, zorder=2)
        if len(sp) and sp[["L_lo", "R_lo"]].notna().all().all():
            ax.errorbar(sp["L"], sp["R"], xerr=[sp["L"] - sp["L_lo"], sp["L_hi"] - sp["L"]],
                        yerr=[sp["R"] - sp["R_lo"], sp["R_hi"] - sp["R"]], fmt="none", ecolor=st["color"],
                        alpha=0.35, lw=0.8, zorder=2)
        sizes = 18 + 50 * np.arange(len(trained)) / max(len(trained) - 1, 1)
        ax.scatter(trained["L"], trained["R"], s=sizes, color=st["color"], marker=st["marker"], zorder=3,
                   edgecolors="white", linewidths=0.5)
        obstacles_xy += list(zip(trained["L"], trained["R"]))
        if row["regime"] == CLIFF:
            lo = curve[curve["lr"] == row["critical_lr_low"]].iloc[0]
            hi = curve[curve["lr"] == row["critical_lr_high"]].iloc[0]
            ax.annotate("", xy=(hi["L"], hi["R"]), xytext=(lo["L"], lo["R"]), zorder=4,
                        arrowprops=dict(arrowstyle="-|>", color=layout.CLIFF_RED, lw=1.8, alpha=0.85))
            ax.scatter([hi["L"]], [hi["R"]], marker="X", s=70, color=layout.CLIFF_RED, zorder=5)
        safe = curve[curve["lr"] == row["max_safe_lr"]]
        ax.scatter(safe["L"], safe["R"], s=130, facecolors="none", edgecolors=layout.SAFE_GREEN, linewidths=1.6,
                   zorder=6)
        if label_lrs:
            items += [(p.L, p.R, layout.lr_text(p.lr), st["color"]) for p in trained.itertuples()]
    base = points[(points["model"] == rows["model"].iloc[0]) & is_base(points)]
    if len(base):
        ax.scatter(base["L"].mean(), base["R"].mean(), marker="*", s=150, color="black", zorder=7)
        obstacles_xy.append((base["L"].mean(), base["R"].mean()))
    ax.grid(alpha=0.25)
    layout.label_points(ax, items, obstacles_xy, 0.08, 8.0)


def frontier_legend(styles: dict) -> tuple[list, list[str]]:
    handles = [Line2D([], [], color=s["color"], marker=s["marker"], lw=0.9, ms=6) for s in styles.values()]
    labels = list(styles)
    handles += [Line2D([], [], color="black", marker="*", lw=0, ms=10),
                Line2D([], [], color="0.4", marker="o", mfc="none", lw=0, ms=5, alpha=0.6),
                Line2D([], [], color=layout.CLIFF_RED, marker="X", lw=1.8, ms=7),
                Line2D([], [], color=layout.SAFE_GREEN, marker="o", mfc="none", lw=0, ms=10, mew=1.6)]
    labels += ["base model (lr 0)", "intermediate checkpoint", "cliff: last lr before the collapse -> first collapsed",
               "highest safe lr"]
    return handles, labels


def frontier_figure(points: pd.DataFrame, spread: pd.DataFrame, panels: list[tuple[str, pd.DataFrame]],
                    title: str, xlabel: str = "learning", ylabel: str = "retention"):
    """One panel per (title, frontiers rows) of ``panels``, in the order given."""
    every = pd.concat([rows for _, rows in panels])
    styles = layout.series_style(sorted(set(zip(every["method"], every["series"])),
                                        key=lambda x: (x[0] != REFERENCE, x[1])))
    fig, axes = layout.grid(len(panels), title=title, legend_entries=len(styles) + 4)
    for ax, (name, rows) in zip(axes, panels):
        ax.set_title(name, fontsize=8.5)
        ax.set_xlabel(xlabel, fontsize=8)
        ax.set_ylabel(ylabel, fontsize=8)
        ax.tick_params(labelsize=7)
        frontier_panel(ax, points, spread, rows, styles)
    layout.figure_legend(fig, *frontier_legend(styles))
    return fig


def by_model(series: pd.DataFrame, title) -> list[tuple[str, pd.DataFrame]]:
    """Panels of ``series`` per model (order of first appearance), titled ``title(model, rows)``."""
    return [(title(m, series[series["model"] == m]), series[series["model"] == m])
            for m in dict.fromkeys(series["model"])]


def fig_model(points, table, spread, model: str, learn_task: str, retain_task: str):
    """One model's series, one panel per epoch count (the report's per-model section)."""
    rows = table[table["model"] == model]
    panels = [(f"{ep} epoch(s)", g) for ep, g in rows.groupby("epochs", sort=True)]
    return frontier_figure(points, spread, panels, f"{_model_title(rows, model)}: frontiers (labels: lr)",
                           f"learning: {learn_task}", f"retention: {retain_task}")


def fig_regimes(points, table, spread, learn_task: str, retain_task: str):
    """Fig. 3 (gradual) and 4 (cliff): SFT's frontier of every model at the main epoch count,
    panels ordered by regime, each titled with it."""
    ep = main_epochs(table)
    sft = table[(table["method"] == REFERENCE) & (table["epochs"] == ep)].copy()
    sft["_order"] = sft["regime"].map(REGIME_ORDER)
    sft = sft.sort_values(["_order", "model"])
    if sft.empty:
        return None
    panels = by_model(sft, lambda m, r: f"{_model_title(r, m)}\n{regime_text(r.iloc[0])}")
    return frontier_figure(points, spread, panels, f"Fig. 3-4: SFT frontiers by regime ({ep} epochs; labels: lr)",
                           f"learning: {learn_task}", f"retention: {retain_task}")


def fig_compare(points, table, spread, gains: pd.DataFrame, methods: tuple[str, ...] | None, fig_name: str,
                learn_task: str, retain_task: str):
    """Fig. 5 (SIB), 6 (continual-learning methods: ``methods`` None = every method without a
    figure of its own) or 8 (LoRA) against SFT, every model, at the main epoch count; panel
    titles give SFT's regime and the largest retention gain at matched learning."""
    ep = main_epochs(table)
    here = table[table["epochs"] == ep]
    pick = here["method"].isin(methods) if methods else ~here["method"].isin(OWN_FIGURES)
    chosen = here[pick]
    if chosen.empty:
        return None
    keep = here[(here["method"] == REFERENCE) & here["model"].isin(chosen["model"])]
    series = pd.concat([keep, chosen]).sort_values(["model", "label"])

    def title(model, rows):
        sft = rows[rows["method"] == REFERENCE]
        g = gains[(gains["model"] == model) & (gains["epochs"] == ep) & gains["method"].isin(chosen["method"])]
        best = g.loc[g["gain_max"].idxmax()] if g["gain_max"].notna().any() else None
        gain = "" if best is None else f"; best R gain {best['gain_max']:+.2f} ({best['label']})"
        return f"{_model_title(rows, model)}\nSFT {sft['regime'].iloc[0] if len(sft) else '-'}{gain}"

    return frontier_figure(points, spread, by_model(series, title), f"{fig_name} ({ep} epochs; labels: lr)",
                           f"learning: {learn_task}", f"retention: {retain_task}")


def fig_epochs(table: pd.DataFrame, effect: pd.DataFrame):
    """Fig. 7: per model, the highest safe lr (solid) and the cliff's first collapsed lr
    (dashed) against the epoch count, one colour per method; hollow where no value exists."""
    models = sorted(effect["model"].unique())
    if effect["epochs"].nunique() < 2:
        return None
    styles = layout.series_style(sorted(set(zip(effect["method"], effect["series"])),
                                        key=lambda x: (x[0] != REFERENCE, x[1])))
    fig, axes = layout.grid(len(models), title="Fig. 7: epochs move the highest safe lr and the cliff",
                            legend_entries=len(styles) + 2)
    eps = sorted(effect["epochs"].unique())
    for ax, model in zip(axes, models):
        g = effect[effect["model"] == model]
        for series, s in g.groupby("series", sort=True):
            st = styles[series]
            s = s.sort_values("epochs")
            ax.plot(s["epochs"], s["max_safe_lr"], "-", marker=st["marker"], color=st["color"], ms=5, lw=1.2)
            ax.plot(s["epochs"], s["critical_lr_high"], "--", marker="v", color=st["color"], ms=5, lw=1.0, alpha=0.8)
        ax.set_xscale("log")
        ax.set_yscale("log")
        ax.set_xticks(eps, [str(e) for e in eps])
        ax.minorticks_off()
        ax.set_title(_model_title(table[table["model"] == model], model), fontsize=8.5)
        ax.set_xlabel("epochs", fontsize=8)
        ax.set_ylabel("learning rate", fontsize=8)
        ax.tick_params(labelsize=7)
        ax.grid(alpha=0.25)
    handles = [Line2D([], [], color=s["color"], marker=s["marker"], lw=1.2) for s in styles.values()]
    handles += [Line2D([], [], color="0.3", lw=1.2), Line2D([], [], color="0.3", ls="--", marker="v", lw=1.0)]
    layout.figure_legend(fig, handles, list(styles) + ["highest safe lr", "cliff: first collapsed lr"])
    return fig


def fig_size(size: pd.DataFrame):
    """Fig. 9: SFT's first collapsed lr, highest safe lr and steepness against model size, one
    line per family; points labelled with the model."""
    known = size.dropna(subset=["size_b"])
    if known.empty:
        return None
    fams = sorted(known["family"].dropna().unique())
    color = {f: FAMILY_COLORS[i % len(FAMILY_COLORS)] for i, f in enumerate(fams)}
    panels = [("critical_lr_high", "cliff: first collapsed lr", True), ("max_safe_lr", "highest safe lr", True),
              ("steepness", "steepness (share of base R lost per lr decade)", False)]
    fig, axes = layout.grid(3, title=f"Fig. 9: SFT vs model size and family ({int(known['epochs'].iloc[0])} epochs)",
                            legend_entries=len(fams))
    for ax, (col, name, log) in zip(axes, panels):
        items, xy = [], []
        for fam in fams:
            g = known[known["family"] == fam].sort_values("size_b")
            ax.plot(g["size_b"], g[col], "-o", color=color[fam], ms=5, lw=1.2)
            ok = g[np.isfinite(g[col].astype(float))]
            items += [(r.size_b, getattr(r, col), r.model, color[fam]) for r in ok.itertuples()]
            xy += list(zip(ok["size_b"], ok[col]))
        ax.set_xscale("log")
        sizes = _spaced(sorted(known["size_b"].unique()))
        ax.set_xticks(sizes, [f"{x:.2g}" for x in sizes])
        ax.minorticks_off()
        if log and any(y > 0 for _, y in xy):  # a log axis with nothing on it has no limits to keep
            ax.set_yscale("log")
        ax.set_title(name, fontsize=8.5)
        ax.set_xlabel("parameters (billions)", fontsize=8)
        ax.tick_params(labelsize=7)
        ax.grid(alpha=0.25)
        layout.label_points(ax, items, xy, 0.12, 7.0)
    layout.figure_legend(fig, [Line2D([], [], color=color[f], marker="o", lw=1.2) for f in fams], fams)
    return fig


def _spaced(sizes: list[float], decades: float = 0.15) -> list[float]:
    """Sizes at least ``decades`` apart on the log axis (3.09B and 3.21B share one tick)."""
    out: list[float] = []
    for x in sizes:
        if not out or np.log10(x / out[-1]) >= decades:
            out.append(x)
    return out


def fig_curvature(curv: pd.DataFrame):
    """Fig. 2: per model, the top-k Hessian eigenvalues (by magnitude) of the retain loss at
    the base weights and after SIB's rescale, and the measured squared gradient norms."""
    if curv is None or curv.empty:
        return None
    models = sorted(curv["model"].unique())
    fig, axes = layout.grid(len(models), title="Fig. 2: retain-loss sharpness, base vs SIB-rescaled",
                            legend_entries=2)
    for ax, model in zip(axes, models):
        g = curv[curv["model"] == model].sort_values("k")
        x = np.arange(len(g))
        ax.bar(x - 0.2, g["eig_base"].abs(), width=0.4, color="0.55")
        ax.bar(x + 0.2, g["eig_sib"].abs(), width=0.4, color=layout.METHOD_COLORS["sib"])
        ax.set_xticks(x, [f"λ{k}" for k in g["k"]])
        r = g.iloc[0]
        ax.set_title(f"{model}\n|∇L_R|² SIB/base = {r['grad_sq_sib'] / r['grad_sq_base']:.2f}", fontsize=8.5)
        ax.set_ylabel("|eigenvalue|", fontsize=8)
        ax.tick_params(labelsize=7)
        ax.grid(alpha=0.25, axis="y")
    layout.figure_legend(fig, [Line2D([], [], color="0.55", lw=6), Line2D([], [], color=layout.METHOD_COLORS["sib"], lw=6)],
                         ["base model", "after SIB's rescale (same function)"])
    return fig
