"""Reading a large store on object storage, before and after compaction (issue 10, Scale).

    python bench/bench_store.py                      # 1,000 trials x 4 checkpoints x 2 tasks
    python bench/bench_store.py --trials 200         # quicker

Builds a store of that shape on a local S3-compatible server (moto's, on loopback, as in the
tests), one unit file per write unit exactly as a sweep writes them (trials, checkpoints,
evals, samples), then times, side by side in one run: reading every table, `cliffsweep status`,
and the analysis' points (what `analyze` reads), before and after `Store.compact()`; prints the
ratios and the number of files.
"""

from __future__ import annotations

import argparse
import sys
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor
from datetime import datetime, timezone
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests"))


def build(store, n_trials: int, n_ckpts: int, tasks: list[str], n_examples: int) -> int:
    from cliffsweep.storage import ledger
    from cliffsweep.storage.store import eval_key

    now = datetime.now(timezone.utc)
    jobs = []
    for i in range(n_trials):
        tid = f"m-sft-lr{i}-e3-s0-{i:08x}"
        base = {"trial_id": tid, "model": "m", "method": "sft", "series": "sft", "optimizer": "adamw",
                "lr": 1e-5 * (1 + i), "epochs": 3, "seed": 0}
        jobs.append(("trials", tid, [dict(base, status="done", steps=100 * n_ckpts, total_steps=100 * n_ckpts)]))
        for c in range(1, n_ckpts + 1):
            step = 100 * c
            jobs.append(("checkpoints", ledger.checkpoint_key(tid, step), [{
                "trial_id": tid, "step": step, "epoch": c * 3 / n_ckpts, "kind": "full",
                "uri": ledger.checkpoint_uri("s3://b/ck", tid, step), "reported_at": now}]))
            for t, role in zip(tasks, ("learn", "retain")):
                key = eval_key(tid, step, t)
                jobs.append(("samples", key, [{"trial_id": tid, "step": step, "task": t, "example_id": str(k),
                                               "correct": bool(k % 2), "prediction": "A"} for k in range(n_examples)]))
                jobs.append(("evals", key, [dict(base, step=step, epoch=c * 3 / n_ckpts, task=t, role=role,
                                                 metric="accuracy", value=0.5, n=n_examples, scorer_version="v",
                                                 evaluated_at=now, eval_seconds=1.0)]))
    with ThreadPoolExecutor(4) as pool:
        list(pool.map(lambda j: store.write(*j), jobs))
    return len(jobs)


def timed(fn) -> float:
    t0 = time.perf_counter()
    fn()
    return time.perf_counter() - t0


def readers(store, tasks):
    from cliffsweep.analysis.points import points_from_evals
    from cliffsweep.storage.store import TABLES
    from cliffsweep.orchestrator.summary import status_text

    return {
        "read every table": lambda: [store.read(t) for t in TABLES],
        "cliffsweep status": lambda: status_text(store),
        "analysis points": lambda: points_from_evals(store.read("evals"), store.read("trials"), *tasks),
    }


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--trials", type=int, default=1000)
    ap.add_argument("--checkpoints", type=int, default=4)
    ap.add_argument("--examples", type=int, default=100, help="samples rows per evaluation")
    args = ap.parse_args()
    from objectstore import s3_server

    from cliffsweep.storage.store import Store

    tasks = ["chem_l3", "gsm8k"]
    with tempfile.TemporaryDirectory() as tmp, s3_server(Path(tmp), relay=False) as (endpoint, _):
        store = Store("s3://sweeps/bench")
        t_build = time.perf_counter()
        n = build(store, args.trials, args.checkpoints, tasks, args.examples)
        print(f"store: {args.trials} trials x {args.checkpoints} checkpoints x {len(tasks)} tasks on an S3 "
              f"server ({endpoint}): {n} unit files written in {time.perf_counter() - t_build:.0f} s")
        before = {k: timed(f) for k, f in readers(store, tasks).items()}
        t_compact = timed(store.compact)
        after = {k: timed(f) for k, f in readers(store, tasks).items()}
        print(f"compaction: {t_compact:.1f} s")
        print(f"{'read':<20} {'before (s)':>11} {'after (s)':>10} {'ratio':>7}")
        for k in before:
            print(f"{k:<20} {before[k]:>11.2f} {after[k]:>10.2f} {before[k] / after[k]:>6.0f}x")


if __name__ == "__main__":
    main()
