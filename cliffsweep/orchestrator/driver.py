"""The sweep driver: spec -> Ray Tune grid of Ray Train trials -> evaluator pool -> store.

    run_sweep(spec)
      1. check what can be checked before anything starts (preflight.py); write the resolved
         spec; find what the store already holds (resume)
      2. start Ray and the evaluator pool (one engine per model, started once)
      3. evaluate each base model once, and every checkpoint of an earlier run that still
         lacks an evaluation (ledger.py); compute once-per-model method statistics; a model
         whose base evaluation fails does not train
      4. Tune runs the remaining grid points; each checkpoint a trial reports is handed to
         the pool at once (training never waits for evaluation)
      5. settle the ledger from the store: every reported checkpoint evaluated, then the
         trials whose checkpoints all are count as `done`
"""

from __future__ import annotations

import json
import os
import time
from datetime import datetime, timezone
from typing import Any

import yaml

from cliffsweep.faults import maybe_fail
from cliffsweep.storage import ledger
from cliffsweep.orchestrator.evaltracker import EvalTracker
from cliffsweep.orchestrator.grid import Trial, base_trial_id, expand_grid
from cliffsweep.orchestrator.inbox import InboxReader, start_inbox
from cliffsweep.orchestrator.policies import (TrialStatus, cluster_concurrency, default_concurrency, final_status,
                                              pack, role_resources, trials_per_job, trials_to_run)
from cliffsweep.orchestrator.pool import EvalRequest, start_pool
from cliffsweep.orchestrator.progress import Progress
from cliffsweep.orchestrator.refine import max_refine_trials
from cliffsweep.orchestrator.refiner import Refiner, TrialQueue, stored_refined_trials, sweep_searcher
from cliffsweep.orchestrator.spec import SweepSpec
from cliffsweep.trainables.stats import compute_stats, stats_key, stats_relpath, stats_task_resources
from cliffsweep.storage.store import Store
from cliffsweep.trainables.config import JobRun, TrainConfig

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


def _now() -> datetime:
    return datetime.now(timezone.utc)


def trial_row(t: Trial, status: TrialStatus, **extra: Any) -> dict[str, Any]:
    row = {k: v for k, v in t.to_dict().items() if k not in ("dtype",)}
    row["method_params"] = json.dumps(t.method_params, sort_keys=True)
    row["status"] = status.value
    row.update(extra)
    return row


def _abs_uri(uri: str) -> str:
    return uri if "://" in uri else os.path.abspath(os.path.expanduser(uri))


class SweepRun:
    """State of one `cliffsweep run`; the Tune callback and the driver loop share it."""

    def __init__(self, spec: SweepSpec, store: Store, eval_backend: str, verbose: bool = False):
        self.spec, self.store, self.backend, self.verbose = spec, store, eval_backend, verbose
        self.grid = expand_grid(spec)  # + refined trials, as refinement adds them (refiner.py)
        self.by_id = {t.trial_id: t for t in self.grid}
        self.status: dict[str, str] = {}  # trial id -> its status, as last recorded
        self.stats_uri: dict[str, str | None] = {}
        self.checkpoint_root = _abs_uri(spec.checkpoint_uri)
        self.task_names = [spec.tasks.learn.name] + [t.name for t in spec.tasks.retain]
        self.attempts: dict[str, int] = {}
        self.started: dict[str, datetime] = {}
        self.last: dict[str, dict] = {}
        self.last_at: dict[str, datetime] = {}
        self.finished: set[str] = set()  # trials whose training ended in this run
        self.trained: dict[str, int | None] = {}  # trained, not yet settled -> final step
        self.finished_at: dict[str, datetime] = {}
        self.ckpt_steps: dict[str, set[int]] = {}  # reported checkpoints per trial (ledger)
        self.stored_rows: dict[str, dict] = {}  # trials rows of earlier runs
        self.progress: Progress | None = None
        self.refiner: Refiner | None = None
        self.inbox_name = f"cliffsweep-inbox-{os.getpid()}-{id(self)}"
        self.inbox: InboxReader | None = None  # set once Ray is up
        self.per_job = 1  # grid points per Train job (policies.trials_per_job), set once Ray is up
        self.jobs_running: set[str] = set()
        self.requeue = None  # hands JobRuns back to Tune's queue (set by run_sweep)

    # --- trial rows ---------------------------------------------------------------------------
    def add_trials(self, trials: list[Trial]) -> None:
        self.grid += [t for t in trials if t.trial_id not in self.by_id]
        self.by_id.update({t.trial_id: t for t in trials})

    def record(self, tid: str, status: TrialStatus, **extra: Any) -> None:
        self.status[tid] = status.value
        if self.refiner is not None and status.terminal:
            self.refiner.dirty = True
        if tid not in self.last and tid in self.stored_rows and status is TrialStatus.DONE:
            # trained by an earlier run: only its status changes
            row = dict(self.stored_rows[tid], status=status.value, **extra)
            self.store.write("trials", tid, [row])
            return
        t = self.by_id[tid]
        last = self.last.get(tid, {})
        started = self.started.get(tid)
        timing: dict[str, Any] = {}
        # A job's later point starts where the previous one ended (its `point_started` mark).
        began = (last.get("setup_marks") or {}).get("point_started") or (started.timestamp() if started else None)
        if began and last.get("loop_started_at"):
            timing["setup_seconds"] = last["loop_started_at"] - began
        if began and last.get("setup_marks"):
            from cliffsweep.trainables.loop import phase_seconds

            timing["setup_phases"] = json.dumps(phase_seconds(began, last["setup_marks"]))
        if extra.get("finished_at") and tid in self.last_at:
            timing["teardown_seconds"] = (extra["finished_at"] - self.last_at[tid]).total_seconds()
        self.store.write("trials", tid, [trial_row(
            t, status, attempt=self.attempts.get(tid, 0), started_at=started, **timing,
            steps=last.get("step"), total_steps=last.get("total_steps"), final_loss=last.get("loss"), train_seconds=last.get("train_seconds"),
            resumed_from_step=last.get("resumed_from_step"),
            config=self.point_config(t, None).to_json(), **extra)])

    # --- configs ------------------------------------------------------------------------------
    def point_config(self, t: Trial, stats_uri: str | None) -> TrainConfig:
        """What one grid point's training needs across the Ray boundary, typed (trainables/config.py)."""
        from cliffsweep.trainables.parallel import torch_threads

        s = self.spec
        return TrainConfig(
            trial=t, recipe=s.recipe, learn=s.tasks.learn, retain=s.tasks.retain[0],
            store_uri=_abs_uri(s.store_uri), checkpoint_root=self.checkpoint_root, stats_uri=stats_uri,
            eval_points=s.eval.points_per_trial, every_epoch=s.eval.every_epoch, strategy=s.resources.strategy,
            torch_threads=torch_threads(s.resources.cpus_per_worker), max_step_rows=s.tracking.max_step_rows)

    def job_configs(self, trials: list[Trial], size: int | None = None) -> list[JobRun]:
        """`trials` as Train jobs of up to `size` (default: self.per_job) points of one model each
        (policies.pack)."""
        import hashlib

        jobs = []
        for idx in pack([f"{t.model_path}|{t.dtype}" for t in trials], size or self.per_job):
            points = tuple(self.point_config(trials[i], self.stats_uri.get(trials[i].trial_id)) for i in idx)
            ids = "\n".join(p.trial.trial_id for p in points)
            job_id = f"job-{points[0].trial.model}-{hashlib.sha1(ids.encode()).hexdigest()[:10]}"
            jobs.append(JobRun(job_id=job_id, points=points, resources=self.spec.resources,
                               resources_per_worker=worker_resources(self.spec.resources),
                               checkpoint_root=self.checkpoint_root, local_cluster=not self.spec.ray_address,
                               inbox=self.inbox_name))
        return jobs

    def on_report(self, tid: str, metrics: dict[str, Any], tracker: EvalTracker) -> None:
        """A trial's report, from the inbox: keep it as the trial's latest; evaluate its
        checkpoint; a job's later trial starts (`begin`), a trial's training ends (`final`)."""
        if tid in self.finished:
            return  # a late duplicate of an ended trial (a retried job re-reporting its end)
        if metrics.get("event") == "begin":
            self.begin(tid)
            return
        self.last[tid] = {**self.last.get(tid, {}), **metrics}
        self.last_at[tid] = datetime.fromtimestamp(metrics["reported_at"], timezone.utc)
        if self.progress is not None and tid in self.progress.running:
            self.progress.running[tid] = self.last[tid]
        if metrics.get("checkpoint_path"):
            step = int(metrics["step"])
            maybe_fail(f"driver_report:{tid}:{step}")
            # The trial's rank 0 records it too; writing it here as well covers a worker that
            # died between its report and its row (idempotent).
            rec = ledger.record_checkpoint(self.store, self.checkpoint_root, tid, step,
                                           float(metrics["epoch"]), metrics["checkpoint_kind"])
            self.evaluate(rec, tracker)
            # `cliffsweep status` shows how far it got; a late report of a trial that Ctrl-C
            # already sent back to pending must not mark it running again
            if self.status.get(tid) == TrialStatus.RUNNING.value:
                self.record(tid, TrialStatus.RUNNING)
        if metrics.get("final"):
            status = final_status(self.last[tid])
            self.finish(tid, status, error="non-finite training loss" if status is TrialStatus.DIVERGED else None)

    def begin(self, tid: str) -> None:
        """A trial of a job starts training (the job's first at the job's start, each later one
        when the one before it ended)."""
        if self.progress is None or tid in self.progress.running or tid in self.finished:
            return
        self.attempts[tid] = self.attempts.get(tid, 0) + 1  # as the inbox counts (Inbox.put)
        self.started.setdefault(tid, _now())
        self.record(tid, TrialStatus.RUNNING)
        self.progress.status["running"] += 1
        self.progress.running[tid] = {}

    def finish(self, tid: str, status: TrialStatus, **extra: Any) -> None:
        """A trial's training ended (trained, diverged) or it failed for good."""
        self.finished.add(tid)
        if self.progress is not None:
            if self.progress.running.pop(tid, None) is not None:
                self.progress.status["running"] -= 1
            self.progress.status[status.value] += 1
            if tid in self.started:
                self.progress.trial_seconds.append((_now() - self.started[tid]).total_seconds())
        self.finished_at[tid] = _now()
        self.record(tid, status, finished_at=self.finished_at[tid], **extra)
        if status is TrialStatus.TRAINED:
            self.trained[tid] = _int_or_none(self.last.get(tid, {}).get("total_steps"))

    def evaluate(self, rec: ledger.CheckpointRecord, tracker: EvalTracker, known_unevaluated: bool = False) -> None:
        self.ckpt_steps.setdefault(rec.trial_id, set()).add(rec.step)
        t = self.by_id[rec.trial_id]
        tracker.submit(EvalRequest(
            trial_id=t.trial_id, model=t.model, method=t.method, series=t.series, optimizer=t.optimizer,
            lr=t.lr, epochs=t.epochs, seed=t.seed, step=rec.step, epoch=rec.epoch, checkpoint=rec.uri,
            kind=rec.kind), known_unevaluated=known_unevaluated)

    def reconcile(self, tracker: EvalTracker) -> None:
        """From the store: every reported checkpoint of this grid that lacks an evaluation is
        sent (once per run: one that already failed in this run waits for the next run)."""
        ck, ev = self.store.read("checkpoints"), self.store.read("evals")
        tracker.evaluated |= ledger.evaluated_keys(ev, self.task_names)
        for rec in ledger.records(ck):
            if rec.trial_id in self.by_id:
                self.ckpt_steps.setdefault(rec.trial_id, set()).add(rec.step)
        for rec in ledger.unevaluated(ck, ev, self.task_names, set(self.by_id)):
            if rec.key not in tracker.failed_keys:
                self.evaluate(rec, tracker, known_unevaluated=True)

    def prune(self, tid: str, final: int | None, steps: set[int]) -> None:
        """A done trial's checkpoints that nothing will read again go (spec.keep_checkpoints)."""
        if final is None:
            return
        drop, drop_state = ledger.prunable(final, steps, self.spec.keep_checkpoints)
        try:
            ledger.delete_checkpoints(self.checkpoint_root, tid, drop, final if drop_state else None)
        except OSError as exc:  # space not freed is no reason to stop the sweep; say so
            self.store.write("errors", f"prune__{tid}", [{"trial_id": tid, "step": -1, "kind": "prune",
                                                          "message": f"{type(exc).__name__}: {exc}", "at": _now()}])

    def settle(self, tracker: EvalTracker) -> list[str]:
        """Trained trials whose checkpoints are all evaluated become `done`; returns them."""
        settled = []
        for tid, final in list(self.trained.items()):
            steps = self.ckpt_steps.get(tid, set())
            if ledger.trial_settled(final, steps, {s for s in steps if (tid, s) in tracker.evaluated}):
                del self.trained[tid]
                self.record(tid, TrialStatus.DONE, finished_at=self.finished_at.get(tid) or _now())
                settled.append(tid)
                self.prune(tid, final, steps)
        return settled


def worker_resources(res) -> tuple[tuple[str, float], ...]:
    """Ray resources of one Train worker: its CPUs and GPU share, and its node role's slot."""
    out = {"CPU": res.cpus_per_worker, **({"GPU": res.gpus_per_worker} if res.gpus_per_worker > 0 else {}),
           **role_resources(res.cluster_roles, "trainer", res.gpus_per_worker)}
    return tuple(sorted(out.items()))


def base_request(model: str) -> EvalRequest:
    return EvalRequest(trial_id=base_trial_id(model), model=model, method="base", series="base",
                       optimizer="", lr=0.0, epochs=0, seed=0, step=0, epoch=0.0, checkpoint=None)


def init_ray(spec: SweepSpec, num_cpus: int | None, verbose: bool) -> None:
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
        # prestart: every actor of a sweep carries its own runtime env, so prestarted idle
        # workers are rarely the ones used, and each costs a Python start with `import ray`.
        ray.init(num_cpus=num_cpus or local_cpus(spec), include_dashboard=False,
                 runtime_env=env, log_to_driver=verbose,
                 _system_config={"enable_metrics_collection": False, "enable_worker_prestart": False})


def local_cpus(spec: SweepSpec) -> int:
    """Logical CPUs of a local cluster: the machine's cores for training, plus the evaluators'
    reservation on top. Evaluators sit idle between checkpoints, so reserving whole cores for
    them would leave a small machine no room to train."""
    import math

    e = spec.eval
    return (os.cpu_count() or 1) + math.ceil(e.cpus_per_evaluator * e.evaluators_per_model * len(spec.models))


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
        raise RuntimeError("the sweep cannot be scheduled on this cluster: " + "; ".join(problems)
                           + " (lower resources.* / eval.*, or add nodes: an autoscaling cluster "
                           "grows only up to its max_workers)")


def ensure_stats(run: SweepRun, todo: list[Trial]) -> tuple[dict[str, str | None], dict[str, str]]:
    """Compute each distinct (model, method stats inputs) once, in parallel Ray tasks, unless
    the store already holds it. Returns (trial_id -> stats URI or None when the method needs
    none, trial_id -> error for trials whose statistics could not be computed)."""
    import ray

    from cliffsweep.trainables.methods import build_method

    spec, store = run.spec, run.store
    r = spec.recipe
    learn, retain = spec.tasks.learn.model_dump(), spec.tasks.retain[0].model_dump()
    out: dict[str, str | None] = {}
    needs: dict[str, list[str]] = {}  # stats relpath -> trial ids
    jobs: dict[str, Trial] = {}
    for t in todo:
        inputs = build_method(t.method, t.method_params).stats_inputs()
        if inputs is None:
            out[t.trial_id] = None
            continue
        key = stats_key(t.model_path, t.method, inputs, learn, retain, r.stats_examples,
                        r.max_seq_len, r.batch_size)
        rel = stats_relpath(t.model, t.method, key)
        out[t.trial_id] = f"{_abs_uri(store.uri).rstrip('/')}/{rel}"
        needs.setdefault(rel, []).append(t.trial_id)
        if not store.exists(rel):
            jobs.setdefault(rel, t)
    res = spec.resources
    task = ray.remote(max_retries=1, resources=role_resources(res.cluster_roles, "trainer", res.gpus_per_worker),
                      **stats_task_resources(res.cpus_per_worker, res.gpus_per_worker, res.workers_per_trial)
                      )(compute_stats)
    refs = {task.remote(t.model_path, t.dtype, t.method, t.method_params, learn, retain,
                        r.stats_examples, r.max_seq_len, r.batch_size, r.micro_batch_size,
                        r.gradient_checkpointing): rel for rel, t in jobs.items()}
    failed: dict[str, str] = {}
    for ref, rel in refs.items():
        try:
            store.put_bytes(rel, ray.get(ref))
        except Exception as exc:  # one method's statistics must not stop the other trials
            msg = f"statistics {rel} could not be computed: {exc}"
            store.write("errors", f"stats__{rel.replace('/', '__')}", [{
                "trial_id": needs[rel][0], "step": -1, "kind": "stats", "message": msg, "at": _now()}])
            failed.update({tid: msg for tid in needs[rel]})
    return out, failed


def run_sweep(spec: SweepSpec, *, eval_backend: str | None = None, retry_failed: bool = False,
              num_cpus: int | None = None, verbose: bool = False, stream=None) -> Store:
    import ray
    from ray import tune

    from cliffsweep.orchestrator.preflight import check_preflight

    check_preflight(spec, eval_backend)
    store = Store(spec.store_uri)
    store.write_text("spec.yaml", yaml.safe_dump(spec.model_dump(), sort_keys=False))
    store.write_json("spec.json", spec.model_dump())
    run = SweepRun(spec, store, eval_backend or spec.eval.backend, verbose)
    from cliffsweep.tracking.sync import start_syncer

    syncer = start_syncer(spec, store.uri)  # mirrors the store to MLflow / W&B / TensorBoard, off this thread

    stored = store.read("trials")
    run.add_trials(stored_refined_trials(spec, run.grid, stored.to_dict("records")))
    run.stored_rows = {r["trial_id"]: r for r in stored.to_dict("records") if r["trial_id"] in run.by_id}
    status = {tid: r["status"] for tid, r in run.stored_rows.items()}
    run.status.update(status)
    todo_ids = set(trials_to_run([t.trial_id for t in run.grid], status, retry_failed))
    todo = [t for t in run.grid if t.trial_id in todo_ids]
    finished = [t.trial_id for t in run.grid if t.trial_id not in todo_ids]
    # trained by an earlier run, their evaluations not all in: settled during this one
    run.trained = {tid: _int_or_none(run.stored_rows[tid].get("steps")) for tid in finished
                   if status.get(tid) == TrialStatus.TRAINED.value}
    for t in todo:
        run.record(t.trial_id, TrialStatus.PENDING)

    init_ray(spec, num_cpus, verbose)
    total_cpus = ray.cluster_resources().get("CPU", 1)
    if not spec.ray_address:  # an autoscaling cluster grows on demand; a local one cannot
        check_capacity(spec, total_cpus, ray.cluster_resources().get("GPU", 0))
    n_eval_cpus = spec.eval.cpus_per_evaluator * spec.eval.evaluators_per_model * len(spec.models)
    r = spec.resources
    concurrency = r.max_concurrent_trials or cluster_concurrency(
        ray.cluster_resources(), r.cluster_roles,
        default_concurrency(total_cpus, r.cpus_per_worker * r.workers_per_trial, n_eval_cpus))

    progress = run.progress = Progress(len(run.grid), concurrency, stream=stream)
    progress.status.update({s: sum(status.get(t) == s for t in finished)
                            for s in ("done", "trained", "diverged", "failed")})
    tracker = EvalTracker(
        store, lambda: start_pool({m.name: (m.path, m.dtype) for m in spec.models}, spec, store.uri, run.backend),
        run.task_names)
    run.inbox = InboxReader(start_inbox(run.inbox_name))

    def tick(wait: float = 0.0) -> None:
        for tid, metrics in run.inbox.poll():
            run.on_report(tid, metrics, tracker)
        tracker.poll(timeout=wait)
        for _tid in run.settle(tracker):
            progress.status["trained"] -= 1
            progress.status["done"] += 1
        if run.refiner is not None:
            run.refiner.check()
        progress.evals_done, progress.evals_failed = tracker.done, tracker.failed
        progress.evals_pending = len(tracker.pending)
        progress.refresh()

    def drain() -> None:
        while tracker.pending:
            tick(wait=0.5)

    with progress:
        for m in spec.models:
            tracker.submit(base_request(m.name))
        run.reconcile(tracker)  # checkpoints an earlier run reported but never evaluated
        progress.phase = "statistics"
        progress.refresh(force=True)
        stats, stats_failed = ensure_stats(run, todo)
        run.stats_uri.update(stats)
        for tid, msg in stats_failed.items():
            run.record(tid, TrialStatus.FAILED, error=msg, finished_at=_now())
            progress.status["failed"] += 1
        # A model whose base evaluation fails would fail every evaluation of its checkpoints:
        # its trials do not train (the error says why) instead of burning the compute.
        progress.phase = "base evaluation"
        while any((base_trial_id(m.name), 0) in tracker.queued for m in spec.models):
            tick(wait=0.5)
        broken = {m.name: tracker.failed_keys[(base_trial_id(m.name), 0)] for m in spec.models
                  if (base_trial_id(m.name), 0) in tracker.failed_keys}
        for t in todo:
            if t.model in broken and t.trial_id not in stats_failed:
                run.record(t.trial_id, TrialStatus.FAILED, finished_at=_now(), error=(
                    f"not trained: the base evaluation of model {t.model!r} failed, so no checkpoint of it "
                    f"could be evaluated; fix the model or its eval settings and re-run with --retry-failed. "
                    f"The evaluation's error:\n{broken[t.model]}"))
                progress.status["failed"] += 1
        todo = [t for t in todo if t.trial_id not in stats_failed and t.model not in broken]
        run.per_job = trials_per_job(len(todo), concurrency, r.trials_per_job)
        # While a job runs it may hand trials back (one that failed for good: its other,
        # unstarted trials get a job of their own), so Tune is not told "finished" before.
        queue = TrialQueue(run.job_configs(todo), lambda: bool(run.jobs_running) or refiner.more_may_come(),
                           pump=lambda: tick(wait=0.2))
        run.requeue = queue.add

        def queue_refined(trials: list[Trial]) -> None:
            """Refinement added these trials: record them pending and hand them to Tune."""
            run.add_trials(trials)
            new_stats, failed = ensure_stats(run, trials)
            run.stats_uri.update(new_stats)
            for t in trials:
                if t.trial_id in failed:
                    run.record(t.trial_id, TrialStatus.FAILED, error=failed[t.trial_id], finished_at=_now())
                else:
                    run.record(t.trial_id, TrialStatus.PENDING)
            queue.add(run.job_configs([t for t in trials if t.trial_id not in failed]))
            progress.n_trials = len(run.grid)

        refiner = run.refiner = Refiner(run, tracker, queue_refined)
        refiner.check()  # a series an earlier run left between two rounds
        if queue.items:
            progress.phase = "training"
            tuner = tune.Tuner(
                tune.with_resources(_trial_fn(), {"CPU": 0.01, **role_resources(r.cluster_roles, "driver")}),
                tune_config=tune.TuneConfig(
                    # an upper bound: the searcher says when it is finished (refiner.py)
                    search_alg=sweep_searcher(queue),
                    num_samples=len(queue.items) + len(todo) + max_refine_trials(spec),
                    max_concurrent_trials=concurrency, reuse_actors=True),
                run_config=tune.RunConfig(
                    storage_path=_abs_uri(store.uri).rstrip("/") + "/_tune",
                    name=f"run-{int(time.time())}",
                    failure_config=tune.FailureConfig(max_failures=r.max_retries),
                    callbacks=[_callback(run, tracker, progress, tick)],
                    verbose=0,
                ),
            )
            tuner.fit()
            # Tune returns early when interrupted (Ctrl-C): trials it stopped go back to pending,
            # which is what a re-run picks up; their evaluations so far are kept.
            for t in run.grid:
                if run.status.get(t.trial_id) == TrialStatus.RUNNING.value and t.trial_id not in run.finished:
                    run.record(t.trial_id, TrialStatus.PENDING)
        progress.phase = "evaluating"
        drain()
        # The store is the truth: whatever a report or a dead worker left unevaluated, now.
        run.reconcile(tracker)
        drain()
        for _tid in run.settle(tracker):
            progress.status["trained"] -= 1
            progress.status["done"] += 1
        progress.phase = "finished"
    tracker.close()
    ray.kill(run.inbox.actor)
    if syncer is not None:  # before compaction: its last round still writes `tracking` rows
        syncer.close()
    # One file per table instead of one per write unit: `status` / `analyze` / the next run read
    # the store in a few requests (docs/store.md, docs/benchmarks.md).
    store.compact()
    return store


def _int_or_none(v) -> int | None:
    return None if v is None or v != v else int(v)


def _trial_fn():
    from cliffsweep.trainables.trial import run_job

    def trial(config: dict) -> None:
        run_job(config["cfg"])

    return trial


def _error_text(trial) -> str:
    path = getattr(trial, "error_file", None)
    if path and os.path.exists(path):
        with open(path) as f:
            return f.read()  # the store keeps its head and its tail (store.clip_message)
    return str(getattr(trial, "error_msg", None) or "trial failed (no error text captured)")


# Tune pickles its callbacks with the experiment state; the live objects (store, Ray refs,
# the terminal) stay here and the callback carries only its key.
_LIVE: dict[int, tuple] = {}


def _callback(run: SweepRun, tracker: EvalTracker, progress: Progress, tick):
    from ray import tune

    key = id(run)
    _LIVE[key] = (run, tracker, progress, tick)

    class SweepCallback(tune.Callback):
        """Tune events (one Tune trial = one Train job of several grid points) -> trial rows and
        progress; reports, checkpoints and each point's start and end come through the inbox."""

        def __reduce__(self):
            return (_callback_from_key, (key,))

        def on_step_begin(self, iteration, trials, **info):
            tick()

        def on_trial_start(self, iteration, trials, trial, **info):
            job: JobRun = trial.config["cfg"]
            run.jobs_running.add(job.job_id)
            todo = [tid for tid in job.trial_ids if tid not in run.finished]
            if todo:
                run.begin(todo[0])  # the job trains its points in order

        def _flush_reports(self):
            """Every report a job made is in the inbox before Tune sees it end (inbox.py)."""
            for tid, metrics in run.inbox.flush():
                run.on_report(tid, metrics, tracker)

        def _unended(self, job: JobRun) -> list[str]:
            return [tid for tid in job.trial_ids if tid not in run.finished]

        def on_trial_complete(self, iteration, trials, trial, **info):
            job: JobRun = trial.config["cfg"]
            self._flush_reports()
            run.jobs_running.discard(job.job_id)
            for tid in self._unended(job):  # never silently: a job must end each of its trials
                run.finish(tid, TrialStatus.FAILED, error=(
                    f"Train job {job.job_id} returned without reporting the end of this trial's training"))
            tick()

        def on_trial_recover(self, iteration, trials, trial, **info):
            job: JobRun = trial.config["cfg"]
            self._flush_reports()
            for tid in self._unended(job):
                if progress.running.pop(tid, None) is not None:  # the one it was training
                    progress.status["running"] -= 1
                    run.store.write("errors", f"trial__{tid}__attempt{run.attempts.get(tid, 0)}", [{
                        "trial_id": tid, "step": -1, "kind": "trial_retry", "message": _error_text(trial),
                        "at": _now()}])

        def on_trial_error(self, iteration, trials, trial, **info):
            job: JobRun = trial.config["cfg"]
            self._flush_reports()
            unended = self._unended(job)
            # The trial it was training failed for good; the ones after it never started: they
            # get a job of their own instead of sharing its failure.
            failed = [tid for tid in unended if tid in progress.running] or unended[:1]
            for tid in failed:
                run.finish(tid, TrialStatus.FAILED, error=_error_text(trial))
            rest = [run.by_id[tid] for tid in unended if tid not in failed]
            if rest and run.requeue is not None:
                run.requeue(run.job_configs(rest))
            run.jobs_running.discard(job.job_id)

    return SweepCallback()


def _callback_from_key(key: int):
    return _callback(*_LIVE[key])
