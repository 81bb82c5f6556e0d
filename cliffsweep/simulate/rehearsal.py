"""The simulator checked against the real stack (issue 22 part 2): a rehearsal.

`rehearse` starts a local Ray cluster of fake GPU nodes (`ray.cluster_utils.Cluster`: each node
a real raylet that declares GPUs it does not have, as Ray's own scale tests do) and runs the
real `run_sweep` on it: driver, Tune, Train jobs, evaluator pool, inbox, store, ledger. Each
piece of work is a timed wait of its planned length (plan.plan_spec), scaled by `scale`
(sweep/rehearsal.py: the Train workers, statistics tasks and evaluators wait instead of
computing). `simulate` predicts the same sweep on the same cluster from the same scaled plan;
the two makespans are compared.

What the real stack adds and the plan does not price: each Train job's start (Tune's trial
actor, Ray Train's controller and worker group, the process group) and each point's reports
(Ray Train's report barrier, polled by its controller). On a real GPU cluster they are seconds
next to minutes of training; in a rehearsal scaled down they are not, so they are measured here
(`calibrate`: three tiny rehearsals) and handed to the simulator unscaled (`Overheads`). Job
starts are CPU work (Python processes importing Ray and torch), and every fake node's run on
this machine's cores: the simulator shares those cores among the starts in progress.

Node kills (part 4): `kills` seconds into the sweep (the benchmark's way), or where the sweep
stands at named fault points (`kill_at`, the test's way: cliffsweep/faults.py `hold`). One fake GPU
node is removed (its raylet and every process on it: trainers, evaluators, Tune's trial actors)
and a node of the same shape added back, as a cluster's autoscaler would replace it. A kill at a
held point removes the node of the process held there, so it hits that trial's training however
long the stack took to start on a loaded machine (a kill timed in seconds from the first
checkpoint once landed between trials and hit nothing: issue 50 part 6). Tune retries the jobs that lost workers,
Ray restarts the evaluators; the store must still hold every point done once and every
checkpoint evaluated once.
"""

from __future__ import annotations

import os
import threading
import time
from dataclasses import dataclass, replace

from cliffsweep.planner import bill
from cliffsweep.simulate.engine import Cluster, Result, simulate
from cliffsweep.sweep.rehearsal import TrialWork, Rehearsal

NOMINAL_STEPS_PER_POINT = 10
"""A rehearsal's steps between two checkpoints (only their order matters: nothing trains)."""


def scaled_plans(plans, scale: float):
    """Copies of `plans` (plan.ModelPlan) with every piece of work `scale` times as long."""
    out = []
    for p in plans:
        q = replace(p, trial_costs=[replace(pt, setup_s=pt.setup_s * scale, train_s=pt.train_s * scale,
                                       blocked_s=pt.blocked_s * scale, eval_s=pt.eval_s * scale) for pt in p.trial_costs],
                    stats_s={k: v * scale for k, v in p.stats_s.items()}, base_eval_s=p.base_eval_s * scale)
        out.append(q)
    return out


def rehearsal_of(plans, scale: float, engine_start_s: float = bill.ENGINE_START_S) -> Rehearsal:
    """The timed waits of a rehearsal of `plans` (already scaled: `scaled_plans`)."""
    points = {}
    for p in plans:
        for pt in p.trial_costs:
            steps = tuple(NOMINAL_STEPS_PER_POINT * k for k in range(1, pt.checkpoints + 1))
            points[pt.trial_id] = TrialWork(setup_s=pt.setup_s, train_s=pt.train_s + pt.blocked_s, steps=steps,
                                            stats_s=p.stats_s.get(pt.stats_key, 0.0) if pt.stats_key else 0.0)
    return Rehearsal(scale=scale, trials=points, eval_s={p.name: p.trial_costs[0].eval_s if p.trial_costs else 0.0 for p in plans},
                     base_eval_s={p.name: p.base_eval_s for p in plans}, engine_start_s=engine_start_s * scale)


@dataclass
class Rehearsed:
    makespan: float
    """Seconds from the sweep's start (Ray already up) to its last evaluation recorded."""
    predicted: Result
    store: object
    kills: list[float]
    """When nodes were killed (seconds into the sweep)."""


def start_cluster(cluster: Cluster, env: dict[str, str]):
    """A local Ray cluster: a head that holds nothing (the driver runs there) and `cluster.nodes`
    fake GPU nodes."""
    import ray
    from ray.cluster_utils import Cluster as RayCluster

    rc = RayCluster(initialize_head=True, head_node_args={
        "num_cpus": 0, "num_gpus": 0, "include_dashboard": False,
        "_system_config": {"enable_metrics_collection": False, "enable_worker_prestart": False}})
    for _ in range(cluster.nodes):
        add_node(rc, cluster)
    ray.init(address=rc.address, runtime_env={"env_vars": env}, log_to_driver=False)
    return rc


def add_node(rc, cluster: Cluster):
    return rc.add_node(num_cpus=cluster.cpus_per_node, num_gpus=cluster.gpus_per_node)


def _kill_nodes(rc, cluster: Cluster, at: list[float], t0: float, done: threading.Event, log: list[float]) -> None:
    """On the main thread (Ray starts a node's processes from there only): at each of `at`
    seconds after `t0`, a fake GPU node removed at once and one of the same shape added."""
    for when in at:
        if done.wait(max(0.0, t0 + when - time.time())):
            return
        _replace_node(rc, cluster, next(iter(rc.worker_nodes)))
        log.append(time.time() - t0)


def _kill_held(rc, cluster: Cluster, points: list[str], faults_dir: str, t0: float, done: threading.Event,
               log: list[float]) -> None:
    """On the main thread: for each of `points` in turn, once a process holds there (faults.py
    `hold`), the fake node it runs on removed and one of the same shape added. The held process
    dies with its node, so the kill cannot miss it; the point is released all the same, for a
    process that reached it elsewhere."""
    from cliffsweep import faults

    for point in points:
        held = faults.wait_reached(point, faults_dir, timeout_s=900, stop=done)
        if held is None:
            return
        victim = next((n for n in rc.worker_nodes if n.node_id == held["node"]), None)
        if victim is None:
            raise RuntimeError(f"the process held at {point} runs on no fake GPU node ({held})")
        _replace_node(rc, cluster, victim)
        log.append(time.time() - t0)
        faults.release(point, faults_dir)


def _replace_node(rc, cluster: Cluster, victim) -> None:
    rc.remove_node(victim, allow_graceful=False)
    add_node(rc, cluster)


@dataclass(frozen=True)
class Overheads:
    """What the real stack costs here beyond the planned work (wall seconds, unscaled): `calibrate`."""

    job_start_s: float = 0.0
    trial_s: float = 0.0
    start_s: float = 0.0
    """The sweep's own start before its first Train job can start (Ray actors, Tune)."""
    cores: float | None = None
    """The cores job starts share (every fake node's processes run on this machine's)."""

    def predict(self, spec, plans, cluster: Cluster, scale: float) -> Result:
        """The simulator's makespan for `plans` (already scaled) on `cluster` with these overheads
        and the engine start scaled as the rehearsal's evaluators scale it."""
        return simulate(spec, plans, cluster, engine_start_s=bill.ENGINE_START_S * scale,
                        job_start_s=self.job_start_s, trial_overhead_s=self.trial_s,
                        start_s=self.start_s, start_cores=self.cores)


def rehearse(spec, cluster: Cluster, scale: float, plans=None, kills: tuple[float, ...] = (),
             overheads: Overheads = Overheads(), stream=None, kill_at: tuple[str, ...] = (),
             faults_dir: str | None = None) -> Rehearsed:
    """Run `spec` (its store: a fresh one) as a rehearsal on a fake cluster of `cluster`'s shape;
    the simulator's prediction for the same scaled plan beside it. `kill_at`: fault points
    (faults.py) where the sweep's process is held and its node killed, in turn; their markers go
    to `faults_dir`."""
    import ray

    from cliffsweep.orchestrator.driver import LOCAL_RAY_ENV, RAY_ENV, run_sweep
    from cliffsweep.planner.plan import plan_spec

    plans = scaled_plans(plans if plans is not None else plan_spec(spec), scale)
    predicted = overheads.predict(spec, plans, cluster, scale)
    if kill_at and faults_dir is None:
        raise ValueError("kill_at needs a faults_dir for the held points' markers")
    held = {"CLIFFSWEEP_FAULTS": ";".join(f"{p}=hold" for p in kill_at), "CLIFFSWEEP_FAULTS_DIR": faults_dir} if kill_at else {}
    rc = start_cluster(cluster, {**RAY_ENV, **LOCAL_RAY_ENV, **held})
    # a cluster's address, as on a real one: Ray Train's placement-group cleaner then runs
    # (trainables/job.py drops it on a local cluster), which frees what a job on a killed
    # node held; without it, the GPUs its placement group held elsewhere stay taken for good
    spec = spec.model_copy(update={"ray_address": rc.address})
    done, log, result, failure = threading.Event(), [], [], []

    def sweep() -> None:  # off the main thread, which kills nodes (Tune runs in any thread)
        try:
            result.append(run_sweep(spec, rehearsal=rehearsal_of(plans, scale), stream=stream))
        except BaseException as exc:  # noqa: BLE001 - raised on the main thread below
            failure.append(exc)
        finally:
            done.set()

    try:
        t0 = time.time()
        runner = threading.Thread(target=sweep, name="rehearsal-sweep")
        runner.start()
        if kill_at:
            _kill_held(rc, cluster, list(kill_at), faults_dir, t0, done, log)
        _kill_nodes(rc, cluster, list(kills), t0, done, log)
        runner.join()
        if failure:
            raise failure[0]
        store = result[0]
        makespan = last_evaluation(store) - t0
    finally:
        done.set()
        ray.shutdown()
        rc.shutdown()
    return Rehearsed(makespan, predicted, store, log)


def last_evaluation(store) -> float:
    """When the sweep's last evaluation was written (epoch seconds)."""
    ev = store.read("evals")
    return float(ev["evaluated_at"].max().timestamp())


def calibrate(spec, cluster: Cluster, n: int = 4) -> Overheads:
    """What the real stack costs on this machine beyond the planned work, from three rehearsals
    of `spec`'s first model and method with no planned work, one job at a time: `n` points in `n`
    jobs, `n` points in one job, `2n` points in one job. The second and third differ by `n`
    points' overhead, the first and second by `n - 1` job starts; what is left of the second is
    the sweep's own start."""
    data = spec.model_dump(exclude_unset=True)  # what the file set: defaults re-derive
    data["methods"], data["models"] = data["methods"][:1], data["models"][:1]
    data["epochs"] = spec.epochs[:1]
    lrs = [float(x) for x in spec.lrs]
    while len(lrs) < 2 * n:
        lrs.append(lrs[-1] * 1.1)
    runs = []
    for k, (points, per_job) in enumerate(((n, 1), (n, n), (2 * n, 2 * n))):
        d = dict(data, lrs=lrs[:points], store=f"{spec.store_uri}-calibration{k}")
        d["resources"] = dict(data.get("resources", {}), max_concurrent_trials=1, trials_per_job=per_job)
        runs.append(rehearse(type(spec).model_validate(d), cluster, 1e-6).makespan)
    return overheads_from(runs, n, float(os.cpu_count() or 1))


def overheads_from(runs: list[float], n: int, cores: float) -> Overheads:
    """The three calibration makespans (`calibrate`: n points in n jobs, n in one job, 2n in one
    job) as per-point, per-job and per-sweep overheads. Pure: the second and third differ by n
    points, the first and second by n - 1 job starts."""
    point = max(0.0, (runs[2] - runs[1]) / n)
    job = max(0.0, (runs[0] - runs[1]) / max(1, n - 1))
    return Overheads(job_start_s=job, trial_s=point, start_s=max(0.0, runs[1] - job - n * point), cores=cores)
