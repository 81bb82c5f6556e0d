"""Replay the verdict around its own thresholds (issue 59 part 5), offline, pure numpy + the analysis.

Each *family* is a series built to sit on one decision's edge: a collapse of 0.30-0.50 of R0 around
`cliff_drop` (0.40), a checkpoint at 0.85-0.95 of R0 around the highest safe lr's cut (0.90), a
decline whose learning gain is 0-3 standard errors, a collapse with no learning beyond noise, a
deep clean cliff. Per draw, every item of the base and of every checkpoint (1 or 3 runs per lr,
each run shifted by a run-to-run deviation) is a Bernoulli draw, paired with the base item by item
(a checkpoint keeps its base's draw on `--pairing` of the items, as a finetuned model keeps most
of its base's answers). Then:

- the full evaluation: every item scored, the analysis (`analysis.frontiers.frontiers`) reads it;
- the adaptive one: each checkpoint scored stage by stage until the stopping rule settles it
  (evals/stopping.py, as the evaluator does), then the verdict's deciding checkpoints topped up to
  every item and the verdict read again, to its fixpoint (analysis/topup.py, as a sweep does);
- the truth: the analysis of the probabilities the series was built from, at the same item counts.

It prints per family: how often the adaptive verdict (regime in both readings, bracket, highest
safe lr) equals the full evaluation's, how often the full evaluation's equals the truth, the items
scored, and the measured error of the per-checkpoint decisions the verdict reads (a checkpoint settled and
still scored in part after the top-ups whose mean of the items scored lies on the other side of a
cut from its mean over every item) against the stated `error`, and how many checkpoints were left
open (a cut inside their interval, the verdict the same at either end of it: no decision made).

    .venv/bin/python bench/bench_margin.py                     # every family, 420 items, 3x grid
    .venv/bin/python bench/bench_margin.py --items 50 200 420 1319 --grids 2 3 10 --runs 1 3
"""

from __future__ import annotations

import argparse
import sys
import zlib
import time
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pandas as pd

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from cliffsweep.analysis.classify import Thresholds  # noqa: E402
from cliffsweep.analysis.frontiers import frontiers  # noqa: E402
from cliffsweep.analysis.topup import stop_rule, top_ups  # noqa: E402
from cliffsweep.analysis.topup import verdict as topup_verdict  # noqa: E402
from cliffsweep.evals.stopping import retention_cuts  # noqa: E402
from cliffsweep.planner import evalcost  # noqa: E402
from cliffsweep.sweep.spec import AdaptiveSpec  # noqa: E402

from bench_adaptive import TASKS, prices, seconds, settle  # noqa: E402 - bench/ is the script's folder

R0, L0 = 0.70, 0.25
TH = Thresholds()


@dataclass(frozen=True)
class Family:
    name: str
    L: tuple[float, ...]  # learn accuracy per lr (6 lrs), before the gain in standard errors
    r: tuple[float, ...]  # retention share per lr
    gain_se: float = 0.0  # added to L on the lrs that forget, in standard errors at the draw's item count


def families() -> list[Family]:
    rising = (0.35, 0.50, 0.62, 0.63, 0.62, 0.63)  # learning done before the collapse
    out = [Family(f"collapse {d:.2f} of R0", rising, (1.0, 0.99, 0.97, 0.97 - d, 0.97 - d - 0.03, 0.97 - d - 0.05))
           for d in (0.30, 0.36, 0.40, 0.42, 0.50)]
    out += [Family(f"safe cut at {s:.2f} of R0", (0.30, 0.40, 0.50, 0.60, 0.70, 0.75), (0.99, 0.97, s, 0.70, 0.50, 0.35))
            for s in (0.85, 0.88, 0.90, 0.92, 0.95)]
    flat = (L0,) * 6
    decline = (0.98, 0.90, 0.80, 0.70, 0.60, 0.50)
    out += [Family(f"decline, learning +{g:g} SE", flat, decline, g) for g in (0, 1, 2, 3)]
    out += [Family("collapse 0.90 without learning (+1 point noise)", tuple(L0 + 0.01 * (k % 2) for k in range(6)),
                   (1.0, 0.99, 0.98, 0.10, 0.08, 0.08)),
            Family("deep clean cliff", (0.40, 0.60, 0.70, 0.71, 0.70, 0.71), (1.0, 0.99, 0.98, 0.10, 0.06, 0.05))]
    return out


def draw(p: float, base_u: np.ndarray, pairing: float, rng: np.random.Generator) -> np.ndarray:
    """One checkpoint's items: the base's uniform on `pairing` of them, a fresh one elsewhere."""
    u = np.where(rng.random(base_u.size) < pairing, base_u, rng.random(base_u.size))
    return (u < p).astype(float)


def series_draw(fam: Family, n: int, grid: float, runs: int, run_sd: float, pairing: float,
                rng: np.random.Generator):
    """(points with every item's mean, the items per (trial, task), the truth's points)."""
    lrs = [1e-5 * grid ** k for k in range(len(fam.r))]
    base_u = {"R": rng.random(n), "L": rng.random(n)}
    base = {"R": (base_u["R"] < R0).astype(float), "L": (base_u["L"] < L0).astype(float)}
    se = np.sqrt(2 * L0 * (1 - L0) / n)
    Ls = [l + (fam.gain_se * se if fam.r[k] < 1 - TH.forget_min else 0.0) for k, l in enumerate(fam.L)]
    rows = [{"model": "m", "series": "base", "epochs": 0, "lr": 0.0, "trial_id": "m-base", "step": 0,
             "L": base["L"].mean(), "R": base["R"].mean(), "n_L": n, "n_R": n, "classified": True}]
    truth = [{**rows[0], "L": L0, "R": R0}]
    items = {("m-base", "L"): base["L"], ("m-base", "R"): base["R"]}
    for k, lr in enumerate(lrs):
        for run in range(runs):
            tid = f"m-sft-lr{lr:g}-s{run}"
            dev = rng.normal(0, run_sd) if runs > 1 else 0.0
            pR, pL = float(np.clip(R0 * (fam.r[k] + dev), 0, 1)), float(np.clip(Ls[k], 0, 1))
            xs = {"R": draw(pR, base_u["R"], pairing, rng), "L": draw(pL, base_u["L"], pairing, rng)}
            items.update({(tid, c): v for c, v in xs.items()})
            common = {"model": "m", "series": "sft", "epochs": 1, "lr": lr, "trial_id": tid, "step": 1, "n_L": n,
                      "n_R": n, "seed": run, "classified": True}
            rows.append({**common, "L": xs["L"].mean(), "R": xs["R"].mean()})
            truth.append({**common, "L": Ls[k], "R": R0 * fam.r[k]})
    return pd.DataFrame(rows), items, pd.DataFrame(truth)


def adaptive(points: pd.DataFrame, items: dict, rule, cuts: tuple[float, ...]) -> tuple[pd.DataFrame, pd.DataFrame, list, int]:
    """(points as the rule reads them, after the top-up fixpoint; scored rows; per retain
    checkpoint the verdict reads from fewer than all its items, whether some cut's side differs
    from the full mean's)."""
    got = points.copy()
    scored = []
    for idx, p in got[got["series"] != "base"].iterrows():
        for col, role in (("R", "retain"), ("L", "learn")):
            x, b = items[(p["trial_id"], col)], items[("m-base", col)]
            row = settle(x, b, rule, role, col)
            got.loc[idx, col] = x[:row["n_scored"]].mean()
            got.loc[idx, f"n_{col}"] = row["n_scored"]
            scored.append({"trial_id": p["trial_id"], "step": 1, "task": col, "col": col, **row})
    scored = pd.DataFrame(scored)
    index = {t: i for i, t in zip(got.index, got["trial_id"])}
    while True:  # the fixpoint: read the verdict, top up what it rests on, read again
        keys = top_ups(got, frontiers(got, n_boot=0), scored, {"L": "L", "R": "R"})
        if not keys:
            break
        hit = pd.Series(False, index=scored.index)
        for tid, _, tasks in keys:  # only the tasks topped up: the others keep what they scored
            for col in tasks:
                got.loc[index[tid], col] = items[(tid, col)].mean()
                got.loc[index[tid], f"n_{col}"] = len(items[(tid, col)])
                hit |= (scored["trial_id"] == tid) & (scored["task"] == col)
        hit &= scored["n_scored"] < scored["n_items"]
        scored.loc[hit, "calls"] += 1  # a top-up is one more call: the items left
        scored.loc[hit, "n_scored"] = scored.loc[hit, "n_items"]
        scored.loc[hit, "settled"] = True
    wrong = []
    r0 = items[("m-base", "R")].mean()
    # a checkpoint left open (its interval still holds a cut, and either end reads the same
    # verdict) settles no decision at that cut: only the settled ones' decisions are at `error`
    short = scored[(scored["task"] == "R") & (scored["n_scored"] < scored["n_items"])]
    left_open = int((~short["settled"].astype(bool)).sum())
    for r in short[short["settled"].astype(bool)].itertuples():
        x = items[(r.trial_id, "R")]
        wrong.append(any((x[:r.n_scored].mean() / r0 - c) * (x.mean() / r0 - c) < 0 for c in cuts))
    return got, scored, wrong, left_open


def verdict(points: pd.DataFrame) -> tuple:
    return topup_verdict(frontiers(points, n_boot=0).iloc[0])


def run_family(fam: Family, n: int, grid: float, runs: int, draws: int, args, rule, cuts) -> dict:
    # crc32, not hash(): a str's hash changes with each process (PYTHONHASHSEED), and a draw
    # that disagrees must be drawn again to be looked at
    rng = np.random.default_rng([n, int(grid * 10), runs, zlib.crc32(fam.name.encode()), args.seed])
    same, true, items_share, seconds_share, wrong, regimes, left_open = [], [], [], [], [], {}, 0
    for _ in range(draws):
        pts, items, truth = series_draw(fam, n, grid, runs, args.run_sd, args.pairing, rng)
        full, fast_pts = verdict(pts), None
        fast_pts, scored, bad, still_open = adaptive(pts, items, rule, cuts)
        left_open += still_open
        fast = verdict(fast_pts)
        same.append(fast == full)
        if fast != full:  # which of the verdict's parts differ: what a reader of the table needs next
            print(f"    draw {len(same) - 1}: adaptive {fast} / full {full}", flush=True)
        true.append(full[:2] == verdict(truth)[:2])
        items_share.append(scored["n_scored"].sum() / scored["n_items"].sum())
        seconds_share.append(seconds(scored, args.price) / seconds(scored.assign(n_scored=scored["n_items"], calls=1), args.price))
        wrong += bad
        regimes[full[0]] = regimes.get(full[0], 0) + 1
    return {"family": fam.name, "items": n, "grid": f"{grid:g}x", "runs": runs, "adaptive = full": np.mean(same),
            "full = truth (regimes)": np.mean(true), "truth": verdict(truth)[0] + " / " + verdict(truth)[1],
            "full regimes": ", ".join(f"{k} {v}" for k, v in sorted(regimes.items())),
            "items scored": np.mean(items_share), "seconds spent": np.mean(seconds_share),
            "decision error": float(np.mean(wrong)) if wrong else 0.0, "stopped early": len(wrong),
            "left open": left_open}


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--items", type=int, nargs="*", default=[420])
    ap.add_argument("--grids", type=float, nargs="*", default=[3.0])
    ap.add_argument("--runs", type=int, nargs="*", default=[1])
    ap.add_argument("--draws", type=int, default=40)
    ap.add_argument("--run-sd", type=float, default=0.03, help="run-to-run deviation of R / R0 where runs > 1")
    ap.add_argument("--pairing", type=float, default=0.8, help="share of items a checkpoint answers as its base draw")
    ap.add_argument("--family", default="", help="only families whose name contains this")
    ap.add_argument("--seed", type=int, default=0, help="another seed draws other series")
    ap.add_argument("--out", type=Path, help="also write the table as CSV here")
    ap.add_argument("--device", choices=("gpu", "cpu"), default="gpu",
                    help="the seconds model's costs: a GPU's assumed ones, or this CPU's measured ones")
    ap.add_argument("--floors", action="store_true",
                    help="stages no smaller than a call is worth on --device (evals/stopping.StopRule.call_items)")
    args = ap.parse_args(argv)
    args.price = prices(args.device)
    if args.price is None:
        ap.error("no CPU measurement is filed: run bench/bench_eval_cost.py --out cliffsweep/measured/eval-cost-cpu-DATE.json")
    spec = AdaptiveSpec()
    floors = tuple((t, evalcost.call_items(*args.price, gen, prompt)) for t, (gen, prompt) in TASKS.items())
    rule = stop_rule(spec, TH, floors if args.floors else ())
    if args.floors:
        print("stage floors: " + ", ".join(f"{t} {v:.0f} items" for t, v in floors))
    cuts = retention_cuts(TH.forget_min, TH.near_base, TH.cliff_drop)
    rows = []
    for fam in (f for f in families() if args.family in f.name):
        for n in args.items:
            for grid in args.grids:
                for runs in args.runs:
                    t0 = time.time()
                    rows.append(run_family(fam, n, grid, runs, args.draws, args, rule, cuts))
                    r = rows[-1]
                    print(f"{r['family']:<48} n={n:<5} {r['grid']:>4} runs={runs}: adaptive=full {r['adaptive = full']:.0%}, "
                          f"full=truth {r['full = truth (regimes)']:.0%} (truth {r['truth']}; full: {r['full regimes']}), "
                          f"items {r['items scored']:.0%}, seconds {r['seconds spent']:.0%}, decision error {r['decision error']:.1%} of "
                          f"{r['stopped early']} settled early (stated {spec.error:.0%}), {r['left open']} left open "
                          f"[{time.time() - t0:.0f} s]",
                          flush=True)
    table = pd.DataFrame(rows)
    if args.out:
        table.to_csv(args.out, index=False)
    worst = table["adaptive = full"].min()
    print(f"\n{len(table)} cells x {args.draws} draws: adaptive = full at worst {worst:.0%} "
          f"(target 98 %), decision error at worst {table['decision error'].max():.1%} (stated {spec.error:.0%}), "
          f"items scored {table['items scored'].mean():.0%} on average, seconds spent "
          f"{table['seconds spent'].mean():.0%} ({args.device} prices{', stage floors' if args.floors else ''})")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
