"""The Ray Tune function trainable: one grid point = one Ray Train TorchTrainer run.

Ray 2.60 (Train V2) no longer accepts a TorchTrainer as a Tune trainable; the documented way is
a Tune function that builds the trainer and calls fit(), with TuneReportCallback forwarding
each report (metrics + checkpoint path) to Tune, where the sweep driver hands checkpoints to
the evaluator pool.
"""

from __future__ import annotations

from typing import Any


def run_trial(config: dict[str, Any]) -> None:
    from ray.train import CheckpointConfig, FailureConfig, RunConfig, ScalingConfig
    from ray.train.torch import TorchTrainer
    from ray.tune.integration.ray_train import TuneReportCallback

    from cliffsweep.trainables.loop import train_loop_per_worker

    res = config["resources"]
    trainer = TorchTrainer(
        train_loop_per_worker,
        train_loop_config=config["train"],
        scaling_config=ScalingConfig(
            num_workers=res["workers_per_trial"],
            use_gpu=res["gpus_per_worker"] > 0,
            resources_per_worker={"CPU": res["cpus_per_worker"], "GPU": res["gpus_per_worker"]}
            if res["gpus_per_worker"] > 0 else {"CPU": res["cpus_per_worker"]},
        ),
        run_config=RunConfig(
            storage_path=config["checkpoint_root"],
            name=config["train"]["trial"]["trial_id"],
            callbacks=[TuneReportCallback()],
            # Retries happen one level up (Tune re-runs this function), so that a retried
            # trial restarts cleanly and the driver can count attempts.
            failure_config=FailureConfig(max_failures=0),
            checkpoint_config=CheckpointConfig(num_to_keep=None),
        ),
    )
    trainer.fit()
