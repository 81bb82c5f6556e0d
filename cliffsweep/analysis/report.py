"""report.html (self-contained: CSS inline, images as base64, opens offline) and report.md
(links the PNGs written beside it): a header with what was measured, a section per figure of
the cliff paper (analysis/figures.py, analysis/paper_claims.py), then one section per model."""

from __future__ import annotations

import base64
import html
import os
import re
from dataclasses import dataclass, field

import matplotlib.pyplot as plt
import numpy as np
import pandas as pd

from cliffsweep.analysis import figures, plots
from cliffsweep.analysis.classify import Thresholds, why_readings_differ
from cliffsweep.analysis.paper_claims import main_epochs, sweep_counts
from cliffsweep.analysis.layout import lr_text
from cliffsweep.analysis.paper_tables import paper_tables
from cliffsweep.sweep.grid import SERIES_KEY

# (column, header). Units: lrs as 3e-4 (as in the plots), shares of base retention or of the
# headroom as %, accuracies and accuracy differences in points of 0-1 with 3 decimals.
TABLE_COLUMNS = [("label", "series"), ("regime_paper", "paper's reading"),
                 ("regime_text", "our reading (bootstrap agreement)"), ("differ", "why the readings differ"),
                 ("cliff_bracket", "cliff: last lr before the collapse -> first collapsed"),
                 ("drop_at_cliff", "R lost at cliff (% of base R)"), ("learned_before_cliff", "learned before cliff (% headroom)"),
                 ("safe", "highest safe lr -> next (forgets)"), ("learn_at_max_safe_lr", "L gain at safe lr"),
                 ("within_noise", "decided by noise (every item scored)"),
                 ("max_forgetting", "max R lost (% of base R)"), ("max_learning", "max L gain"),
                 ("frontier_area", "frontier area"), ("model_pareto_share", "share of model frontier"),
                 ("dominated_by", "dominated by"), ("n_points", "points")]
REFINE_COLUMNS = [("label", "series"), ("n_grid_lrs", "grid lrs"), ("n_refined_lrs", "refined lrs"),
                  ("grid_regime", "regime on the grid"), ("regime", "regime refined (point estimate)"),
                  ("grid_safe", "safe-lr bracket on the grid"), ("safe", "safe-lr bracket refined"),
                  ("grid_transition", "cliff / unresolved bracket on the grid"),
                  ("transition", "cliff / unresolved bracket refined")]
_PERCENT = {"drop_at_cliff", "learned_before_cliff", "max_forgetting", "model_pareto_share", "share",
            "share_dominating_sft", "share_dominated_by_sft", "confidence", "eig_ratio", "grad_sq_ratio"}
_LR = {"critical_lr_low", "critical_lr_high", "max_safe_lr", "max_safe_lr_next", "lr"}

DEFINITIONS = """\
A series is one model x method (x epochs) across learning rates, plus the base model (lr = 0).
Retention R is judged as a share of the base R, learning L against the series' learning span.

- **cliff**: lrs first keep retention, then within one lr factor of cliff_lr_ratio retention
  collapses by cliff_drop of base R with no learning gain (cliff paper, Fig. 4);
- **gradual**: a trade-off: R falls progressively as L rises beyond noise, no single step
  collapses without learning (Fig. 3, where a method such as SIB can help);
- **forgetting**: R falls, but the lrs that forget learned no more than the lrs that keep R,
  beyond noise_z standard errors of the learn task's items: forgetting with nothing bought by it
  (no trade-off to move; a slow decline, or a collapse wider than one step);
- **no_forgetting**: R never falls meaningfully within the swept lrs;
- **inconclusive**: too few points, a collapse over a grid step too wide to tell (refine it), or
  bootstrap replicates disagree (the point estimate and its agreement are shown).

The paper's reading asks more of a cliff: small lrs learn with minimal forgetting, then the
collapse, with no further learning. A cliff whose last lr before the collapse gained less than
paper_min_learning of the headroom 1 - L0 reads there as **collapse_without_learning**; one whose
safe side had already lost forget_min of base R as **forgot_before_cliff**; one with no trained lr a
transition width (cliff_lr_ratio) below the collapse, so that its small lrs are unmeasured, as
**unmeasured_before_cliff**; one whose higher lrs still learn more than the safe side's best, by
more than noise_z standard errors of the learn task's items (without item counts: by more than
max_gain_share of the safe side's own learning), as **learned_after_cliff**. Where the runs at a
cliff's bracket disagree about its collapse beyond their noise, it is no cliff in either reading.
Both readings are reported and counted; the report leads with the paper's, and where ours differs
the series table says why. Method effects by SFT's regime use the paper's reading.
Highest safe lr: the highest trained lr keeping >= 1 - forget_min of base R (green ring); the next
trained lr forgets, so the answer lies between the two. Where every item leaves a decision within
noise_z standard errors of its cut (the safe lr's share, a cliff's drop), the series table says
so in words ("decided by noise"): the verdict's pick there is noise's, not a measurement.

Points are seed means; bars are 5-95 % bootstrap intervals (examples resampled). Confidence = share
of bootstrap replicates that re-classify the same; where an lr has several training runs, each
replicate draws the runs, then their examples (confidence over "runs and items"); a cliff whose
bracket has one run per lr reads **cliff (one run)**: its confidence saw the items only.
Frontier area: area dominated by the series in (L gain / headroom, R / base R), 1 = full
learning, no forgetting. Pareto frontiers use every checkpoint (final and intermediate;
intermediate ones are hollow in the plots)."""


@dataclass
class Section:
    title: str
    text: str = ""
    tables: list[tuple[str, pd.DataFrame, list[tuple[str, str]]]] = field(default_factory=list)
    figures: list[tuple[str, str]] = field(default_factory=list)
    """(caption, PNG file name in the output folder)."""
    level: int = 2


ZERO = 1e-12
"""Below this a table's number is float rounding of 0 (a difference of equal means summed in
another order), printed as 0: the BLAS of one machine wrote 3.08e-16 where another wrote -1.92e-15."""


def _fmt(value, col: str) -> str:
    if isinstance(value, (list, tuple, np.ndarray)):
        return ", ".join(map(str, value)) or "-"
    if value is None or (isinstance(value, float) and not np.isfinite(value)) or value is pd.NA:
        return "-"
    if isinstance(value, (bool, np.bool_)):
        return "yes" if value else "no"
    if col in _LR:
        return lr_text(float(value))
    if col in _PERCENT:
        return f"{value:.0%}"
    if isinstance(value, (float, np.floating)):
        if abs(value) < ZERO:
            return "0.000"  # zero within float rounding: a user reads 0, never -1.92e-15 (issue 60 part 7)
        return f"{value:.3g}" if abs(value) >= 100 or abs(value) < 1e-3 else f"{value:.3f}"
    return str(value)


def bracket_text(lo: float, hi: float) -> str:
    """'3e-4 -> 1e-3 (3.3x)'; '-' for no bracket, '< 1e-4' / '>= 1e-2' for open ones."""
    lo_ok, hi_ok = np.isfinite(lo), np.isfinite(hi)
    if lo_ok and hi_ok:
        return f"{lr_text(lo)} -> {lr_text(hi)} ({hi / lo:.2g}x)"
    return f">= {lr_text(lo)}" if lo_ok else f"< {lr_text(hi)}" if hi_ok else "-"


def series_rows(rows: pd.DataFrame) -> pd.DataFrame:
    """The frontiers rows with the report's text columns (regime, brackets)."""
    out = rows.copy()
    out["regime_text"] = [figures.regime_text(r) for _, r in out.iterrows()]
    out["differ"] = [why_readings_differ(r.regime, r.regime_paper, r.learned_before_cliff, r.kept_before_cliff,
                                         r.learned_after_cliff) for r in out.itertuples()]
    out["cliff_bracket"] = [bracket_text(a, b) for a, b in zip(out["critical_lr_low"], out["critical_lr_high"])]
    out["safe"] = [bracket_text(a, b) for a, b in zip(out["max_safe_lr"], out["max_safe_lr_next"])]
    return out


def refinement_rows(table: pd.DataFrame, labels: pd.DataFrame) -> pd.DataFrame:
    """The refinement table (analysis/refinement_gain.py) with brackets as text and plot labels."""
    out = table.merge(labels[[*SERIES_KEY, "label"]], on=SERIES_KEY, how="left")
    for pre in ("grid_", ""):
        out[f"{pre}safe"] = [bracket_text(a, b) for a, b in zip(out[f"{pre}max_safe_lr"], out[f"{pre}max_safe_lr_next"])]
        out[f"{pre}transition"] = [bracket_text(a, b) for a, b in zip(out[f"{pre}transition_low"],
                                                                       out[f"{pre}transition_high"])]
    return out


def _summary(rows: pd.DataFrame) -> str:
    """One line per model: base accuracies, regimes counted in the paper's reading (ours beside it
    where they differ), the leading series on the model frontier."""
    counts = rows["regime_paper"].value_counts().to_dict()
    ours = rows.loc[rows["regime"] != rows["regime_paper"], "regime"].value_counts().to_dict()
    lead = rows.sort_values("model_pareto_share", ascending=False)
    lead = lead[lead["model_pareto_share"] > 0]
    leaders = ", ".join(f"{r.label} ({r.model_pareto_share:.0%})" for r in lead.itertuples())
    regimes = ", ".join(f"{k}: {v}" for k, v in sorted(counts.items()))
    if ours:
        regimes += " (our reading: " + ", ".join(f"{k}: {v}" for k, v in sorted(ours.items())) + " of these)"
    r = rows.iloc[0]
    base = f"Base model: L = {r['base_L']:.3f}, R = {r['base_R']:.3f}. " if np.isfinite(r["base_L"]) else ""
    return (f"{base}Regimes, in the paper's reading: {regimes}. Points on the model's Pareto frontier by series: "
            f"{leaders or 'none'}.")


def _save(fig, out_dir: str, name: str) -> str | None:
    if fig is None:
        return None
    fig.savefig(os.path.join(out_dir, name), dpi=plots.DPI)
    plt.close(fig)
    return name


def _cols(*names: str) -> list[tuple[str, str]]:
    return [(n, n.replace("_", " ")) for n in names]


def paper_sections(table, points, paper: dict, out_dir: str, learn: str, retain: str) -> list[Section]:
    """One section per figure of the cliff paper, each with its figure and the table it is drawn
    from (docs/analysis.md maps figure -> section -> table)."""
    spread, gains = paper["point_spread"], paper["matched_gain"]
    ep = main_epochs(table)
    secs = []
    curv = paper["curvature"]
    f2 = _save(figures.fig_curvature(curv), out_dir, "paper_fig2_curvature.png")
    secs.append(Section("Fig. 2: SIB flattens the retain loss", "Top Hessian eigenvalues of the retain loss by "
                        "magnitude (Lanczos on Hessian-vector products) and squared gradient norms, at the base "
                        "weights and after SIB's function-preserving rescale; measured once per model with SIB's "
                        "statistics. Table: curvature.parquet." if len(curv) else "No SIB statistics with a Hessian "
                        "spectrum in the store(s): run SIB (hessian_top_k > 0, the default) to measure it.",
                        [("", curv, _cols("model", "k", "eig_base", "eig_sib", "eig_ratio", "grad_sq_ratio"))]
                        if len(curv) else [], [("Fig. 2", f2)] if f2 else []))
    counts = paper["regime_counts"]
    allm = counts[counts["method"] == "all"]
    secs.append(Section("Fig. 3-4: the two regimes", f"SFT at {ep} epochs, one panel per model, ordered by regime. "
                        "Regimes over the whole grid, in our reading and the paper's (table: regime_counts.parquet).",
                        [("", allm, _cols("view", "regime", "n_series", "share", "n_models"))],
                        [("Fig. 3-4", f)] if (f := _save(figures.fig_regimes(points, table, spread, learn, retain),
                                                         out_dir, "paper_fig34_regimes.png")) else []))
    gain_cols = _cols("model", "label", "sft_regime", "regime", "n_matched", "gain_max", "gain_max_lo", "gain_max_hi",
                      "L_at_gain_max", "learning_over_sft", "dominates_sft")
    for name, methods, fname, what in (("Fig. 5: SFT vs SIB", ("sib",), "paper_fig5_sib.png", "SIB"),
                                       ("Fig. 6: continual-learning methods", None, "paper_fig6_cl.png",
                                        "the continual-learning methods"),
                                       ("Fig. 8: LoRA vs full finetuning", ("lora",), "paper_fig8_lora.png", "LoRA")):
        f = _save(figures.fig_compare(points, table, spread, gains, methods, name, learn, retain), out_dir, fname)
        g = gains[gains["epochs"] == ep]
        g = g[g["method"].isin(methods)] if methods else g[~g["method"].isin(figures.OWN_FIGURES)]
        tables = [(f"Retention gain over SFT at matched learning ({ep} epochs; matched_gain.parquet): gain_max = "
                   "largest R - R_SFT(L) over the method's lrs that learn no more than SFT, with its 5-95 % "
                   "bootstrap interval", g, gain_cols)] if len(g) else []
        if methods is None and len(paper["by_sft_regime"]):
            tables.append(("Method effects by SFT's regime, every epoch count (by_sft_regime.parquet)",
                           paper["by_sft_regime"], _cols("sft_regime", "method", "n_series", "share_dominating_sft",
                                                        "share_dominated_by_sft", "mean_gain_max",
                                                        "mean_learning_over_sft")))
        secs.append(Section(name, f"{what} against SFT, every model, {ep} epochs." if f else
                            f"No {what} series in the store(s).", tables, [(name, f)] if f else []))
    eff = paper["epochs_effect"]
    f7 = _save(figures.fig_epochs(table, eff), out_dir, "paper_fig7_epochs.png")
    ecols = _cols("model", "label", "epochs", "regime", "regime_paper", "critical_lr_high", "max_safe_lr",
                  "critical_lr_slope", "max_safe_lr_slope")
    secs.append(Section("Fig. 7: epochs", "Slopes: d log10 lr / d log10 epochs (< 0: more epochs move it to lower "
                        "lrs). Table: epochs_effect.parquet." if f7 else "One epoch count swept: no epochs figure.",
                        [("", eff, ecols)] if f7 else [], [("Fig. 7", f7)] if f7 else []))
    size = paper["size_effect"]
    f9 = _save(figures.fig_size(size), out_dir, "paper_fig9_size.png")
    secs.append(Section("Fig. 9: model size and family", f"SFT at {ep} epochs per model (size_effect.parquet). "
                        "Steepness = the largest share of base retention lost per decade of lr; "
                        "family_steepness_vs_size = Spearman rank correlation within a family (3+ sizes).",
                        [("", size, _cols("model", "family", "size_b", "regime", "regime_paper", "critical_lr_high",
                                          "max_safe_lr", "steepness", "frontier_area", "max_learning", "base_L",
                                          "base_R", "family_steepness_vs_size"))], [("Fig. 9", f9)] if f9 else []))
    if len(paper["optimizers"]):
        secs.append(Section("001: SFT under other optimizers", "SFT with each other optimizer against SFT's own "
                            "series at the same model and epochs (optimizers.parquet): retention gain at matched "
                            "learning (gain_max, 5-95 % interval), learning over it, Pareto dominance both ways.",
                            [("", paper["optimizers"], _cols("model", "epochs", "series", "reference", "sft_regime",
                                                              "regime", "gain_max", "gain_max_lo", "gain_max_hi",
                                                              "learning_over_sft", "dominates_sft",
                                                              "dominated_by_sft"))]))
    if len(paper.get("forgetting_order", ())):
        secs.append(Section("001: the methods' forgetting order under each optimizer", "Per model and epochs, the "
                            "methods ordered by frontier area (the larger, the less forgotten at matched learning) "
                            "under each optimizer, and Kendall's tau against the reference optimizer's order "
                            "(1 = the same order; forgetting_order.parquet).",
                            [("", paper["forgetting_order"], _cols("model", "epochs", "optimizer", "order", "reference",
                                                                    "kendall_tau", "same_order"))]))
    secs.append(Section("Sec. 3: learning and retention are uncorrelated", "Correlation of learn and retain "
                        "accuracy across the base models and across each model's checkpoints "
                        "(task_correlation.parquet).", [("", paper["task_correlation"],
                                                         _cols("scope", "model", "n", "pearson", "spearman"))]))
    return secs


def model_sections(table, points, spread, out_dir, learn, retain, curves, refinement) -> list[Section]:
    secs = []
    refined = refinement_rows(refinement, table) if refinement is not None and len(refinement) else None
    cols = TABLE_COLUMNS + ([("n_refined_lrs", "refined lrs")] if (table["n_refined_lrs"] > 0).any() else [])
    for model in sorted(table["model"].unique()):
        slug = re.sub(r"[^A-Za-z0-9_.-]+", "_", model)
        rows = table[table["model"] == model]
        figs = [(f"{model}: retention vs learning, one panel per epoch count",
                 _save(figures.fig_model(points, table, spread, model, learn, retain), out_dir, f"frontier_{slug}.png"))]
        plots.plot_vs_lr(model, points, table, os.path.join(out_dir, f"vs_lr_{slug}.png"), learn, retain)
        figs.append((f"{model}: learning and retention vs lr", f"vs_lr_{slug}.png"))
        if curves is not None and plots.plot_training_curves(model, curves, os.path.join(out_dir, f"training_{slug}.png")):
            figs.append((f"{model}: training curves", f"training_{slug}.png"))
        secs.append(Section(model, _summary(rows), [("", series_rows(rows), cols)], figs))
        ref = refined[refined["model"] == model] if refined is not None else ()
        if len(ref):
            secs.append(Section(f"{model}: brackets on the grid (round 0) and after the refinement rounds",
                                tables=[("", ref, REFINE_COLUMNS)], level=3))
    return secs


SUITE_TABLE = [("label", "series"), ("task", "retain task"), ("regime", "regime (its own)"), ("confidence", "agreement"),
               ("cliff_bracket", "cliff: last lr before the collapse -> first collapsed"), ("safe", "highest safe lr -> next (forgets)"),
               ("max_forgetting", "max R lost (% of its base)"), ("base_R", "base"), ("first", "falls first")]


def suite_sections(table, points, per_task: pd.DataFrame, out_dir: str) -> list[Section]:
    """A retention suite (issue 30 part 3): per model, each task's regime beside the aggregate's,
    the task that falls first per series, and retention vs lr per task."""
    tasks = list(dict.fromkeys(per_task["task"]))
    out = per_task.copy()
    out["cliff_bracket"] = [bracket_text(a, b) for a, b in zip(out["critical_lr_low"], out["critical_lr_high"])]
    out["safe"] = [bracket_text(a, b) for a, b in zip(out["max_safe_lr"], out["max_safe_lr_next"])]
    out["first"] = np.where(out["first_to_fall"], "first, at lr " + out["falls_at"].map(lr_text), "")
    text = (f"R is the suite's aggregate of {len(tasks)} retain tasks ({', '.join(tasks)}); the regimes, "
            "confidence and lrs above are read on it. Here each task is read on its own (suite.parquet); a task "
            "falls at its first collapsed lr (a cliff) or the lr after its highest safe lr, and the task that "
            "falls at the lowest lr of a series falls first.")
    secs = [Section("Retention suite: each task beside the aggregate", text)]
    for model in sorted(out["model"].unique()):
        slug = re.sub(r"[^A-Za-z0-9_.-]+", "_", model)
        name = f"suite_{slug}.png"
        plots.plot_suite(model, points, table, per_task, tasks, os.path.join(out_dir, name))
        agg = table[table["model"] == model][["label", "regime"]].rename(columns={"regime": "aggregate"})
        rows = out[out["model"] == model].merge(agg, on="label", how="left")
        secs.append(Section(f"{model}: retention per task", tables=[("", rows, [*SUITE_TABLE[:1], ("aggregate", "aggregate regime"),
                                                                               *SUITE_TABLE[1:]])],
                            figures=[(f"{model}: retention per task vs lr", name)], level=3))
    return secs


def _md_table(rows: pd.DataFrame, columns) -> str:
    head = "| " + " | ".join(h for _, h in columns) + " |\n|" + "---|" * len(columns) + "\n"
    body = "".join("| " + " | ".join(_fmt(r[c], c).replace("|", "/") for c, _ in columns) + " |\n"
                   for _, r in rows.iterrows())
    return head + body


def _html_table(rows: pd.DataFrame, columns) -> str:
    head = "".join(f"<th>{html.escape(h)}</th>" for _, h in columns)
    body = "".join("<tr>" + "".join(f"<td class='{c}'>{html.escape(_fmt(r[c], c))}</td>" for c, _ in columns)
                   + "</tr>" for _, r in rows.iterrows())
    return f"<div class='scroll'><table><thead><tr>{head}</tr></thead><tbody>{body}</tbody></table></div>"


def _html_text(text: str) -> str:
    """Markdown paragraphs, one bullet list and **bold** as HTML."""
    out = []
    for para in text.split("\n\n"):
        t = re.sub(r"\*\*(.+?)\*\*", r"<b>\1</b>", html.escape(para.replace("\n  ", " ")))
        if t.startswith("- "):
            out.append("<ul>" + "".join(f"<li>{x[2:]}</li>" for x in t.splitlines()) + "</ul>")
        else:
            out.append(f"<p>{t}</p>")
    return "".join(out)


def _render(secs: list[Section], out_dir: str) -> tuple[str, str]:
    md, body = [], []
    for s in secs:
        h = "#" * s.level
        md.append(f"{h} {s.title}\n\n{s.text}\n")
        body.append(f"<h{s.level}>{html.escape(s.title)}</h{s.level}>{_html_text(s.text) if s.text else ''}")
        for cap, df, cols in s.tables:
            md.append((f"{cap}\n\n" if cap else "") + _md_table(df, cols))
            body.append((f"<p class='cap'>{html.escape(cap)}</p>" if cap else "") + _html_table(df, cols))
        for cap, fn in s.figures:
            md.append(f"![{cap}]({fn})\n")
            with open(os.path.join(out_dir, fn), "rb") as f:
                data = base64.b64encode(f.read()).decode()
            body.append(f"<figure><img alt='{html.escape(cap)}' src='data:image/png;base64,{data}'>"
                        f"<figcaption>{html.escape(cap)}</figcaption></figure>")
    return "\n".join(md), _HTML.format(body="\n".join(body))


def header(store_uri: str, counts: dict, params: str, models: pd.DataFrame | None) -> str:
    """What was measured: stores, models with family and size, seeds, eval sizes, trials."""
    trials = ", ".join(f"{k} {v}" for k, v in counts.get("trials", {}).items()) or "no trials rows"
    known = models.dropna(subset=["size_b"]) if models is not None else pd.DataFrame()
    fam = ", ".join(f"{r.model} ({r.family}, {r.size_b:.3g}B)" for r in known.itertuples())
    unknown = (len(models) - len(known)) if models is not None else 0
    return (f"Stores: {store_uri}.\n\n{counts['models']} model(s), {counts['series']} series, seeds "
            f"{counts['seeds']}, learn-task eval size(s) {counts['n_learn']}, retain-task eval size(s) "
            f"{counts['n_retain']}; trials by status: {trials}; {counts['checkpoints']} evaluated checkpoints "
            f"({counts['final_checkpoints']} final).\n\nModels: {fam or '-'}"
            + (f"; {unknown} without a known size" if unknown else "") + f".\n\n{params}.")


def write_report(table: pd.DataFrame, points: pd.DataFrame, out_dir: str, *, store_uri: str, learn_task: str,
                 retain_task: str, thresholds: Thresholds, min_confidence: float, n_boot: int,
                 notes: list[str], refinement: pd.DataFrame | None = None, curves: pd.DataFrame | None = None,
                 paper: dict | None = None, counts: dict | None = None, models: pd.DataFrame | None = None
                 ) -> tuple[str, str]:
    """Write the PNGs, report.md and report.html into ``out_dir``; return the two report paths.
    ``paper``: analysis/run.paper_tables (the paper's sections); ``refinement``:
    analysis/refinement_gain.py's table (a before / after table per refined model)."""
    os.makedirs(out_dir, exist_ok=True)
    paper = paper if paper is not None else paper_tables(points, table, None, [])
    counts = counts or sweep_counts(points, None)
    params = (f"Learn task {learn_task}, retain task {retain_task}; thresholds "
              + ", ".join(f"{k}={v}" for k, v in thresholds.model_dump().items())
              + f"; min_confidence={min_confidence}; bootstrap replicates={n_boot}")
    secs = [Section("cliffsweep report", header(store_uri, counts, params, models), level=1),
            Section("Definitions", DEFINITIONS)]
    if notes:
        secs.append(Section("Notes", "\n".join(f"- {n}" for n in notes)))
    secs.append(Section("The cliff paper's figures", "Each section reproduces one figure or claim of the cliff "
                        "paper (seed 000) from these stores; docs/analysis.md maps them."))
    secs += [Section(s.title, s.text, s.tables, s.figures, level=3)
             for s in paper_sections(table, points, paper, out_dir, learn_task, retain_task)]
    secs += model_sections(table, points, paper["point_spread"], out_dir, learn_task, retain_task, curves, refinement)
    if paper.get("suite") is not None:
        secs += suite_sections(table, points, paper["suite"], out_dir)
    md, page = _render(secs, out_dir)
    md_path, html_path = os.path.join(out_dir, "report.md"), os.path.join(out_dir, "report.html")
    with open(md_path, "w") as f:
        f.write(md)
    with open(html_path, "w") as f:
        f.write(page)
    return md_path, html_path


_HTML = """<!doctype html>
<html lang="en"><head><meta charset="utf-8"><title>cliffsweep report</title>
<style>
body {{ font-family: sans-serif; margin: 24px; color: #222; max-width: 1800px; }}
div.scroll {{ overflow-x: auto; }}
table {{ border-collapse: collapse; font-size: 12px; margin: 8px 0 16px; }}
th, td {{ border: 1px solid #ccc; padding: 3px 6px; text-align: left; }}
th {{ background: #f2f2f2; }}
td.regime_text {{ font-weight: bold; }}
p.cap {{ font-size: 12px; color: #555; margin-bottom: 2px; }}
figure {{ margin: 12px 0; }}
img {{ max-width: 100%; border: 1px solid #eee; }}
</style></head><body>
{body}
</body></html>
"""
