"""The training loop (trainables/loop.py) under Ray Train with the memory recipe on: a trial run
by 2 DDP workers in micro-batches of 3 rows with activation checkpointing ends with the weights
of the same trial run by 1 worker in one pass per step (same data, same gradients, same AdamW
steps), and both checkpoints are ordinary HF folders."""

from __future__ import annotations

import pytest
import torch

pytestmark = [pytest.mark.ray, pytest.mark.slow]


@pytest.fixture(scope="module")
def ray_local():
    import ray

    from cliffsweep.orchestrator.inbox import start_inbox

    ray.init(address="local", num_cpus=2, include_dashboard=False, log_to_driver=False)
    inbox = start_inbox("loop-inbox")  # rank 0's checkpoint writer reports there (trainables/checkpoints.py)
    yield inbox
    ray.shutdown()


def train(tmp_path, name: str, workers: int, **recipe) -> dict[str, torch.Tensor]:
    from ray.train import RunConfig, ScalingConfig
    from ray.train.torch import TorchTrainer
    from safetensors.torch import load_file

    from cliffsweep.sweep.grid import Trial
    from cliffsweep.sweep.gpushare import trainer_share
    from cliffsweep.sweep.spec import RecipeSpec, ResourcesSpec, TaskSpec
    from cliffsweep.trainables.config import WORKER_KEY, TrainConfig
    from cliffsweep.trainables.loop import train_loop_per_worker

    cfg = TrainConfig(
        trial=Trial(trial_id=name, model="q", model_path="toy:qwen2-tiny", dtype="float32", method="sft",
                    method_params={}, optimizer="adamw", series="sft", lr=1e-3, epochs=1, seed=0),
        recipe=RecipeSpec(batch_size=12, max_seq_len=128, **recipe),
        learn=TaskSpec(name="toy_facts", params={"n_train": 24, "n_eval": 8}), retain=TaskSpec(name="toy_arith"),
        # The loop writes each checkpoint under <checkpoint_root>/<trial> and records it in the store.
        store_uri=str(tmp_path / "store"), checkpoint_root=str(tmp_path), stats_uri=None, eval_points=1,
        every_epoch=False, strategy="ddp", torch_threads=1, max_step_rows=1000, inbox="loop-inbox",
        resume_every_s=0.0, async_checkpoints=True, gpu_share=trainer_share(ResourcesSpec()))
    TorchTrainer(train_loop_per_worker, train_loop_config={WORKER_KEY: (cfg,)},
                          scaling_config=ScalingConfig(num_workers=workers, resources_per_worker={"CPU": 0.5}),
                          run_config=RunConfig(storage_path=str(tmp_path), name=name)).fit()
    # 24 examples, global batch 12: 2 steps, one checkpoint (eval_points=1) at the last
    from cliffsweep.storage import ledger
    from cliffsweep.storage.store import Store
    rows = ledger.records(Store(str(tmp_path / "store")).read("checkpoints"))
    assert sorted(r.step for r in rows if r.trial_id == name) == [2]
    # rank 0 alone wrote the training curve: one row per step, whatever the number of workers
    steps = Store(str(tmp_path / "store")).read("steps")
    mine = steps[steps["trial_id"] == name].sort_values("step")
    assert mine["step"].tolist() == [1, 2] and mine["loss"].notna().all() and (mine["grad_norm"] > 0).all()
    assert mine["tokens"].is_monotonic_increasing and (mine["lr"] > 0).all()
    return load_file(f"{rows[-1].uri}/model.safetensors")


def test_two_workers_in_micro_batches_with_checkpointing_end_with_one_worker_weights(ray_local, tmp_path):
    from safetensors.torch import load_file

    from cliffsweep.models import resolve_model

    one = train(tmp_path, "one-pass", workers=1)
    micro = train(tmp_path, "micro", workers=2, micro_batch_size=3, gradient_checkpointing=True)
    base = load_file(f"{resolve_model('toy:qwen2-tiny')}/model.safetensors")
    assert one.keys() == micro.keys() == base.keys()
    # Compared as updates: AdamW's first steps are lr * g / (|g| + eps), so where a gradient is
    # rounding noise (|g| ~ 1e-9) its update is noise of up to lr; such entries are few and
    # weigh nothing in the norm, while a wrong gradient (another normalisation) moves many.
    moved = sum(float((one[k] - base[k]).square().sum()) for k in one) ** 0.5
    diff = sum(float((micro[k] - one[k]).square().sum()) for k in one) ** 0.5
    worst = max(float((one[k] - micro[k]).abs().max()) for k in one)
    assert moved > 1e-2  # it trained
    assert diff / moved < 1e-3, (diff / moved, worst)
