"""Tune's side of a run: the function each Tune trial runs (one Train job), and the callback
that turns Tune's events into trial rows and progress (reports, checkpoints and each trial's
start and end come through the inbox: orchestrator/inbox.py)."""

from __future__ import annotations

import os

from cliffsweep.orchestrator.failures import FailureLog
from cliffsweep.orchestrator.live import lookup, register
from cliffsweep.sweep.status import TrialStatus
from cliffsweep.orchestrator.sweeprun import SweepRun
from cliffsweep.trainables.config import JOB_KEY, JobRun


def trial_fn():
    from cliffsweep.trainables.job import run_job

    def trial(config: dict) -> None:
        run_job(config[JOB_KEY])

    return trial


def _error_text(trial) -> str:
    path = getattr(trial, "error_file", None)
    if path and os.path.exists(path):
        with open(path) as f:
            return f.read()  # the store keeps its head and its tail (store.clip_message)
    return str(getattr(trial, "error_msg", None) or "trial failed (no error text captured)")


def sweep_callback(run: SweepRun):
    from ray import tune

    key = register(run)  # Tune pickles its callbacks; the live run stays here (live.py)
    book = run.book
    failures = run.failures

    class SweepCallback(tune.Callback):
        """Tune events (one Tune trial = one Train job of several trials) -> trial rows and
        progress; reports, checkpoints and each point's start and end come through the inbox."""

        def __reduce__(self):
            return (_callback_from_key, (key,))

        def on_step_begin(self, iteration, trials, **info):
            run.tick()

        def on_trial_start(self, iteration, trials, trial, **info):
            job: JobRun = trial.config[JOB_KEY]
            run.job_started(job)
            todo = self._unended(job)
            if todo:
                book.begin(todo[0])  # the job trains its trials in order

        def _flush_reports(self):
            """Every report a job made is in the inbox before Tune sees it end (inbox.py)."""
            for tid, rec in run.inbox.flush():
                run.on_report(tid, rec)

        def _unended(self, job: JobRun) -> list[str]:
            return [tid for tid in job.trial_ids if not book.ended(tid)]

        def on_trial_complete(self, iteration, trials, trial, **info):
            job: JobRun = trial.config[JOB_KEY]
            self._flush_reports()
            run.job_ended(job)
            for tid in self._unended(job):  # never silently: a job must end each of its trials
                book.finish(tid, TrialStatus.FAILED, error=(
                    f"Train job {job.job_id} returned without reporting the end of this trial's training"))
            run.tick()

        def on_trial_recover(self, iteration, trials, trial, **info):
            job: JobRun = trial.config[JOB_KEY]
            self._flush_reports()
            text, unended = _error_text(trial), self._unended(job)
            # the one it was training starts again; none had begun: the job died starting its first
            for tid in [t for t in unended if t in run.progress.running] or unended[:1]:
                book.retry(tid, text)
            failures.note(unended[0] if unended else job.job_id, text, "a trial failed and is retried")

        def on_trial_error(self, iteration, trials, trial, **info):
            job: JobRun = trial.config[JOB_KEY]
            self._flush_reports()
            _job_failed(run, failures, job, self._unended(job), _error_text(trial))

    return SweepCallback()


def _job_failed(run: SweepRun, failures: FailureLog, job: JobRun, unended: list[str], text: str) -> None:
    """A Train job failed for good: the trial it was training failed; the ones after it never
    started, so they get a job of their own instead of sharing its failure."""
    failed = [tid for tid in unended if tid in run.progress.running] or unended[:1]
    for tid in failed:
        run.book.finish(tid, TrialStatus.FAILED, error=text)
        failures.note(tid, text, "a trial failed for good")
    rest = [run.by_id[tid] for tid in unended if tid not in failed]
    if rest:
        run.queue.put_back(run.configs.jobs(rest, len(rest)))
    run.job_ended(job)


def _callback_from_key(key: int):
    return sweep_callback(lookup(key))
