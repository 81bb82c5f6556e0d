"""Weights & Biases: one run per trial, grouped by sweep, through the wandb client.

Run ids are derived from the trial ids (`base.run_key`) and runs are opened with
resume="allow": a re-run continues the same run (offline: a new run folder with the same id,
merged by `wandb sync`). Training points and evaluation points have their own x axes
(`train/step`, `eval/step`, W&B's define_metric), because evaluations of a checkpoint arrive
after later training steps were already logged and W&B drops points logged at a lower `_step`.
Credentials: WANDB_API_KEY (or `wandb login`), as W&B reads them.
"""

from __future__ import annotations

import contextlib
import os

from cliffsweep.sweep.status import TrialStatus
from cliffsweep.tracking.base import RunDelta, Tracker, run_key


class WandbTracker(Tracker):
    name = "wandb"

    def __init__(self, cfg, sweep: str):
        # Loaded in the thread that builds the tracker, before the tracking thread starts: wandb
        # installs import hooks, and imports racing across threads under them can see a partly
        # initialised module (tensorboard_tracker.py). Not installed: said at first use.
        with contextlib.suppress(ImportError):
            import wandb  # noqa: F401

        super().__init__(cfg, sweep)
        self.runs: dict[str, object] = {}

    def _dir(self) -> str | None:
        if self.cfg.dir is None:
            return None
        path = os.path.abspath(self.cfg.dir.replace("{name}", self.sweep))
        os.makedirs(path, exist_ok=True)
        return path

    def _init(self, delta: RunDelta):
        import wandb

        key = run_key(self.sweep, delta.trial_id)
        run = wandb.init(project=self.cfg.project, entity=self.cfg.entity, group=self.sweep, id=key,
                         name=delta.name, job_type="sweep" if delta.parent else "trial", config=delta.params,
                         mode=self.cfg.mode, dir=self._dir(), reinit="create_new", resume="allow",
                         settings=wandb.Settings(console="off", silent=True, x_disable_stats=True))
        for axis, keys in (("train/step", "train/*"), ("eval/step", "eval/*"), ("eval/step", "base/*")):
            run.define_metric(axis)
            run.define_metric(keys, step_metric=axis)
        self.runs[key] = run
        return key

    def open(self, delta: RunDelta, run_id: str | None) -> str:
        return self._init(delta)

    def send(self, run_id: str, delta: RunDelta) -> None:
        run = self.runs[run_id]
        for p in delta.steps:
            run.log({**p.values, "train/step": p.step})
        for p in delta.evals:
            run.log({**p.values, "eval/step": p.step})
        if delta.status is not None:
            run.summary["status"] = delta.status

    def finish(self, run_id: str, status: str | None) -> None:
        run = self.runs.pop(run_id, None)
        if run is not None:
            run.finish(exit_code=0 if status in (None, TrialStatus.DONE) else 1)

    def annotate(self, run_id: str, delta: RunDelta, tags: dict[str, str]) -> None:
        key = self._init(delta)
        self.runs[key].summary.update(tags)
        self.finish(key, None)

    def attach(self, run_id: str, paths: list[str]) -> None:
        import wandb

        run = self.runs[run_id]
        art = wandb.Artifact(f"{self.sweep}-report", type="report")
        for path in paths:
            if os.path.isdir(path):
                art.add_dir(path, name=os.path.basename(path.rstrip("/")))
            else:
                art.add_file(path)
        run.log_artifact(art)

    def close(self) -> None:
        for key in list(self.runs):
            self.finish(key, None)
