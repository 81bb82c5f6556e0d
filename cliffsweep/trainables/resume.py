"""Checkpoint folders and mid-trial resume: writing a checkpoint where the ledger says it lives,
the training state saved beside it, and finding it again.

Rank 0 writes each checkpoint itself to `ledger.checkpoint_uri(root, trial, step)` (local disk,
a shared filesystem or object storage, through pyarrow), `cliffsweep_meta.json` last: a folder
without it was cut short and is never resumed from. Why not Ray Train's checkpoint reporting: a
Train job trains several trials in turn (trainables/job.py), and Ray keeps one "latest
checkpoint" per job, not per trial.

A trial that is retried (a crashed worker) or re-run (a resumed sweep) resumes from `latest`:
its newest complete folder holding `TRAIN_STATE`, the weights as trained (before
`method.export`, so WiSE-FT resumes from its fine-tuned weights, not the interpolation, and LoRA
from the peft model), the optimizer, the lr schedule, the method's own state (NanoAdam's masks)
and the step. The loop loads the base model, runs `method.prepare` (statistics, anchors and
frozen copies come from the base, as in the first run), then this state, and skips the batches
already trained on: data order is a function of (seed, epoch), so the resumed run sees what the
uninterrupted one would have.

The training state is saved only every `resume_every_s` of training (trainables/trial.py; the
checkpoint lifecycle: docs/design.md), and only the two latest checkpoints keep it
(`keep_latest`): it holds the
optimizer's moments, twice the weights; two, so that a worker dying while it drops the older
one's state still leaves one to resume from. FSDP trials restart from step 0 (their optimizer
state is sharded; not saved).
"""

from __future__ import annotations

import io
import json
import os
from pathlib import Path
from typing import Any

import torch

from cliffsweep.storage.ledger import META, TRAIN_STATE  # the checkpoint folder's layout
from cliffsweep.storage.store import filesystem as _fs


def training_state(step: int, model: torch.nn.Module, optimizer, scheduler, method) -> dict[str, Any]:
    """What `TRAIN_STATE` holds for an unwrapped, unsharded `model` (the live tensors: the
    checkpoint writer copies them to host memory first, trainables/checkpoints.py)."""
    return {"step": step, "model": model.state_dict(), "optimizer": optimizer.state_dict(),
            "scheduler": scheduler.state_dict(), "method": method.state_dict()}


def save(folder: str | Path, step: int, model: torch.nn.Module, optimizer, scheduler, method) -> None:
    """Write the training state into a checkpoint folder."""
    torch.save(training_state(step, model, optimizer, scheduler, method), Path(folder) / TRAIN_STATE)


def clear(uri: str) -> None:
    """Delete what is at `uri` (a checkpoint folder never completed: a killed attempt's files),
    before it is written again; nothing there is a no-op."""
    import pyarrow.fs as pafs

    from cliffsweep.storage.store import retrying

    fs, path = _fs(uri)
    if fs.get_file_info(path).type != pafs.FileType.NotFound:
        retrying("clear an incomplete checkpoint folder", uri, lambda: fs.delete_dir(path))


def put_meta(uri: str, meta_: dict[str, Any]) -> None:
    """Write the folder's meta file (last: the folder is complete once it exists)."""
    from cliffsweep.storage.store import retrying

    fs, path = _fs(uri)

    def put() -> None:
        with fs.open_output_stream(f"{path}/{META}") as f:
            f.write(json.dumps(meta_).encode())

    retrying(f"write {META}", uri, put)


def upload(local: str, uri: str, before_meta=lambda: None) -> None:
    """Copy the checkpoint folder `local` (its meta file not yet written) to `uri`, retried like
    every store write; the caller writes the meta file after it (`put_meta`). `before_meta` runs
    once the files are there (a fault point: a worker killed there leaves an incomplete folder)."""
    import pyarrow.fs as pafs

    from cliffsweep.storage.store import retrying

    fs, dest = _fs(uri)
    names = sorted(os.listdir(local))
    if META in names:
        raise ValueError(f"{local} has its {META} already: it is written last, after the upload")
    retrying("create checkpoint folder", uri, lambda: fs.create_dir(dest, recursive=True))
    for name in names:  # copy_files takes a file or a whole folder (LoRA's adapter subfolders)
        retrying(f"upload {name}", uri, lambda n=name: pafs.copy_files(
            os.path.join(local, n), f"{dest}/{n}", source_filesystem=pafs.LocalFileSystem(),
            destination_filesystem=fs))
    before_meta()


def meta(uri: str) -> dict[str, Any]:
    fs, path = _fs(uri)
    with fs.open_input_stream(f"{path}/{META}") as f:
        return json.loads(f.read())


def _files(root: str, trial_id: str) -> tuple[str, set[str]]:
    """(the trial's checkpoint folder, the paths of every file under it, relative to it)."""
    import pyarrow.fs as pafs

    fs, base = _fs(root)
    folder = f"{base.rstrip('/')}/{trial_id}"
    infos = fs.get_file_info(pafs.FileSelector(folder, recursive=True, allow_not_found=True))
    return folder, {i.path[len(folder) + 1:] for i in infos if i.type == pafs.FileType.File}


def complete_steps(root: str, trial_id: str, files: set[str] | None = None) -> list[int]:
    """Steps of `trial_id` whose checkpoint folder is complete (its meta file written), ascending
    (`files`: the folder's listing, when the caller has it already)."""
    if files is None:
        _, files = _files(root, trial_id)
    return sorted(int(p.split("/")[0].removeprefix("step-")) for p in files
                  if p.startswith("step-") and p.count("/") == 1 and p.endswith("/" + META))


def latest(root: str, trial_id: str) -> tuple[str, dict[str, Any]] | None:
    """The newest complete checkpoint of `trial_id` that holds its training state: (its URI, the
    state), or None when there is none (the trial starts at step 0)."""
    from cliffsweep.storage.ledger import checkpoint_uri

    fs, _ = _fs(root)
    folder, files = _files(root, trial_id)
    for step in reversed(complete_steps(root, trial_id, files)):
        uri = checkpoint_uri(root, trial_id, step)
        name = uri.rstrip("/").rsplit("/", 1)[1]
        if f"{name}/{TRAIN_STATE}" in files:
            with fs.open_input_stream(f"{folder}/{name}/{TRAIN_STATE}") as f:
                return uri, torch.load(io.BytesIO(f.read()), map_location="cpu", weights_only=True)
    return None


KEEP = 2


def keep_latest(with_state: list[str]) -> None:
    """Drop the training state of all but the KEEP latest of `with_state` (URIs, oldest first)."""
    while len(with_state) > KEEP:
        drop(with_state.pop(0))


def drop(uri: str) -> None:
    """Delete a checkpoint's training state (it has a newer one); the exported model stays."""
    import pyarrow.fs as pafs

    fs, path = _fs(uri)
    path = f"{path}/{TRAIN_STATE}"
    if fs.get_file_info(path).type == pafs.FileType.File:
        fs.delete_file(path)
