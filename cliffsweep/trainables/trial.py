"""The Ray Tune function trainable: one grid point = one Ray Train TorchTrainer run.

Ray 2.60 (Train V2) no longer accepts a TorchTrainer as a Tune trainable; the documented way is
a Tune function that builds the trainer and calls fit(). Each report (metrics + checkpoint
path) goes from the Train controller to the sweep's inbox actor (orchestrator/inbox.py), where
the driver picks it up and hands checkpoints to the evaluator pool; Tune's own route
(TuneReportCallback) would start one more queue actor per trial.
"""

from __future__ import annotations

from functools import lru_cache

from cliffsweep.trainables.config import WORKER_KEY, TrialRun

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


def run_trial(run: TrialRun) -> None:
    import time

    started = time.time()  # the setup's "placement" phase ends here (loop.SETUP_PHASES)
    from ray.train import CheckpointConfig, FailureConfig, RunConfig, ScalingConfig

    from cliffsweep.orchestrator.inbox import report_callback
    from cliffsweep.orchestrator.policies import role_resources
    from cliffsweep.trainables.loop import train_loop_per_worker

    import ray

    res, tid = run.resources, run.trial_id
    attempt = ray.get(ray.get_actor(run.inbox).begin.remote(tid))
    trainer = lean_trainer_cls()(
        train_loop_per_worker,
        train_loop_config={WORKER_KEY: run.train.for_attempt(attempt, started)},
        scaling_config=ScalingConfig(
            num_workers=res.workers_per_trial,
            use_gpu=res.gpus_per_worker > 0,
            resources_per_worker={"CPU": res.cpus_per_worker,
                                  **({"GPU": res.gpus_per_worker} if res.gpus_per_worker > 0 else {}),
                                  **role_resources(res.cluster_roles, "trainer", res.gpus_per_worker)},
        ),
        run_config=RunConfig(
            storage_path=run.checkpoint_root,
            name=tid,
            callbacks=[report_callback(run.inbox, tid)],
            # Retries happen one level up (Tune re-runs this function), so that a retried
            # trial restarts cleanly and the driver can count attempts.
            failure_config=FailureConfig(max_failures=0),
            checkpoint_config=CheckpointConfig(num_to_keep=None),
        ),
        local_cluster=run.local_cluster,
    )
    trainer.fit()
