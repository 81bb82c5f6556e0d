"""MLflow: one run per trial, nested under one run per sweep, through MLflow's own client.

Runs are found again by their `cliffsweep.run_key` tag (MLflow chooses run ids itself), so a
re-run or `export-tracking` continues the same runs. Metric points carry the store's
timestamps: MLflow keeps one copy of an identical (key, step, timestamp, value) point, which
makes a repeated send harmless. Credentials: MLflow's own environment variables
(MLFLOW_TRACKING_TOKEN, MLFLOW_TRACKING_USERNAME / MLFLOW_TRACKING_PASSWORD).
"""

from __future__ import annotations

import os

from cliffsweep.sweep.status import TrialStatus
from cliffsweep.tracking.base import RunDelta, Tracker, run_key, sweep_run_id

# MLflow's client retries a refused connection 7 times with backoff and waits 120 s for an
# answer by default: minutes per call against a dead server. The sync thread has its own
# retry with backoff (sync.py), so each call fails fast instead (a user's setting wins).
CLIENT_ENV = {"MLFLOW_HTTP_REQUEST_MAX_RETRIES": "0", "MLFLOW_HTTP_REQUEST_TIMEOUT": "10"}
BATCH = 1000  # metrics per log_batch call (MLflow's limit)


class MlflowTracker(Tracker):
    name = "mlflow"

    def __init__(self, cfg, sweep: str):
        super().__init__(cfg, sweep)
        for k, v in CLIENT_ENV.items():
            os.environ.setdefault(k, v)
        from mlflow import MlflowClient

        self.client = MlflowClient(tracking_uri=cfg.tracking_uri)
        self._experiment: str | None = None
        self._parent: str | None = None

    def experiment_id(self) -> str:
        if self._experiment is None:
            name = self.cfg.experiment or self.sweep
            exp = self.client.get_experiment_by_name(name)
            self._experiment = exp.experiment_id if exp is not None else self.client.create_experiment(name)
        return self._experiment

    def _find(self, trial_id: str) -> str | None:
        key = run_key(self.sweep, trial_id)
        runs = self.client.search_runs([self.experiment_id()], filter_string=f"tags.`cliffsweep.run_key` = '{key}'",
                                       max_results=1)
        return runs[0].info.run_id if runs else None

    def parent_id(self) -> str:
        if self._parent is None:
            self._parent = self._find(sweep_run_id(self.sweep))
            if self._parent is None:
                raise RuntimeError("the sweep's parent run does not exist yet")  # sent first: retried
        return self._parent

    def open(self, delta: RunDelta, run_id: str | None) -> str:
        from mlflow.entities import Param

        found = run_id or self._find(delta.trial_id)
        if found is not None:
            return found
        tags = {"cliffsweep.run_key": run_key(self.sweep, delta.trial_id), "cliffsweep.trial_id": delta.trial_id,
                "cliffsweep.sweep": self.sweep, "cliffsweep.kind": "sweep" if delta.parent else "trial"}
        if not delta.parent:
            tags["mlflow.parentRunId"] = self.parent_id()
        run = self.client.create_run(self.experiment_id(), run_name=delta.name, tags=tags)
        new = run.info.run_id
        self.client.log_batch(new, params=[Param(k, str(v)) for k, v in delta.params.items()])
        if delta.parent:
            self._parent = new
        return new

    def send(self, run_id: str, delta: RunDelta) -> None:
        from mlflow.entities import Metric

        metrics = [Metric(k, v, int(p.at.timestamp() * 1000), p.step)
                   for p in (*delta.steps, *delta.evals) for k, v in p.values.items()]
        for i in range(0, len(metrics), BATCH):
            self.client.log_batch(run_id, metrics=metrics[i:i + BATCH])
        if delta.status is not None:
            self.client.set_tag(run_id, "cliffsweep.status", delta.status)

    def finish(self, run_id: str, status: str | None) -> None:
        self.client.set_terminated(run_id, "FINISHED" if status == TrialStatus.DONE else "FAILED")

    def annotate(self, run_id: str, delta: RunDelta, tags: dict[str, str]) -> None:
        for k, v in tags.items():
            self.client.set_tag(run_id, f"cliffsweep.{k}", v)

    def attach(self, run_id: str, paths: list[str]) -> None:
        for path in paths:
            if os.path.isdir(path):
                self.client.log_artifacts(run_id, path, artifact_path=os.path.basename(path.rstrip("/")))
            else:
                self.client.log_artifact(run_id, path)
