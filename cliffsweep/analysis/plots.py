"""Per-model report figures (matplotlib, Agg): learning and retention vs lr, and the training
curves. The paper's figures are in analysis/figures.py."""

from __future__ import annotations

import matplotlib

matplotlib.use("Agg")  # files only; never needs a display

import matplotlib.pyplot as plt  # noqa: E402
import numpy as np  # noqa: E402
import pandas as pd  # noqa: E402

from cliffsweep.analysis.classify import lr_curve  # noqa: E402

DPI = 110
# Fixed margins instead of tight_layout, which measures every text box and was most of the
# report's plotting time on a 2-core machine.
_MARGINS = dict(left=0.08, right=0.98, top=0.92, bottom=0.11, wspace=0.22)


from cliffsweep.analysis.layout import CLIFF_RED, SAFE_GREEN, lr_text, series_style  # noqa: E402
from cliffsweep.sweep.status import TrialStatus
from cliffsweep.analysis.regimes import CLIFF
from cliffsweep.sweep.grid import is_base


def _final_curve(series_pts: pd.DataFrame, base: pd.DataFrame) -> pd.DataFrame:
    return lr_curve(pd.concat([base, series_pts[series_pts["classified"]]]))


_SAFE_RING = dict(s=130, facecolors="none", edgecolors=SAFE_GREEN, linewidths=1.6, zorder=6)


def _ring_safe(ax, curve: pd.DataFrame, row: pd.Series, x: str, y: str) -> None:
    """Ring the series' highest safe lr (frontiers column max_safe_lr), if it has one."""
    at = curve[curve["lr"] == row["max_safe_lr"]]
    if len(at):
        ax.scatter(at[x], at[y], **_SAFE_RING)


def plot_vs_lr(model: str, points: pd.DataFrame, table: pd.DataFrame, path: str, learn_task: str,
               retain_task: str) -> None:
    """Learning and retention of the final checkpoints vs lr, one line per series; cliff
    brackets shaded."""
    mp = points[points["model"] == model]
    base = mp[is_base(mp)]
    rows = table[table["model"] == model]
    style = series_style(sorted(zip(rows["method"], rows["label"]), key=lambda x: (x[0] != "sft", x[1])))
    fig, axes = plt.subplots(1, 2, figsize=(11, 4.6), sharex=True)
    for ax, key, task in ((axes[0], "L", learn_task), (axes[1], "R", retain_task)):
        if len(base):
            ax.axhline(base[key].mean(), color="black", ls=":", lw=1, label="base")
        for _, row in rows.iterrows():
            s = mp[(mp["series"] == row["series"]) & (mp["epochs"] == row["epochs"])]
            curve = _final_curve(s, base)
            curve = curve[curve["lr"] > 0]
            st = style[row["label"]]
            ax.plot(curve["lr"], curve[key], "-", marker=st["marker"], ms=4, color=st["color"], label=row["label"])
            _ring_safe(ax, curve, row, "lr", key)
            if row["regime"] == CLIFF:
                ax.axvspan(row["critical_lr_low"], row["critical_lr_high"], color=CLIFF_RED, alpha=0.06)
        ax.set_xscale("log")
        ax.set_xlabel("learning rate")
        ax.set_ylabel(f"{task} accuracy")
        ax.set_title(f"{model}: {'learning' if key == 'L' else 'retention'} vs lr")
        ax.grid(alpha=0.3)
    axes[1].scatter([], [], **_SAFE_RING, label="highest safe lr")
    axes[1].axvspan(np.nan, np.nan, color=CLIFF_RED, alpha=0.15, label="cliff bracket (the last lr before the collapse -> the first collapsed; not the highest safe lr)")
    handles, labels = axes[1].get_legend_handles_labels()
    fig.legend(handles, labels, loc="lower center", ncol=min(len(labels), 5), fontsize=7, frameon=False)
    fig.subplots_adjust(**{**_MARGINS, "bottom": 0.11 + 0.05 * (1 + len(labels) // 5)})
    fig.savefig(path, dpi=DPI)
    plt.close(fig)


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
            diverged = status == TrialStatus.DIVERGED
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


def plot_suite(model: str, points: pd.DataFrame, table: pd.DataFrame, per_task: pd.DataFrame, tasks: list[str],
               path: str) -> None:
    """A retention suite (issue 30 part 3): each task's retention as a share of its base vs lr,
    one panel per task and one for the aggregate, one line per series; each task's own cliff
    bracket shaded and the task that falls first marked in its panel title per series."""
    from cliffsweep.analysis.suite import task_column

    mp = points[points["model"] == model]
    base = mp[is_base(mp)]
    rows = table[table["model"] == model]
    style = series_style(sorted(zip(rows["method"], rows["label"]), key=lambda x: (x[0] != "sft", x[1])))
    panels = [("R", "aggregate")] + [(task_column(t), t) for t in tasks]
    fig, axes = plt.subplots(1, len(panels), figsize=(3.6 * len(panels) + 1, 3.8), sharex=True, sharey=True,
                             squeeze=False)  # one scale: a task that loses 3 % must not look like one that loses 90 %
    for ax, (col, name) in zip(axes[0], panels):
        ref = base[col].mean()
        for _, row in rows.iterrows():
            s = mp[(mp["series"] == row["series"]) & (mp["epochs"] == row["epochs"])]
            curve = _final_curve(s.assign(R=s[col]), base.assign(R=base[col]))
            curve = curve[curve["lr"] > 0]
            st = style[row["label"]]
            ax.plot(curve["lr"], curve["R"] / ref, "-", marker=st["marker"], ms=4, color=st["color"], label=row["label"])
            mine = per_task[(per_task["model"] == model) & (per_task["series"] == row["series"])
                            & (per_task["epochs"] == row["epochs"]) & (per_task["task"] == name)]
            for r in mine.itertuples():
                if r.regime == CLIFF:
                    ax.axvspan(r.critical_lr_low, r.critical_lr_high, color=CLIFF_RED, alpha=0.06)
        first = per_task[(per_task["model"] == model) & (per_task["task"] == name) & per_task["first_to_fall"]]
        ax.axhline(1.0, color="black", ls=":", lw=1)
        ax.set_xscale("log")
        ax.set_xlabel("learning rate")
        ax.set_title(f"{name}" + (f"\nfalls first in {len(first)} series" if len(first) else ""), fontsize=9)
        ax.grid(alpha=0.3)
    axes[0][0].set_ylabel("retention, share of base")
    handles, labels = axes[0][0].get_legend_handles_labels()
    fig.legend(handles, labels, loc="lower center", ncol=min(len(labels), 5), fontsize=7, frameon=False)
    fig.suptitle(f"{model}: retention suite per task (shaded: a task's own cliff bracket)", fontsize=10)
    fig.subplots_adjust(**{**_MARGINS, "top": 0.8, "bottom": 0.16 + 0.05 * (1 + len(labels) // 5)})
    fig.savefig(path, dpi=DPI)
    plt.close(fig)
