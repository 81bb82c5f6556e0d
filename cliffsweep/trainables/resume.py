"""Mid-trial resume: the training state saved beside each checkpoint, and reading it back.

A trial that is retried (a crashed worker) or re-run (a resumed sweep) starts a new Ray Train
run with the same name and storage path; Ray Train then hands the workers the latest reported
checkpoint (`ray.train.get_checkpoint()`). Beside the exported model it holds `TRAIN_STATE`:
the weights as trained (before `method.export`, so WiSE-FT resumes from its fine-tuned weights,
not the interpolation, and LoRA from the peft model), the optimizer, the lr schedule, the
method's own state (NanoAdam's masks) and the step. The loop loads the base model, runs
`method.prepare` (statistics, anchors and frozen copies come from the base, as in the first
run), then this state, and skips the batches already trained on: data order is a function of
(seed, epoch), so the resumed run sees what the uninterrupted one would have.

Only the two latest checkpoints keep their training state (`keep_latest`): it holds the
optimizer's moments, twice the weights. Why two: `ray.train.report` returns once the controller
has taken the report, before it registers the checkpoint; a worker that dies in between leaves
the previous checkpoint as the latest registered one, which must still hold its state. FSDP
trials restart from step 0 (their optimizer state is sharded; not saved).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import torch

TRAIN_STATE = "train_state.pt"


def save(folder: str | Path, step: int, model: torch.nn.Module, optimizer, scheduler, method) -> None:
    """Write the training state of an unwrapped, unsharded `model` into a checkpoint folder."""
    torch.save({"step": step, "model": model.state_dict(), "optimizer": optimizer.state_dict(),
                "scheduler": scheduler.state_dict(), "method": method.state_dict()},
               Path(folder) / TRAIN_STATE)


def load(checkpoint) -> dict[str, Any] | None:
    """The training state in a Ray Train checkpoint, or None (no checkpoint, or one without it).
    Reads that one file from the checkpoint's storage, not the whole folder."""
    import io

    import pyarrow.fs as pafs

    if checkpoint is None:
        return None
    path = f"{checkpoint.path}/{TRAIN_STATE}"
    if checkpoint.filesystem.get_file_info(path).type != pafs.FileType.File:
        return None
    with checkpoint.filesystem.open_input_stream(path) as f:
        return torch.load(io.BytesIO(f.read()), map_location="cpu", weights_only=True)


KEEP = 2


def keep_latest(with_state: list) -> None:
    """Drop the training state of all but the KEEP latest of `with_state` (oldest first)."""
    while len(with_state) > KEEP:
        drop(with_state.pop(0))


def drop(checkpoint) -> None:
    """Delete a checkpoint's training state (it has a newer one); the exported model stays."""
    import pyarrow.fs as pafs

    path = f"{checkpoint.path}/{TRAIN_STATE}"
    if checkpoint.filesystem.get_file_info(path).type == pafs.FileType.File:
        checkpoint.filesystem.delete_file(path)
