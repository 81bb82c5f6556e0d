"""Trial lifecycle and the small policies around it, as pure functions (style.md 5)."""

from __future__ import annotations

from dataclasses import dataclass

from cliffsweep.sweep.reports import EndReport
from cliffsweep.sweep.status import Phase, TrialStatus


def trials_to_run(grid_ids: list[str], stored_status: dict[str, str], retry_failed: bool) -> list[str]:
    """Resume rule: train every grid point whose training has not finished; a failed one only
    when asked (`--retry-failed`), so a resume never silently repeats a known crash. (A
    `trained` trial's missing evaluations are the ledger's business, not a reason to retrain.)"""
    skip = {TrialStatus.TRAINED, TrialStatus.DONE, TrialStatus.DIVERGED} | (set() if retry_failed else {TrialStatus.FAILED})
    return [t for t in grid_ids if stored_status.get(t) not in skip]


def final_status(end: EndReport) -> TrialStatus:
    """Status of a trial whose training ended (its end report): `trained` until its
    evaluations are in (then the driver records `done`), or `diverged`."""
    return TrialStatus.DIVERGED if end.diverged else TrialStatus.TRAINED


def default_concurrency(total_cpus: float, cpus_per_trial: float, evaluator_cpus: float) -> int:
    """Trials that fit beside the evaluators, at least one."""
    return max(1, int((total_cpus - evaluator_cpus) // max(cpus_per_trial, 1e-9)))


# Custom resources of the shipped cluster configs (clusters/), one per role.
ROLE_RESOURCES = {"driver": "cliffsweep_driver", "trainer": "cliffsweep_trainer", "evaluator": "cliffsweep_evaluator"}


def role_resources(cluster_roles: bool, role: str, gpus: float = 0.0) -> dict[str, float]:
    """Extra Ray resources that pin a kind of work to its node type (resources.cluster_roles):
    a trial driver takes one `cliffsweep_driver` slot on the head; a Train worker or an
    evaluator takes its GPU share of the role's resource (one slot per GPU on those nodes), or a
    whole slot when it uses no GPU."""
    if not cluster_roles:
        return {}
    return {ROLE_RESOURCES[role]: 1.0 if role == "driver" else (gpus if gpus > 0 else 1.0)}


# Ray's own resource of the head node (every Ray since 2.4 has it; amount 1.0).
HEAD_NODE = "node:__internal_head__"


def trial_driver_resources(cluster_roles: bool) -> dict[str, float]:
    """What one Tune trial's actor (the coordinator of one Train job, 0.01 CPU) asks for: a
    driver slot on the head with cluster roles, else a sliver of the head itself. A trial's
    coordinator on a worker node dies with that node, and Tune retries it at once, before Ray
    has noticed the node is gone: the retries can land on the dead node again and use up the
    trial's `max_retries` in two seconds (the node-kill rehearsal in CI, 2026-11-28). The head
    is the node a sweep cannot lose anyway (its driver and GCS live there). No CPU there: a
    head often has none to give (KubeRay's advice; the rehearsal's head), and the coordinator
    and its Train controller (which Ray Train places on the coordinator's node, num_cpus=0)
    only wait on others."""
    return {"CPU": 0.01, **role_resources(True, "driver")} if cluster_roles else {"CPU": 0, HEAD_NODE: 0.001}


def cluster_concurrency(cluster_resources: dict[str, float], cluster_roles: bool, default: int) -> int:
    """With cluster roles, concurrent trials = the head's driver slots (an autoscaling cluster
    starts with no trainer nodes, so CPUs present at start would mean one trial at a time)."""
    slots = int(cluster_resources.get(ROLE_RESOURCES["driver"], 0))
    return max(default, slots) if cluster_roles and slots else default


def job_slots(spec, cluster_resources: dict[str, float]) -> int:
    """Train jobs the cluster's CPUs (or, with cluster roles, the head's driver slots) could run
    beside the evaluators: what jobs are sized by (trials_per_job). Pure."""
    r, e = spec.resources, spec.eval
    eval_cpus = e.cpus_per_evaluator * e.evaluators_per_model * len(spec.models)
    return r.max_concurrent_trials or cluster_concurrency(
        cluster_resources, r.cluster_roles,
        default_concurrency(cluster_resources.get("CPU", 1), r.cpus_per_worker * r.workers_per_trial, eval_cpus))


def sweep_concurrency(spec, cluster_resources: dict[str, float]) -> int:
    """Train jobs at once: resources.max_concurrent_trials, else `job_slots`, and on a cluster
    whose GPUs are all there (no cluster roles: an autoscaling cluster starts without them) no
    more than its GPUs hold (evaluators give way to waiting jobs: policies.evaluator_changes). A job Tune starts beyond the GPUs only waits
    for them, and its waiting placement group takes GPUs that free up before an evaluator whose
    model's checkpoints pile up can (the rehearsal showed it: evaluation waited for the end of
    training). Pure: the driver passes ray.cluster_resources(), `cliffsweep simulate` the
    simulated cluster's."""
    r = spec.resources
    slots = job_slots(spec, cluster_resources)
    gpus, per_job = cluster_resources.get("GPU", 0.0), r.gpus_per_worker * r.workers_per_trial
    if r.max_concurrent_trials or r.cluster_roles or per_job <= 0 or gpus <= 0:
        return slots
    return max(1, min(slots, int((gpus + 1e-9) // per_job)))


def torch_threads(cpus_per_worker: float) -> int:
    """Torch's intra-op threads for a worker given `cpus_per_worker` CPUs: the nearest whole
    number, at least 1. Why round: Ray hands out fractional CPUs as a share of the machine,
    torch can only run whole threads; truncating (int) left a worker with 1.9 CPUs on one
    thread, while rounding never oversubscribes a worker's share by more than half a core."""
    return max(1, round(cpus_per_worker))


MAX_AUTO_TRIALS_PER_JOB = 16


SHARED_JOBS_PER_SLOT = 4
"""Jobs per concurrent slot where several drivers share the store (`run --join`): a driver
claims a job's trials when it starts the job, so one job per slot let the first driver claim the
whole grid before the second had started (seen in the Slurm walk-through: 20 trials to 0)."""


def trials_per_job(n_trials: int, concurrency: int, asked: int | None, shared: bool = False) -> int:
    """Trials per Ray Train job: `asked` when the spec says, else one job per concurrent
    slot (SHARED_JOBS_PER_SLOT where drivers share the store), at most MAX_AUTO_TRIALS_PER_JOB
    trials (so that a refinement round waits on few trials, and one long job does not hold the
    sweep's tail). Measured on the default toy sweep (docs/benchmarks.md): 2 jobs per slot gave
    setup + teardown 7.8 s per trial and wall / compute 1.50; 1 job per slot 5.0 s and 1.28."""
    if asked is not None:
        return asked
    slots = max(1, concurrency) * (SHARED_JOBS_PER_SLOT if shared else 1)
    return max(1, min(MAX_AUTO_TRIALS_PER_JOB, -(-n_trials // slots)))


ONE_DRIVER_TRIALS = 441
"""The most trials one driver has been rehearsed with (bench/bench_driver_scale.py, docs/benchmarks.md
"One driver as the grid grows", issue 62): its memory grew 1.19x for 3x the trials, Tune's state
file by about 4.6 KB a trial. Larger grids on one driver have not been measured."""


def drivers_for(n_trials: int) -> int:
    """Drivers sharing one store (`run --join`, a Slurm job array) that keep each within
    ONE_DRIVER_TRIALS trials, the claims spreading the grid among them."""
    return max(1, -(-n_trials // ONE_DRIVER_TRIALS))


def one_driver_note(n_trials: int, source: str) -> str | None:
    """What `validate` says of a grid larger than one driver has been measured with: the fact,
    and the remedy with its number; None within it."""
    k = drivers_for(n_trials)
    if k == 1:
        return None
    return (f"{n_trials:,} trials: one driver has been measured with up to {ONE_DRIVER_TRIALS} "
            f"(docs/benchmarks.md, \"One driver as the grid grows\"); more on one driver is not measured. "
            f"To keep each driver within that, run {k} drivers on this store: `cliffsweep run {source} --join` "
            f"on each, or `cliffsweep submit --to slurm {source} --array {k}`")


def pack(keys: list[str], size: int) -> list[list[int]]:
    """Indices of items grouped into jobs: items of one key (a model) only, in their order, each
    key's items split into ceil(n / size) jobs whose sizes differ by one at most."""
    groups: dict[str, list[int]] = {}
    for i, k in enumerate(keys):
        groups.setdefault(k, []).append(i)
    jobs = []
    for idx in groups.values():
        n_jobs = -(-len(idx) // max(1, size))
        base, extra = divmod(len(idx), n_jobs)
        at = 0
        for j in range(n_jobs):
            n = base + (j < extra)
            jobs.append(idx[at:at + n])
            at += n
    return jobs


LIVE_EVERY_S = 5.0
REBALANCE_EVERY_S = 1.0
"""How often the driver looks at the cluster's free resources and waiting placement groups for
the evaluator pool (two GCS calls; the tick itself runs every 0.2-0.5 s)."""


class Every:
    """The driver tick's periodic chores: each runs at most once per its period (seconds)."""

    def __init__(self, **periods: float):
        self.periods = periods
        self.last = dict.fromkeys(periods, 0.0)

    def due(self, chore: str, now: float) -> bool:
        """Whether `chore` is due at `now`; if so it counts as done now."""
        if now - self.last[chore] < self.periods[chore]:
            return False
        self.last[chore] = now
        return True


def wait_reasons(pending: list[str], phase: str, running_jobs: dict[str, list[str]], training: dict[str, str],
                 queued_jobs: list[list[str]], concurrency: int, free: dict[str, float],
                 need: dict[str, float]) -> dict[str, str]:
    """Why each pending trial is not training yet (`cliffsweep status`, from the driver's live
    state): the run's set-up phases, its place in a running job (a job trains its trials in
    turn), the concurrency limit, or resources a queued job needs and the running jobs hold.
    `running_jobs`: job -> its trials; `training`: job -> the trial it trains now; `need`: the
    Ray resources one job's workers ask for; `free`: the cluster's available resources."""
    in_job = {tid: job for job, tids in running_jobs.items() for tid in tids}
    queued = {tid for tids in queued_jobs for tid in tids}
    short = [f"{k} {v:g}" for k, v in sorted(need.items()) if free.get(k, 0.0) < v]
    out = {}
    for tid in pending:
        if Phase(phase).before_training:
            out[tid] = f"the run's {phase} (no trial trains before the base evaluations and statistics)"
        elif tid in in_job:
            job = in_job[tid]
            out[tid] = f"its job {job}, which trains {training.get(job, 'its first trial')} first (trials train in turn)"
        elif tid in queued and len(running_jobs) >= concurrency:
            out[tid] = (f"the concurrency limit: {len(running_jobs)} job(s) running of {concurrency} "
                        "(resources.max_concurrent_trials, else the cluster's CPUs)")
        elif tid in queued and short:
            held = ", ".join(sorted(running_jobs)) or "no job of this sweep (other work on the cluster)"
            out[tid] = f"resources: a job needs {', '.join(short)} more than the cluster has free; held by {held}"
        elif tid in queued:
            out[tid] = "Tune's queue (its job starts next)"
        else:
            out[tid] = "nothing in this run (pending in the store: re-run the sweep to train it)"
    return out


def evaluator_cap(eval_spec) -> int:
    """The most evaluators per model: eval.max_evaluators_per_model, else as many as free GPUs
    allow when evaluators use GPUs, else eval.evaluators_per_model (a CPU machine has no spare
    cores for another engine)."""
    e = eval_spec
    if e.max_evaluators_per_model is not None:
        return max(e.max_evaluators_per_model, e.evaluators_per_model)
    return 1 << 30 if e.gpus_per_evaluator > 0 else e.evaluators_per_model


EVAL_DEPTH = 2
"""Evaluations in flight per evaluator actor: the one it runs and the next, so that it never
waits on the driver's poll between two; the rest wait in the driver, where any evaluator of the
model (a new one included) can take them."""


EVAL_SENDS = 3
"""How often one run sends one checkpoint's evaluation when the evaluator fails beneath it."""


def resend_evaluation(evaluator_lost: bool, sent: int) -> bool:
    """Whether a failed evaluation goes back to the backlog (evaltracker.EvalTracker.poll).

    `evaluator_lost`: the call failed because its evaluator actor did (its process or node died,
    or it could not be reached), not because the evaluation raised; `sent`: how often this run
    sent it. A lost evaluator says nothing about the checkpoint: the rehearsal's node kills lost
    two evaluations this way, and their trials stayed unsettled until a re-run. An error the
    evaluation raised would only repeat, and a checkpoint that kills every evaluator it meets must
    not stop its model's evaluations for good: both are recorded (the `errors` table) after
    `EVAL_SENDS` sends at most, and a re-run evaluates them (storage/ledger.py). Pure."""
    return evaluator_lost and sent < EVAL_SENDS


@dataclass(frozen=True)
class ModelPool:
    """One model's evaluators as the rebalance rule sees them: what the driver's pool
    (orchestrator/evalpool.py `EvaluatorPool.view`) and the simulator (simulate/engine.py) build,
    each from its own evaluators, so that both follow the same rule."""

    backlog: int
    """Evaluations waiting in the driver (none sent yet)."""
    evaluators: int
    """Evaluators running (or starting)."""
    idle: int = 0
    """Of those, with nothing in flight."""
    lingered: int | None = None
    """Of the idle ones, idle for at least an engine start: the ones that may give way below the
    base pool (stopping one sooner and starting another for the next checkpoint would cost more
    than it saved). None: every idle one."""
    starved_at: int = 1
    """The backlog at which the model, left without evaluators, gets one whether resources are
    free or not: as many checkpoints as take an engine start to evaluate, so the start is worth it."""


@dataclass(frozen=True)
class PoolSize:
    base: int
    """eval.evaluators_per_model: the pool a model keeps while no Train job waits for what it holds."""
    cap: int
    """The most evaluators per model (`evaluator_cap`)."""


def evaluator_changes(pools: dict[str, ModelPool], size: PoolSize, free_slots: int,
                      job_waits_for_them: bool) -> dict[str, int]:
    """How many evaluators each model gains (+) or stops (-) now (issue 22: evaluator capacity that
    follows the load; `cliffsweep simulate` showed a static pool of one per model evaluating for
    hours after training ended, while the freed GPUs sat idle).

    `pools`: each model's evaluators and backlog (`ModelPool`); `free_slots`: evaluators the
    cluster's free resources could hold now (resources no Train job took: Ray places a waiting job
    as soon as its resources are free, so what stays free is too little for one);
    `job_waits_for_them`: a waiting Train job would fit if the idle evaluators stopped.

    Training first: a waiting job gets what idle evaluators of models with nothing waiting hold,
    down to none. Evaluation is never starved: a model with enough checkpoints waiting and no
    evaluator gets one, free resources or not (the rehearsal showed why: on a cluster that Tune keeps
    full, an evaluator that gave way never found free resources again, and every evaluation waited
    for the end of training); it takes the next resources that free up, as a job would. More
    start only in free resources, while no job waits. Pure."""
    out: dict[str, int] = {}
    for m, p in pools.items():
        if p.backlog:
            continue
        stop = min(p.idle, max(0, p.evaluators - size.base))  # extras, idle: not worth their GPUs
        if job_waits_for_them:  # and below the base pool, those idle long enough
            stop = max(stop, min(p.idle if p.lingered is None else p.lingered, p.evaluators))
        if stop:
            out[m] = -stop
    for m, p in pools.items():
        if p.evaluators == 0 and p.backlog >= max(1, p.starved_at):
            out[m] = 1
            free_slots -= 1  # it takes a free slot if there is one
    if job_waits_for_them:
        return out
    want = {m: p.evaluators + max(0, out.get(m, 0)) for m, p in pools.items()}
    while free_slots > 0:
        # the model whose waiting work per evaluator is largest, if more than its evaluators
        # would take next (a new engine's start is only worth a queue)
        growable = [k for k in want if want[k] < size.cap and pools[k].backlog > EVAL_DEPTH * want[k]]
        if not growable:
            break
        m = max(growable, key=lambda k: pools[k].backlog / max(want[k], 0.5))
        want[m] += 1
        out[m] = out.get(m, 0) + 1
        free_slots -= 1
    return out
