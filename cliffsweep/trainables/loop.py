"""The Ray Train loop: each worker of a job trains the job's trials one after the other
(DDP over gloo on CPU, NCCL/FSDP on GPU), each from its base model (trainables/trial.py).

Light on purpose: the Tune trial process imports this module to start the Train job and never
trains; torch and the model code load in the workers, with trial.py.
"""

from __future__ import annotations

import time

from cliffsweep.trainables.config import WORKER_KEY, TrainConfig


def train_loop_per_worker(config: dict[str, tuple[TrainConfig, ...]]) -> None:
    """One Train worker of a job: trains `config[WORKER_KEY]`'s trials (TrainConfigs,
    trainables/config.py) one after the other, each from its base model."""
    started = time.time()
    trials = config[WORKER_KEY]
    if trials and trials[0].rehearsal is not None:  # a rehearsal: timed waits, no torch (sweep/rehearsal.py)
        from cliffsweep.trainables.rehearsal import rehearse_trial as train_trial
    else:
        from cliffsweep.trainables.trial import train_trial

    for i, cfg in enumerate(trials):
        # The job's first trial pays the job's start-up (its setup phases start at the job's
        # function); a later one starts when the previous one ended.
        train_trial(cfg, {"worker_started": started} if i == 0 else {"trial_started": time.time()})
        if cfg.rehearsal is None:
            _release_memory()


def _release_memory() -> None:
    """What the previous trial held goes before the next loads its model (GPU memory above all)."""
    import gc

    import torch

    gc.collect()
    if torch.cuda.is_available():
        torch.cuda.empty_cache()
