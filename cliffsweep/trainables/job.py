"""A job: one Ray Train TorchTrainer run that trains one or more trials (grid points) of one
model in turn (trainables/loop.py), each still its own trial in the store. Ray Tune runs each
job as one Tune trial, through `run_job`, its function trainable (docs/design.md, "Words").

Ray 2.60 (Train V2) no longer accepts a TorchTrainer as a Tune trainable; the documented way is
a Tune function that builds the trainer and calls fit(). Each report (metrics + checkpoint
path) goes from the Train controller to the sweep's inbox actor (orchestrator/inbox.py), where
the driver picks it up and hands checkpoints to the evaluator pool; Tune's own route
(TuneReportCallback) would start one more queue actor per trial.
"""

from __future__ import annotations

from functools import lru_cache

from cliffsweep.trainables.config import WORKER_KEY, JobRun

# Ray Train V2 starts these helper actors on every fit(); each is a fresh Python process that
# imports Ray Train (~2-3 core-s on this 2-core machine, docs/benchmarks.md). A sweep trial
# needs neither: it passes no Ray Datasets (DatasetManager serves only those), and on a local
# cluster the detached placement-group cleaner guards against a controller dying without
# removing its placement group, which ray.shutdown() does anyway when the sweep ends.
UNUSED_WITHOUT_DATASETS = "DatasetsCallback"
UNUSED_ON_LOCAL_CLUSTER = "PlacementGroupCleanerCallback"


@lru_cache(maxsize=1)
def lean_trainer_cls():
    """TorchTrainer minus the per-fit helper actors a sweep trial does not use (above)."""
    from ray.train.torch import TorchTrainer

    class LeanTorchTrainer(TorchTrainer):
        def __init__(self, *args, local_cluster: bool, **kwargs):
            self.local_cluster = local_cluster
            super().__init__(*args, **kwargs)

        def _create_default_callbacks(self):
            drop = {UNUSED_WITHOUT_DATASETS} if not self.datasets else set()
            if self.local_cluster:
                drop.add(UNUSED_ON_LOCAL_CLUSTER)
            return [cb for cb in super()._create_default_callbacks() if type(cb).__name__ not in drop]

    return LeanTorchTrainer


def run_job(job: JobRun) -> None:
    import time

    started = time.time()  # the setup's "placement" phase ends here (sweep/reports.SETUP_PHASES)
    from ray.train import FailureConfig, RunConfig, ScalingConfig
    from ray.train.torch import TorchConfig

    from cliffsweep.trainables.loop import train_loop_per_worker

    import ray

    res = job.resources
    attempts = ray.get(ray.get_actor(job.inbox).begin_job.remote(list(job.trial_ids)))
    trials = tuple(p.for_attempt(attempts[p.trial.trial_id], started) for p in job.trials
                   if p.trial.trial_id in attempts)
    if not trials:  # every trial of the job ended in an earlier attempt
        return
    trainer = lean_trainer_cls()(
        train_loop_per_worker,
        train_loop_config={WORKER_KEY: trials},
        scaling_config=ScalingConfig(num_workers=res.workers_per_trial, use_gpu=res.gpus_per_worker > 0,
                                     resources_per_worker=dict(job.resources_per_worker)),
        run_config=RunConfig(
            storage_path=job.checkpoint_root,
            name=job.job_id,
            callbacks=[report_callback(job.inbox)],
            # Retries happen one level up (Tune re-runs this function), so that a retried
            # job restarts cleanly and the driver can count attempts.
            failure_config=FailureConfig(max_failures=0),
        ),
        local_cluster=job.local_cluster,
        # A rehearsal's fake GPU nodes have no CUDA: gloo, whatever resources the workers hold.
        **({"torch_config": TorchConfig(backend="gloo")} if job.trials[0].rehearsal is not None else {}),
    )
    trainer.fit()


def report_callback(inbox_name: str):
    """A Ray Train callback (runs in the job's Train controller) that pushes every report to the
    inbox: rank 0's record (sweep/reports.py: it names its trial, a job trains several), stamped
    with `reported_at`. (Checkpoint reports do not come this way: rank 0's checkpoint writer
    pushes them itself once their folder is complete, trainables/checkpoints.py.)"""
    import time

    from ray.train.v2.api.callback import UserCallback

    class InboxReportCallback(UserCallback):
        def __init__(self):
            self._inbox = None  # resolved in the controller: handles are looked up, not pickled

        def __getstate__(self):
            return {"_inbox": None}

        def after_report(self, run_context, metrics, checkpoint):
            import ray

            if self._inbox is None:
                self._inbox = ray.get_actor(inbox_name)
            from cliffsweep.sweep.reports import REPORT_KEY, stamped

            item = stamped(metrics[0][REPORT_KEY], time.time())
            ray.get(self._inbox.put.remote(item.trial_id, item))

    return InboxReportCallback()
