"""report.html (self-contained: CSS inline, images as base64, opens offline) and report.md
(links the PNGs written beside it) from a frontiers table and its points."""

from __future__ import annotations

import base64
import html
import os
import re

import numpy as np
import pandas as pd

from cliffsweep.analysis import plots
from cliffsweep.analysis.classify import Thresholds

TABLE_COLUMNS = [("label", "series"), ("regime", "regime"), ("confidence", "confidence"),
                 ("critical_lr_low", "cliff lr low"), ("critical_lr_high", "cliff lr high"),
                 ("drop_at_cliff", "R lost at cliff (share of base)"), ("gain_at_cliff", "L gain at cliff"),
                 ("max_safe_lr", "max safe lr"), ("max_safe_lr_next", "next lr (forgets)"),
                 ("learn_at_max_safe_lr", "L gain at max safe lr"), ("max_safe_lr_confidence", "safe lr confidence"),
                 ("max_forgetting", "max R lost (share)"), ("max_learning", "max L gain"),
                 ("frontier_area", "frontier area"), ("model_pareto_share", "share of model frontier"),
                 ("dominated_by", "dominated by"), ("n_points", "points"), ("n_refined_lrs", "refined lrs"),
                 ("reason", "why")]
REFINE_COLUMNS = [("label", "series"), ("n_grid_lrs", "grid lrs"), ("n_refined_lrs", "refined lrs"),
                  ("grid_regime", "regime on the grid"), ("regime", "regime refined (point estimate)"),
                  ("grid_safe", "safe-lr bracket on the grid"), ("safe", "safe-lr bracket refined"),
                  ("grid_transition", "cliff / unresolved bracket on the grid"),
                  ("transition", "cliff / unresolved bracket refined")]

DEFINITIONS = """\
A series is one model x method (x epochs) across learning rates, plus the base model (lr = 0).
Retention R is judged as a share of the base R, learning L against the series' learning span.

- **cliff**: lrs first learn without forgetting, then one lr step loses a large share of base R
  with no learning gain (cliff paper, Fig. 4);
- **gradual**: R falls progressively as L rises, no single step collapses without learning (Fig. 3);
- **no_forgetting**: R never falls meaningfully within the swept lrs;
- **inconclusive**: too few points, a collapse over a grid step too wide to tell (refine it), or
  bootstrap replicates disagree (confidence below the minimum).

A cliff is judged over an lr factor, not a grid step: a loss of cliff_drop of base R between two
trained lrs at most cliff_lr_ratio apart (lrs between them belong to the collapse).
Max safe lr: the highest trained lr keeping >= 1 - forget_min of base R (marked with a green ring in
the plots); the next trained lr forgets, so the answer lies between the two.

Confidence = share of bootstrap replicates (examples resampled, re-scored, re-classified) that agree.
Frontier area: area dominated by the series in (L gain / headroom, R / base R), 1 = full learning, no
forgetting. Pareto frontiers use every checkpoint (final and intermediate)."""


def _fmt(value, col: str) -> str:
    if isinstance(value, (list, tuple, np.ndarray)):
        return ", ".join(map(str, value)) or "-"
    if value is None or (isinstance(value, float) and not np.isfinite(value)):
        return "-"
    if col.startswith("critical_lr") or col in ("max_safe_lr", "max_safe_lr_next"):
        return f"{value:g}"
    if col in ("confidence", "drop_at_cliff", "max_forgetting", "model_pareto_share", "max_safe_lr_confidence"):
        return f"{value:.0%}"
    if isinstance(value, float):
        return f"{value:.3f}"
    return str(value)


def _definitions_html() -> str:
    """DEFINITIONS (markdown paragraphs and one bullet list) as HTML."""
    out = []
    for para in DEFINITIONS.split("\n\n"):
        text = re.sub(r"\*\*(.+?)\*\*", r"<b>\1</b>", html.escape(para.replace("\n  ", " ")))
        if text.startswith("- "):
            out.append("<ul>" + "".join(f"<li>{x[2:]}</li>" for x in text.splitlines()) + "</ul>")
        else:
            out.append(f"<p>{text}</p>")
    return "".join(out)


def _slug(text: str) -> str:
    return re.sub(r"[^A-Za-z0-9_.-]+", "_", text)


def write_figures(table: pd.DataFrame, points: pd.DataFrame, out_dir: str, learn_task: str,
                  retain_task: str, curves: pd.DataFrame | None = None) -> dict[str, list[tuple[str, str]]]:
    """PNG files per model: {model: [(caption, filename), ...]}."""
    figs: dict[str, list[tuple[str, str]]] = {}
    for model in sorted(table["model"].unique()):
        slug = _slug(model)
        names = [(f"{model}: retention vs learning", f"frontier_{slug}.png"),
                 (f"{model}: learning and retention vs lr", f"vs_lr_{slug}.png")]
        plots.plot_frontier(model, points, table, os.path.join(out_dir, names[0][1]), learn_task, retain_task)
        plots.plot_vs_lr(model, points, table, os.path.join(out_dir, names[1][1]), learn_task, retain_task)
        ep = (f"{model}: effect of epochs", f"epochs_{slug}.png")
        if plots.plot_epochs(model, points, table, os.path.join(out_dir, ep[1]), learn_task, retain_task):
            names.append(ep)
        tc = (f"{model}: training curves", f"training_{slug}.png")
        if curves is not None and plots.plot_training_curves(model, curves, os.path.join(out_dir, tc[1])):
            names.append(tc)
        figs[model] = names
    return figs


def _md_table(rows: pd.DataFrame, columns=TABLE_COLUMNS) -> str:
    head = "| " + " | ".join(h for _, h in columns) + " |\n|" + "---|" * len(columns) + "\n"
    body = "".join("| " + " | ".join(_fmt(r[c], c).replace("|", "/") for c, _ in columns) + " |\n"
                   for _, r in rows.iterrows())
    return head + body


def _html_table(rows: pd.DataFrame, columns=TABLE_COLUMNS) -> str:
    head = "".join(f"<th>{html.escape(h)}</th>" for _, h in columns)
    body = "".join("<tr>" + "".join(f"<td class='{c}'>{html.escape(_fmt(r[c], c))}</td>" for c, _ in columns)
                   + "</tr>" for _, r in rows.iterrows())
    return f"<table><thead><tr>{head}</tr></thead><tbody>{body}</tbody></table>"


def bracket_text(lo: float, hi: float) -> str:
    """'3e-04 -> 1e-03 (3.3x)'; '-' for no bracket, '< 1e-04' / '>= 1e-02' for open ones."""
    lo_ok, hi_ok = np.isfinite(lo), np.isfinite(hi)
    if lo_ok and hi_ok:
        return f"{lo:.3g} -> {hi:.3g} ({hi / lo:.2g}x)"
    return f">= {lo:.3g}" if lo_ok else f"< {hi:.3g}" if hi_ok else "-"


def refinement_rows(table: pd.DataFrame, labels: pd.DataFrame) -> pd.DataFrame:
    """The refinement table (analysis/refinement_gain.py) with brackets as text and plot labels."""
    out = table.merge(labels[["model", "series", "epochs", "label"]], on=["model", "series", "epochs"], how="left")
    for pre in ("grid_", ""):
        out[f"{pre}safe"] = [bracket_text(a, b) for a, b in zip(out[f"{pre}max_safe_lr"], out[f"{pre}max_safe_lr_next"])]
        out[f"{pre}transition"] = [bracket_text(a, b) for a, b in zip(out[f"{pre}transition_low"],
                                                                       out[f"{pre}transition_high"])]
    return out


def _summary(rows: pd.DataFrame) -> str:
    """One line per model: regimes counted, the leading methods on the model frontier."""
    counts = rows["regime"].value_counts().to_dict()
    lead = rows.sort_values("model_pareto_share", ascending=False)
    lead = lead[lead["model_pareto_share"] > 0]
    leaders = ", ".join(f"{r.label} ({r.model_pareto_share:.0%})" for r in lead.itertuples())
    regimes = ", ".join(f"{k}: {v}" for k, v in sorted(counts.items()))
    return f"Regimes: {regimes}. Points on the model's Pareto frontier by series: {leaders or 'none'}."


def write_report(table: pd.DataFrame, points: pd.DataFrame, out_dir: str, *, store_uri: str, learn_task: str,
                 retain_task: str, thresholds: Thresholds, min_confidence: float, n_boot: int,
                 notes: list[str], refinement: pd.DataFrame | None = None,
                 curves: pd.DataFrame | None = None) -> tuple[str, str]:
    """Write the PNGs, report.md and report.html into ``out_dir``; return the two report paths.
    ``refinement``: analysis/refinement_gain.py's table; each model with refined series gets a
    before / after table of its brackets."""
    refined = refinement_rows(refinement, table) if refinement is not None and len(refinement) else None
    os.makedirs(out_dir, exist_ok=True)
    figs = write_figures(table, points, out_dir, learn_task, retain_task, curves)
    params = (f"learn task `{learn_task}`, retain task `{retain_task}`; thresholds "
              + ", ".join(f"{k}={v}" for k, v in thresholds.model_dump().items())
              + f"; min_confidence={min_confidence}; bootstrap replicates={n_boot}")
    md = [f"# cliffsweep report\n\nStore: `{store_uri}`. {params}.\n\n## Definitions\n\n{DEFINITIONS}\n"]
    body = [f"<h1>cliffsweep report</h1><p>Store: <code>{html.escape(store_uri)}</code>. "
            f"{html.escape(params.replace('`', ''))}.</p><h2>Definitions</h2>{_definitions_html()}"]
    if notes:
        md.append("## Notes\n\n" + "".join(f"- {n}\n" for n in notes))
        body.append("<h2>Notes</h2><ul>" + "".join(f"<li>{html.escape(n)}</li>" for n in notes) + "</ul>")
    for model, names in figs.items():
        rows = table[table["model"] == model]
        md.append(f"## {model}\n\n{_summary(rows)}\n\n{_md_table(rows)}\n"
                  + "".join(f"![{cap}]({fn})\n\n" for cap, fn in names))
        imgs = []
        for cap, fn in names:
            with open(os.path.join(out_dir, fn), "rb") as f:
                data = base64.b64encode(f.read()).decode()
            imgs.append(f"<figure><img alt='{html.escape(cap)}' src='data:image/png;base64,{data}'>"
                        f"<figcaption>{html.escape(cap)}</figcaption></figure>")
        body.append(f"<h2>{html.escape(model)}</h2><p>{html.escape(_summary(rows))}</p>{_html_table(rows)}"
                    + "".join(imgs))
        ref = refined[refined["model"] == model] if refined is not None else ()
        if len(ref):
            title = f"{model}: brackets on the grid (round 0) and after the refinement rounds"
            md.append(f"### {title}\n\n{_md_table(ref, REFINE_COLUMNS)}\n")
            body.append(f"<h3>{html.escape(title)}</h3>{_html_table(ref, REFINE_COLUMNS)}")
    md_path, html_path = os.path.join(out_dir, "report.md"), os.path.join(out_dir, "report.html")
    with open(md_path, "w") as f:
        f.write("\n".join(md))
    with open(html_path, "w") as f:
        f.write(_HTML.format(body="\n".join(body)))
    return md_path, html_path


_HTML = """<!doctype html>
<html lang="en"><head><meta charset="utf-8"><title>cliffsweep report</title>
<style>
body {{ font-family: sans-serif; margin: 24px; color: #222; }}
table {{ border-collapse: collapse; font-size: 12px; margin: 8px 0 16px; }}
th, td {{ border: 1px solid #ccc; padding: 3px 6px; text-align: left; }}
th {{ background: #f2f2f2; }}
td.regime {{ font-weight: bold; }}
figure {{ margin: 12px 0; }}
img {{ max-width: 100%; border: 1px solid #eee; }}
</style></head><body>
{body}
</body></html>
"""
