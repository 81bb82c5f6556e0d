"""`cliffsweep submit --slurm`: a sweep as a Slurm batch job (issue 53, docs/cluster.md "Slurm").

Two layouts, each an sbatch script written from the pure functions below (clusters/slurm/ holds
each as `--dry-run` prints it for a placeholder sweep; tests/test_slurm.py keeps them equal):

- a **job array** (`--array N`): N tasks, each a driver with its own local Ray on its node, all
  joining one store (`cliffsweep run FILE --join`: storage/claims.py shares the grid out);
- **one allocation** (no `--array`): a Ray cluster across the allocation's nodes (the head on the
  first, started with `srun ray start`), and one driver on the first node joining it.

Both survive what Slurm does to long jobs. A time limit: the script asks for
`--signal=B:USR1@<grace>`; on USR1 it stops the driver as on SIGTERM (interrupted trials go back
to pending, its claims are given back) and requeues its own job (`scontrol requeue`), which
resumes from the store. Preemption and `scancel`: SIGTERM, handled the same way (a preempting
partition with PreemptMode=REQUEUE requeues the job itself; a cancelled job stays cancelled, and
what it held passes to the other drivers).
"""

from __future__ import annotations

import math
import os
import re
import shlex
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path

TIME = re.compile(r"^(\d+-)?\d+(:\d{1,2}){0,2}$")
"""Slurm's --time forms: minutes, MM:SS, HH:MM:SS, D-HH, D-HH:MM, D-HH:MM:SS."""


@dataclass(frozen=True)
class SlurmJob:
    """What one `submit --slurm` asks of Slurm."""

    spec: str
    """The sweep file, an absolute path every node reads (a shared filesystem)."""
    name: str
    array: int | None = None
    """Tasks of a job array, each a driver; None: one allocation running one Ray cluster."""
    nodes: int = 1
    time: str = "1-00:00:00"
    partition: str | None = None
    cpus_per_task: int = 8
    gpus_per_node: int = 0
    grace_s: int = 300
    """Seconds before the time limit that USR1 arrives: enough to stop the driver cleanly."""
    workdir: str = "."
    python: str = sys.executable
    run_flags: tuple[str, ...] = field(default_factory=tuple)
    """More `cliffsweep run` flags (e.g. --eval-backend hf)."""

    @property
    def log(self) -> str:
        return f"{self.workdir}/cliffsweep-slurm/%x-%A_%a.out" if self.array else \
            f"{self.workdir}/cliffsweep-slurm/%x-%j.out"


def problems(job: SlurmJob) -> list[str]:
    out = []
    if job.array is not None and job.array < 1:
        out.append(f"--array: at least 1 task, got {job.array}")
    if job.array is not None and job.nodes != 1:
        out.append("--nodes: each array task is one driver on one node; give --nodes to the one-allocation layout")
    if not TIME.match(job.time):
        out.append(f"--time {job.time!r}: not a Slurm time (minutes, HH:MM:SS, D-HH:MM:SS)")
    if job.grace_s < 30:
        out.append(f"--grace {job.grace_s}: the driver needs at least 30 s to stop cleanly")
    if not Path(job.spec).is_absolute():
        out.append(f"the sweep file {job.spec} must be an absolute path (the job starts elsewhere)")
    return out


def _header(job: SlurmJob) -> list[str]:
    lines = ["#!/bin/bash", f"#SBATCH --job-name=cliffsweep-{job.name}"]
    if job.array:
        lines.append(f"#SBATCH --array=0-{job.array - 1}")
    lines += [f"#SBATCH --nodes={job.nodes}", "#SBATCH --ntasks-per-node=1", f"#SBATCH --cpus-per-task={job.cpus_per_task}",
              f"#SBATCH --time={job.time}"]
    if job.partition:
        lines.append(f"#SBATCH --partition={job.partition}")
    if job.gpus_per_node:
        lines.append(f"#SBATCH --gpus-per-node={job.gpus_per_node}")
    lines += ["#SBATCH --requeue", f"#SBATCH --signal=B:USR1@{job.grace_s}", f"#SBATCH --output={job.log}",
              "#SBATCH --open-mode=append"]
    return lines


SIGNALS = """\
# A time limit: Slurm sends USR1 to this script {grace} s before it (--signal=B:USR1@{grace}); the
# driver stops as on SIGTERM (interrupted trials back to pending, its claims given back) and the
# job requeues itself, to resume from the store, unless the driver finished the sweep meanwhile
# (exit 0). Preemption and scancel send SIGTERM: the driver stops the same way.
# (cliffsweep/slurm.py, docs/cluster.md "Slurm")
driver=""
stop_driver() {{ if [ -z "$driver" ]; then return 1; fi; kill -TERM "$driver" 2>/dev/null; wait "$driver"; }}
on_usr1() {{
  echo "cliffsweep-slurm: time limit near: stopping the driver, then requeueing job $SLURM_JOB_ID"
  if stop_driver; then echo "cliffsweep-slurm: the sweep finished meanwhile: not requeued"; exit 0; fi
  scontrol requeue "$SLURM_JOB_ID"; exit 0
}}
on_term() {{ echo "cliffsweep-slurm: SIGTERM (preempted or cancelled): stopping the driver"; stop_driver; exit 143; }}
trap on_usr1 USR1
trap on_term TERM"""


def _run(job: SlurmJob, where: str) -> str:
    """The driver's command: `where` (its Ray) before the user's flags, which may override it."""
    head = shlex.join([job.python, "-m", "cliffsweep.cli", "run", job.spec, "--join"])
    return " ".join([head, where, *(shlex.quote(f) for f in job.run_flags)])


def array_script(job: SlurmJob) -> str:
    return "\n".join([
        *_header(job), "", "set -u", f"cd {shlex.quote(job.workdir)}",
        "echo \"cliffsweep-slurm: task ${SLURM_ARRAY_TASK_ID} of job ${SLURM_ARRAY_JOB_ID} (job $SLURM_JOB_ID, "
        "restart ${SLURM_RESTART_COUNT:-0}) on $(hostname)\"",
        SIGNALS.format(grace=job.grace_s), "",
        "# one driver per task, its own Ray on this node, all joining one store (run --join)",
        _run(job, '--num-cpus "$SLURM_CPUS_PER_TASK"') + " &",
        "driver=$!", "wait \"$driver\"", "exit $?", ""])


def allocation_script(job: SlurmJob) -> str:
    ray = shlex.quote(str(Path(job.python).parent / "ray"))
    gpus = f" --num-gpus={job.gpus_per_node}" if job.gpus_per_node else ""
    return "\n".join([
        *_header(job), "", "set -u", f"cd {shlex.quote(job.workdir)}",
        SIGNALS.format(grace=job.grace_s), "",
        "# Ray's token authentication (docs/cluster.md \"Security\"): one token, ~/.ray/auth_token in the home",
        "# every node shares, and every Ray process of the allocation and the driver in token mode",
        "export RAY_AUTH_MODE=token",
        f"[ -s ~/.ray/auth_token ] || {ray} get-auth-token --generate >/dev/null",
        "# a Ray cluster across the allocation: its head on the first node, a worker on each other one",
        "nodes=($(scontrol show hostnames \"$SLURM_JOB_NODELIST\"))",
        "head=${nodes[0]}",
        "head_ip=$(srun --nodes=1 --ntasks=1 -w \"$head\" hostname --ip-address | awk '{print $1}')",
        "port=$((20000 + SLURM_JOB_ID % 20000))",
        f"srun --nodes=1 --ntasks=1 -w \"$head\" {ray} start --head --node-ip-address=\"$head_ip\" --port=\"$port\" "
        f"--num-cpus=\"$SLURM_CPUS_PER_TASK\"{gpus} --block &",
        "sleep 15",
        "if [ \"${#nodes[@]}\" -gt 1 ]; then",
        f"  srun --nodes=$(( ${{#nodes[@]}} - 1 )) --ntasks=$(( ${{#nodes[@]}} - 1 )) --exclude=\"$head\" {ray} start "
        f"--address=\"$head_ip:$port\" --num-cpus=\"$SLURM_CPUS_PER_TASK\"{gpus} --block &",
        "  sleep 10",
        "fi", "",
        "# the driver on the first node, joining that cluster and the store (other allocations may join too)",
        _run(job, '--ray-address "$head_ip:$port"') + " &",
        "driver=$!", "wait \"$driver\"", "exit $?", ""])


def script(job: SlurmJob) -> str:
    return array_script(job) if job.array else allocation_script(job)


def submit(job: SlurmJob) -> str:
    """Write the script beside the logs (<workdir>/cliffsweep-slurm/) and `sbatch` it; the job id."""
    folder = Path(job.workdir) / "cliffsweep-slurm"
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / f"{job.name}-{time.strftime('%Y%m%d-%H%M%S')}.sbatch"
    path.write_text(script(job))
    out = subprocess.run(["sbatch", "--parsable", str(path)], capture_output=True, text=True)
    if out.returncode != 0:
        raise RuntimeError(f"sbatch refused {path}: {out.stderr.strip() or out.stdout.strip()}")
    return out.stdout.strip().split(";")[0]


def sweep_gpus(resources, eval_) -> int:
    """GPUs a node needs to run one trial and its model's evaluator (the sweep's resources): what
    `submit --slurm` asks per node when --gpus-per-node is not given; 0 for a CPU sweep."""
    if resources.gpus_per_worker <= 0:
        return 0
    return max(1, math.ceil(resources.workers_per_trial * resources.gpus_per_worker + eval_.gpus_per_evaluator - 1e-9))


def gpu_problems(job: SlurmJob, needed: int) -> list[str]:
    if needed and job.gpus_per_node < needed:
        return [f"--gpus-per-node {job.gpus_per_node}: the sweep's resources need {needed} GPU(s) on a node (one "
                "trial's workers and one evaluator); ask at least that"]
    return []


def partition_problems(job: SlurmJob) -> list[str]:
    """A request the partition can never run (issue 63: 8 CPUs a task on a 2-CPU node sat as
    `PD (PartitionConfig)` forever): its nodes' CPUs and GPUs, as `sinfo` reports them, against
    what the job asks. Nothing is said where sinfo cannot tell."""
    argv = ["sinfo", "-h", "-o", "%c|%G", *(["-p", job.partition] if job.partition else [])]
    try:
        out = subprocess.run(argv, capture_output=True, text=True, timeout=30)
    except (OSError, subprocess.TimeoutExpired):
        return []
    nodes = [line.split("|", 1) for line in out.stdout.split() if "|" in line]
    if out.returncode != 0 or not nodes:
        return []
    cpus = max(int(re.sub(r"\D.*", "", c) or 0) for c, _ in nodes)
    gpus = max(sum(int(n) for n in re.findall(r"gpu(?::[^:(,]+)?:(\d+)", g)) for _, g in nodes)
    where = f"partition {job.partition!r}" if job.partition else "the default partition"
    said = []
    if job.cpus_per_task > cpus:
        said.append(f"--cpus-per-task {job.cpus_per_task}: the nodes of {where} have at most {cpus} CPU(s), so "
                    f"Slurm would never start it; ask at most {cpus}")
    if job.gpus_per_node > gpus:
        said.append(f"--gpus-per-node {job.gpus_per_node}: the nodes of {where} have at most {gpus} GPU(s) "
                    "(sinfo's GRES), so Slurm would never start it")
    return said


def cmd_slurm(args) -> int:
    from cliffsweep.orchestrator.specfile import load_spec

    spec = load_spec(args.spec)  # a wrong sweep file is refused here, not in the queue hours later
    needed = sweep_gpus(spec.resources, spec.eval)
    gpus = needed if args.gpus_per_node is None else args.gpus_per_node
    job = SlurmJob(spec=os.path.abspath(args.spec), name=spec.name, array=args.array, nodes=args.nodes,
                   time=args.time, partition=args.partition, cpus_per_task=args.cpus_per_task,
                   gpus_per_node=gpus, grace_s=args.grace, workdir=os.path.abspath(args.workdir),
                   run_flags=tuple(args.run_flag))
    bad = problems(job) + gpu_problems(job, needed) + ([] if args.dry_run else partition_problems(job))
    if args.gpus_per_node is None and needed:
        print(f"note: asking {needed} GPU(s) per node, what one trial and one evaluator of the sweep need; "
              "--gpus-per-node asks more", file=sys.stderr)
    if bad:
        print("error: cannot submit:\n" + "\n".join(f"  - {p}" for p in bad), file=sys.stderr)
        return 2
    if "://" not in spec.store_uri:
        print(f"note: the store {spec.store_uri} is a local path: every node must see it (a shared filesystem)",
              file=sys.stderr)
    if args.dry_run:
        print(script(job), end="")
        return 0
    try:
        job_id = submit(job)
    except (RuntimeError, FileNotFoundError) as e:
        print(f"error: {e}", file=sys.stderr)
        return 1
    print(job_id)
    return 0


class SlurmTarget:
    """`cliffsweep submit --to slurm` (submit.Target)."""

    help = "Slurm, with sbatch: a job array of drivers joining the store, or one allocation running a Ray cluster"

    def add_arguments(self, group) -> None:
        add_arguments(group)

    def submit(self, args) -> int:
        return cmd_slurm(args)


def add_arguments(j) -> None:
    """`submit --to slurm`'s options (its argument group of `submit`)."""
    j.add_argument("--array", type=int, help="Slurm: N array tasks, each a driver joining the store (default: one "
                                             "allocation running one Ray cluster)")
    j.add_argument("--nodes", type=int, default=1, help="Slurm, one allocation: nodes of its Ray cluster")
    j.add_argument("--time", default="1-00:00:00", help="Slurm: the time limit (the job requeues itself before it)")
    j.add_argument("--partition", help="Slurm: the partition")
    j.add_argument("--cpus-per-task", type=int, default=8, help="Slurm: CPUs per task (each driver's local Ray)")
    j.add_argument("--gpus-per-node", type=int, help="Slurm: GPUs per node (default: what one trial and one evaluator "
                                                     "of the sweep need, 0 for a CPU sweep)")
    j.add_argument("--grace", type=int, default=300, help="Slurm: seconds before the time limit that the driver stops")
    j.add_argument("--workdir", default=".", help="Slurm: where the job runs and its script and logs go")
    j.add_argument("--run-flag", action="append", default=[], metavar="FLAG",
                   help="Slurm: a `cliffsweep run` flag for every driver (repeatable, e.g. --run-flag=--eval-backend=hf)")
    j.add_argument("--dry-run", action="store_true", help="Slurm: print the script, submit nothing")


EXAMPLES = {
    "array.sbatch": SlurmJob(spec="/path/to/sweep.yaml", name="my-sweep", array=4, time="1-00:00:00", partition="gpu",
                             cpus_per_task=8, gpus_per_node=1, workdir="/path/to/workdir",
                             python="/path/to/venv/bin/python"),
    "allocation.sbatch": SlurmJob(spec="/path/to/sweep.yaml", name="my-sweep", nodes=2, time="1-00:00:00",
                                  partition="gpu", cpus_per_task=32, gpus_per_node=4, workdir="/path/to/workdir",
                                  python="/path/to/venv/bin/python"),
}
"""clusters/slurm/'s two scripts: what `--dry-run` prints for a placeholder sweep (array: `submit --slurm
/path/to/sweep.yaml --array 4 --partition gpu --gpus-per-node 1`; allocation: `--nodes 2 --cpus-per-task 32
--gpus-per-node 4`), kept equal by tests/test_slurm.py."""
