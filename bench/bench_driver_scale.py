"""One driver as the grid grows (issue 62 part 1): the paper grid rehearsed on fake GPU nodes
(simulate/rehearsal.py: the real driver, Tune, Train jobs, evaluators and store, every piece of
work a timed wait scaled near zero), at several sizes, and what the driver costs at each.

    .venv/bin/python bench/bench_driver_scale.py --sizes 441 1764 [--nodes 2 --gpus-per-node 8]

Sizes are cut from cliffsweep/configs/paper.yaml (147 trials a model): 441 = its first three
models, 882 = all six, then 882 per seed (1,764 = two seeds, 9,702 = eleven). Per size it prints:

    wall s           the sweep, from its start to its end (Ray already up)
    driver peak RSS  this process (the driver runs here), sampled every second
    driver CPU ms/trial  this process's CPU seconds over the sweep, per trial (its bookkeeping:
                     Tune's loop, the callback, the ledger, the store's reads and writes)
    ticks            the driver's ticks (SweepRun.tick, counted by wrapping it here)
    requests/tick    the store requests this process made (storage/counting.py), per tick, by kind
    Tune state KB    the size of Tune's experiment-state file at the end
    gap s            the median time from a trial's end to the start of the next trial (any slot)

and the ratios of the largest size to the smallest. docs/benchmarks.md records it with this command.
"""

from __future__ import annotations

import argparse
import glob
import os
import sys
import tempfile
import threading
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
os.environ["CLIFFSWEEP_COUNT_REQUESTS"] = "1"  # before any store exists

import psutil  # noqa: E402

from cliffsweep.orchestrator.specfile import load_spec  # noqa: E402
from cliffsweep.simulate.engine import Cluster  # noqa: E402
from cliffsweep.simulate.rehearsal import Overheads, rehearse  # noqa: E402
from cliffsweep.storage.counting import REQUESTS  # noqa: E402

PER_MODEL = 147


def spec_of(size: int, store: str):
    spec = load_spec("cliffsweep/configs/paper.yaml")
    data = spec.model_dump()
    models = len(data["models"])
    if size < models * PER_MODEL:
        data["models"] = data["models"][: max(1, size // PER_MODEL)]
        data["seeds"] = [0]
    else:
        data["seeds"] = list(range(max(1, size // (models * PER_MODEL))))
    data.update(store=store, ray_address=None, checkpoints=None, name=f"scale-{size}")
    return type(spec).model_validate(data)


class Sampler:
    """This process's RSS every second, and its CPU seconds from start to stop."""

    def __init__(self):
        self.me, self.peak, self.done = psutil.Process(), 0, threading.Event()
        self.cpu0 = sum(self.me.cpu_times()[:2])
        self.thread = threading.Thread(target=self._run, daemon=True)
        self.thread.start()

    def _run(self) -> None:
        while not self.done.wait(1.0):
            self.peak = max(self.peak, self.me.memory_info().rss)

    def stop(self) -> tuple[float, float]:
        self.done.set()
        self.thread.join()
        return self.peak / 1e9, sum(self.me.cpu_times()[:2]) - self.cpu0


def counted_ticks() -> list[int]:
    from cliffsweep.orchestrator.sweeprun import SweepRun

    ticks, tick = [0], SweepRun.tick

    def counting(self, *a, **kw):
        ticks[0] += 1
        return tick(self, *a, **kw)

    SweepRun.tick = counting
    return ticks


def successor_gap(trials) -> float:
    """The median of, for each trial started after the first ended, its start minus the latest
    end before it."""
    import numpy as np

    ends = np.sort(trials["finished_at"].dropna().astype("int64").to_numpy()) / 1e9
    starts = np.sort(trials["started_at"].dropna().astype("int64").to_numpy()) / 1e9
    gaps = [s - ends[i - 1] for s in starts if (i := np.searchsorted(ends, s)) > 0]
    return float(np.median(gaps)) if gaps else float("nan")


def one(size: int, cluster: Cluster, scale: float, ticks: list[int]) -> dict:
    tmp = tempfile.mkdtemp(prefix=f"scale-{size}-")
    spec = spec_of(size, f"{tmp}/store")
    REQUESTS.clear()
    ticks[0] = 0
    sampler = Sampler()
    t = time.time()
    out = rehearse(spec, cluster, scale, overheads=Overheads())
    wall = time.time() - t
    peak, cpu = sampler.stop()
    trials = out.store.read("trials")
    requests = dict(REQUESTS)
    states = glob.glob(f"{tmp}/**/experiment_state*.json", recursive=True) + \
        glob.glob(os.path.expanduser("~/ray_results/**/experiment_state*.json"), recursive=True)
    newest = max(states, key=os.path.getmtime) if states else None
    return {"trials": len(trials), "not done": int((trials["status"] != "done").sum()), "wall s": wall,
            "driver peak RSS GB": peak, "driver CPU ms/trial": 1000 * cpu / max(1, len(trials)), "ticks": ticks[0],
            "requests/tick": {k: round(v / max(1, ticks[0]), 2) for k, v in sorted(requests.items())},
            "Tune state KB": os.path.getsize(newest) / 1e3 if newest else float("nan"),
            "gap s": successor_gap(trials)}


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--sizes", type=int, nargs="+", default=[441, 1764])
    ap.add_argument("--nodes", type=int, default=2)
    ap.add_argument("--gpus-per-node", type=int, default=8)
    ap.add_argument("--cpus-per-node", type=int, default=64)
    ap.add_argument("--scale", type=float, default=1e-4, help="rehearsal seconds per planned second")
    args = ap.parse_args()
    cluster, ticks, rows = Cluster(args.nodes, args.gpus_per_node, args.cpus_per_node), counted_ticks(), {}
    for size in args.sizes:
        rows[size] = one(size, cluster, args.scale, ticks)
        print(size, rows[size], flush=True)
    if len(rows) > 1:
        lo, hi = rows[min(rows)], rows[max(rows)]
        print(f"largest / smallest: driver peak RSS {hi['driver peak RSS GB'] / lo['driver peak RSS GB']:.2f}, "
              f"CPU per trial {hi['driver CPU ms/trial'] / lo['driver CPU ms/trial']:.2f}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
