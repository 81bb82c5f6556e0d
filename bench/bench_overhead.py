"""Orchestration overhead vs pure compute, measured side by side on one sweep.

    .venv/bin/python bench/bench_overhead.py [SWEEP.yaml] [--store DIR]

Runs the sweep (default: the packaged toy sweep) into a fresh store and prints, per trial,
wall time (Tune start -> finish) next to its training compute, and for the whole run the
wall time next to the sum of train and eval compute. Overhead per trial = trial wall time
minus its training loop time, split into setup (trial start -> first training step: Ray
Train's controller and worker group, imports, model and data loading) and teardown (last
report -> trial finished).

    --by-process   also sample every process's CPU time (psutil, every 0.5 s) and print it
                   grouped by Ray process title (TrainController, RayTrainWorker, evaluator, ...):
                   where the machine's CPU went, per trial.
"""

from __future__ import annotations

import argparse
import os
import shutil
import tempfile
import threading
import time
from collections import defaultdict


def cpu_jiffies() -> list[int] | None:
    """Machine-wide CPU time (user, nice, system, idle) in clock ticks, from /proc/stat."""
    try:
        with open("/proc/stat") as f:
            return [int(x) for x in f.readline().split()[1:5]]
    except OSError:
        return None


class ProcessSampler:
    """CPU seconds per process kind, sampled with psutil: each sample's CPU delta of a process
    goes to the title it has at that moment (Ray retitles a worker process when an actor or
    task starts in it). A process that exits between two samples loses at most its last
    interval, so the totals are slight under-counts."""

    def __init__(self, interval: float = 0.5):
        self.interval, self._stop = interval, threading.Event()
        self.last: dict[int, float] = {}
        self.cpu: dict[str, float] = defaultdict(float)
        self.pids: dict[str, set] = defaultdict(set)
        self._thread = threading.Thread(target=self._run, daemon=True)

    @staticmethod
    def label(cmdline: list[str], name: str) -> str:
        first = " ".join(cmdline) if cmdline else name
        if first.startswith("ray::"):  # Ray's process titles: ray::<Actor>.<method> or ray::IDLE
            return first.split(" ")[0].split(".")[0]
        exe = os.path.basename(cmdline[0]) if cmdline else name
        if exe.startswith("python") and len(cmdline) > 1:  # a Python daemon: name it by its script
            script = next((a for a in cmdline[1:] if a.endswith(".py")), cmdline[1])
            return f"python {os.path.basename(script)}"
        return exe or name

    def _sample(self, first: bool) -> None:
        import psutil

        me = os.getpid()
        for p in psutil.process_iter(["pid", "name", "cmdline", "cpu_times"]):
            try:
                info = p.info
                t = info["cpu_times"].user + info["cpu_times"].system
            except (psutil.NoSuchProcess, psutil.AccessDenied, AttributeError):
                continue
            pid = info["pid"]
            label = "driver (cliffsweep)" if pid == me else self.label(info["cmdline"] or [], info["name"] or "?")
            # processes already running when sampling starts count from then on only
            delta = t - self.last.get(pid, t if first else 0.0)
            self.last[pid] = t
            self.cpu[label] += delta
            self.pids[label].add(pid)

    def _run(self) -> None:
        self._sample(first=True)
        while not self._stop.wait(self.interval):
            self._sample(first=False)

    def __enter__(self):
        self._thread.start()
        return self

    def __exit__(self, *exc):
        self._stop.set()
        self._thread.join()

    def totals(self) -> dict[str, tuple[float, int]]:
        return {k: (c, len(self.pids[k])) for k, c in self.cpu.items()}


def main() -> None:
    from cliffsweep.orchestrator.driver import run_sweep
    from cliffsweep.orchestrator.specfile import default_spec_path, load_spec, parse_spec

    ap = argparse.ArgumentParser()
    ap.add_argument("spec", nargs="?", default=str(default_spec_path()))
    ap.add_argument("--store", default=None)
    ap.add_argument("--by-process", action="store_true", help="CPU per Ray process kind (psutil)")
    args = ap.parse_args()
    store_dir = args.store or tempfile.mkdtemp(prefix="cliffsweep-bench-")
    shutil.rmtree(store_dir, ignore_errors=True)
    data = load_spec(args.spec).model_dump()
    data["store"] = store_dir
    spec = parse_spec(data)

    sampler = ProcessSampler() if args.by_process else None
    t0, cpu0 = time.time(), cpu_jiffies()
    if sampler:
        with sampler:
            store = run_sweep(spec)
    else:
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
    print_setup_phases(trials)
    if "checkpoint_seconds" in trials:  # issue 21: what checkpoints cost the training loops
        ck_s, ck_b = trials["checkpoint_seconds"].fillna(0), trials["checkpoint_bytes"].fillna(0)
        print(f"\n{'trial':48} {'ckpt s':>8} {'of train':>9} {'ckpt MB':>9}")
        for tid, s, b, t in zip(trials["trial_id"], ck_s, ck_b, train):
            print(f"{tid:48} {s:8.2f} {s / max(t, 1e-9):9.1%} {b / 1e6:9.1f}")
        print(f"checkpoints: {ck_s.sum():.1f} s of {train.sum():.1f} s training ({ck_s.sum() / max(train.sum(), 1e-9):.1%}), "
              f"{ck_b.sum() / 1e9:.2f} GB written")

    if cpu0 and cpu1:
        hz = os.sysconf("SC_CLK_TCK")
        d = [(b - a) / hz for a, b in zip(cpu0, cpu1)]
        busy = sum(d[:3])
        print(f"machine CPU over the sweep: busy {busy:.0f} core-s of {sum(d):.0f} ({busy / max(sum(d), 1e-9):.0%}; "
              f"user {d[0]:.0f}, nice {d[1]:.0f} (Ray workers), system {d[2]:.0f}, idle {d[3]:.0f})")
    if sampler:
        n = max(len(trials), 1)
        print("\nCPU by process kind (psutil, every 0.5 s):")
        print(f"{'process':40} {'core-s':>8} {'procs':>6} {'per trial':>10}")
        for k, (c, procs) in sorted(sampler.totals().items(), key=lambda kv: -kv[1][0]):
            if c >= 1.0:
                print(f"{k:40} {c:8.1f} {procs:6d} {c / n:10.2f}")


def print_setup_phases(trials) -> None:
    """Where the setup went, phase by phase (the trials table's setup_phases, issue 15)."""
    import json

    import pandas as pd

    from cliffsweep.sweep.reports import SETUP_PHASES

    rows = [json.loads(p) for p in trials["setup_phases"].dropna()]
    if not rows:
        return
    table = pd.DataFrame(rows).reindex(columns=[name for name, _ in SETUP_PHASES])
    print(f"\nsetup by phase over {len(table)} trial(s), seconds (first_step: the first step's own compute, "
          "after the setup):")
    print(f"{'phase':18} {'mean':>7} {'min':>7} {'max':>7}")
    for name in table.columns:
        col = table[name].dropna()
        if len(col):
            print(f"{name:18} {col.mean():7.2f} {col.min():7.2f} {col.max():7.2f}")


if __name__ == "__main__":
    main()
