"""TensorBoard: one event-file folder per trial (<dir>/<trial_id>/) and one for the sweep
(<dir>/_sweep/), written with torch's SummaryWriter; scalars carry the store's step and
timestamp. TensorBoard has no artifacts: the analysis' files are copied into <dir>/_sweep/report/.
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil

from cliffsweep.tracking.base import RunDelta, Tracker

SWEEP_FOLDER = "_sweep"


class TensorboardTracker(Tracker):
    name = "tensorboard"

    def __init__(self, cfg, sweep: str):
        # Loaded here, in the thread that builds the tracker (the driver's), not first in the
        # tracking thread: there it raced the driver's own `import torch`, and under wandb's
        # import hooks one of them saw a partly initialised torch.utils (ImportError, the driver
        # exited: CI of 2026-11-28). Not installed: said at first use, as before.
        with contextlib.suppress(ImportError):
            import torch.utils.tensorboard  # noqa: F401

        super().__init__(cfg, sweep)
        self.root = os.path.abspath(cfg.dir.replace("{name}", sweep))
        self.writers: dict[str, object] = {}

    def _writer(self, folder: str):
        from torch.utils.tensorboard import SummaryWriter

        if folder not in self.writers:
            self.writers[folder] = SummaryWriter(log_dir=os.path.join(self.root, folder))
        return self.writers[folder]

    def open(self, delta: RunDelta, run_id: str | None) -> str:
        folder = SWEEP_FOLDER if delta.parent else delta.trial_id
        w = self._writer(folder)
        if run_id is None:  # a new run: its params, once
            w.add_text("params", "\n".join(f"    {k}: {json.dumps(v)}" for k, v in delta.params.items()))
        return folder

    def send(self, run_id: str, delta: RunDelta) -> None:
        w = self._writer(run_id)
        for p in (*delta.steps, *delta.evals):
            for k, v in p.values.items():
                w.add_scalar(k, v, global_step=p.step, walltime=p.at.timestamp())
        if delta.status is not None:
            w.add_text("status", delta.status)
        w.flush()

    def finish(self, run_id: str, status: str | None) -> None:
        w = self.writers.pop(run_id, None)
        if w is not None:
            w.close()

    def annotate(self, run_id: str, delta: RunDelta, tags: dict[str, str]) -> None:
        w = self._writer(run_id)
        w.add_text("analysis", "\n".join(f"    {k}: {v}" for k, v in tags.items()))
        self.finish(run_id, None)

    def attach(self, run_id: str, paths: list[str]) -> None:
        dest = os.path.join(self.root, run_id, "report")
        os.makedirs(dest, exist_ok=True)
        for path in paths:
            target = os.path.join(dest, os.path.basename(path.rstrip("/")))
            if os.path.isdir(path):
                shutil.copytree(path, target, dirs_exist_ok=True)
            else:
                shutil.copy2(path, target)

    def close(self) -> None:
        for folder in list(self.writers):
            self.finish(folder, None)
