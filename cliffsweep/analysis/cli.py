"""`cliffsweep analyze STORE --out DIR`: the argparse subcommand (wired into cliffsweep/cli.py,
which also tags the sweep's trackers with the regimes) and a standalone entry that writes the
tables and report only: `python -m cliffsweep.analysis.cli STORE --out DIR`."""

from __future__ import annotations

import argparse
import sys

from cliffsweep.analysis.classify import Thresholds
from cliffsweep.analysis.frontiers import MIN_CONFIDENCE
from cliffsweep.analysis.suite import AGGREGATES
from cliffsweep.analysis.regimes import CLIFF


def add_parser(subparsers) -> argparse.ArgumentParser:
    """Add the `analyze` subcommand to an argparse subparsers object; sets func=run."""
    p = subparsers.add_parser("analyze", help="classify frontiers (gradual / cliff) and write the report",
                              description="Read a sweep's Parquet store; write frontiers.parquet/.csv, "
                              "report.html/.md and plots to --out.")
    p.add_argument("store", nargs="+", help="store root(s) (folder or URI such as s3://bucket/prefix); several "
                   "are analysed as one (e.g. the paper grid's three stores)")
    p.add_argument("--out", required=True, help="output folder")
    p.add_argument("--learn-task", help="learn task (default: the store's only learn task)")
    p.add_argument("--retain-task", help="read retention on this one retain task (default: every retain task of "
                   "the store; several are a suite, read by --suite)")
    p.add_argument("--suite", choices=AGGREGATES, default="share_of_base",
                   help="how several retain tasks make one retention: the mean share of each task's base score "
                        "(default), or seed 003's general performance (plain mean, tasks the base scores < 0.5 on left out)")
    p.add_argument("--metric", default="accuracy",
                   help="the stored metric read as learning and retention (default: greedy accuracy; a sampled "
                        "task's avg@N or pass@K, or avg / pass: each task's own avg@n / its largest pass@k, 004's "
                        "readings); a loss task is read on its likelihood whatever this says")
    p.add_argument("--robust-frontier", type=float, default=0.0, metavar="C",
                   help="seed 001's robust frontier: keep a Pareto point only if it beats every other point by C "
                        "on one axis (001: 0.001); default 0, the plain frontier")
    p.add_argument("--n-boot", type=int, default=200, help="bootstrap replicates (0: no confidence)")
    p.add_argument("--seed", type=int, default=0, help="bootstrap seed")
    p.add_argument("--min-confidence", type=float, default=MIN_CONFIDENCE,
                   help="below this bootstrap agreement a regime is reported as inconclusive")
    p.add_argument("--no-report", action="store_true", help="write the tables only")
    p.add_argument("--top-up", action="store_true",
                   help="first score on every item the checkpoints each verdict hinges on that a sweep under "
                        "eval.adaptive scored in part (runs the store's sweep again: nothing is trained)")
    p.add_argument("--checkpoint", choices=["final", "best_learn"], default="final",
                   help="which checkpoint of a trial is classified: its last (the cliff paper) or its best on the "
                        "learn task (003's best-target checkpoint)")
    for name, field in Thresholds.model_fields.items():
        p.add_argument(f"--{name.replace('_', '-')}", dest=f"th_{name}", type=field.annotation, default=None,
                       help=f"threshold (default {field.default}); see docs/analysis.md")
    p.set_defaults(func=run)
    return p


def run(args: argparse.Namespace, after=None) -> int:
    """Analyse, print the regimes; `after(table)` then runs (`cliffsweep analyze` tags the
    sweep's trackers with them: cliffsweep/cli.py, above both analysis and tracking)."""
    from cliffsweep.analysis.points import AnalysisInputError
    from cliffsweep.analysis.run import analyze_store

    thresholds = {k[3:]: v for k, v in vars(args).items() if k.startswith("th_") and v is not None}
    try:
        table = analyze_store(args.store, args.out, learn_task=args.learn_task, retain_task=args.retain_task,
                              thresholds=thresholds, n_boot=args.n_boot, seed=args.seed,
                              min_confidence=args.min_confidence, report=not args.no_report, pick=args.checkpoint,
                              suite=args.suite, robust_frontier=args.robust_frontier, metric=args.metric)
    except AnalysisInputError as e:
        print(f"cliffsweep analyze: {e}", file=sys.stderr)
        return 2
    from cliffsweep.analysis.figures import regime_text
    from cliffsweep.analysis.layout import lr_text

    for _, row in table.iterrows():
        r = row
        # the report's words for the regime (issue 63: "cliff (100%)" here, "cliff (one run)" there)
        bracket = f" lr {lr_text(r.critical_lr_low)} -> {lr_text(r.critical_lr_high)}" if r.regime == CLIFF else ""
        paper = "" if r.regime_paper == r.regime else f" [paper: {r.regime_paper}]"
        safe = "" if r.max_safe_lr != r.max_safe_lr else f"; max safe lr {lr_text(r.max_safe_lr)}" + (
            "" if r.max_safe_lr_next != r.max_safe_lr_next else f" (next {lr_text(r.max_safe_lr_next)} forgets)")
        print(f"{r.model:>16} {r.label:<24} {regime_text(r)}{paper}{bracket}{safe}")
    _print_suite(args.out)
    print(f"wrote {args.out}/frontiers.parquet" + ("" if args.no_report else f" and {args.out}/report.html"))
    if after is not None:
        after(table)
    return 0


def _print_suite(out: str) -> None:
    """For a retention suite: which task falls first in each series (suite.parquet)."""
    import os

    import pandas as pd

    from cliffsweep.analysis.layout import lr_text

    path = os.path.join(out, "suite.parquet")
    if not os.path.exists(path):
        return
    per_task = pd.read_parquet(path)
    print(f"retention suite of {per_task['task'].nunique()} tasks; the task that falls first per series:")
    for (model, label), g in per_task.groupby(["model", "label"], sort=True):
        first = g[g["first_to_fall"]]
        what = "none falls within the swept lrs" if first.empty else \
            f"{first['task'].iloc[0]} (at lr {lr_text(first['falls_at'].iloc[0])}, its own regime {first['regime'].iloc[0]})"
        print(f"{model:>16} {label:<24} {what}")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="cliffsweep")
    add_parser(parser.add_subparsers(dest="command", required=True))
    args = parser.parse_args(["analyze", *(sys.argv[1:] if argv is None else argv)])
    return args.func(args)


if __name__ == "__main__":
    sys.exit(main())
