"""Real experiment trackers for the tracking tests, and their own readers (no mock objects):
an MLflow tracking server on loopback (`mlflow server`, sqlite backend, a process the test can
kill and start again on the same port and database), W&B offline runs read back with the wandb
package's own reader (`wandb leet inspect --json`), TensorBoard event files read with
tensorboard's EventAccumulator."""

from __future__ import annotations

import glob
import json
import os
import signal
import subprocess
import sys
import time
import urllib.request
from collections import defaultdict
from pathlib import Path

from objectstore import free_port

BIN = Path(sys.executable).parent


class MlflowServer:
    def __init__(self, root: Path, port: int | None = None):
        self.root, self.port = root, port or free_port()
        self.uri = f"http://127.0.0.1:{self.port}"
        self.proc: subprocess.Popen | None = None

    def start(self, timeout: float = 360) -> "MlflowServer":
        # readiness, not speed: on a loaded 2-core machine the server's imports took 140 s
        # (a clean-clone run of 2026-12-07 failed at the 120 s this waited before)
        self.root.mkdir(parents=True, exist_ok=True)
        self.proc = subprocess.Popen(
            [str(BIN / "mlflow"), "server", "--backend-store-uri", f"sqlite:///{self.root}/mlflow.db",
             "--artifacts-destination", str(self.root / "artifacts"), "--host", "127.0.0.1",
             "--port", str(self.port), "--workers", "1"],
            stdout=open(self.root / "server.log", "a"), stderr=subprocess.STDOUT, start_new_session=True)
        deadline = time.time() + timeout
        while time.time() < deadline:
            try:
                with urllib.request.urlopen(f"{self.uri}/health", timeout=2) as r:
                    if r.status == 200:
                        return self
            except OSError:
                time.sleep(0.5)
            assert self.proc.poll() is None, (self.root / "server.log").read_text()[-3000:]
        raise TimeoutError(f"mlflow server not up in {timeout} s: {(self.root / 'server.log').read_text()[-3000:]}")

    def kill(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            os.killpg(self.proc.pid, signal.SIGKILL)
            self.proc.wait(30)
        self.proc = None


def mlflow_runs(uri: str, experiment: str) -> dict[str, dict]:
    """trial id -> {run, params, tags, metrics: {key: {step: value}}, artifacts} of every run."""
    from mlflow import MlflowClient

    c = MlflowClient(uri)
    exp = c.get_experiment_by_name(experiment)
    out = {}
    for run in c.search_runs([exp.experiment_id], max_results=1000):
        tid = run.data.tags["cliffsweep.trial_id"]
        assert tid not in out, f"two MLflow runs for {tid}"
        metrics = {}
        for key in run.data.metrics:
            history = c.get_metric_history(run.info.run_id, key)
            steps = [m.step for m in history]
            assert len(steps) == len(set(steps)), f"{tid} {key}: a step logged twice: {sorted(steps)}"
            metrics[key] = {m.step: m.value for m in history}
        out[tid] = {"run": run, "params": run.data.params, "tags": run.data.tags, "metrics": metrics,
                    "artifacts": [a.path for a in c.list_artifacts(run.info.run_id)]}
    return out


def wandb_history(wandb_dir: str) -> dict[str, dict]:
    """run id -> {config, summary, history: [rows]} of every offline run under `wandb_dir`, the
    run folders of one id (a re-run resumes into a new folder) merged in order."""
    runs: dict[str, dict] = defaultdict(lambda: {"config": {}, "summary": {}, "history": [], "group": None})
    for f in sorted(glob.glob(f"{wandb_dir}/**/offline-run-*/run-*.wandb", recursive=True)):
        out = subprocess.run([str(BIN / "wandb"), "leet", "inspect", "--json", f], capture_output=True,
                             text=True, check=True, timeout=120)
        for line in out.stdout.splitlines():
            if not line.startswith("{"):
                continue
            rec = json.loads(line)
            kind = rec.get("type")
            if kind == "run":
                rid = rec["run"]["run_id"]
                run = runs[rid]
                run["group"] = rec["run"].get("run_group")
                run["name"] = rec["run"].get("display_name")
                run["config"].update(rec["run"].get("config", {}).get("update", {}))
            elif kind == "history":
                run["history"].append(rec["history"]["item"])
            elif kind == "config":
                run["config"].update(rec["config"].get("update", {}))
            elif kind == "summary":
                run["summary"].update(rec["summary"].get("update", {}))
    return dict(runs)


def tensorboard_scalars(folder: str) -> dict[str, dict[int, float]]:
    """tag -> {step: value} of every scalar in the event files of `folder`."""
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    acc = EventAccumulator(folder, size_guidance={"scalars": 0})
    acc.Reload()
    out = {}
    for tag in acc.Tags()["scalars"]:
        events = acc.Scalars(tag)
        steps = [e.step for e in events]
        assert len(steps) == len(set(steps)), f"{folder} {tag}: a step written twice"
        out[tag] = {e.step: e.value for e in events}
    return out
