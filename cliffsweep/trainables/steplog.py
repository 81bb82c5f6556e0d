"""A trial's training curve, in the store's `steps` table (issue 17): written by rank 0.

Why stretches between checkpoints: a retried or re-run trial continues from its latest
checkpoint (resume.py) and trains the steps after it again. Each write unit holds the rows from
one checkpoint's step + 1 up to the next checkpoint (`store.steps_key(trial, first step)`), and
every flush rewrites the whole stretch so far. A resumed attempt starts its first stretch at
the same step as the one it replaces, so it replaces that unit instead of adding to it: the
table never holds a step twice, whatever interrupts the trial (tests/invariant.py checks it
after every fault test). A trial that restarts from scratch (FSDP) rewrites every stretch.

A stretch is flushed before its checkpoint is reported (so a worker that dies after the
report leaves no gap), before a divergence is reported, and every `flush_seconds` in between
(what the trackers show live).
"""

from __future__ import annotations

import json
import math
import sys
import time
from datetime import datetime, timezone
from typing import Any

from cliffsweep.storage.store import StorageError, Store, steps_key

# Long trials keep at most this many rows each; short ones log every step.
DEFAULT_MAX_ROWS = 1000
FLUSH_SECONDS = 30.0


def log_every(total_steps: int, max_rows: int) -> int:
    """Log one step in this many, so that a trial of `total_steps` keeps at most about
    `max_rows` rows (checkpoint and final steps are always logged on top)."""
    return max(1, math.ceil(total_steps / max(1, max_rows)))


def should_log(step: int, total_steps: int, every: int, checkpoint_steps: set[int]) -> bool:
    return step % every == 0 or step == total_steps or step in checkpoint_steps


class StepLog:
    """Rank 0's buffer of the current stretch. `start`: the step this attempt continues from."""

    def __init__(self, store: Store | None, trial_id: str, attempt: int, start: int, total_steps: int,
                 max_rows: int, checkpoint_steps: set[int], flush_seconds: float = FLUSH_SECONDS):
        self.store, self.trial_id, self.attempt = store, trial_id, attempt
        self.total, self.checkpoints = total_steps, checkpoint_steps
        self.every = log_every(total_steps, max_rows)
        self.first = start + 1  # first step of the current stretch
        self.rows: list[dict[str, Any]] = []
        self.unwritten: dict[str, list[dict[str, Any]]] = {}  # stretch key -> rows storage refused
        self.flush_seconds = flush_seconds
        self._flushed_at = time.time()

    def wants(self, step: int) -> bool:
        """Whether `step` is logged (the caller skips computing what it would log otherwise)."""
        return should_log(step, self.total, self.every, self.checkpoints)

    def add(self, step: int, epoch: float, tokens: int, loss: float, terms: dict[str, float],
            grad_norm: float | None, lr: float, seconds: float) -> None:
        self.rows.append({
            "trial_id": self.trial_id, "attempt": self.attempt, "step": step, "epoch": epoch,
            "tokens": tokens, "loss": loss, "terms": json.dumps(terms, sort_keys=True),
            "grad_norm": grad_norm, "lr": lr, "seconds": seconds, "logged_at": datetime.now(timezone.utc)})
        if time.time() - self._flushed_at >= self.flush_seconds:
            self.flush()

    def flush(self) -> None:
        """Rewrite the current stretch (atomic, idempotent). A curve never stops training: if
        storage stays away through the store's retries, the stretch is kept and written again
        at the next flush (a stretch still unwritten when the trial ends is lost, and said so)."""
        self._flushed_at = time.time()
        if self.store is None:
            return
        if self.rows:
            self.unwritten[steps_key(self.trial_id, self.first)] = list(self.rows)
        for key, rows in list(self.unwritten.items()):
            try:
                self.store.write("steps", key, rows)
            except StorageError as exc:
                print(f"cliffsweep: training curve of {self.trial_id} not written yet ({exc}); "
                      "trying again at the next flush", file=sys.stderr, flush=True)
                return
            del self.unwritten[key]

    def close_stretch(self, step: int) -> None:
        """A checkpoint at `step`: flush its stretch; the next one starts after it."""
        self.flush()
        self.first, self.rows = step + 1, []
