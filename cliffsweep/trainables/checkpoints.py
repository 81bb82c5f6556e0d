"""Checkpoints off the training thread (issue 21): rank 0 snapshots what a checkpoint holds into
host memory, and one writer thread writes, uploads, records and reports it while training goes on.

What the training thread does at an evaluation point (`Checkpointer.save`): the export
(`method.export`: the HF model, LoRA's adapter, WiSE-FT's interpolation) copied to host memory
unless it is a copy already, the canary computed on the live weights (a forward pass of a few
dozen tokens), and, when `resume_every_s` of training time have passed since the last one, the
training state (trainables/resume.py) cloned to host memory. Then it hands the snapshot to the
writer and trains on. The queue holds one snapshot waiting behind the one being written: a
writer that falls behind blocks training at the next checkpoint instead of filling host memory.

What the writer thread does, in order, for each snapshot: write the folder under a local
temporary directory, upload it to `ledger.checkpoint_uri` with the meta file last
(resume.upload; written in place on a filesystem), the meta file last, record the ledger row (the store's row is what makes it evaluable whatever
happens to the driver), and push a `CheckpointReport` to the sweep's inbox (the driver hands it
to the evaluators). Only then is the checkpoint visible to anyone: a worker killed mid-upload
leaves a folder without its meta file, which nothing records, evaluates or resumes from, and a
retry writes it again.

`drain()` waits for every snapshot to be reported; the loop calls it before the trial's end
report, so the driver never sees a checkpoint after the trial's end (it would drop it). A write
that fails (storage away past the store's retries) is raised on the training thread at the next
`save` or `drain`: the trial fails and is retried, nothing is dropped silently.

A retried attempt that re-trains steps whose folders are already complete (the training state
was not saved there: `resume_every_s`) does not write them again (an evaluator may be reading
them); it reports them again instead (`report_existing`; recording and evaluating are
idempotent), so its step count and the ledger end as an uninterrupted run's. The checkpoint an
attempt resumes from is reported again too, before its first step (trainables/trial.py): the
attempt that wrote it may have died between its meta file and its report.

`blocking=True` (spec `async_checkpoints: false`) waits for each write before training on: the
synchronous path before this module, kept for comparison (bench/bench_checkpoints.py).
"""

from __future__ import annotations

import os
import queue
import tempfile
import threading
import time
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

import torch

from cliffsweep.evals.canary import save_record
from cliffsweep.faults import maybe_fail
from cliffsweep.storage.ledger import TRAIN_STATE, record_checkpoint
from cliffsweep.storage.store import Store
from cliffsweep.sweep.reports import CheckpointReport
from cliffsweep.trainables import resume


def host_copy(obj: Any, memo: dict | None = None) -> Any:
    """`obj` (tensors, dicts, lists of them: a state dict, an optimizer state) with every tensor
    cloned to host memory, so that training can change the originals at once. Tensors that are
    one (a tied embedding and LM head) stay one: the save drops tied weights by identity."""
    memo = {} if memo is None else memo
    if isinstance(obj, torch.Tensor):
        key = (obj.untyped_storage().data_ptr(), obj.storage_offset(), tuple(obj.shape), tuple(obj.stride()),
               obj.dtype, obj.device)
        if key not in memo:
            memo[key] = obj.detach().to("cpu", copy=True)
        return memo[key]
    if isinstance(obj, dict):
        return {k: host_copy(v, memo) for k, v in obj.items()}
    if isinstance(obj, (list, tuple)):
        return type(obj)(host_copy(v, memo) for v in obj)
    return obj


@dataclass
class Snapshot:
    """One checkpoint in host memory, ready for the writer."""

    step: int
    epoch: float
    loss: float
    kind: str
    export: torch.nn.Module
    """The model to save (HF folder, or adapter folder for LoRA): a CPU copy of its own, or the
    live model, whose config the save reads and whose weights it never reads (`weights` then)."""
    weights: dict[str, torch.Tensor] | None
    canary: dict[str, Any]
    state: dict[str, Any] | None
    """The training state to resume from (resume.save's layout), or None: not due."""
    report: CheckpointReport
    """The report to push once the folder is complete (bytes and seconds filled in then)."""


class Checkpointer:
    """Rank 0's checkpoints of one trial attempt (the other ranks only join the collectives)."""

    def __init__(self, store_uri: str, root: str, trial_id: str, inbox: str, tokenizer,
                 blocking: bool, keep_state: list[str]):
        self.store_uri, self.root, self.trial_id, self.inbox_name = store_uri, root, trial_id, inbox
        self.tok, self.blocking = tokenizer, blocking
        self.with_state = keep_state  # URIs holding training state, oldest first (resume.keep_latest)
        self.blocked_s = 0.0  # seconds the training thread spent in save / drain
        self.bytes = 0  # bytes written by this attempt
        self._queue: queue.Queue = queue.Queue(maxsize=1)
        self._error: BaseException | None = None
        self._thread: threading.Thread | None = None
        self._inbox = None

    # --- training thread ------------------------------------------------------------------------
    def save(self, snap: Snapshot, started: float) -> None:
        """Hand `snap` to the writer (`started`: when the training thread began this checkpoint,
        so that the snapshot's cost counts as blocked time)."""
        self._raise()
        if self._thread is None and not self.blocking:
            self._thread = threading.Thread(target=self._run, name=f"checkpoints-{self.trial_id}", daemon=True)
            self._thread.start()
        if self.blocking:  # the path before issue 21: written here, training waits
            self._write(snap)
        else:
            self._queue.put(snap)  # blocks while one snapshot waits already
        self.blocked_s += time.time() - started
        self._raise()

    def drain(self) -> None:
        """Every snapshot written, uploaded, recorded and reported (before the trial's end report)."""
        t0 = time.time()
        if self._thread is not None:
            self._queue.join()
        self.blocked_s += time.time() - t0
        self._raise()

    def close(self) -> None:
        """Drained: the writer thread ends (a job's next point starts its own)."""
        self.drain()
        if self._thread is not None:
            self._queue.put(None)
            self._thread.join()
            self._thread = None

    def report_existing(self, report: CheckpointReport) -> None:
        """A checkpoint an earlier attempt completed: recorded and reported again, not rewritten."""
        self.drain()  # in step order with this attempt's own checkpoints
        record_checkpoint(Store(self.store_uri), self.root, self.trial_id, report.step, report.epoch,
                          report.checkpoint_kind)
        self._push(report)

    def _raise(self) -> None:
        if self._error is not None:
            err, self._error = self._error, None
            cause = os_cause(err)
            said = f": {cause}" if cause is not None else f" ({type(err).__name__}: {err})"
            raise RuntimeError(f"checkpoint of {self.trial_id} could not be written under {self.root}{said}") from err

    # --- writer thread --------------------------------------------------------------------------
    def _run(self) -> None:
        while True:
            snap = self._queue.get()
            if snap is None:  # close()
                self._queue.task_done()
                return
            try:
                if self._error is None:  # after a failure, later snapshots are not written
                    self._write(snap)
            except BaseException as exc:  # noqa: BLE001 - handed to the training thread
                self._error = exc
            finally:
                self._queue.task_done()

    def _write(self, snap: Snapshot) -> None:
        uri = snap.report.checkpoint_uri
        fault = lambda: maybe_fail(f"uploading:{self.trial_id}:{snap.step}")  # noqa: E731
        resume.clear(uri)  # what a killed attempt left of this never-completed folder (no meta file)
        if "://" in uri or self.blocking:
            # object storage (and the synchronous path, as before issue 21): a local temporary
            # folder, then the upload, meta file last
            with tempfile.TemporaryDirectory(prefix="cliffsweep-ckpt-") as tmp:
                self._files(snap, tmp)
                resume.upload(tmp, uri, before_meta=fault)
        else:  # a local or shared filesystem: written in place (one write instead of two), meta last
            os.makedirs(uri, exist_ok=True)
            self._files(snap, uri)
            fault()
        self._meta(snap, uri)
        maybe_fail(f"written:{self.trial_id}:{snap.step}")  # complete, not yet recorded nor reported
        record_checkpoint(Store(self.store_uri), self.root, self.trial_id, snap.step, snap.epoch, snap.kind)
        self._push(replace(snap.report, checkpoint_bytes=self.bytes, checkpoint_seconds=self.blocked_s))
        maybe_fail(f"reported:{self.trial_id}:{snap.step}")
        if snap.state is not None:
            self.with_state.append(uri)
            resume.keep_latest(self.with_state)

    def _files(self, snap: Snapshot, folder: str) -> None:
        """The folder's files but its meta file; counts their bytes."""
        if snap.state is not None:
            torch.save(snap.state, Path(folder) / TRAIN_STATE)
        snap.export.save_pretrained(folder, safe_serialization=True, state_dict=snap.weights)
        self.tok.save_pretrained(folder)
        save_record(snap.canary, folder)
        self.bytes += folder_bytes(folder)

    def _meta(self, snap: Snapshot, uri: str) -> None:
        """The meta file, last: from now on the folder is complete (resume.upload)."""
        resume.put_meta(uri, {"step": snap.step, "epoch": snap.epoch, "kind": snap.kind, "loss": snap.loss})

    def _push(self, report: CheckpointReport) -> None:
        """Into the sweep's inbox, synchronously (the driver reads it from there: inbox.py)."""
        import ray

        if self._inbox is None:
            self._inbox = ray.get_actor(self.inbox_name)
        ray.get(self._inbox.put.remote(report.trial_id, replace(report, reported_at=time.time())))


def folder_bytes(folder: str) -> int:
    return sum(p.stat().st_size for p in Path(folder).rglob("*") if p.is_file())


def os_cause(err: BaseException) -> OSError | None:
    """The OS's own error under `err` (no space, permission, read-only filesystem), if any: what
    the user must read, where a storage wrapper's retries would hide it."""
    seen: set[int] = set()
    while err is not None and id(err) not in seen:
        seen.add(id(err))
        if isinstance(err, OSError) and err.errno is not None:
            return err
        err = err.__cause__ or err.__context__
    return None
