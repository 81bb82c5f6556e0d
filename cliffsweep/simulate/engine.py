"""A discrete-event simulation of a sweep's schedule on a GPU cluster (issue 22 part 1).

The work is what `plan` prices (plan.plan_spec: each point's setup, training, checkpoint waits
and evaluations, each model's statistics and base evaluation; bill.py); the decisions are the
orchestrator's own, called here as the driver calls them:

- concurrency: policies.sweep_concurrency on the simulated cluster's resources;
- jobs: policies.trials_per_job (of policies.job_slots) and policies.pack over the grid's trials (jobs.job_configs);
  Tune starts queued jobs in order, up to the concurrency, each when its workers' GPUs are free
  (a job that does not fit does not block a later one that does: Ray places whichever placement
  group fits);
- statistics: every distinct (model, method) statistics task at the start, one GPU each
  (trainables/stats.stats_task_resources), and training only after all of them and every base
  evaluation (sweeprun.prepare_training);
- evaluation: `eval.evaluators_per_model` evaluators per model at the start, each holding
  `eval.gpus_per_evaluator` GPUs and paying an engine start (bill.ENGINE_START_S); checkpoints
  wait in the driver until one of their model's evaluators is free (orchestrator/evaltracker.py);
  evaluators start and stop as policies.evaluator_changes says, on the GPUs no Train job took.

Not modelled: failures and retries, storage contention, CPU limits beyond the concurrency rule,
refinement rounds. Everything is deterministic: one run, one answer.
"""

from __future__ import annotations

import heapq
import math
import itertools
from collections import deque
from dataclasses import dataclass, field

from cliffsweep.planner import bill
from cliffsweep.orchestrator.policies import (ModelPool, PoolSize, evaluator_cap, evaluator_changes, job_slots, pack,
                                              sweep_concurrency, trials_per_job)
from cliffsweep.trainables.stats import stats_task_resources

KINDS = ("training", "evaluating", "statistics")
"""What a GPU can be busy with (a job's setup and checkpoint waits count as training: the job holds
its GPUs through them)."""


@dataclass(frozen=True)
class Cluster:
    nodes: int
    gpus_per_node: int
    cpus_per_node: int

    @property
    def gpus(self) -> int:
        return self.nodes * self.gpus_per_node

    def resources(self) -> dict[str, float]:
        return {"CPU": float(self.nodes * self.cpus_per_node), "GPU": float(self.gpus)}


@dataclass
class Timeline:
    """GPU use as intervals: (start, end, GPUs, kind); and intervals when work waited for a GPU."""

    busy: list[tuple[float, float, float, str]] = field(default_factory=list)
    waiting: list[tuple[float, float]] = field(default_factory=list)

    def use(self, start: float, end: float, gpus: float, kind: str) -> None:
        if end > start:
            self.busy.append((start, end, gpus, kind))

    def waited(self, since: float, until: float) -> None:
        if until > since:
            self.waiting.append((since, until))


@dataclass
class Result:
    cluster: Cluster
    makespan: float
    work_gpu_s: dict[str, float]
    """GPU-seconds of work by kind (the evaluators' engine starts count as evaluating)."""
    longest_chain: float
    """The longest chain of dependent work: a trial's statistics, setup, training and its last
    checkpoint's evaluation."""
    concurrency: int
    per_job: int
    jobs: int
    evaluator_gpus: float
    """GPUs of the evaluators started at the beginning (eval.evaluators_per_model per model)."""
    timeline: Timeline
    evaluations: int = 0
    engines: int = 0
    """Evaluator engines started (the base pool and every extra one)."""

    @property
    def ideal(self) -> float:
        return max(sum(self.work_gpu_s.values()) / self.cluster.gpus, self.longest_chain)

    @property
    def ratio(self) -> float:
        return self.makespan / self.ideal


@dataclass
class _Evaluator:
    model: str
    got: list | None
    """Its GPUs (None: waiting for them)."""
    free_at: float
    """When it can take the next evaluation (at first: when its engine has started)."""


class _Nodes:
    """Free GPUs per node; a job's workers packed onto as few nodes as fit (Ray Train's PACK)."""

    def __init__(self, cluster: Cluster):
        self.free = [float(cluster.gpus_per_node)] * cluster.nodes

    def take(self, bundles: list[float]) -> list[tuple[int, float]] | None:
        if sum(bundles) <= 0:
            return []
        order = sorted(range(len(self.free)), key=lambda i: -self.free[i])
        got: list[tuple[int, float]] = []
        left = list(self.free)
        for b in bundles:
            node = next((i for i in order if left[i] >= b - 1e-9), None)
            if node is None:
                return None
            left[node] -= b
            got.append((node, b))
        self.free = left
        return got

    def give(self, got: list[tuple[int, float]]) -> None:
        for node, b in got:
            self.free[node] += b


class Simulation:
    def __init__(self, spec, plans, cluster: Cluster, engine_start_s: float = bill.ENGINE_START_S,
                 job_start_s: float = 0.0, trial_overhead_s: float = 0.0, start_s: float = 0.0,
                 start_cores: float | None = None):
        self.spec, self.plans, self.cluster = spec, plans, cluster
        # What the plan does not price: an evaluator engine's start, a Train job's start (Tune's
        # trial actor, Ray Train's controller and workers), each trial's reports, the sweep's own
        # start before its first Train job (Ray actors, Tune): simulate/rehearsal.py measures them
        self.engine_start_s, self.job_start_s, self.trial_overhead_s = engine_start_s, job_start_s, trial_overhead_s
        self.start_s = start_s
        # Cores that job starts share (None: each node starts its own jobs, no contention; a
        # rehearsal's fake nodes all start theirs on this machine's few cores)
        self.start_cores = start_cores
        self.starting: dict[int, tuple[float, list, list]] = {}  # job -> (start work left, job, GPUs)
        self.job_began: dict[int, float] = {}
        self.cores_at, self.cores_rate, self.cores_version = 0.0, 0.0, 0
        self.nodes = _Nodes(cluster)
        self.timeline = Timeline()
        self.events: list[tuple[float, int, object]] = []
        self.seq = itertools.count()
        self.now = 0.0
        self.end = 0.0
        e = spec.eval
        if e.gpus_per_evaluator <= 0 or spec.resources.gpus_per_worker <= 0:
            raise ValueError("simulate prices GPU work: the sweep's resources.gpus_per_worker and "
                             "eval.gpus_per_evaluator must be > 0")
        self.eval_gpus = e.gpus_per_evaluator
        self.cap = evaluator_cap(e)
        self.evaluators: dict[str, list[_Evaluator]] = {}
        self.waiting_evaluators: deque[_Evaluator] = deque()
        # as the driver's tracker: checkpoints whose evaluation takes an engine start
        self.starved_at = {p.name: max(1, math.ceil(engine_start_s / p.base_eval_s)) if p.base_eval_s > 0 else 1
                           for p in plans}
        self.backlog: dict[str, deque] = {}
        self.training = False
        self.queue: list = []
        self.evaluations = self.engines = 0
        r = spec.resources
        self.bundles = [r.gpus_per_worker] * r.workers_per_trial
        if _Nodes(cluster).take(self.bundles) is None:  # Ray would wait forever
            raise ValueError(f"a Train job ({r.workers_per_trial} worker(s) x {r.gpus_per_worker:g} GPU) does not fit "
                             f"the cluster ({cluster.nodes} node(s) x {cluster.gpus_per_node} GPUs)")
        self.running = 0
        self.concurrency = sweep_concurrency(spec, cluster.resources())

    # --- the event loop ----------------------------------------------------------------------
    def at(self, t: float, fn) -> None:
        heapq.heappush(self.events, (t, next(self.seq), fn))

    def run(self) -> None:
        while self.events:
            self.now, _, fn = heapq.heappop(self.events)
            fn()

    # --- evaluation --------------------------------------------------------------------------
    def start_evaluators(self) -> None:
        per_model = self.spec.eval.evaluators_per_model
        for p in self.plans:
            self.evaluators[p.name], self.backlog[p.name] = [], deque()
            for _ in range(per_model):
                if not self.add_evaluator(p.name):
                    raise ValueError(f"the cluster ({self.cluster.gpus} GPUs) cannot hold the evaluators: "
                                     f"{len(self.plans)} model(s) x {per_model} x {self.eval_gpus:g} GPU")

    def add_evaluator(self, model: str, wait: bool = False) -> bool:
        """Start one evaluator of `model` in free GPUs; with `wait`, one that takes the next GPUs
        that free up if none are free now (a pending actor: policies.evaluator_changes)."""
        got = self.nodes.take([self.eval_gpus])
        if got is None and not wait:
            return False
        ev = _Evaluator(model, got, float("inf"))
        self.evaluators[model].append(ev)
        if got is None:
            self.waiting_evaluators.append(ev)
        else:
            self.place(ev, got)
        return True

    def place(self, ev: _Evaluator, got) -> None:
        ev.got, ev.free_at = got, self.now + self.engine_start_s
        self.engines += 1
        self.timeline.use(self.now, ev.free_at, self.eval_gpus, "evaluating")
        self.at(ev.free_at, lambda: self.pump(ev.model))

    def freed(self) -> None:
        """GPUs came free: waiting evaluators first (they asked before the queued jobs), then jobs."""
        while self.waiting_evaluators:
            got = self.nodes.take([self.eval_gpus])
            if got is None:
                break
            self.place(self.waiting_evaluators.popleft(), got)
        if self.training and self.queue:
            self.start_jobs()

    def evaluate(self, model: str, seconds: float, on_done=None) -> None:
        """One checkpoint's evaluation waits in the driver until an evaluator of its model is free
        (orchestrator/evaltracker.py)."""
        self.backlog[model].append((self.now, seconds, on_done))
        self.pump(model)
        self.rebalance()

    def pump(self, model: str) -> None:
        for ev in self.evaluators[model]:
            if not self.backlog[model]:
                return
            if ev.free_at <= self.now:
                submitted, seconds, on_done = self.backlog[model].popleft()
                self.evaluations += 1
                ev.free_at = self.now + seconds / self.eval_gpus
                self.timeline.waited(submitted, self.now)
                self.timeline.use(self.now, ev.free_at, self.eval_gpus, "evaluating")
                self.end = max(self.end, ev.free_at)
                self.at(ev.free_at, lambda on_done=on_done: self.eval_done(model, on_done))
                self.at(ev.free_at + self.engine_start_s, self.rebalance)  # idle that long: it may give way

    def eval_done(self, model: str, on_done) -> None:
        if on_done is not None:
            on_done()
        self.pump(model)
        self.rebalance()

    def rebalance(self) -> None:
        """Evaluators added or stopped as the driver's policy says (policies.evaluator_changes)."""
        idle = {m: sorted((ev for ev in evs if ev.free_at <= self.now), key=lambda ev: ev.free_at)
                for m, evs in self.evaluators.items()}
        lingered = {m: sum(ev.free_at <= self.now - self.engine_start_s for ev in v) for m, v in idle.items()}
        free, need = sum(self.nodes.free), sum(self.bundles)
        # start_jobs ran first: free GPUs are those no job could take (too few, or the concurrency limit)
        job_waits = (self.jobs_waiting and self.running < self.concurrency
                     and free < need <= free + self.eval_gpus * sum(len(v) for v in idle.values()))
        pools = {m: ModelPool(len(self.backlog.get(m, ())), len(evs), len(idle[m]), lingered[m], self.starved_at.get(m, 1))
                 for m, evs in self.evaluators.items()}
        changes = evaluator_changes(pools, PoolSize(self.spec.eval.evaluators_per_model, self.cap),
                                    int(free // self.eval_gpus), job_waits)
        freed = False
        for m, k in changes.items():
            for ev in idle[m][:max(0, -k)]:
                self.evaluators[m].remove(ev)
                self.nodes.give(ev.got)
                freed = True
            for _ in range(max(0, k)):
                # the one a model without evaluators gets waits for GPUs; others only in free ones
                if not self.add_evaluator(m, wait=not self.evaluators[m]):
                    break
        if freed:
            self.freed()

    @property
    def jobs_waiting(self) -> bool:
        return self.training and bool(self.queue)

    # --- statistics, then training ------------------------------------------------------------
    def simulate(self) -> Result:
        spec, plans = self.spec, self.plans
        self.start_evaluators()
        # training waits for every base evaluation and every statistics task (sweeprun.prepare_training)
        self.gates = len(plans) + 2  # + the statistics, + the sweep's own start
        self.at(self.start_s, self.gate)
        for p in plans:
            self.evaluate(p.name, p.base_eval_s, on_done=self.gate)
        stats = [(p.name, key, s) for p in plans for key, s in p.stats_s.items()]
        r = spec.resources
        stats_gpus = stats_task_resources(r.cpus_per_worker, r.gpus_per_worker, r.workers_per_trial)["num_gpus"]
        self.stats_left = list(stats)
        self.stats_running = 0
        self.stats_gpus = stats_gpus
        points = [pt for p in plans for pt in p.trial_costs]
        concurrency = self.concurrency
        per_job = trials_per_job(len(points), job_slots(spec, self.cluster.resources()), r.trials_per_job)
        self.queue = [[points[i] for i in idx] for idx in pack([pt.model for pt in points], per_job)]
        self.n_jobs = len(self.queue)
        self.at(0.0, self.start_stats)
        self.run()
        work = {k: sum((e - s) * g for s, e, g, kind in self.timeline.busy if kind == k) for k in KINDS}
        stats_of = {key: s for p in plans for key, s in p.stats_s.items()}
        chain = max((stats_of.get(pt.stats_key, 0.0) + pt.setup_s + pt.train_s + pt.blocked_s + pt.eval_s
                     for pt in points), default=0.0)
        return Result(self.cluster, self.end, work, chain, concurrency, per_job, self.n_jobs,
                      self.eval_gpus * spec.eval.evaluators_per_model * len(plans), self.timeline,
                      self.evaluations, self.engines)

    def start_stats(self) -> None:
        while self.stats_left:
            got = self.nodes.take([self.stats_gpus])
            if got is None:
                return  # the rest start as GPUs free up
            model, key, seconds = self.stats_left.pop(0)
            self.stats_running += 1
            self.timeline.waited(0.0, self.now)
            self.timeline.use(self.now, self.now + seconds, self.stats_gpus, "statistics")
            self.at(self.now + seconds, lambda got=got: self.stats_done(got))
        if self.stats_running == 0:
            self.gate()

    def gate(self) -> None:
        self.gates -= 1
        if self.gates == 0:
            self.start_training()

    def stats_done(self, got) -> None:
        self.nodes.give(got)
        self.stats_running -= 1
        self.start_stats()
        self.freed()

    def start_training(self) -> None:
        self.queue = [(self.now, job) for job in self.queue]
        self.training = True
        self.start_jobs()
        self.rebalance()

    def start_jobs(self) -> None:
        i = 0
        while i < len(self.queue) and self.running < self.concurrency:
            queued_at, job = self.queue[i]
            got = self.nodes.take(self.bundles)
            if got is None:
                return  # every job needs the same bundles: none fits until a job or an idle evaluator gives way
            self.queue.pop(i)
            self.running += 1
            self.timeline.waited(queued_at, self.now)
            self.run_job(job, got)

    def run_job(self, job, got) -> None:
        """The job's start (`job_start_s`; shared cores: `start_cores`), then its trials in turn."""
        self.job_began[id(job)] = self.now
        if self.start_cores is None:
            self.at(self.now + self.job_start_s, lambda: self.train_job(job, got))
            return
        self.starting[id(job)] = (self.job_start_s, job, got)
        self.share_cores()

    def share_cores(self) -> None:
        """Job starts in progress share `start_cores` (processor sharing): each advances at
        min(1, cores / starts); the next to finish is scheduled, earlier schedules go stale."""
        elapsed = self.now - self.cores_at
        rate = min(1.0, self.start_cores / len(self.starting)) if self.starting else 0.0
        for key, (left, job, got) in list(self.starting.items()):
            self.starting[key] = (left - elapsed * self.cores_rate, job, got)
        self.cores_at, self.cores_rate = self.now, rate
        self.cores_version += 1
        if self.starting:
            key = min(self.starting, key=lambda k: self.starting[k][0])
            version = self.cores_version
            self.at(self.now + max(0.0, self.starting[key][0]) / rate, lambda: self.started(key, version))

    def started(self, key: int, version: int) -> None:
        if version != self.cores_version:
            return  # the sharing changed since this was scheduled
        self.share_cores()  # bring every start's remaining work up to now
        _, job, got = self.starting.pop(key)
        self.share_cores()
        self.train_job(job, got)

    def train_job(self, job, got) -> None:
        t = self.now
        gpus = sum(b for _, b in got)
        for pt in job:
            t += pt.setup_s + self.trial_overhead_s
            span = pt.train_s + pt.blocked_s
            for k in range(1, pt.checkpoints + 1):
                self.at(t + span * k / pt.checkpoints, lambda pt=pt: self.evaluate(pt.model, pt.eval_s))
            t += span
        self.timeline.use(self.job_began.pop(id(job)), t, gpus, "training")
        self.end = max(self.end, t)
        self.at(t, lambda: self.job_done(got))

    def job_done(self, got) -> None:
        self.nodes.give(got)
        self.running -= 1
        self.freed()
        self.rebalance()


def simulate(spec, plans, cluster: Cluster, engine_start_s: float = bill.ENGINE_START_S, job_start_s: float = 0.0,
             trial_overhead_s: float = 0.0, start_s: float = 0.0, start_cores: float | None = None) -> Result:
    """The schedule of `spec` (its plan: plan.plan_spec) on `cluster`; the keyword arguments are
    costs the plan does not price (seconds; Simulation)."""
    return Simulation(spec, plans, cluster, engine_start_s, job_start_s, trial_overhead_s, start_s,
                      start_cores).simulate()
