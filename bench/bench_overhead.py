"""Orchestration overhead vs pure compute, measured side by side on one sweep.

    .venv/bin/python bench/bench_overhead.py [SWEEP.yaml] [--store DIR]

Runs the sweep (default: the packaged toy sweep) into a fresh store and prints, per trial,
wall time (Tune start -> finish) next to its training compute, and for the whole run the
wall time next to the sum of train and eval compute. Overhead per trial = trial wall time
minus its training loop time, split into setup (trial start -> first training step: Ray
Train's controller and worker group, imports, model and data loading) and teardown (last
report -> trial finished).
"""

from __future__ import annotations

import argparse
import os
import shutil
import tempfile
import time


def cpu_jiffies() -> list[int] | None:
    """Machine-wide CPU time (user, nice, system, idle) in clock ticks, from /proc/stat."""
    try:
        with open("/proc/stat") as f:
            return [int(x) for x in f.readline().split()[1:5]]
    except OSError:
        return None


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

    t0, cpu0 = time.time(), cpu_jiffies()
    store = run_sweep(spec)
    wall, cpu1 = time.time() - t0, cpu_jiffies()

    trials = store.read("trials")
    evals = store.read("evals")
    per_eval = evals.drop_duplicates(["trial_id", "step", "task"])
    trial_wall = (trials["finished_at"] - trials["started_at"]).dt.total_seconds()
    train = trials["train_seconds"].fillna(0)
    overhead = trial_wall - train
    setup, teardown = trials["setup_seconds"], trials["teardown_seconds"]
    eval_s = per_eval["eval_seconds"].sum()
    print(f"\n{'trial':48} {'wall s':>8} {'train s':>8} {'overhead s':>10} {'setup s':>8} {'teardown s':>10}")
    for tid, w, t, o, su, td in zip(trials["trial_id"], trial_wall, train, overhead, setup, teardown):
        print(f"{tid:48} {w:8.1f} {t:8.1f} {o:10.1f} {su:8.1f} {td:10.1f}")
    print(f"\ntrials: {len(trials)}  mean trial wall {trial_wall.mean():.1f}s  mean train {train.mean():.1f}s  "
          f"mean overhead {overhead.mean():.1f}s  (overhead/compute {overhead.mean() / max(train.mean(), 1e-9):.1f}x)"
          f"  mean setup {setup.mean():.1f}s  mean teardown {teardown.mean():.1f}s")
    print(f"sweep wall {wall:.1f}s | train compute {train.sum():.1f}s | eval compute {eval_s:.1f}s "
          f"({len(per_eval)} task evals) | wall / (train+eval) = {wall / max(train.sum() + eval_s, 1e-9):.2f}")

    if cpu0 and cpu1:
        hz = os.sysconf("SC_CLK_TCK")
        d = [(b - a) / hz for a, b in zip(cpu0, cpu1)]
        busy = sum(d[:3])
        print(f"machine CPU over the sweep: busy {busy:.0f} core-s of {sum(d):.0f} ({busy / max(sum(d), 1e-9):.0%}; "
              f"user {d[0]:.0f}, nice {d[1]:.0f} (Ray workers), system {d[2]:.0f}, idle {d[3]:.0f})")


if __name__ == "__main__":
    main()
