"""The sweep driver: spec -> Ray Tune trials, each a Ray Train job of trials -> evaluator
pool -> store.

    run_sweep(spec)
      1. check what can be checked before anything starts: the sweep file, each model's
         config, every task file (preflight.py), the store's files (storage/health.py); take the
         store's lease (storage/lease.py); write the resolved spec
      2. start Ray; the run (SweepRun: progress, evaluator pool started on first use, inbox,
         Tune's job queue, refiner) finds what the store already holds (SweepRun.resume)
      3. evaluate each base model once, and every checkpoint of an earlier run that still
         lacks an evaluation (storage/ledger.py); compute once-per-model method statistics; a
         model whose base evaluation fails does not train (SweepRun.prepare_training)
      4. Tune runs the remaining trials as Train jobs (SweepRun.queue_jobs, tune_jobs);
         each checkpoint a trial reports is handed to the pool at once (training never waits
         for evaluation)
      5. settle the ledger from the store: every reported checkpoint evaluated, then the
         trials whose checkpoints all are count as `done` (SweepRun.finish_evaluations);
         compact the store, release the lease; the CLI's exit code says how it ended
         (outcome.py)
"""

from __future__ import annotations

import logging
import math
import os
import signal
import threading
import time

import yaml

from cliffsweep.sweep.status import Phase
from cliffsweep.orchestrator.policies import sweep_concurrency, trial_driver_resources
from cliffsweep.orchestrator.jobqueue import JobQueue, sweep_searcher
from cliffsweep.orchestrator.refiner import max_refine_trials, max_verify_trials
from cliffsweep.sweep.spec import SweepSpec
from cliffsweep.orchestrator.sweeprun import SweepRun
from cliffsweep.storage.claims import Claims, live_drivers
from cliffsweep.storage.health import ensure_readable
from cliffsweep.storage.lease import Lease, StoreBusy
from cliffsweep.storage.store import SPEC_FILE, Store, absolute_uri
from cliffsweep.orchestrator.raystart import RAY_START_TIMEOUT_S, start_ray
from cliffsweep.orchestrator.terminal import log_path, third_party_to_log

# Per-trial overhead is a first-class cost (docs/benchmarks.md). Ray Train V2 polls its workers
# every 2 s by default, which adds up to 2 s per report and per trial end; 1 s halves that (0.2 s
# was tried: controller CPU per trial was the same within noise, ~7 s, dominated by imports).
# Its metrics and structured-logging callbacks cost CPU in every controller and worker.
RAY_ENV = {
    "RAY_TRAIN_HEALTH_CHECK_INTERVAL_S": "1.0",
    "RAY_TRAIN_METRICS_ENABLED": "0",
    "RAY_TRAIN_ENABLE_CONTROLLER_STRUCTURED_LOGGING": "0",
    "RAY_TRAIN_ENABLE_WORKER_STRUCTURED_LOGGING": "0",
    "TOKENIZERS_PARALLELISM": "false",
}
# A local cluster has no preemptible nodes: skip the per-trial preemption-watcher actor.
LOCAL_RAY_ENV = {"RAY_TRAIN_ENABLE_PREEMPTION_WATCHER": "0"}


def stop_on_sigterm() -> None:
    """SIGTERM (what `kill`, `timeout`, Kubernetes and Slurm send) stops the sweep as Ctrl-C does:
    it goes to whatever handles SIGINT now (Tune's graceful stop while trials run, else a
    KeyboardInterrupt). Installed after `ray.init`, whose own handler exits at once and left
    interrupted trials `running` (issue 29). Signal handlers belong to the main thread only."""
    if threading.current_thread() is not threading.main_thread():
        return

    def as_interrupt(signum, frame) -> None:
        handler = signal.getsignal(signal.SIGINT)
        if callable(handler):
            handler(signal.SIGINT, frame)
        else:
            raise KeyboardInterrupt

    signal.signal(signal.SIGTERM, as_interrupt)


def init_ray(spec: SweepSpec, num_cpus: int | None, verbose: bool, node_ip: str | None = None) -> None:
    """`node_ip`: the address a local cluster gives its node (None: Ray's choice). Not a firewall:
    Ray 2.60 binds its gRPC servers (GCS, raylet, workers) on every interface and its agents on
    the machine's network address whatever it is (docs/design.md "What a local run exposes");
    Ray's token authentication, on by default, guards them."""
    import ray

    if ray.is_initialized():
        return
    env = {"env_vars": dict(RAY_ENV)}
    if spec.ray_address:
        ray.init(address=spec.ray_address, runtime_env=env, log_to_driver=verbose)
    else:
        env["env_vars"].update(LOCAL_RAY_ENV)
        # No metrics collection: every Ray process records and exports metrics that nothing
        # reads on a local cluster (the store holds the sweep's own timings). No worker
        # prestart, neither ongoing nor for the first driver: every actor of a sweep carries its
        # own runtime env, so prestarted idle workers are rarely the ones used, and each costs a
        # Python start with `import ray` (about 2.5 CPU-seconds; docs/benchmarks.md).
        # address="local": a cluster of its own even when another runs on this machine (`ray start`,
        # a notebook's): ray.init() alone would join that one, or fail on num_cpus
        ray.init(address="local", num_cpus=num_cpus or local_cpus(spec), include_dashboard=False,
                 **({"_node_ip_address": node_ip} if node_ip else {}), runtime_env=env, log_to_driver=verbose,
                 _system_config={"enable_metrics_collection": False, "enable_worker_prestart": False,
                                 "prestart_worker_first_driver": False})


def local_cpus(spec: SweepSpec) -> int:
    """Logical CPUs of a local cluster: the machine's cores for training, plus the evaluators'
    reservation on top. Evaluators sit idle between checkpoints, so reserving whole cores for
    them would leave a small machine no room to train."""
    e = spec.eval
    return (os.cpu_count() or 1) + math.ceil(e.cpus_per_evaluator * e.evaluators_per_model * len(spec.models))


class ClusterTooSmall(RuntimeError):
    """A trial could never be scheduled on this cluster; the message gives the numbers."""


def check_capacity(spec: SweepSpec, total_cpus: float, total_gpus: float) -> None:
    """Fail fast, with numbers, when a trial can never be scheduled (Ray would wait forever)."""
    e, r = spec.eval, spec.resources
    eval_cpus = e.cpus_per_evaluator * e.evaluators_per_model * len(spec.models)
    eval_gpus = e.gpus_per_evaluator * e.evaluators_per_model * len(spec.models)
    need_cpus = r.cpus_per_worker * r.workers_per_trial + 0.01
    need_gpus = r.gpus_per_worker * r.workers_per_trial
    problems = []
    if eval_cpus + need_cpus > total_cpus:
        problems.append(f"CPU: evaluators take {eval_cpus:g} and one trial needs {need_cpus:g}, "
                        f"but the cluster has {total_cpus:g}")
    if eval_gpus + need_gpus > total_gpus:
        problems.append(f"GPU: evaluators take {eval_gpus:g} and one trial needs {need_gpus:g}, "
                        f"but the cluster has {total_gpus:g}")
    if problems:
        raise ClusterTooSmall("the sweep cannot be scheduled on this cluster: " + "; ".join(problems)
                           + " (lower resources.* / eval.*, or add nodes: an autoscaling cluster "
                           "grows only up to its max_workers)")


def concurrency_of(spec: SweepSpec) -> int:
    """Train jobs at once: the spec's, else what the cluster's CPUs (or driver slots) allow."""
    import ray

    resources = ray.cluster_resources()
    if not spec.ray_address:  # an autoscaling cluster grows on demand; a local one cannot
        check_capacity(spec, resources.get("CPU", 1), resources.get("GPU", 0))
    return sweep_concurrency(spec, resources)


def pin_train_coordinator() -> None:
    """Ray Train (2.60) starts a detached "AutoscalingCoordinator" actor the first time a Train
    job starts, with a hard affinity to that job's node, and every later job waits on it with
    infinite retries. If that node dies, no later Train job ever starts: the actor cannot come
    back on a dead node (seen in the rehearsal: a killed fake node hung the sweep). Created here
    first, it lives on the driver's node, which the sweep cannot lose anyway."""
    try:
        from ray.data._internal.cluster_autoscaler.default_autoscaling_coordinator import (
            get_or_create_autoscaling_coordinator)
    except ImportError:  # another Ray: its Train jobs find their coordinator themselves
        return
    get_or_create_autoscaling_coordinator()


TUNE_STATE_EVERY_S = 7 * 86400
"""Seconds between two saves of Tune's experiment state (TUNE_GLOBAL_CHECKPOINT_S, a user's own
setting wins): a week, so in practice once, when the run ends."""


def tune_jobs(run: SweepRun, queue: JobQueue, concurrency: int, n_todo: int, verbose: bool) -> None:
    """Ray Tune runs the queue's Train jobs, `concurrency` at a time, each retried up to
    resources.max_retries; returns when the queue is finished or Tune was interrupted."""
    from ray import tune

    from cliffsweep.orchestrator.tunecallback import sweep_callback, trial_fn

    spec, r = run.spec, run.spec.resources
    run.progress.phase = Phase.TRAINING
    # Tune logs every failed trial's traceback; the callback says each root cause once instead
    # (orchestrator/failures.py) and the store keeps every traceback. --verbose shows them all.
    os.environ["TUNE_PRINT_ALL_TRIAL_ERRORS"] = "1" if verbose else "0"
    # Tune's experiment state is never read back (the store is the truth: outcome.py), yet by
    # default Tune rewrites it, every trial in it, each 19x as long as the last write took: work
    # that grows with the grid (issue 62 part 2, ray#64231). Written once at the end instead.
    os.environ.setdefault("TUNE_GLOBAL_CHECKPOINT_S", str(TUNE_STATE_EVERY_S))
    # Nor are Tune's own per-trial result files (CSV, JSON, TensorBoard): the store holds every
    # report. Their TensorBoard logger alone imported tensorboardX and torch into the driver,
    # about 3 CPU-seconds a run (docs/benchmarks.md "A run's start-up, session 10").
    os.environ.setdefault("TUNE_DISABLE_AUTO_CALLBACK_LOGGERS", "1")
    if not verbose:  # its closing "Trials did not complete" list of Tune's trial names
        logging.getLogger("ray.tune.tune").setLevel(logging.CRITICAL)
    pin_train_coordinator()
    tune.Tuner(
        tune.with_resources(trial_fn(), trial_driver_resources(r.cluster_roles)),
        tune_config=tune.TuneConfig(
            # an upper bound: the searcher says when it is finished (refiner.py)
            search_alg=sweep_searcher(queue),
            # (+ the grid: trials adopted from a driver that left, issue 53)
            num_samples=len(queue.items) + n_todo + len(run.grid) + max_refine_trials(spec) + max_verify_trials(spec),
            max_concurrent_trials=concurrency, reuse_actors=True),
        run_config=tune.RunConfig(
            storage_path=absolute_uri(run.tables.store.uri).rstrip("/") + "/_tune", name=f"run-{int(time.time())}",
            failure_config=tune.FailureConfig(max_failures=r.max_retries),
            callbacks=[sweep_callback(run)], verbose=0),
    ).fit()
    run.book.interrupted()


def run_sweep(spec: SweepSpec, *, eval_backend: str | None = None, retry_failed: bool = False,
              num_cpus: int | None = None, verbose: bool = False, stream=None, rehearsal=None,
              force: bool = False, node_ip: str | None = None, start_timeout: float = RAY_START_TIMEOUT_S,
              join: bool = False) -> Store:
    """`rehearsal` (sweep/rehearsal.py): every piece of work a timed wait of its planned length
    (cliffsweep/simulate/rehearsal.py starts such a run on fake GPU nodes). The store is checked
    and its lease taken (storage/health.py, storage/lease.py; `force` takes a live-looking one)
    before anything is written or started. `join` (issue 53): work beside the store's other
    drivers instead (no lease; every driver claims each piece of work before doing it,
    storage/claims.py); without it, a store another live driver works is refused."""
    from cliffsweep.orchestrator.preflight import check_preflight

    check_preflight(spec, eval_backend)
    store = Store(spec.store_uri)
    ensure_readable(store)  # a damaged store is named file by file before Ray starts
    lease = None if join else Lease(store, force)
    try:
        others = [] if join or force else live_drivers(store)
        if others:
            d = others[0]
            raise StoreBusy(f"{len(others)} cliffsweep run(s) work the store {store.uri} with --join (the oldest: "
                            f"{d.get('label', d.get('host'))}). Nothing was started. Add --join to work beside "
                            f"them, or wait for them (`cliffsweep status {store.uri}`).")
        claims = Claims(store, shared=join)
        try:
            _sweep(spec, store, eval_backend, retry_failed, num_cpus, verbose, stream, rehearsal, node_ip,
                   start_timeout, claims)
        finally:
            claims.close()
    finally:
        if lease is not None:
            lease.release()
    return store


def _sweep(spec: SweepSpec, store: Store, eval_backend, retry_failed, num_cpus, verbose, stream, rehearsal,
           node_ip: str, start_timeout: float, claims: Claims) -> None:
    from cliffsweep.tracking.sync import start_syncer

    store.write_text("spec.yaml", yaml.safe_dump(spec.model_dump(), sort_keys=False))
    store.write_json(SPEC_FILE, spec.model_dump())
    syncer = start_syncer(spec, store.uri)  # mirrors the store to MLflow / W&B / TensorBoard, off this thread
    import ray  # noqa: F401 - before the streams move: Ray's logger binds its handler to stderr on import

    with third_party_to_log(None if verbose else log_path(store.uri, spec.name)) as term:
        start_ray(lambda: init_ray(spec, num_cpus, verbose, node_ip), spec.ray_address, verbose, start_timeout)
        stop_on_sigterm()
        concurrency = concurrency_of(spec)
        run = SweepRun(spec, store, eval_backend or spec.eval.backend, claims, rehearsal, concurrency,
                       stream or term.out, term.err)
        todo = run.resume(retry_failed)
        with run.progress:
            todo = run.prepare_training(todo)
            queue = run.queue_jobs(todo)
            if queue.items or run.sharing.elsewhere:  # another driver's: wait for them, or adopt them if it goes
                tune_jobs(run, queue, concurrency, len(todo), verbose)
            run.finish_evaluations()
        run.close()
        if syncer is not None:  # before compaction: its last round still writes `tracking` rows
            syncer.close()
        # One file per table instead of one per write unit: `status` / `analyze` / the next run read
        # the store in a few requests (docs/store.md, docs/benchmarks.md). Not while another driver
        # writes (its next unit file could share a folded one's name): the last one compacts.
        if not [d for d in live_drivers(store) if d.get("token") != claims.driver.token]:
            store.compact()
        if term.log is not None:
            print(f"Tune's and Ray's own messages: {term.log}", file=term.out, flush=True)
