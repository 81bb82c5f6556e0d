"""Driver scale: N trivial trials through the sweep's real scheduling path (issue 10, Scale).

    python bench/bench_scheduling.py --trials 1000

The trials are grid points of a real spec (one model, N learning rates) run by the driver's own
machinery: the queue searcher (orchestrator/refiner.py), the Tune callback that records every
trial row in the store, the inbox, the evaluation tracker; only the trial function is trivial
(no Ray Train, no training), so what is measured is the driver's and Tune's cost per trial.
Prints the per-trial scheduling overhead (wall time x concurrency / trials) and the driver's
resident memory after each tenth of the trials: it must not grow per trial beyond a small
constant.
"""

from __future__ import annotations

import argparse
import os
import tempfile
import time

import psutil


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--trials", type=int, default=1000)
    ap.add_argument("--concurrency", type=int, default=2)
    ap.add_argument("--trace", action="store_true",
                    help="also print the Python allocation sites that grew most after the first tenth (tracemalloc)")
    args = ap.parse_args()
    import tracemalloc

    if args.trace:
        tracemalloc.start(12)
    snaps = []

    import ray
    from ray import tune

    from cliffsweep.orchestrator import driver
    from cliffsweep.orchestrator.evaltracker import EvalTracker
    from cliffsweep.orchestrator.sweeprun import SweepRun
    from cliffsweep.orchestrator.tunecallback import sweep_callback
    from cliffsweep.orchestrator.jobqueue import JobQueue, sweep_searcher
    from cliffsweep.orchestrator.specfile import parse_spec
    from cliffsweep.storage.store import Store
    from cliffsweep.sweep.reports import EndReport
    from cliffsweep.trainables.config import JOB_KEY

    me = psutil.Process()
    rss: list[tuple[int, float]] = []
    with tempfile.TemporaryDirectory() as tmp:
        spec = parse_spec({
            "name": "sched", "models": [{"name": "q", "path": "toy:qwen2-tiny"}], "methods": [{"name": "sft"}],
            "lrs": [1e-6 * (i + 1) for i in range(args.trials)], "epochs": [1],
            "tasks": {"learn": {"name": "toy_facts"}, "retain": [{"name": "toy_arith"}]},
            "eval": {"backend": "hf"}, "store": f"{tmp}/store"})
        store = Store(spec.store_uri)
        driver.init_ray(spec, num_cpus=args.concurrency + 1, verbose=False)
        run = SweepRun(spec, store, "hf", concurrency=args.concurrency, stream=open(os.devnull, "w"))
        tracker = EvalTracker(store, lambda model: None, run.task_names, [])
        progress = run.progress
        run.book.show(progress)
        finished = [0]

        def tick(wait: float = 0.0) -> None:
            for tid, rec in run.inbox.poll():
                run.on_report(tid, rec)
            done = sum(progress.status[s] for s in ("trained", "done", "failed"))
            if done >= finished[0] + args.trials // 10:
                finished[0] = done
                rss.append((done, me.memory_info().rss / 2**20))
                if args.trace and len(snaps) < 2 and (not snaps or done >= args.trials * 0.9):
                    snaps.append(tracemalloc.take_snapshot())

        def trivial(config: dict) -> None:
            # ends its one trial as a real job does: a final report through the inbox
            job = config[JOB_KEY]
            inbox = ray.get_actor(job.inbox)
            ray.get([inbox.put.remote(tid, EndReport(tid, diverged=False, step=1, epoch=1.0, total_steps=1,
                                                     reported_at=time.time())) for tid in job.trial_ids])

        queue = JobQueue(run.job_configs(run.grid, size=1), lambda: False)
        run.tracker, run.tick = tracker, tick  # the callback drives this bench's own tick
        rss.append((0, me.memory_info().rss / 2**20))
        t0 = time.perf_counter()
        tune.Tuner(
            tune.with_resources(trivial, {"CPU": 0.01}),
            tune_config=tune.TuneConfig(search_alg=sweep_searcher(queue), num_samples=len(run.grid),
                                        max_concurrent_trials=args.concurrency, reuse_actors=True),
            run_config=tune.RunConfig(storage_path=f"{tmp}/tune", name="bench", verbose=0,
                                      callbacks=[sweep_callback(run)]),
        ).fit()
        wall = time.perf_counter() - t0
        rss.append((args.trials, me.memory_info().rss / 2**20))
        rows = len(store.read("trials"))
        ray.shutdown()
    print(f"{args.trials} trivial trials, {args.concurrency} at a time: {wall:.0f} s wall, "
          f"{wall * args.concurrency / args.trials:.3f} s of scheduling per trial; {rows} trial rows in the store")
    print("driver RSS (MiB) after N trials: " + ", ".join(f"{n}: {m:.0f}" for n, m in rss))
    grow = (rss[-1][1] - rss[1][1]) / max(1, rss[-1][0] - rss[1][0]) * 1024
    print(f"growth after the first tenth: {grow:.1f} KiB per trial")
    if len(snaps) == 2:
        stats = snaps[1].compare_to(snaps[0], "traceback")
        print(f"Python heap growth, first tenth -> nine tenths: {sum(s.size_diff for s in stats) / 2**20:.1f} MiB; top sites:")
        for st in stats[:8]:
            print(f"  {st.size_diff / 2**10:9.0f} KiB  {st.count_diff:+7d} blocks")
            for line in st.traceback.format()[-6:]:
                print("      " + line)


if __name__ == "__main__":
    main()
