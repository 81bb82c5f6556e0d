"""Every trial's state in one `cliffsweep run`, owned here and changed only through the methods
below (issue 24 part 4): its status, attempts, times, the reports its training sent
(sweep/reports.py), the checkpoints it reported, and the progress counters the display shows.

Each change is written to the store's `trials` table at once: the store, not this object, is
what a re-run starts from (storage/ledger.py). The run's phases (orchestrator/sweeprun.py) and
Tune's callback (tunecallback.py) say what happened; the book keeps the counts consistent with
it (a trial is counted once, in one status).
"""

from __future__ import annotations

import json
from datetime import datetime, timezone
from typing import Any, Callable

from cliffsweep.sweep.status import TrialStatus
from cliffsweep.orchestrator.progress import Progress
from cliffsweep.storage import ledger
from cliffsweep.storage.store import Store
from cliffsweep.sweep.grid import Trial
from cliffsweep.sweep.reports import CheckpointReport, EndReport, TrialRecord, phase_seconds


def now() -> datetime:
    return datetime.now(timezone.utc)


def trial_row(t: Trial, status: TrialStatus, **extra: Any) -> dict[str, Any]:
    row = {k: v for k, v in t.to_dict().items() if k not in ("dtype",)}
    row["method_params"] = json.dumps(t.method_params, sort_keys=True)
    row["status"] = status.value
    row.update(extra)
    return row


def int_or_none(v) -> int | None:
    return None if v is None or v != v else int(v)


COUNTED = (TrialStatus.DONE, TrialStatus.TRAINED, TrialStatus.DIVERGED, TrialStatus.FAILED)
"""Statuses the progress line counts from the store (an earlier run's, another driver's)."""


class TrialBook:
    """The trials of one run. `trials`: id -> grid point (shared with the run, which adds
    refined trials to it); `config_json`: a trial's resolved config as its row stores it."""

    def __init__(self, store: Store, trials: dict[str, Trial], config_json: Callable[[Trial], str],
                 progress: Progress, driver: str = "", owns: Callable[[str], bool] = lambda tid: True):
        """`progress`: the terminal's counters, which every status change moves. `driver`: this
        run's label, each row's `driver` column (storage/claims.py); `owns(tid)`: whether this
        driver holds the trial's claim (of a store shared by several drivers, a trial another
        one trains is never written here)."""
        self.store, self.trials, self.config_json, self.progress = store, trials, config_json, progress
        self.driver, self.owns = driver, owns
        self.terminal_changes = 0
        """How many times a trial reached a terminal status: refinement asks again when it moves."""
        self.status: dict[str, str] = {}  # trial id -> its status, as last recorded
        self.attempts: dict[str, int] = {}
        self.started: dict[str, datetime] = {}
        self.reports: dict[str, TrialRecord] = {}  # what each trial's training reported in this run
        self.last_at: dict[str, datetime] = {}
        self.finished: set[str] = set()  # trials whose training ended in this run
        self.trained: dict[str, int | None] = {}  # trained, not yet settled -> final step
        self.finished_at: dict[str, datetime] = {}
        self.ckpt_steps: dict[str, set[int]] = {}  # reported checkpoints per trial (ledger)
        self.stored_rows: dict[str, dict] = {}  # trials rows of earlier runs

    # --- an earlier run's rows, and the display -----------------------------------------------
    def load(self, rows: list[dict]) -> None:
        """The `trials` rows of earlier runs (of this grid): statuses, and the trials trained but
        not yet settled."""
        self.stored_rows = {r["trial_id"]: r for r in rows if r["trial_id"] in self.trials}
        self.status.update({tid: r["status"] for tid, r in self.stored_rows.items()})
        self.trained = {tid: int_or_none(r.get("steps")) for tid, r in self.stored_rows.items()
                        if r["status"] == TrialStatus.TRAINED.value}

    def show(self) -> None:
        """The counters start from what earlier runs finished."""
        self.progress.status.update({s: sum(v == s for tid, v in self.status.items() if tid in self.stored_rows)
                                for s in COUNTED})

    def _move(self, tid: str, to: str | None) -> None:
        """Counters: `tid` leaves `running` (if it was) and joins `to`."""
        if tid in self.progress.running:  # its value is None until its first report
            del self.progress.running[tid]
            self.progress.status[TrialStatus.RUNNING] -= 1
        if to is not None:
            self.progress.status[to] += 1

    # --- lifecycle ------------------------------------------------------------------------------
    def pending(self, tid: str) -> None:
        self.record(tid, TrialStatus.PENDING)

    def begin(self, tid: str) -> None:
        """A trial of a job starts training (the job's first at the job's start, each later one
        when the one before it ended)."""
        if self.progress is None or tid in self.progress.running or tid in self.finished:
            return
        self.attempts[tid] = self.attempts.get(tid, 0) + 1  # as the inbox counts (Inbox.put)
        self.started.setdefault(tid, now())
        self.record(tid, TrialStatus.RUNNING)
        self.progress.status[TrialStatus.RUNNING] += 1
        self.progress.running[tid] = None

    def retry(self, tid: str, error: str) -> None:
        """Tune retries the job that was training `tid`: it starts again (a new attempt), and the
        failed attempt is an `errors` row, also when it died before its first report reached the
        driver (a node killed while the job started: the rehearsal's kills)."""
        if tid in self.progress.running:
            self._move(tid, None)
        ledger.record_error(self.store, f"trial__{tid}__attempt{self.attempts.get(tid, 0)}", "trial_retry", tid, error)

    def finish(self, tid: str, status: TrialStatus, **extra: Any) -> None:
        """A trial's training ended (trained, diverged) or it failed for good."""
        self.finished.add(tid)
        self._move(tid, status.value)
        if tid in self.started:
            self.progress.trial_seconds.append((now() - self.started[tid]).total_seconds())
        self.finished_at[tid] = now()
        self.record(tid, status, finished_at=self.finished_at[tid], **extra)
        if status is TrialStatus.FAILED:  # the errors table holds every failure, not only retries
            ledger.record_error(self.store, f"trial__{tid}__attempt{self.attempts.get(tid, 0)}", "trial_failed", tid,
                                extra.get("error", ""))
        if status is TrialStatus.TRAINED:
            self.trained[tid] = self.reports.get(tid, TrialRecord()).total_steps

    def fail(self, tid: str, error: str) -> None:
        """A trial that will not train in this run, and why."""
        self.record(tid, TrialStatus.FAILED, error=error, finished_at=now())
        self._move(tid, TrialStatus.FAILED.value)

    def interrupted(self) -> None:
        """Tune returned early (Ctrl-C): trials it stopped go back to pending, which is what a
        re-run picks up; their evaluations so far are kept."""
        for tid, status in list(self.status.items()):
            if status == TrialStatus.RUNNING.value and tid not in self.finished and self.owns(tid):
                self.record(tid, TrialStatus.PENDING)

    def observe(self, tid: str, status: str) -> None:
        """Another driver's trial changed status in the store (read, never written here)."""
        old = self.status.get(tid)
        if old == status:
            return
        self.status[tid] = status
        if TrialStatus(status).terminal:
            self.terminal_changes += 1
        counted = {s.value for s in COUNTED}  # the progress line counts them too (trials x/N)
        if old in counted:
            self.progress.status[TrialStatus(old)] -= 1
        if status in counted:
            self.progress.status[TrialStatus(status)] += 1

    def stored_end(self, tid: str) -> TrialStatus | None:
        """The status the store gives `tid` if its training has ended (another driver may have
        finished it just before this one claimed it), observed here; None: still to train. A
        trained trial's evaluations are the claimer's."""
        row = self.store.read_unit("trials", tid)
        status = None if row is None or row.empty else TrialStatus(str(row["status"].iloc[-1]))
        if status is None or not (status.terminal or status is TrialStatus.TRAINED):
            return None
        self.observe(tid, status.value)
        if status is TrialStatus.TRAINED:
            self.trained.setdefault(tid, None)
        return status

    # --- reports --------------------------------------------------------------------------------
    def note(self, rec: CheckpointReport | EndReport) -> None:
        """Keep a trial's report as its latest (the `trials` row is built from it)."""
        tid = rec.trial_id
        old = self.reports.get(tid, TrialRecord())
        self.reports[tid] = (TrialRecord(checkpoint=rec, end=old.end) if isinstance(rec, CheckpointReport)
                             else TrialRecord(checkpoint=old.checkpoint, end=rec))
        self.last_at[tid] = datetime.fromtimestamp(rec.reported_at, timezone.utc)
        if tid in self.progress.running:
            self.progress.running[tid] = self.reports[tid]
        if isinstance(rec, CheckpointReport):
            self.ckpt_steps.setdefault(tid, set()).add(rec.step)
            # `cliffsweep status` shows how far it got; a late report of a trial that Ctrl-C
            # already sent back to pending must not mark it running again
            if self.status.get(tid) == TrialStatus.RUNNING.value:
                self.record(tid, TrialStatus.RUNNING)

    def known_checkpoint(self, tid: str, step: int) -> None:
        self.ckpt_steps.setdefault(tid, set()).add(step)

    def settle(self, evaluated: Callable[[str, int], bool]) -> list[tuple[str, int | None, set[int]]]:
        """Trained trials whose checkpoints are all evaluated become `done`; returns them as
        (trial, final step, its checkpoint steps)."""
        settled = []
        for tid, final in list(self.trained.items()):
            steps = self.ckpt_steps.get(tid, set())
            if ledger.trial_settled(final, steps, {s for s in steps if evaluated(tid, s)}):
                del self.trained[tid]
                self.record(tid, TrialStatus.DONE, finished_at=self.finished_at.get(tid) or now())
                self.progress.status[TrialStatus.TRAINED] -= 1
                self.progress.status[TrialStatus.DONE] += 1
                settled.append((tid, final, steps))
        return settled

    # --- the row --------------------------------------------------------------------------------
    def record(self, tid: str, status: TrialStatus, **extra: Any) -> None:
        self.status[tid] = status.value
        if status.terminal:
            self.terminal_changes += 1
        if tid not in self.reports and tid in self.stored_rows and status is TrialStatus.DONE:
            # trained by an earlier run: only its status changes (its `driver` is the one that trained it)
            self.store.write("trials", tid, [dict(self.stored_rows[tid], status=status.value, **extra)])
            return
        t = self.trials[tid]
        rec = self.reports.get(tid, TrialRecord())
        started = self.started.get(tid)
        self.store.write("trials", tid, [trial_row(
            t, status, attempt=self.attempts.get(tid, 0), started_at=started,
            **self._timing(tid, rec, started, extra.get("finished_at")),
            steps=rec.step, total_steps=rec.total_steps, final_loss=rec.loss, train_seconds=rec.train_seconds,
            resumed_from_step=rec.resumed_from_step, config=self.config_json(t), driver=self.driver, **extra)])

    def _timing(self, tid: str, rec: TrialRecord, started: datetime | None, finished_at) -> dict[str, Any]:
        out: dict[str, Any] = {}
        ck = rec.checkpoint
        if ck is not None:
            marks = ck.marks
            # A job's later trial starts where the previous one ended (its `trial_started` mark).
            began = marks.get("trial_started") or (started.timestamp() if started else None)
            if began:
                out["setup_seconds"] = ck.loop_started_at - began
                out["setup_phases"] = json.dumps(phase_seconds(began, marks))
            out["compute"] = ck.compute or None
        if finished_at is not None and tid in self.last_at:
            out["teardown_seconds"] = (finished_at - self.last_at[tid]).total_seconds()
        costs = rec.checkpoint_costs
        if costs is not None:
            out["checkpoint_seconds"], out["checkpoint_bytes"] = costs
        return out
