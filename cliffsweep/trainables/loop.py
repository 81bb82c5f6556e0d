"""The Ray Train loop: each worker of a job trains the job's grid points one after the other
(DDP over gloo on CPU, NCCL/FSDP on GPU), each from its base model (trainables/point.py).

Light on purpose: the Tune trial process imports this module to start the Train job and never
trains; torch and the model code load in the workers, with point.py.
"""

from __future__ import annotations

import time

from cliffsweep.trainables.config import WORKER_KEY, TrainConfig


def train_loop_per_worker(config: dict[str, tuple[TrainConfig, ...]]) -> None:
    """One Train worker of a job: trains `config[WORKER_KEY]`'s points (TrainConfigs,
    trainables/config.py) one after the other, each from its base model."""
    started = time.time()
    points = config[WORKER_KEY]
    if points and points[0].rehearsal is not None:  # a rehearsal: timed waits, no torch (sweep/rehearsal.py)
        from cliffsweep.trainables.rehearsal import rehearse_point as train_point
    else:
        from cliffsweep.trainables.point import train_point

    for i, cfg in enumerate(points):
        # The job's first point pays the job's start-up (its setup phases start at the trial
        # function); a later one starts when the previous one ended.
        train_point(cfg, {"worker_started": started} if i == 0 else {"point_started": time.time()})
        if cfg.rehearsal is None:
            _release_memory()


def _release_memory() -> None:
    """What the previous point held goes before the next loads its model (GPU memory above all)."""
    import gc

    import torch

    gc.collect()
    if torch.cuda.is_available():
        torch.cuda.empty_cache()
