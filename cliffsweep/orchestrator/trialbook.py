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
from dataclasses import dataclass, field
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


@dataclass
class TrialState:
    """One trial's state in this run (issue 60 part 4: one record, not ten dicts kept in step)."""
    status: TrialStatus | None = None  # as last recorded here or observed in the store
    attempts: int = 0
    started: datetime | None = None
    report: TrialRecord | None = None  # what its training reported in this run
    last_at: datetime | None = None  # its last report's time
    ended: bool = False  # its training ended in this run
    awaiting: bool = False  # trained, its evaluations not all in yet (`settle`)
    final_step: int | None = None  # of a trained trial
    finished_at: datetime | None = None
    steps: set[int] = field(default_factory=set)  # the checkpoints it reported (ledger)
    stored: dict | None = None  # its `trials` row from an earlier run


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
        self.state: dict[str, TrialState] = {}

    def _of(self, tid: str) -> TrialState:
        got = self.state.get(tid)
        if got is None:
            got = self.state[tid] = TrialState()
        return got

    # --- what the run asks ----------------------------------------------------------------------
    def status_of(self, tid: str) -> TrialStatus | None:
        st = self.state.get(tid)
        return None if st is None else st.status

    def statuses(self) -> dict[str, str]:
        """Every known trial's status, as the store spells it."""
        return {tid: st.status.value for tid, st in self.state.items() if st.status is not None}

    def terminal(self, tid: str) -> bool:
        status = self.status_of(tid)
        return status is not None and status.terminal

    def ended(self, tid: str) -> bool:
        """Whether `tid`'s training ended in this run (a later report of it is a duplicate)."""
        return tid in self.state and self.state[tid].ended

    def steps(self, tid: str) -> set[int]:
        return self.state[tid].steps if tid in self.state else set()

    def awaiting(self) -> set[str]:
        """Trained trials whose evaluations are not all in."""
        return {tid for tid, st in self.state.items() if st.awaiting}

    def not_awaited(self, tid: str) -> None:
        """`tid` is trained again here, or another driver holds it: not settled by this run."""
        if tid in self.state:
            self.state[tid].awaiting = False

    # --- an earlier run's rows, and the display -----------------------------------------------
    def load(self, rows: list[dict]) -> None:
        """The `trials` rows of earlier runs (of this grid): statuses, and the trials trained but
        not yet settled."""
        for r in rows:
            if r["trial_id"] not in self.trials:
                continue
            st = self._of(r["trial_id"])
            st.stored, st.status = r, TrialStatus(r["status"])
            if st.status is TrialStatus.TRAINED:
                st.awaiting, st.final_step = True, int_or_none(r.get("steps"))

    def show(self) -> None:
        """The counters start from what earlier runs finished."""
        self.progress.status.update({s: sum(st.status is s for st in self.state.values() if st.stored is not None)
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
        if tid in self.progress.running or self.ended(tid):
            return
        st = self._of(tid)
        st.attempts += 1  # as the inbox counts (Inbox.put)
        st.started = st.started or now()
        self.record(tid, TrialStatus.RUNNING)
        self.progress.status[TrialStatus.RUNNING] += 1
        self.progress.running[tid] = None

    def retry(self, tid: str, error: str) -> None:
        """Tune retries the job that was training `tid`: it starts again (a new attempt), and the
        failed attempt is an `errors` row, also when it died before its first report reached the
        driver (a node killed while the job started: the rehearsal's kills)."""
        if tid in self.progress.running:
            self._move(tid, None)
        ledger.record_error(self.store, f"trial__{tid}__attempt{self._of(tid).attempts}", "trial_retry", tid, error)

    def finish(self, tid: str, status: TrialStatus, **extra: Any) -> None:
        """A trial's training ended (trained, diverged) or it failed for good."""
        st = self._of(tid)
        st.ended = True
        self._move(tid, status.value)
        if st.started is not None:
            self.progress.trial_seconds.append((now() - st.started).total_seconds())
        st.finished_at = now()
        self.record(tid, status, finished_at=st.finished_at, **extra)
        if status is TrialStatus.FAILED:  # the errors table holds every failure, not only retries
            ledger.record_error(self.store, f"trial__{tid}__attempt{st.attempts}", "trial_failed", tid,
                                extra.get("error", ""))
        if status is TrialStatus.TRAINED:
            st.awaiting, st.final_step = True, (st.report or TrialRecord()).total_steps

    def fail(self, tid: str, error: str) -> None:
        """A trial that will not train in this run, and why."""
        self.record(tid, TrialStatus.FAILED, error=error, finished_at=now())
        self._move(tid, TrialStatus.FAILED.value)

    def interrupted(self) -> None:
        """Tune returned early (Ctrl-C): trials it stopped go back to pending, which is what a
        re-run picks up; their evaluations so far are kept."""
        for tid, st in list(self.state.items()):
            if st.status is TrialStatus.RUNNING and not st.ended and self.owns(tid):
                self.record(tid, TrialStatus.PENDING)

    def observe(self, tid: str, status: str) -> None:
        """Another driver's trial changed status in the store (read, never written here)."""
        st, new = self._of(tid), TrialStatus(status)
        old = st.status
        if old is new:
            return
        st.status = new
        if new.terminal:
            self.terminal_changes += 1
        if old in COUNTED:  # the progress line counts them too (trials x/N)
            self.progress.status[old] -= 1
        if new in COUNTED:
            self.progress.status[new] += 1

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
            self._of(tid).awaiting = True
        return status

    # --- reports --------------------------------------------------------------------------------
    def note(self, rec: CheckpointReport | EndReport) -> None:
        """Keep a trial's report as its latest (the `trials` row is built from it)."""
        st = self._of(rec.trial_id)
        old = st.report or TrialRecord()
        st.report = (TrialRecord(checkpoint=rec, end=old.end) if isinstance(rec, CheckpointReport)
                     else TrialRecord(checkpoint=old.checkpoint, end=rec))
        st.last_at = datetime.fromtimestamp(rec.reported_at, timezone.utc)
        if rec.trial_id in self.progress.running:
            self.progress.running[rec.trial_id] = st.report
        if isinstance(rec, CheckpointReport):
            st.steps.add(rec.step)
            # `cliffsweep status` shows how far it got; a late report of a trial that Ctrl-C
            # already sent back to pending must not mark it running again
            if st.status is TrialStatus.RUNNING:
                self.record(rec.trial_id, TrialStatus.RUNNING)

    def known_checkpoint(self, tid: str, step: int) -> None:
        self._of(tid).steps.add(step)

    def settle(self, evaluated: Callable[[str, int], bool]) -> list[tuple[str, int | None, set[int]]]:
        """Trained trials whose checkpoints are all evaluated become `done`; returns them as
        (trial, final step, its checkpoint steps)."""
        settled = []
        for tid in sorted(self.awaiting()):
            st = self.state[tid]
            if ledger.trial_settled(st.final_step, st.steps, {s for s in st.steps if evaluated(tid, s)}):
                st.awaiting = False
                self.record(tid, TrialStatus.DONE, finished_at=st.finished_at or now())
                self.progress.status[TrialStatus.TRAINED] -= 1
                self.progress.status[TrialStatus.DONE] += 1
                settled.append((tid, st.final_step, st.steps))
        return settled

    # --- the row --------------------------------------------------------------------------------
    def record(self, tid: str, status: TrialStatus, **extra: Any) -> None:
        st = self._of(tid)
        st.status = status
        if status.terminal:
            self.terminal_changes += 1
        if st.report is None and st.stored is not None and status is TrialStatus.DONE:
            # trained by an earlier run: only its status changes (its `driver` is the one that trained it)
            self.store.write("trials", tid, [dict(st.stored, status=status.value, **extra)])
            return
        t = self.trials[tid]
        rec = st.report or TrialRecord()
        self.store.write("trials", tid, [trial_row(
            t, status, attempt=st.attempts, started_at=st.started,
            **self._timing(st, rec, extra.get("finished_at")),
            steps=rec.step, total_steps=rec.total_steps, final_loss=rec.loss, train_seconds=rec.train_seconds,
            resumed_from_step=rec.resumed_from_step, config=self.config_json(t), driver=self.driver, **extra)])

    @staticmethod
    def _timing(st: TrialState, rec: TrialRecord, finished_at) -> dict[str, Any]:
        out: dict[str, Any] = {}
        ck = rec.checkpoint
        if ck is not None:
            marks = ck.marks
            # A job's later trial starts where the previous one ended (its `trial_started` mark).
            began = marks.get("trial_started") or (st.started.timestamp() if st.started else None)
            if began:
                out["setup_seconds"] = ck.loop_started_at - began
                out["setup_phases"] = json.dumps(phase_seconds(began, marks))
            out["compute"] = ck.compute or None
        if finished_at is not None and st.last_at is not None:
            out["teardown_seconds"] = (finished_at - st.last_at).total_seconds()
        costs = rec.checkpoint_costs
        if costs is not None:
            out["checkpoint_seconds"], out["checkpoint_bytes"] = costs
        return out
