"""Live progress of a sweep: trials, evaluations, ETA. A rich live panel on a terminal; plain
periodic lines elsewhere (CI logs, pipes)."""

from __future__ import annotations

import sys
import time
from collections import Counter

from cliffsweep.sweep.status import TERMINAL, Phase, TrialStatus
from cliffsweep.sweep.reports import TrialRecord


class Progress:
    def __init__(self, n_trials: int, concurrency: int, stream=None, interval: float = 15.0):
        self.n_trials = n_trials
        self.concurrency = max(1, concurrency)
        self.status: Counter = Counter()
        self.evals_done = 0
        self.evals_pending = 0
        self.evals_failed = 0
        self.trial_seconds: list[float] = []
        self.t0 = time.time()
        self.stream = stream or sys.stdout
        self.interval = interval
        self._last_print = 0.0
        self._live = None
        self.phase = Phase.STARTING
        self.running: dict[str, TrialRecord | None] = {}  # trial id -> its reports so far (None: none yet)

    # --- state ------------------------------------------------------------------------------
    def eta_seconds(self) -> float | None:
        finished = self.finished()
        left = self.n_trials - finished
        if left <= 0:
            return 0.0
        if not self.trial_seconds:
            return None
        mean = sum(self.trial_seconds) / len(self.trial_seconds)
        return mean * left / self.concurrency

    def live(self) -> dict:
        """The progress line's numbers, for live.json (what `cliffsweep dashboard` shows)."""
        return {"started_at": self.t0, "eta_s": self.eta_seconds(), "evals_done": self.evals_done,
                "evals_queued": self.evals_pending, "evals_failed": self.evals_failed, "n_trials": self.n_trials}

    def finished(self) -> int:
        return sum(self.status[s] for s in TERMINAL)

    def line(self) -> str:
        eta = self.eta_seconds()
        eta_txt = "?" if eta is None else f"{eta:.0f}s"
        counts = ", ".join(f"{s} {self.status[s]}" for s in (TrialStatus.RUNNING, TrialStatus.DONE,
                                                                TrialStatus.DIVERGED, TrialStatus.FAILED))
        return (f"[{time.time() - self.t0:6.0f}s] {self.phase}: trials {self.finished()}/{self.n_trials} "
                f"({counts}) | "
                f"evals done {self.evals_done}, queued {self.evals_pending}, failed {self.evals_failed} | ETA {eta_txt}"
                + "".join(f"\n    {tid}: {trial_progress(r)}" for tid, r in sorted(self.running.items())))

    # --- display ----------------------------------------------------------------------------
    def __enter__(self):
        if self.stream.isatty():
            from rich.live import Live

            self._live = Live(self.line(), refresh_per_second=2, transient=False)
            self._live.__enter__()
        return self

    def refresh(self, force: bool = False) -> None:
        if self._live is not None:
            self._live.update(self.line())
        elif force or time.time() - self._last_print >= self.interval:
            print(self.line(), file=self.stream, flush=True)
            self._last_print = time.time()

    def __exit__(self, *exc):
        if self._live is not None:
            self._live.update(self.line())
            self._live.__exit__(*exc)
        else:
            self.refresh(force=True)


def trial_progress(report: TrialRecord | None) -> str:
    """'step 12/40 (30%), loss 1.234' from a trial's reports so far ('starting' before any)."""
    if report is None or report.step is None:
        return "starting (Ray Train workers, model and data loading)"
    step, total = int(report.step), int(report.total_steps or 0)
    pct = f" ({100 * step / total:.0f}%)" if total else ""
    loss = report.loss
    loss_txt = f", loss {loss:.4g}" if isinstance(loss, (int, float)) and loss == loss else ""
    return f"step {step}/{total or '?'}{pct}{loss_txt}"


def live_record(driver: str, progress: Progress, running: dict[str, list[str]], queued: list[list[str]],
                status: dict[str, str], res, free: dict[str, float], tracker_live: dict) -> dict:
    """The run's live state as `cliffsweep status` and the dashboard read it (the store's
    LIVE_FILE): its phase, the jobs running (`running`: job -> its trials) and queued, and why
    each pending trial waits (policies.wait_reasons)."""
    import os
    from datetime import datetime, timezone

    from cliffsweep.orchestrator.jobs import worker_resources
    from cliffsweep.orchestrator.policies import wait_reasons

    training = {job: next((t for t in tids if t in progress.running), tids[0]) for job, tids in running.items() if tids}
    need = {k: v * res.workers_per_trial for k, v in worker_resources(res)}
    pending = [tid for tid, s in status.items() if s == TrialStatus.PENDING.value]
    reasons = wait_reasons(pending, progress.phase, running, training, queued, progress.concurrency, free, need)
    return {"at": datetime.now(timezone.utc).isoformat(), "pid": os.getpid(), "driver": driver,
            "phase": progress.phase, "concurrency": progress.concurrency, "running_jobs": running,
            "queued_jobs": len(queued), "free": {k: v for k, v in free.items() if k in need}, "need_per_job": need,
            "waiting": reasons, "progress": progress.live(), **tracker_live}
