"""One `cliffsweep run`'s phases (the driver, orchestrator/driver.py, calls them in order; the
Tune callback, orchestrator/tunecallback.py, feeds them Tune's events).

`SweepRun` holds what the run needs across its phases (the grid, the evaluator tracker, the
inbox, Tune's queue of jobs) and turns reports into ledger rows and evaluations; every trial's
own state lives in its trial book (orchestrator/trialbook.py), which writes each change to the
store at once: the store, not these objects, is the truth a re-run starts from
(storage/ledger.py).
"""

from __future__ import annotations

import os
import time
from dataclasses import replace

from cliffsweep.faults import maybe_fail
from cliffsweep.analysis.topup import stop_rule
from cliffsweep.orchestrator.evaltracker import EvalTracker
from cliffsweep.orchestrator.inbox import InboxReader, start_inbox
from cliffsweep.evaluator.request import EvalRequest, base_request
from cliffsweep.orchestrator.jobs import Configs
from cliffsweep.orchestrator.placement import REAP_EVERY_S, a_job_waits_for, reap_orphaned_placement_groups
from cliffsweep.sweep.status import Phase, TrialStatus
from cliffsweep.orchestrator.policies import (LIVE_EVERY_S, REBALANCE_EVERY_S, Every, evaluator_cap, final_status,
                                              job_slots, trials_per_job, trials_to_run)
from cliffsweep.orchestrator.pool import evaluator_slots, evaluator_starter
from cliffsweep.orchestrator.failures import FailureLog
from cliffsweep.orchestrator.progress import Progress, live_record
from cliffsweep.orchestrator.jobqueue import JobQueue
from cliffsweep.orchestrator.refiner import Refiner, stored_refined_trials, stored_verification_trials
from cliffsweep.orchestrator.series import SeriesWatch
from cliffsweep.orchestrator.sharing import Sharing, Take, adoption
from cliffsweep.orchestrator.topups import TopUps
from cliffsweep.orchestrator.trialbook import TrialBook
from cliffsweep.planner.evalcost import stage_floors
from cliffsweep.storage import ledger
from cliffsweep.storage.claims import Claims
from cliffsweep.storage.store import LIVE_FILE, Store
from cliffsweep.storage.tablecache import TableCache
from cliffsweep.sweep.grid import Trial, base_trial_id, expand_grid
from cliffsweep.sweep.rehearsal import Rehearsal
from cliffsweep.sweep.reports import Begin, CheckpointReport, EndReport, Report
from cliffsweep.sweep.spec import SweepSpec
from cliffsweep.evals.tasks import task_label
from cliffsweep.trainables.config import JobRun


class SweepRun:
    """The phases of one `cliffsweep run`; the Tune callback and the driver loop share it."""

    def __init__(self, spec: SweepSpec, store: Store, eval_backend: str, claims: Claims,
                 rehearsal: Rehearsal | None = None, concurrency: int = 1, stream=None, err=None):
        """Made once Ray is up (it starts the inbox actor): everything a run's phases share exists
        from here on, nothing is filled in later (issue 33). `claims`: this driver's claims on the
        store (storage/claims.py: several drivers may share it, issue 53). `stream`, `err`: the
        terminal's streams for cliffsweep's own lines (orchestrator/terminal.py)."""
        # the store; what the tick reads of it is read again only where files changed (issue 62 part 2)
        self.spec, self.tables = spec, TableCache(store)
        self.sharing = Sharing(claims)
        self.grid = expand_grid(spec)  # + refined trials, as refinement adds them (refiner.py)
        self.by_id = {t.trial_id: t for t in self.grid}
        inbox_name = f"cliffsweep-inbox-{os.getpid()}-{id(self)}"
        self.configs = Configs(spec, inbox_name, rehearsal)  # rehearsal: timed waits instead of work
        self.running_jobs: dict[str, JobRun] = {}  # Train jobs Tune runs now
        self.every = Every(live=LIVE_EVERY_S, rebalance=REBALANCE_EVERY_S, reap=REAP_EVERY_S)
        self.progress = Progress(len(self.grid), concurrency, stream=stream)  # concurrency: Train jobs at once
        self.book = TrialBook(store, self.by_id, self.configs.row_json, self.progress, claims.driver.label,
                              self.sharing.holds_trial)
        self.failures = FailureLog(err)  # one terminal line per root cause; the store keeps every traceback
        models = {m.name: (m.path, m.dtype) for m in spec.models}
        # the evaluator pool is started on first use
        self.tracker = EvalTracker(store, evaluator_starter(models, spec, store.uri, eval_backend, rehearsal),
                                   [task_label(t.name, t.params) for _, _, t in spec.tasks.evaluated], list(models),
                                   spec.eval.evaluators_per_model, evaluator_cap(spec.eval),
                                   linger_s=self.configs.engine_start_s())
        self.inbox = InboxReader(start_inbox(inbox_name))
        # Train jobs waiting for Tune; while a job runs it may hand trials back (one that failed
        # for good: its other, unstarted trials get a job of their own), and refinement may add
        # some, so Tune is not told "finished" before (jobqueue.py)
        self.queue = JobQueue([], more=self.jobs_may_come, pump=self.pump, hold=self.tracker.placing,
                              claim=self.claim_job)
        self.broken: dict[str, str] = {}  # model -> its base evaluation's error (drop_broken_models)
        watch = SeriesWatch(self.grid, self.book, self.tracker)  # the one reader of "series ready"
        self.refiner = Refiner(spec, self.tables, watch, self.queue_refined)
        self.rule = stop_rule(spec.eval.adaptive, call_items=stage_floors(spec, eval_backend))  # None: every item
        # with the rule on, a checkpoint the verdict hinges on is scored in full once its series'
        # trials are all in (topups.py), and a done trial's folders wait for that
        self.topups = TopUps(self.tables, watch, self.tracker, self.refiner.final_round, self.top_up)
        self.prune_later: list[tuple[str, int | None, set[int]]] = []

    # --- a run, step by step (driver.run_sweep) -----------------------------------------------
    def resume(self, retry_failed: bool) -> list[Trial]:
        """What the store already holds: refined trials of earlier runs rejoin the grid, trials
        that need no training keep their status (and count on the progress line); returns the
        trials to train (recorded pending)."""
        stored = self.tables.store.read("trials").to_dict("records")
        self.add_trials(stored_refined_trials(self.spec, self.grid, stored))
        self.add_trials(stored_verification_trials(self.spec, self.grid, stored))
        self.progress.n_trials = len(self.grid)
        self.book.load(stored)
        self.book.show()
        todo_ids = set(trials_to_run([t.trial_id for t in self.grid], self.book.statuses(), retry_failed))
        # another live driver's trials are its business (issue 53): not recorded, not queued here
        elsewhere = self.sharing.elsewhere
        elsewhere |= self.sharing.held_elsewhere(todo_ids | self.book.awaiting())
        for tid in elsewhere:
            self.book.not_awaited(tid)
        todo = [t for t in self.grid if t.trial_id in todo_ids - elsewhere]
        for t in todo:
            self.book.not_awaited(t.trial_id)
            self.book.pending(t.trial_id)
        return todo

    def tick(self, wait: float = 0.0) -> None:
        """One turn of the driver loop: reports in, evaluations polled, trials settled,
        refinement asked, the display refreshed."""
        tracker, progress = self.tracker, self.progress
        for tid, rec in self.inbox.poll():
            self.on_report(tid, rec)
        tracker.poll(timeout=wait)
        self.rebalance_evaluators()
        if self.every.due("reap", time.time()):
            reap_orphaned_placement_groups()
        self.drop_broken_models()
        if self.sharing.adoption_due():
            self.adopt()
        self.count_settled()
        self.refiner.check()
        progress.evals_done, progress.evals_failed = tracker.counts.done, tracker.counts.failed
        progress.evals_pending = tracker.waiting
        progress.refresh()
        if self.every.due("live", time.time()):
            self.write_live()

    def write_live(self) -> None:
        """What the run is doing now, for `cliffsweep status` (which reads only the store)."""
        import ray

        self.every.last["live"] = time.time()
        free = ray.available_resources() if ray.is_initialized() else {}
        self.tables.store.write_json(LIVE_FILE, live_record(
            self.sharing.label, self.progress, {c.job_id: list(c.trial_ids) for c in self.running_jobs.values()},
            [list(c.trial_ids) for c in self.queue.items], self.book.statuses(), self.spec.resources, free,
            self.tracker.live()))

    def job_started(self, job: JobRun) -> None:
        self.running_jobs[job.job_id] = job

    def job_ended(self, job: JobRun) -> None:
        self.running_jobs.pop(job.job_id, None)

    def count_settled(self) -> None:
        for tid, final, steps in self.book.settle(self.tracker.was_evaluated):
            self.prune_later.append((tid, final, steps))
        if self.rule is not None:
            self.topups.check()
        waiting = []
        for tid, final, steps in self.prune_later:
            if self.rule is None or self.topups.final(self.by_id[tid]):
                self.prune(tid, final, steps)
                self.sharing.release_trial(tid)  # done, its evaluations in: held claims stay few
            else:
                waiting.append((tid, final, steps))
        self.prune_later = waiting
        self.sharing.release_done(self.book.status_of, lambda tid: all(
            self.tracker.was_evaluated(tid, s) for s in self.book.steps(tid)))

    def rebalance_evaluators(self) -> None:
        """Evaluators follow the load (evaltracker.EvalTracker.rebalance): the free resources no
        Train job took, and whether a queued job waits for what idle evaluators hold."""
        import ray

        tracker = self.tracker
        if not tracker.may_rebalance() or not self.every.due("rebalance", time.time()):
            return
        free = ray.available_resources()
        slots, idle_hold = evaluator_slots(self.spec, free, tracker.idle_count())
        tracker.rebalance(slots, a_job_waits_for(free, idle_hold))

    def drain(self) -> None:
        while self.tracker.busy():
            self.tick(wait=0.5)

    def prepare_training(self, todo: list[Trial]) -> list[Trial]:
        """Base evaluations submitted and once-per-model statistics computed; returns the trials
        that can train. Training does not wait for the base evaluations (issue 39 part 4: a GPU
        share, or 166 s of 2 CPU cores, sat idle meanwhile): they run beside it, and a model
        whose base evaluation fails has its trials that have not started taken out of the queue
        (`drop_broken_models`, each tick)."""
        spec, progress = self.spec, self.progress
        for m in spec.models:
            self.submit_base(m.name)
        self.reconcile()  # checkpoints an earlier run reported but never evaluated
        progress.phase = Phase.STATISTICS
        progress.refresh(force=True)
        stats_failed = self.configs.add_stats(self.tables.store, todo)
        for tid, msg in stats_failed.items():
            self.fail_if_mine(tid, msg)
        return [t for t in todo if t.trial_id not in stats_failed]

    def drop_broken_models(self) -> None:
        """A model whose base evaluation failed would fail every evaluation of its checkpoints:
        its trials still queued do not train (recorded failed, saying why). One already training
        goes on; its checkpoints' evaluations are tried and their errors recorded."""
        for m in self.spec.models:
            error = self.tracker.error_of(base_trial_id(m.name), 0)
            if error is None or m.name in self.broken:
                continue
            self.broken[m.name] = error
            for tid in self.queue.drop_model(m.name):
                self.fail_if_mine(tid, f"not trained: the base evaluation of model {m.name!r} failed, so no checkpoint "
                               f"of it could be evaluated; fix the model or its eval settings and re-run with "
                               f"--retry-failed. The evaluation's error:\n{error}")

    def queue_jobs(self, todo: list[Trial]) -> JobQueue:
        """The trials to train as Train jobs in Tune's queue; refinement may add more."""
        self.queue.add(self.configs.jobs(todo, self.job_size(len(todo))))
        self.refiner.check()  # a series an earlier run left between two rounds
        return self.queue

    def jobs_may_come(self) -> bool:
        """Whether Tune must wait for more jobs: one runs (it may hand trials back) or refinement
        may still add a round."""
        return bool(self.running_jobs) or self.refiner.more_may_come() or bool(self.sharing.elsewhere)

    def pump(self) -> None:
        """The driver's tick while Tune waits in the searcher (refiner.JobQueue)."""
        self.tick(wait=0.2)

    def queue_refined(self, trials: list[Trial]) -> None:
        """Refinement added these trials: record them pending and hand them to Tune. Of a store
        several drivers share, the driver that claims the round does (issue 53); the others know
        its trials and wait for them like any trial another driver holds."""
        self.add_trials(trials)
        trials = self.sharing.take_rounds(trials, self.spec.seeds)
        failed = self.configs.add_stats(self.tables.store, trials)
        for t in trials:
            if t.trial_id in failed:
                self.fail_if_mine(t.trial_id, failed[t.trial_id])
            else:
                self.book.pending(t.trial_id)
        ready = [t for t in trials if t.trial_id not in failed]
        self.queue.add(self.configs.jobs(ready, self.job_size(len(ready))))
        self.progress.n_trials = len(self.grid)

    def finish_evaluations(self) -> None:
        """Every checkpoint evaluated: what is in flight, then whatever a report or a dead
        worker left unevaluated (the store is the truth), then the trials settle."""
        self.progress.phase = Phase.EVALUATING
        self.drain()
        self.reconcile()
        self.drain()
        self.count_settled()
        if self.rule is not None:  # series refinement left short of its last round are checked now
            self.topups.check(last=True)
            self.drain()
            while self.topups.check():  # the verdict read again after each round, to its fixpoint (topups.py)
                self.drain()
            self.count_settled()
        self.progress.phase = Phase.FINISHED
        self.write_live()

    def top_up(self, rec: ledger.CheckpointRecord, at_least: int, tasks: tuple[str, ...]) -> None:
        """Score `rec`'s checkpoint on at least `at_least` items of each of `tasks` (topups.py), if
        this driver holds its trial (or can claim it: its driver is done or gone)."""
        if rec.trial_id in self.by_id and self.take_trial(rec.trial_id, evaluating=True):
            self.evaluate(rec, at_least=at_least, top_up=tasks)

    def close(self) -> None:
        import ray

        self.tracker.close()
        ray.kill(self.inbox.actor)

    def add_trials(self, trials: list[Trial]) -> None:
        self.grid.extend(t for t in trials if t.trial_id not in self.by_id)  # in place: the refiner holds this list
        self.by_id.update({t.trial_id: t for t in trials})

    # --- several drivers on one store (issue 53, storage/claims.py) ---------------------------
    def take_trial(self, tid: str, evaluating: bool = False) -> bool:
        """Claim trial `tid` for this driver: whether it holds it now. Once claimed, the store
        says whether the trial is still to train (another driver may have finished it just
        before): a finished one is given back, unless the claim is for its evaluations
        (`evaluating`: a checkpoint without its evaluation, a top-up)."""
        got = self.sharing.take_trial(tid)
        if got is not Take.NEW or evaluating:
            return got is not Take.ELSEWHERE
        status = self.book.stored_end(tid)  # (a trained one's evaluations are ours now)
        if status is not None and status is not TrialStatus.TRAINED:
            self.sharing.release_trial(tid)
        return status is None

    def fail_if_mine(self, tid: str, error: str) -> None:
        """Record a trial that will not train here as failed, if this driver can claim it (one
        another driver trains is not this driver's to record)."""
        if self.take_trial(tid):
            self.book.fail(tid, error)

    def claim_job(self, job: JobRun) -> JobRun | None:
        """`job` with only the trials this driver could claim (JobQueue, as Tune takes it); None
        if it keeps none."""
        keep = tuple(cfg for cfg in job.trials if self.take_trial(cfg.trial.trial_id))
        if len(keep) == len(job.trials):
            return job
        return replace(job, trials=keep) if keep else None

    def submit_base(self, model: str) -> None:
        """A model's base evaluation, by the driver that claims it."""
        if self.sharing.take_base(model):
            self.tracker.submit(base_request(model))

    def adopt(self) -> None:
        """What other drivers did and left (every sharing.ADOPT_EVERY_S while they hold
        something): statuses they wrote, trials their rounds added, evaluations they stored; and
        the trials and base evaluations whose driver is gone (its claims lapsed) become this
        driver's (sharing.adoption decides)."""
        sharing, rows = self.sharing, self.tables.rows("trials")
        stored = rows.to_dict("records")
        new = [t for t in stored_refined_trials(self.spec, self.grid, stored)
               + stored_verification_trials(self.spec, self.grid, stored) if t.trial_id not in self.by_id]
        self.add_trials(new)
        sharing.elsewhere.update(t.trial_id for t in new)
        self.progress.n_trials = len(self.grid)
        if sharing.bases_elsewhere or self.refiner.active:  # another driver's base evaluation, which rounds wait for
            self.tracker.note_evaluated(ledger.evaluated_keys(self.tables.rows("evals"), self.tracker.task_names))
        latest = dict(zip(rows["trial_id"], rows["status"])) if not rows.empty else {}
        bases_done = {m for m in sharing.bases_elsewhere if self.tracker.was_evaluated(base_trial_id(m), 0)}
        got = adoption(latest, self.by_id, sharing.mine(), sharing.others(), sharing.elsewhere,
                       sharing.bases_elsewhere, bases_done)
        for tid, status in got.observe.items():
            self.book.observe(tid, status)
        sharing.elsewhere -= got.settled
        sharing.bases_elsewhere -= got.bases_done
        orphans = [self.by_id[tid] for tid in got.orphans if self.take_trial(tid)]
        for model in got.bases_orphaned:
            self.submit_base(model)
        if orphans:
            for t in orphans:
                self.book.pending(t.trial_id)
            self.reconcile()
            self.queue.add(self.configs.jobs(orphans, self.job_size(len(orphans))))

    # --- configs ------------------------------------------------------------------------------
    def job_size(self, n: int) -> int:
        """Trials per Train job for `n` trials queued together (policies.trials_per_job): the grid
        at the start, each refinement round on its own (a round of few trials spreads over the
        free slots rather than queueing behind one job)."""
        import ray

        return trials_per_job(n, job_slots(self.spec, ray.cluster_resources()), self.spec.resources.trials_per_job,
                              shared=self.sharing.shared)

    # --- reports, checkpoints, evaluations ----------------------------------------------------
    def on_report(self, tid: str, rec: Report) -> None:
        """A trial's report, from the inbox (sweep/reports.py): a trial of a job starts; a
        checkpoint is recorded and evaluated; a trial's training ends."""
        if self.book.ended(tid):
            return  # a late duplicate of an ended trial (a retried job re-reporting its end)
        if isinstance(rec, Begin):
            self.book.begin(tid)
        elif isinstance(rec, CheckpointReport):
            maybe_fail(f"driver_report:{tid}:{rec.step}")
            # The trial's rank 0 records it too; writing it here as well covers a worker that
            # died between its report and its row (idempotent).
            self.evaluate(ledger.record_checkpoint(self.tables.store, self.configs.checkpoint_root, tid, rec.step, rec.epoch,
                                                   rec.checkpoint_kind))
            self.book.note(rec)
        elif isinstance(rec, EndReport):
            self.book.note(rec)
            status = final_status(rec)
            self.book.finish(tid, status, error="non-finite training loss" if status is TrialStatus.DIVERGED else None)
        else:
            raise TypeError(f"unknown report {type(rec).__name__} from trial {tid}")

    def evaluate(self, rec: ledger.CheckpointRecord, known_unevaluated: bool = False, at_least: int = 0,
                 top_up: tuple[str, ...] = ()) -> None:
        self.book.known_checkpoint(rec.trial_id, rec.step)
        t = self.by_id[rec.trial_id]
        self.tracker.submit(EvalRequest(
            trial_id=t.trial_id, model=t.model, method=t.method, series=t.series, optimizer=t.optimizer,
            lr=t.lr, epochs=t.epochs, seed=t.seed, step=rec.step, epoch=rec.epoch, checkpoint=rec.uri,
            kind=rec.kind, rule=self.rule, at_least=at_least, top_up=top_up), known_unevaluated=known_unevaluated)

    def reconcile(self) -> None:
        """From the store: every reported checkpoint of this grid that lacks an evaluation is
        sent (once per run: one that already failed in this run waits for the next run)."""
        ck, ev = self.tables.rows("checkpoints"), self.tables.rows("evals")
        self.tracker.note_evaluated(ledger.evaluated_keys(ev, self.tracker.task_names))
        for rec in ledger.records(ck):
            if rec.trial_id in self.by_id:
                self.book.known_checkpoint(rec.trial_id, rec.step)
        for rec in ledger.unevaluated(ck, ev, self.tracker.task_names, set(self.by_id)):
            if self.tracker.error_of(*rec.key) is None and self.take_trial(rec.trial_id, evaluating=True):
                self.evaluate(rec, known_unevaluated=True)

    def prune(self, tid: str, final: int | None, steps: set[int]) -> None:
        """A done trial's checkpoints that nothing will read again go (spec.keep_checkpoints)."""
        if final is not None:
            ledger.prune_done(self.tables.store, self.configs.checkpoint_root, tid, final, steps, self.spec.keep_checkpoints)
