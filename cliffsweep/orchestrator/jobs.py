"""What crosses Ray to a Train job, built from the sweep file: each trial's typed config
(trainables/config.py) and the jobs that pack a model's trials together (policies.pack)."""

from __future__ import annotations

from cliffsweep.orchestrator.policies import pack, role_resources, torch_threads
from cliffsweep.storage.store import absolute_uri
from cliffsweep.sweep.grid import Trial
from cliffsweep.sweep.rehearsal import Rehearsal
from cliffsweep.sweep.spec import SweepSpec
from cliffsweep.trainables.config import JobRun, TrainConfig


def trial_config(spec: SweepSpec, checkpoint_root: str, inbox: str, rehearsal: Rehearsal | None, t: Trial,
                 stats_uri: str | None) -> TrainConfig:
    """What one trial's training needs across the Ray boundary, typed (trainables/config.py)."""
    from cliffsweep.sweep.gpushare import trainer_share

    s = spec
    return TrainConfig(
        trial=t, recipe=s.recipe, learn=s.tasks.learn, retain=s.tasks.replay,
        store_uri=absolute_uri(s.store_uri), checkpoint_root=checkpoint_root, stats_uri=stats_uri,
        eval_points=s.eval.points_per_trial, every_epoch=s.eval.every_epoch, strategy=s.resources.strategy,
        torch_threads=torch_threads(s.resources.cpus_per_worker), max_step_rows=s.tracking.max_step_rows,
        inbox=inbox, resume_every_s=s.resume_every_s, async_checkpoints=s.async_checkpoints,
        gpu_share=trainer_share(s.resources), rehearsal=rehearsal.trials[t.trial_id] if rehearsal is not None else None)


def job_configs(spec: SweepSpec, trials: list[Trial], size: int, stats_uri: dict[str, str | None],
                checkpoint_root: str, inbox: str, rehearsal: Rehearsal | None) -> list[JobRun]:
    """`trials` as Train jobs of up to `size` trials of one model each (policies.pack), typed
    for the Ray boundary (trainables/config.py)."""
    import hashlib

    jobs = []
    for idx in pack([f"{t.model_path}|{t.dtype}" for t in trials], size):
        points = tuple(trial_config(spec, checkpoint_root, inbox, rehearsal, trials[i], stats_uri.get(trials[i].trial_id))
                       for i in idx)
        ids = "\n".join(p.trial.trial_id for p in points)
        job_id = f"job-{points[0].trial.model}-{hashlib.sha1(ids.encode()).hexdigest()[:10]}"
        jobs.append(JobRun(job_id=job_id, trials=points, resources=spec.resources,
                           resources_per_worker=worker_resources(spec.resources), checkpoint_root=checkpoint_root,
                           local_cluster=not spec.ray_address, inbox=inbox))
    return jobs


def config_json(spec: SweepSpec, checkpoint_root: str, inbox: str, rehearsal: Rehearsal | None, t: Trial) -> str:
    """A trial's resolved config as its `trials` row stores it (no statistics URI, no attempt)."""
    return trial_config(spec, checkpoint_root, inbox, rehearsal, t, None).to_json()


def worker_resources(res) -> tuple[tuple[str, float], ...]:
    """Ray resources of one Train worker: its CPUs and GPU share, and its node role's slot."""
    out = {"CPU": res.cpus_per_worker, **({"GPU": res.gpus_per_worker} if res.gpus_per_worker > 0 else {}),
           **role_resources(res.cluster_roles, "trainer", res.gpus_per_worker)}
    return tuple(sorted(out.items()))


class Configs:
    """What one run builds its Train jobs from: the sweep file, where checkpoints go, the inbox
    its trials report to, the rehearsal (if any), and each trial's statistics once computed."""

    def __init__(self, spec: SweepSpec, inbox: str, rehearsal: Rehearsal | None):
        self.spec, self.inbox, self.rehearsal = spec, inbox, rehearsal
        self.checkpoint_root = absolute_uri(spec.checkpoint_uri)
        self.stats_uri: dict[str, str | None] = {}

    def trial(self, t: Trial) -> TrainConfig:
        return trial_config(self.spec, self.checkpoint_root, self.inbox, self.rehearsal, t, self.stats_uri.get(t.trial_id))

    def jobs(self, trials: list[Trial], size: int) -> list[JobRun]:
        """`trials` as Train jobs of up to `size` trials of one model each."""
        return job_configs(self.spec, trials, size, self.stats_uri, self.checkpoint_root, self.inbox, self.rehearsal)

    def add_stats(self, store, trials: list[Trial]) -> dict[str, str]:
        """Once-per-model statistics for `trials` (orchestrator/statistics.py), kept for their
        configs; returns the error of each trial whose statistics failed."""
        from cliffsweep.orchestrator.statistics import ensure_stats

        got, failed = ensure_stats(self.spec, store, self.rehearsal, trials)
        self.stats_uri.update(got)
        return failed

    def engine_start_s(self) -> float:
        """What one evaluator's engine start costs (an idle one gives way to training only after
        idling that long: policies.evaluator_changes)."""
        from cliffsweep.planner import bill

        return self.rehearsal.engine_start_s if self.rehearsal is not None else bill.ENGINE_START_S

    def row_json(self, t: Trial) -> str:
        """A trial's resolved config as its `trials` row stores it."""
        return config_json(self.spec, self.checkpoint_root, self.inbox, self.rehearsal, t)
