"""Orchestration overhead vs pure compute, measured side by side on one sweep.

    .venv/bin/python bench/bench_overhead.py [SWEEP.yaml] [--store DIR]

Runs the sweep (default: the packaged toy sweep) into a fresh store and prints, per trial,
wall time (Tune start -> finish) next to its training compute, and for the whole run the
wall time next to the sum of train and eval compute. Overhead per trial = trial wall time
minus its training loop time (Ray actor start-up, model loading, worker group, reporting).
"""

from __future__ import annotations

import argparse
import shutil
import tempfile
import time


def main() -> None:
    from cliffsweep.orchestrator.driver import run_sweep
    from cliffsweep.orchestrator.spec import default_spec_path, load_spec, parse_spec

    ap = argparse.ArgumentParser()
    ap.add_argument("spec", nargs="?", default=str(default_spec_path()))
    ap.add_argument("--store", default=None)
    args = ap.parse_args()
    store_dir = args.store or tempfile.mkdtemp(prefix="cliffsweep-bench-")
    shutil.rmtree(store_dir, ignore_errors=True)
    data = load_spec(args.spec).model_dump()
    data["store"] = store_dir
    spec = parse_spec(data)

    t0 = time.time()
    store = run_sweep(spec)
    wall = time.time() - t0

    trials = store.read("trials")
    evals = store.read("evals")
    per_eval = evals.drop_duplicates(["trial_id", "step", "task"])
    trial_wall = (trials["finished_at"] - trials["started_at"]).dt.total_seconds()
    train = trials["train_seconds"].fillna(0)
    overhead = trial_wall - train
    eval_s = per_eval["eval_seconds"].sum()
    print(f"\n{'trial':48} {'wall s':>8} {'train s':>8} {'overhead s':>10}")
    for tid, w, t, o in zip(trials["trial_id"], trial_wall, train, overhead):
        print(f"{tid:48} {w:8.1f} {t:8.1f} {o:10.1f}")
    print(f"\ntrials: {len(trials)}  mean trial wall {trial_wall.mean():.1f}s  mean train {train.mean():.1f}s  "
          f"mean overhead {overhead.mean():.1f}s  (overhead/compute {overhead.mean() / max(train.mean(), 1e-9):.1f}x)")
    print(f"sweep wall {wall:.1f}s | train compute {train.sum():.1f}s | eval compute {eval_s:.1f}s "
          f"({len(per_eval)} task evals) | wall / (train+eval) = {wall / max(train.sum() + eval_s, 1e-9):.2f}")


if __name__ == "__main__":
    main()
