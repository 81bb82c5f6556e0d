"""The once-per-model statistics cache at work, side by side in one run.

    .venv/bin/python bench/bench_stats_cache.py [--trials 20] [--method ewc] [--examples 128]

For an N-trial sweep of one stats-needing method on one toy model, prints the time to compute
the statistics once per trial (what a sweep without the cache would pay), the time of the
cached path (`ensure_stats` for all N trials: one computation), and a resume (cache hit).
"""

from __future__ import annotations

import argparse
import tempfile
import time


def main() -> None:
    import ray

    from cliffsweep.orchestrator.statistics import ensure_stats
    from cliffsweep.sweep.grid import expand_grid
    from cliffsweep.orchestrator.specfile import parse_spec
    from cliffsweep.trainables.stats import compute_stats
    from cliffsweep.storage.store import Store

    ap = argparse.ArgumentParser()
    ap.add_argument("--trials", type=int, default=20)
    ap.add_argument("--method", default="ewc")
    ap.add_argument("--model", default="qwen2-tiny")
    ap.add_argument("--examples", type=int, default=128)
    args = ap.parse_args()

    store_dir = tempfile.mkdtemp(prefix="cliffsweep-stats-")
    spec = parse_spec({
        "name": "stats", "models": [{"name": args.model, "path": f"toy:{args.model}"}],
        "methods": [{"name": args.method}], "lrs": [1e-5 * (i + 1) for i in range(args.trials)],
        "tasks": {"learn": {"name": "toy_facts"}, "retain": [{"name": "toy_arith"}]},
        "recipe": {"stats_examples": args.examples, "max_seq_len": 128}, "store": store_dir,
    })
    grid = expand_grid(spec)
    from cliffsweep.trainables.config import StatsJob

    t = grid[0]
    job = StatsJob(model_path=t.model_path, dtype=t.dtype, method=t.method, method_params=t.method_params,
                   learn=spec.tasks.learn, retain=spec.tasks.retain[0], recipe=spec.recipe)
    compute_stats(job)  # warm-up: imports and file caches are not the statistics' cost
    t0 = time.time()
    compute_stats(job)
    one = time.time() - t0

    ray.init(num_cpus=2, include_dashboard=False, log_to_driver=False)
    store = Store(store_dir)
    t0 = time.time()
    ensure_stats(spec, store, None, grid)
    cached = time.time() - t0
    t0 = time.time()
    ensure_stats(spec, store, None, grid)
    resume = time.time() - t0
    ray.shutdown()

    print(f"\n{args.method} statistics for {args.trials} trials of {args.model} ({args.examples} retain examples)")
    print(f"{'without cache (N x compute)':34} {one * args.trials:8.1f} s   ({args.trials} computations of {one:.2f} s, measured once)")
    print(f"{'with cache (ensure_stats)':34} {cached:8.1f} s   (1 computation, in a Ray task)")
    print(f"{'resume (cache hit)':34} {resume:8.2f} s   (0 computations)")
    print(f"speed-up: {one * args.trials / cached:.1f}x")


if __name__ == "__main__":
    main()
