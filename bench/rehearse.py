"""The schedule simulator against the real stack (issue 22 parts 2 and 4): a rehearsal of a part
of the paper grid on a local cluster of fake GPU nodes, every piece of work a timed wait of its
planned length scaled by --scale (cliffsweep/simulate/rehearsal.py), beside the simulator's
prediction for the same sweep, cluster and scaled plan.

    .venv/bin/python bench/rehearse.py                         # 2 x 8 GPUs, 3 paper models, 252 trials
    .venv/bin/python bench/rehearse.py --kills 120 300         # two node kills
    .venv/bin/python bench/rehearse.py --models 1 --methods sft --lrs 2 --epochs 1 --nodes 1 --gpus-per-node 4
    .venv/bin/python bench/rehearse.py --autoscale 2 --idle 30   # no node at start, at most 2, gone when idle 30 s

First a calibration (a small rehearsal of --calibrate trials on one node) measures what the plan
does not price here: a Train job's start and a point's reports, in wall seconds on this machine
(unscaled); the simulator gets them. Prints the measured and predicted makespans and their ratio.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from cliffsweep.orchestrator.specfile import load_spec  # noqa: E402
from cliffsweep.simulate.engine import Cluster  # noqa: E402
from cliffsweep.simulate.rehearsal import Overheads, calibrate, rehearse  # noqa: E402


def sub_spec(path: str, models: int, methods: list[str] | None, lrs: int | None, epochs: list[int] | None, store: str):
    """A part of a sweep file: its first `models` models, the named methods, every other lr..."""
    spec = load_spec(path)
    data = spec.model_dump()
    data["models"] = data["models"][:models]
    if methods:
        data["methods"] = [m for m in data["methods"] if m["name"] in methods]
    if lrs:
        step = max(1, len(data["lrs"]) // lrs)
        data["lrs"] = data["lrs"][::step][:lrs]
    if epochs:
        data["epochs"] = epochs
    data.update(store=store, ray_address=None, checkpoints=None, name=f"rehearsal-{spec.name}")
    return type(spec).model_validate(data)


def losses(store, spec) -> dict[str, int]:
    """The exactly-once invariant, counted (tests/invariant.py asserts it): trials not done,
    checkpoints reported but not evaluated on every task, duplicated evaluation rows; and what
    the faults cost (retried trials, evaluations sent again)."""
    from cliffsweep.storage import ledger

    trials, ck, ev, err = (store.read(t) for t in ("trials", "checkpoints", "evals", "errors"))
    tasks = [spec.tasks.learn.name] + [t.name for t in spec.tasks.retain]
    return {"trials": len(trials), "not done": int((trials["status"] != "done").sum()),
            "checkpoints": len(ck), "unevaluated": len(ledger.unevaluated(ck, ev, tasks, set(trials["trial_id"]))),
            "duplicated eval rows": int(ev.duplicated(["trial_id", "step", "task", "metric"]).sum()),
            "trial retries": int((err["kind"] == "trial_retry").sum()) if len(err) else 0,
            "evaluations sent again": int((err["kind"] == "eval_resent").sum()) if len(err) else 0}


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--spec", default="cliffsweep/configs/paper.yaml")
    ap.add_argument("--models", type=int, default=3)
    ap.add_argument("--methods", nargs="*", default=["sft", "sib", "ewc", "kl"])
    ap.add_argument("--lrs", type=int, default=None, help="keep this many of the file's lrs")
    ap.add_argument("--epochs", type=int, nargs="*", default=None)
    ap.add_argument("--nodes", type=int, default=2)
    ap.add_argument("--gpus-per-node", type=int, default=8)
    ap.add_argument("--cpus-per-node", type=int, default=64)
    ap.add_argument("--scale", type=float, default=0.05, help="rehearsal seconds per planned second")
    ap.add_argument("--kills", type=float, nargs="*", default=[], help="seconds into the sweep to kill a node")
    ap.add_argument("--job-start", type=float, default=None, help="skip the calibration: a job's start (s)")
    ap.add_argument("--point-overhead", type=float, default=None, help="skip the calibration: a point's (s)")
    ap.add_argument("--start", type=float, default=None, help="with the two above: the sweep's own start (s)")
    ap.add_argument("--json", help="write the numbers here")
    ap.add_argument("--autoscale", type=int, default=None, metavar="MAX_NODES",
                    help="on an autoscaling fake cluster: no GPU node at start, at most MAX_NODES (--nodes ignored)")
    ap.add_argument("--idle", type=float, default=30.0, help="with --autoscale: an idle node goes after this (s)")
    args = ap.parse_args()

    cluster = Cluster(args.nodes, args.gpus_per_node, args.cpus_per_node)
    tmp = tempfile.mkdtemp(prefix="rehearse-")
    if args.job_start is None or args.point_overhead is None:
        t = time.time()
        over = calibrate(sub_spec(args.spec, 1, ["sft"], None, [1], f"{tmp}/calibration"), Cluster(1, 8, args.cpus_per_node))
        print(f"calibration ({time.time() - t:.0f} s): a Train job's start {over.job_start_s:.1f} s, a point's "
              f"overhead {over.trial_s:.1f} s, the sweep's start {over.start_s:.1f} s (wall, this machine)", flush=True)
    else:
        over = Overheads(args.job_start, args.point_overhead, args.start or 0.0, cores=float(os.cpu_count() or 1))
    spec = sub_spec(args.spec, args.models, args.methods, args.lrs, args.epochs, f"{tmp}/store")
    if args.autoscale:
        return autoscaled(spec, cluster, args, over)
    t = time.time()
    out = rehearse(spec, cluster, args.scale, kills=tuple(args.kills), overheads=over)
    trials = out.store.read("trials")
    p = out.predicted
    print(f"rehearsal of {len(trials)} trials ({p.jobs} Train jobs, {p.concurrency} at once) on {args.nodes} x "
          f"{args.gpus_per_node} fake GPUs, scale {args.scale:g}, node kills at {[round(k) for k in out.kills]} s: "
          f"ran {time.time() - t:.0f} s")
    print(f"makespan measured {out.makespan:.0f} s, simulated {p.makespan:.0f} s: simulated / measured = "
          f"{p.makespan / out.makespan:.3f}; ideal {p.ideal:.0f} s")
    lost = losses(out.store, spec)
    print("what the store holds: " + ", ".join(f"{k} {v}" for k, v in lost.items()))
    if args.json:
        Path(args.json).write_text(json.dumps({
            "trials": len(trials), "jobs": p.jobs, "measured_s": out.makespan, "simulated_s": p.makespan,
            "ideal_s": p.ideal, "kills": out.kills, "overheads": over.__dict__,
            "scale": args.scale, "store": lost}, indent=1))
    return 0


def autoscaled(spec, cluster, args, over) -> int:
    """Part 5: the rehearsal on an autoscaling fake cluster; node-seconds up vs busy."""
    from cliffsweep.simulate.autoscale import rehearse_autoscaling

    t = time.time()
    out = rehearse_autoscaling(spec, cluster, args.scale, args.autoscale, args.idle, overheads=over)
    use = out.use.summary()
    down = "never (within the wait)" if out.scaled_down_s is None else f"{out.scaled_down_s:.0f} s after the sweep"
    print(f"autoscaled rehearsal of {len(out.store.read('trials'))} trials, at most {args.autoscale} x "
          f"{args.gpus_per_node} fake GPUs, scale {args.scale:g}: ran {time.time() - t:.0f} s")
    print(f"makespan measured {out.makespan:.0f} s; simulated with every node up from the start "
          f"{out.predicted.makespan:.0f} s; no worker node left {down}")
    print("nodes: " + ", ".join(f"{k} {v:.2f}" if isinstance(v, float) else f"{k} {v}" for k, v in use.items()))
    lost = losses(out.store, spec)
    print("what the store holds: " + ", ".join(f"{k} {v}" for k, v in lost.items()))
    if args.json:
        Path(args.json).write_text(json.dumps({
            "measured_s": out.makespan, "simulated_full_cluster_s": out.predicted.makespan,
            "scaled_down_after_s": out.scaled_down_s, "nodes": use, "store": lost, "scale": args.scale,
            "max_nodes": args.autoscale, "idle_s": args.idle}, indent=1))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
