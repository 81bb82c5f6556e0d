"""The sweep file's `tracking:` section (issue 17): which experiment trackers mirror the store.

    tracking:
      mlflow: {tracking_uri: http://127.0.0.1:5000, experiment: qwen-chem}
      wandb: {project: qwen-chem, mode: offline}     # online | offline | disabled
      tensorboard: {dir: results/qwen-chem/tb}

Credentials are never fields here: the sweep file is copied into the store. Each tool reads its
own environment variables (MLFLOW_TRACKING_TOKEN or MLFLOW_TRACKING_USERNAME/PASSWORD,
WANDB_API_KEY), as it does outside cliffsweep.
"""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, ConfigDict, Field

# Keys that look like credentials get a message saying where credentials go instead.
CREDENTIAL_KEYS = ("api_key", "key", "token", "password", "username", "secret")


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class MlflowSpec(_Strict):
    tracking_uri: str
    """The MLflow tracking server (http://host:port), or any URI mlflow accepts."""
    experiment: str | None = None
    """Experiment name; None = the sweep's name."""


class WandbSpec(_Strict):
    project: str
    entity: str | None = None
    mode: Literal["online", "offline", "disabled"] = "online"
    """offline: runs are written under `dir` and uploaded later with `wandb sync`."""
    dir: str | None = None
    """Where W&B writes its run folders ('{name}': the sweep's name); None = W&B's default
    (WANDB_DIR, else ./wandb)."""


class TensorboardSpec(_Strict):
    dir: str
    """Event files go to <dir>/<trial_id>/ ('{name}': the sweep's name); the sweep's own run
    (base evaluations, analysis) to <dir>/_sweep/."""


class TrackingSpec(_Strict):
    mlflow: MlflowSpec | None = None
    wandb: WandbSpec | None = None
    tensorboard: TensorboardSpec | None = None
    max_step_rows: int = Field(1000, ge=10)
    """Rows of the `steps` table per trial at most: short trials log every step, longer ones
    every ceil(steps / max_step_rows)-th (and every checkpoint's step). Also without trackers:
    the training curve is in the store either way."""
    interval_s: float = Field(15.0, gt=0)
    """How often the driver mirrors what is new in the store to the trackers."""
    close_timeout_s: float = Field(60.0, ge=0)
    """At the end of a run, how long the driver waits for the trackers to catch up before it
    leaves the rest to the next run or `cliffsweep export-tracking` (the sweep itself is done)."""

    @property
    def enabled(self) -> list[str]:
        return [n for n in ("mlflow", "wandb", "tensorboard") if getattr(self, n) is not None]
