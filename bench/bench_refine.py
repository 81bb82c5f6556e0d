"""Grid-invariant regimes and adaptive lr refinement, measured on simulated sweeps (issue 11).

    .venv/bin/python bench/bench_refine.py [--curves 200] [--seed 0] [--baseline OLD_CLASSIFY.py]

Each simulated series is a ground-truth curve (cliffsweep.analysis.synthetic.random_curve: sharp
cliffs, gradual declines) evaluated with binomial noise at the paper's eval sizes (ChemL3 420,
GSM8K 1,319 examples). Three measurements:

1. regimes right per lr grid, with the default thresholds and with near_base 0.2 (the old
   default) (``--baseline``: also a classify.py from an older checkout, e.g.
   ``git show 872a64b:cliffsweep/analysis/classify.py > /tmp/classify_old.py``);
2. trials to bracket the transition (highest safe lr and any cliff) to ``--target`` (1.3x):
   refinement from a coarse grid vs a dense geometric grid of that step over the same range,
   and how often the final bracket holds the true safe lr;
3. wall time for both, *modeled* (equal trials of ``--trial-s`` seconds, ``--concurrent`` at a
   time, a series' round starting when its previous round is done; default 25.1 s and 2: the toy
   sweep's mean trial wall and concurrency, docs/benchmarks.md). Real toy wall times need the
   driver to run refinement rounds.
"""

from __future__ import annotations

import argparse
import importlib.util
import math
import sys
import time

import numpy as np
import pandas as pd

from cliffsweep.analysis.classify import Thresholds, classify, lr_curve
from cliffsweep.analysis.safe_lr import max_safe_lr_arrays
from cliffsweep.analysis.synthetic import geometric_lrs, mantissa_lrs, random_curve, simulate_refinement
from cliffsweep.sweep.spec import RefineSpec

PAPER_EVAL = (420, 1319)
SHAPES = ("cliff", "gradual")


def _load(path: str):
    spec = importlib.util.spec_from_file_location("baseline_classify", path)
    mod = importlib.util.module_from_spec(spec)
    sys.modules["baseline_classify"] = mod  # dataclasses resolve their module by name
    spec.loader.exec_module(mod)
    return mod.classify


def _series(rng: np.random.Generator, shape: str):
    c = random_curve(shape, rng)
    return c, 10 ** (c.forget_at - 1.6 - rng.uniform(0, 0.5)), 10 ** (c.forget_at + 1.0)


def _grids(lo: float, hi: float) -> dict[str, list[float]]:
    return {"paper 1-2-5 (2-2.5x)": mantissa_lrs(lo, hi), "toy 1-3 (3-3.3x)": mantissa_lrs(lo, hi, (1, 3)),
            "half-decade 3.16x": geometric_lrs(lo, hi, 10**0.5), "dense 1.4x": geometric_lrs(lo, hi, 1.4),
            "decade 10x": geometric_lrs(lo, hi, 10)}


def regimes(n: int, seed: int, baseline) -> None:
    rng = np.random.default_rng(seed)
    rows = []
    for shape in SHAPES:
        for _ in range(n):
            c, lo, hi = _series(rng, shape)
            samples = {name: c.series(lrs, PAPER_EVAL, rng) for name, lrs in _grids(lo, hi).items()}
            for name in ("half-decade 3.16x", "decade 10x"):
                samples[name.split()[0] + " + 2 refinement rounds"] = simulate_refinement(
                    c, samples[name]["lr"].iloc[1:].tolist(), RefineSpec(rounds=2), PAPER_EVAL, rng)
            for name, pts in samples.items():
                rows.append({"shape": shape, "grid": name, "lrs": (pts["lr"] > 0).sum(),
                             "new": classify(pts[["lr", "L", "R"]]).regime,
                             "near_base 0.2": classify(pts[["lr", "L", "R"]], Thresholds(near_base=0.2)).regime,
                             "baseline": baseline(pts[["lr", "L", "R"]]).regime if baseline else None})
    df = pd.DataFrame(rows)
    print(f"\n1. Regimes right, {n} curves per shape, eval noise n = {PAPER_EVAL} (right / unresolved-or-"
          "inconclusive / wrong)")
    cols = ["new", "near_base 0.2"] + (["baseline"] if baseline else [])
    print(f"{'grid':<34} {'mean lrs':>8}   " + "   ".join(f"{s + ' ' + c[:13]:>22}" for c in cols for s in SHAPES))
    for grid, g in df.groupby("grid", sort=False):
        cells = []
        for col in cols:
            for shape in SHAPES:
                r = g.loc[g["shape"] == shape, col]
                right, inc = (r == shape).sum(), (r == "inconclusive").sum()
                cells.append(f"{right:>4} / {inc:>3} / {len(r) - right - inc:>3}".rjust(22))
        print(f"{grid:<34} {g['lrs'].mean():>8.1f}   " + "   ".join(cells))
    for col in cols:
        right = (df[col] == df["shape"]).sum()
        print(f"all grids, {col}: {right}/{len(df)} right, {(df[col] == 'inconclusive').sum()} inconclusive")


def _true_safe_lr(c, forget_min: float = 0.10) -> float:
    """The lr where the curve's retention crosses 1 - forget_min of R0."""
    p = forget_min / (1 - c.floor)
    return 10 ** (c.forget_at + c.forget_decades / (2 * math.log(9)) * math.log(p / (1 - p)))


def _final_brackets(pts: pd.DataFrame) -> tuple[float, float, float]:
    curve = lr_curve(pts)
    s = max_safe_lr_arrays(curve["lr"].to_numpy(), curve["L"].to_numpy(), curve["R"].to_numpy(), Thresholds())
    c = classify(pts)
    cliff = c.critical_lr_high / c.critical_lr_low if c.regime == "cliff" else np.nan
    return (s.max_safe_lr or np.nan), (s.max_safe_lr_next or np.nan), cliff


def _makespan(rounds: list[list[int]], slots: int) -> int:
    """Time steps to run every series' rounds (unit trials, ``slots`` at once, round k of a
    series ready when its round k - 1 is done); greedy, oldest-ready first."""
    todo = [list(r) for r in rounds]  # per series: trials left in each round
    steps = 0
    while any(sum(r) for r in todo):
        free = slots
        ran = [0] * len(todo)
        for s, r in enumerate(todo):
            k = next((i for i, x in enumerate(r) if x), None)
            if k is None or free == 0:
                continue
            take = min(free, r[k])
            ran[s], free = take, free - take
        for s, take in enumerate(ran):
            if take:
                k = next(i for i, x in enumerate(todo[s]) if x)
                todo[s][k] -= take
        steps += 1
    return steps


def refinement_vs_dense(n: int, seed: int, target: float, trial_s: float, slots: int, n_series: int) -> None:
    rng = np.random.default_rng(seed + 1)
    cfg = RefineSpec(rounds=10, points_per_round=2, target_ratio=target)
    rows = []
    for shape in SHAPES:
        for _ in range(n):
            c, lo, hi = _series(rng, shape)
            truth = _true_safe_lr(c)
            dense = c.series(geometric_lrs(lo, hi, target), PAPER_EVAL, rng)
            d_lo, d_hi, _ = _final_brackets(dense)
            for start, step in (("decade 10x", 10), ("half-decade 3.16x", 10**0.5)):
                grid = c.series(geometric_lrs(lo, hi, step), PAPER_EVAL, rng)
                g_lo, g_hi, _ = _final_brackets(grid)
                pts = simulate_refinement(c, grid["lr"].iloc[1:].tolist(), cfg, PAPER_EVAL, rng)
                f_lo, f_hi, f_cliff = _final_brackets(pts)
                per_round = pts[pts["lr"] > 0].groupby("round").size().tolist()
                rows.append({"shape": shape, "start": start, "grid_trials": per_round[0],
                             "refine_trials": sum(per_round), "rounds": len(per_round) - 1, "per_round": per_round,
                             "dense_trials": int((dense["lr"] > 0).sum()), "grid_safe_ratio": g_hi / g_lo,
                             "safe_ratio": f_hi / f_lo, "cliff_ratio": f_cliff,
                             "refine_holds_truth": f_lo < truth < f_hi, "dense_holds_truth": d_lo < truth < d_hi})
    df = pd.DataFrame(rows)
    print(f"\n2. Trials to bracket the highest safe lr (and any cliff) to <= {target}x, {n} curves per shape "
          f"(range {df['dense_trials'].mean():.1f} dense lrs ~ 2.6-3.1 decades)")
    print(f"{'start grid':<19} {'shape':<8} {'grid':>5} {'+refined':>8} {'rounds':>7} {'dense':>6} "
          f"{'dense/refine':>12}  {'safe bracket grid -> final (median)':>36}  {'truth inside: refine, dense':>28}")
    for (start, shape), g in df.groupby(["start", "shape"], sort=False):
        print(f"{start:<19} {shape:<8} {g['grid_trials'].mean():>5.1f} {g['refine_trials'].mean() - g['grid_trials'].mean():>8.1f} "
              f"{g['rounds'].mean():>7.1f} {g['dense_trials'].mean():>6.1f} "
              f"{g['dense_trials'].mean() / g['refine_trials'].mean():>11.2f}x  "
              f"{g['grid_safe_ratio'].median():>17.2f}x -> {g['safe_ratio'].median():.2f}x (max {g['safe_ratio'].max():.2f}x)"
              f"  {g['refine_holds_truth'].mean():>12.0%}, {g['dense_holds_truth'].mean():.0%}")
    for start, g in df.groupby("start", sort=False):
        print(f"{start}: dense grid needs {g['dense_trials'].mean() / g['refine_trials'].mean():.2f}x the trials "
              f"of refinement ({g['dense_trials'].mean():.1f} vs {g['refine_trials'].mean():.1f} per series)")

    print(f"\n3. Modeled wall time ({trial_s:g} s per trial, {slots} trials at a time; rounds of a series in order)")
    for start, g in df.groupby("start", sort=False):
        refine_rounds = [list(r) for r in g["per_round"]]
        one_r = np.mean([_makespan([r], slots) for r in refine_rounds]) * trial_s
        one_d = np.mean([_makespan([[d]], slots) for d in g["dense_trials"]]) * trial_s
        k = len(refine_rounds) // n_series * n_series
        many_r = np.mean([_makespan(refine_rounds[i:i + n_series], slots) for i in range(0, k, n_series)]) * trial_s
        many_d = np.mean([_makespan([[d] for d in g["dense_trials"].iloc[i:i + n_series]], slots)
                          for i in range(0, k, n_series)]) * trial_s
        print(f"{start:<19} one series: refine {one_r:6.0f} s, dense {one_d:6.0f} s ({one_d / one_r:.2f}x);  "
              f"{n_series} series sharing the cluster: refine {many_r:6.0f} s, dense {many_d:6.0f} s "
              f"({many_d / many_r:.2f}x)")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--curves", type=int, default=200, help="curves per shape")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--baseline", help="a classify.py to compare (e.g. from an older commit)")
    ap.add_argument("--target", type=float, default=1.3, help="bracket factor to reach (refine.target_ratio)")
    ap.add_argument("--trial-s", type=float, default=25.1, help="wall seconds per trial (toy mean)")
    ap.add_argument("--concurrent", type=int, default=2, help="trials at a time (toy default)")
    ap.add_argument("--series", type=int, default=4, help="series sharing the cluster (toy default: 4)")
    args = ap.parse_args()
    t0 = time.perf_counter()
    regimes(args.curves, args.seed, _load(args.baseline) if args.baseline else None)
    refinement_vs_dense(args.curves, args.seed, args.target, args.trial_s, args.concurrent, args.series)
    print(f"\n({time.perf_counter() - t0:.0f} s)")


if __name__ == "__main__":
    main()
