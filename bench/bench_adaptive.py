"""Replay full evaluations through the stopping rule (issue 51 part 6), offline.

Takes stores that hold every item's result (the `samples` table), puts each task's items in one
seeded order per model (evals/stopping.py `item_order`, shared by every checkpoint and the
base), and scores each checkpoint stage by stage (32, 48, 72, ... items: the defaults) until the rule says
its decisions are settled (`StopRule.read`, as the evaluator calls it). Each checkpoint's
accuracy is then the mean of the items it scored (what the store keeps), the checkpoints each
series' verdict hinges on are topped up to every item (analysis/topup.py, as a sweep does at its
end), and the analysis runs on both readings (analysis/frontiers.py, the bootstrap off). It prints the items scored against all
items and how often each verdict agrees with the full evaluation's: regimes (ours and the
paper's), critical-lr brackets, highest safe lr, frontier membership.

    .venv/bin/python bench/bench_adaptive.py --paper /tmp/paper-stores    # writes them first if missing
    .venv/bin/python bench/bench_adaptive.py --store results/toy           # any store(s) with samples

Targets (issue 51): at most 35 % of items; regimes and brackets identical in at least 98 % of
series; the highest safe lr identical in at least 95 %.
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

import numpy as np
import pandas as pd

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from cliffsweep.analysis.frontiers import frontiers  # noqa: E402
from cliffsweep.analysis.points import load_store  # noqa: E402
from cliffsweep.analysis.topup import stop_rule, top_ups  # noqa: E402
from cliffsweep.planner import evalcost  # noqa: E402
from cliffsweep.planner.bill import EvalThroughput, eval_throughput  # noqa: E402
from cliffsweep.evals.stopping import item_order  # noqa: E402
from cliffsweep.sweep.spec import AdaptiveSpec  # noqa: E402


def ordered(samples: pd.DataFrame, task: str, seed: int) -> dict[tuple[str, int], np.ndarray]:
    """(trial, step) -> its correctness on `task`, items in the model's shared order."""
    s = samples[samples["task"] == task]
    ids = sorted(s["example_id"].unique())
    order = np.asarray(ids, dtype=object)[item_order(len(ids), seed, task)]
    pos = {e: i for i, e in enumerate(order)}
    out = {}
    for (tid, step), g in s.groupby(["trial_id", "step"], sort=False):
        v = np.full(len(ids), np.nan)
        v[[pos[e] for e in g["example_id"]]] = g["correct"].astype(float).to_numpy()
        out[(tid, int(step))] = v
    return out


TASKS = {"R": (256, 150.0), "L": (16, 150.0)}
"""(max generated tokens, prompt tokens) of an item of each task as the seconds are priced: the
paper's shapes (GSM8K's worked answers; ChemL3's multiple choice), prompts of 150 tokens."""


def prices(device: str) -> tuple[evalcost.EvalCost, EvalThroughput] | None:
    """The seconds model's costs (planner/evalcost.py): a GPU's assumed ones at 1.5 B parameters,
    or this CPU's measured ones (None where none is filed)."""
    if device == "gpu":
        return evalcost.GPU, eval_throughput(1.5e9)
    return evalcost.cpu_cost()


def seconds(scored: pd.DataFrame, price) -> float:
    """The evaluation seconds of `scored` (n_scored items in `calls` calls per checkpoint and task),
    each call's items an equal share (planner/evalcost.call_seconds); weights' loads left out."""
    cost, tput = price
    total = 0.0
    for r in scored.itertuples():
        gen, prompt = TASKS[r.col]
        part = r.n_scored / r.calls
        total += r.calls * evalcost.call_seconds(part, part * prompt, gen, cost, tput)
    return total


def settle(x: np.ndarray, base: np.ndarray, rule, role: str, label: str = "") -> dict:
    """The `evals` row's staged columns when the rule stops (n_scored, settled: false where it
    stopped open, by the width; ci_low, ci_high) and its generation calls, its stages chosen as
    the evaluator chooses them (evaluator/staged.py: StopRule.next_total, then StopRule.read)."""
    done, calls, reading = 0, 0, None
    while done < len(x):
        done = rule.next_total(done, len(x), reading, label)
        calls += 1
        reading = rule.read(role, x[:done], base)
        if reading.settled:
            break
    return {"n_scored": done, "n_items": len(x), "calls": calls, "settled": done >= len(x) or not reading.open,
            "ci_low": reading.interval.low, "ci_high": reading.interval.high}


def replay(points: pd.DataFrame, samples: pd.DataFrame, learn: str, retain: str, rule) -> tuple[pd.DataFrame, pd.DataFrame]:
    """(points read from the items the rule scored, then topped up where the verdict hinges as a
    sweep does it (analysis/topup.py); one row per (checkpoint, task) with n_scored)."""
    got = points.copy()
    rows, full = [], {}
    for task, col, role in ((retain, "R", "retain"), (learn, "L", "learn")):
        by_point = ordered(samples, task, seed=0)
        for model, mpts in got.groupby("model"):
            base = by_point[(f"{model}-base", 0)]
            for idx, p in mpts[mpts["series"] != "base"].iterrows():
                x = by_point[(p["trial_id"], int(p["step"]))]
                row = {"col": col, **settle(x, base, rule, role, col)}
                n = row["n_scored"]
                got.loc[idx, col] = float(x[:n].mean())  # what the store keeps: the mean of the items scored
                full[(p["trial_id"], int(p["step"]), col)] = float(x.mean())
                rows.append({"model": model, "task": task, "trial_id": p["trial_id"], "step": int(p["step"]), **row})
    scored = pd.DataFrame(rows)
    index = {(p["trial_id"], int(p["step"])): idx for idx, p in got[got["series"] != "base"].iterrows()}
    column = {learn: "L", retain: "R"}
    while True:  # the sweep's fixpoint (orchestrator/topups.py): read, top up, read again
        hinge = {(k.trial_id, k.step, t) for k in top_ups(got, frontiers(got, n_boot=0), scored,
                                                           {"L": learn, "R": retain}) for t in k.tasks}
        if not hinge:
            return got, scored
        for tid, step, task in hinge:  # only the tasks topped up: the others keep what they scored
            got.loc[index[(tid, step)], column[task]] = full[(tid, step, column[task])]
        topped = scored.apply(lambda r: (r["trial_id"], r["step"], r["task"]) in hinge, axis=1)
        scored.loc[topped & (scored["n_scored"] < scored["n_items"]), "calls"] += 1  # the top-up's one call
        scored.loc[topped, "n_scored"] = scored.loc[topped, "n_items"]
        scored.loc[topped, "settled"] = True


def agreement(full: pd.DataFrame, fast: pd.DataFrame) -> dict[str, float]:
    key = ["model", "series", "epochs"]
    a, b = full.set_index(key), fast.set_index(key).reindex(full.set_index(key).index)

    def same(col: str) -> pd.Series:
        x, y = a[col], b[col]
        return (x == y) | (x.isna() & y.isna())

    def ids(col):
        return lambda t: t[col].map(lambda v: frozenset(v) if isinstance(v, (list, np.ndarray)) else frozenset())

    x, y = ids("pareto_point_ids")(a), ids("pareto_point_ids")(b)
    jaccard = [len(p & q) / len(p | q) if p | q else 1.0 for p, q in zip(x, y)]
    return {"regime": same("regime").mean(), "regime_paper": same("regime_paper").mean(),
            "bracket": (same("critical_lr_low") & same("critical_lr_high")).mean(),
            "max_safe_lr": same("max_safe_lr").mean(),
            "frontier set": (x == y).mean(), "frontier points (Jaccard)": float(np.mean(jaccard))}


def paper_stores(root: Path) -> list[str]:
    from cliffsweep.analysis.synthetic import paper_sized, write_synthetic_store

    out = []
    for name, sw in paper_sized(n=420).items():  # ChemL3's 420 items on both axes
        path = root / name
        if not (path / "spec.json").exists():
            t0 = time.time()
            write_synthetic_store(str(path), sw)
            print(f"wrote {path} in {time.time() - t0:.0f} s", flush=True)
        out.append(str(path))
    return out


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--paper", type=Path, help="folder for the paper-sized synthetic stores (420 items a task)")
    ap.add_argument("--store", nargs="*", default=[], help="stores with every item's result")
    ap.add_argument("--error", type=float, default=0.05)
    ap.add_argument("--width", type=float, default=0.15, help="an interval this narrow (in accuracy) stops")
    ap.add_argument("--first", type=int, default=32, help="items of the first stage")
    ap.add_argument("--growth", type=float, default=1.5, help="each stage's items over the one before")
    ap.add_argument("--device", choices=("gpu", "cpu"), default="gpu",
                    help="the seconds model's costs (planner/evalcost.py): a GPU's assumed ones, or this CPU's measured ones")
    ap.add_argument("--floors", action="store_true",
                    help="stages no smaller than a call is worth on --device (evals/stopping.StopRule.call_items)")
    args = ap.parse_args(argv)
    price = prices(args.device)
    if price is None:
        ap.error("no CPU measurement is filed: run bench/bench_eval_cost.py --out cliffsweep/measured/eval-cost-cpu-DATE.json")
    uris = list(args.store) + (paper_stores(args.paper) if args.paper else [])
    floors = tuple((t, evalcost.call_items(*price, gen, prompt)) for t, (gen, prompt) in TASKS.items())
    rule = stop_rule(AdaptiveSpec(error=args.error, width=args.width, first=args.first, growth=args.growth),
                     call_items=floors if args.floors else ())
    print(f"{args.device} prices ({price[0].source})" + (
        "; stage floors " + ", ".join(f"{t} {v:.0f} items" for t, v in floors) if args.floors else "; no stage floors"))
    for uri in uris:
        t0 = time.time()
        data = load_store(uri)
        fast_points, scored = replay(data.points, data.samples, data.learn_task, data.retain_task, rule)
        full = frontiers(data.points, n_boot=0)
        fast = frontiers(fast_points, n_boot=0)
        agree = agreement(full, fast)
        share = scored["n_scored"].sum() / scored["n_items"].sum()
        modeled = seconds(scored, price) / seconds(scored.assign(n_scored=scored["n_items"], calls=1), price)
        per_task = scored.groupby("task").apply(lambda g: g["n_scored"].sum() / g["n_items"].sum()).to_dict()
        print(f"{uri}: {len(full)} series, {len(scored) // 2} checkpoints; items scored {share:.1%} of all "
              f"({', '.join(f'{t} {v:.1%}' for t, v in per_task.items())}); agreement with the full evaluation: "
              + ", ".join(f"{k} {v:.1%}" for k, v in agree.items())
              + f"; {scored['calls'].mean():.2f} calls per checkpoint and task, modeled evaluation seconds "
              f"{modeled:.1%} of the full evaluation's ({time.time() - t0:.0f} s)", flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
