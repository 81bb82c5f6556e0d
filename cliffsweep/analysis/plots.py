"""Report figures (matplotlib, Agg): the cliff paper's Fig. 3-5 style retention-vs-learning
plot per model, learning/retention vs lr, and the effect of epochs (Fig. 7)."""

from __future__ import annotations

import matplotlib

matplotlib.use("Agg")  # files only; never needs a display

import matplotlib.pyplot as plt  # noqa: E402
import numpy as np  # noqa: E402
import pandas as pd  # noqa: E402

from cliffsweep.analysis.classify import lr_curve  # noqa: E402
from cliffsweep.analysis.pareto import pareto_mask  # noqa: E402

DPI = 110
# Fixed margins instead of tight_layout, which measures every text box and was most of the
# report's plotting time on a 2-core machine.
_MARGINS = dict(left=0.08, right=0.98, top=0.92, bottom=0.11, wspace=0.22)


def lr_text(lr: float) -> str:
    """Compact lr label: 3e-05 -> '3e-5'."""
    mant, exp = f"{lr:.0e}".split("e")
    return f"{mant}e{int(exp)}"


def colors(labels: list[str]) -> dict[str, tuple]:
    cmap = plt.get_cmap("tab10")
    return {lab: cmap(i % 10) for i, lab in enumerate(sorted(labels))}


def _final_curve(series_pts: pd.DataFrame, base: pd.DataFrame) -> pd.DataFrame:
    return lr_curve(pd.concat([base, series_pts[series_pts["classified"]]]))


_SAFE_RING = dict(s=170, facecolors="none", edgecolors="green", linewidths=2.0, zorder=6)


def _ring_safe(ax, curve: pd.DataFrame, row: pd.Series, x: str, y: str) -> None:
    """Ring the series' highest safe lr (frontiers column max_safe_lr), if it has one."""
    at = curve[curve["lr"] == row["max_safe_lr"]]
    if len(at):
        ax.scatter(at[x], at[y], **_SAFE_RING)


def plot_frontier(model: str, points: pd.DataFrame, table: pd.DataFrame, path: str, learn_task: str,
                  retain_task: str) -> None:
    """Retention vs learning, one line per series through its final checkpoints in lr order,
    points labelled by lr, intermediate checkpoints faint, the base point, each cliff marked
    and the model's Pareto frontier dashed."""
    mp = points[points["model"] == model]
    base = mp[mp["series"] == "base"]
    rows = table[table["model"] == model]
    col = colors(rows["label"].tolist())
    fig, ax = plt.subplots(figsize=(8.5, 6.2))
    front = mp[pareto_mask(mp["L"], mp["R"])].sort_values("L")
    ax.step(front["L"], front["R"], where="post", color="0.6", ls="--", lw=1.2, label="Pareto frontier (model)",
            zorder=1)
    for _, row in rows.iterrows():
        s = mp[(mp["series"] == row["series"]) & (mp["epochs"] == row["epochs"])]
        c = col[row["label"]]
        inter = s[~s["classified"]]
        ax.scatter(inter["L"], inter["R"], s=12, color=c, alpha=0.35, zorder=2)
        curve = _final_curve(s, base)
        ax.plot(curve["L"], curve["R"], "-o", color=c, ms=5, lw=1.6, zorder=3,
                label=f"{row['label']}: {row['regime']}" + (f" ({row['confidence']:.0%})"
                                                           if np.isfinite(row["confidence"]) else ""))
        for _, p in curve[curve["lr"] > 0].iterrows():
            ax.annotate(lr_text(p["lr"]), (p["L"], p["R"]), textcoords="offset points", xytext=(4, 3),
                        fontsize=7, color=c)
        if row["regime"] == "cliff":
            lo = curve[curve["lr"] == row["critical_lr_low"]].iloc[0]
            hi = curve[curve["lr"] == row["critical_lr_high"]].iloc[0]
            ax.annotate("", xy=(hi["L"], hi["R"]), xytext=(lo["L"], lo["R"]), zorder=4,
                        arrowprops=dict(arrowstyle="-|>", color="red", lw=2.2, alpha=0.8))
            ax.scatter([hi["L"]], [hi["R"]], marker="X", s=90, color="red", zorder=5)
        _ring_safe(ax, curve, row, "L", "R")
    if len(base):
        ax.scatter(base["L"].mean(), base["R"].mean(), marker="*", s=260, color="black", zorder=6,
                   label="base (lr = 0)")
    ax.plot([], [], color="red", lw=2.2, label="cliff (arrow: last safe lr -> first collapsed lr)")
    ax.scatter([], [], **_SAFE_RING, label="max safe lr (keeps >= 1 - forget_min of base R)")
    ax.set_xlabel(f"learning: {learn_task} accuracy")
    ax.set_ylabel(f"retention: {retain_task} accuracy")
    ax.set_title(f"{model}: learning-forgetting frontier (labels: lr)")
    ax.grid(alpha=0.3)
    ax.legend(fontsize=7, loc="best")
    fig.subplots_adjust(**_MARGINS)
    fig.savefig(path, dpi=DPI)
    plt.close(fig)


def plot_vs_lr(model: str, points: pd.DataFrame, table: pd.DataFrame, path: str, learn_task: str,
               retain_task: str) -> None:
    """Learning and retention of the final checkpoints vs lr, one line per series; cliff
    brackets shaded."""
    mp = points[points["model"] == model]
    base = mp[mp["series"] == "base"]
    rows = table[table["model"] == model]
    col = colors(rows["label"].tolist())
    fig, axes = plt.subplots(1, 2, figsize=(11, 4.2), sharex=True)
    for ax, key, task in ((axes[0], "L", learn_task), (axes[1], "R", retain_task)):
        if len(base):
            ax.axhline(base[key].mean(), color="black", ls=":", lw=1, label="base")
        for _, row in rows.iterrows():
            s = mp[(mp["series"] == row["series"]) & (mp["epochs"] == row["epochs"])]
            curve = _final_curve(s, base)
            curve = curve[curve["lr"] > 0]
            ax.plot(curve["lr"], curve[key], "-o", ms=4, color=col[row["label"]], label=row["label"])
            _ring_safe(ax, curve, row, "lr", key)
            if row["regime"] == "cliff":
                ax.axvspan(row["critical_lr_low"], row["critical_lr_high"], color=col[row["label"]], alpha=0.08)
        ax.set_xscale("log")
        ax.set_xlabel("learning rate")
        ax.set_ylabel(f"{task} accuracy")
        ax.set_title(f"{model}: {'learning' if key == 'L' else 'retention'} vs lr")
        ax.grid(alpha=0.3)
    axes[1].legend(fontsize=7)
    fig.subplots_adjust(**_MARGINS)
    fig.savefig(path, dpi=DPI)
    plt.close(fig)


def plot_epochs(model: str, points: pd.DataFrame, table: pd.DataFrame, path: str, learn_task: str,
                retain_task: str) -> bool:
    """Retention vs learning per method with one line per epoch count (cliff paper Fig. 7).
    Returns False (and writes nothing) if this model sweeps a single epoch count."""
    rows = table[table["model"] == model]
    methods = [s for s, g in rows.groupby("series", sort=True) if g["epochs"].nunique() > 1]
    if not methods:
        return False
    mp = points[points["model"] == model]
    base = mp[mp["series"] == "base"]
    fig, axes = plt.subplots(1, len(methods), figsize=(4.6 * len(methods), 4.2), squeeze=False)
    cmap = plt.get_cmap("viridis")
    for ax, series in zip(axes[0], methods):
        eps = sorted(rows.loc[rows["series"] == series, "epochs"])
        for k, ep in enumerate(eps):
            s = mp[(mp["series"] == series) & (mp["epochs"] == ep)]
            curve = _final_curve(s, base)
            c = cmap(k / max(len(eps) - 1, 1) * 0.85)
            ax.plot(curve["L"], curve["R"], "-o", ms=4, color=c, label=f"{ep} epoch(s)")
            for _, p in curve[curve["lr"] > 0].iterrows():
                ax.annotate(lr_text(p["lr"]), (p["L"], p["R"]), textcoords="offset points", xytext=(3, 2),
                            fontsize=6, color=c)
        if len(base):
            ax.scatter(base["L"].mean(), base["R"].mean(), marker="*", s=160, color="black", zorder=5)
        ax.set_title(f"{model}: {series}")
        ax.set_xlabel(f"{learn_task} accuracy")
        ax.set_ylabel(f"{retain_task} accuracy")
        ax.grid(alpha=0.3)
        ax.legend(fontsize=7)
    fig.subplots_adjust(**_MARGINS)
    fig.savefig(path, dpi=DPI)
    plt.close(fig)
    return True


def plot_training_curves(model: str, curves: pd.DataFrame, path: str) -> bool:
    """Training loss vs optimizer step, one panel per series x epochs, one line per lr (the
    store's `steps` table). A diverged trial's line is dashed and ends in a red cross at its
    last finite loss. Returns False (and writes nothing) when the model has no curve."""
    rows = curves[curves["model"] == model]
    if rows.empty:
        return False
    panels = sorted(rows.groupby(["series", "epochs"]).groups)
    fig, axes = plt.subplots(1, len(panels), figsize=(4.6 * len(panels), 3.6), squeeze=False, dpi=DPI)
    lrs = sorted(rows["lr"].unique())
    cmap = plt.get_cmap("viridis")
    shade = {lr: cmap(i / max(1, len(lrs) - 1)) for i, lr in enumerate(lrs)}
    for ax, (series, epochs) in zip(axes[0], panels):
        pts = rows[(rows["series"] == series) & (rows["epochs"] == epochs)]
        for (lr, status), g in pts.groupby(["lr", "status"]):
            g = g.sort_values("step")
            ok = g[np.isfinite(g["loss"])]
            diverged = status == "diverged"
            ax.plot(ok["step"], ok["loss"], color=shade[lr], linestyle="--" if diverged else "-", linewidth=1.3,
                    label=f"lr {lr_text(lr)}" + (" (diverged)" if diverged else ""))
            if diverged and len(ok):
                ax.scatter(ok["step"].iloc[-1:], ok["loss"].iloc[-1:], marker="x", color="red", s=60, zorder=5)
        ax.set_title(f"{series}, {epochs} epoch(s)", fontsize=10)
        ax.set_xlabel("optimizer step")
        ax.set_ylabel("training loss")
        ax.legend(fontsize=7, loc="upper right")
    fig.suptitle(f"{model}: training curves (red x: the last finite loss of a diverged trial)", fontsize=10)
    width = 4.6 * len(panels)  # margins in inches, so that one panel keeps its axis labels too
    fig.subplots_adjust(**{**_MARGINS, "left": 0.75 / width, "right": 1 - 0.15 / width, "top": 0.85,
                           "bottom": 0.15, "wspace": 0.3})
    fig.savefig(path)
    plt.close(fig)
    return True
