"""What checkpoints cost the training loop, side by side in one run (issue 21 part 1).

    .venv/bin/python bench/bench_checkpoints.py [--model smollm2:135m-instruct] [--steps 8] [--points 4]

The same trial (the real training loop, trainables/trial.py, in a one-worker Ray Train job,
SFT on toy_facts rows, batch 4 x up to 128 tokens, 2 torch threads) runs in four variants, each
in a fresh job:

    none         no checkpoint at all (the reference)
    today        every checkpoint written synchronously with its training state
                 (resume_every_s 0, async_checkpoints false: the path before issue 21)
    async+state  written by the writer thread, training state every time
    new          the defaults: written by the writer thread, no training state for a trial
                 shorter than resume_every_s (300 s)

Printed per variant: the training loop's wall time (first step to the last checkpoint reported,
the writer drained), the time lost per checkpoint = (wall - wall of `none`) / checkpoints, the
bytes written per checkpoint, and the ratios of `new` to `today`. The loop's own account of the
seconds it was blocked (the trials table's checkpoint_seconds) is printed beside the wall-time
difference: on a 2-core CPU the writer thread competes with training for the cores, which the
blocked seconds do not see and the wall time does.
"""

from __future__ import annotations

import argparse
import os
import tempfile
import time

VARIANTS = {
    "none": dict(points=0, resume_every_s=0.0, async_checkpoints=True),
    "today": dict(resume_every_s=0.0, async_checkpoints=False),
    "async+state": dict(resume_every_s=0.0, async_checkpoints=True),
    "new": dict(resume_every_s=300.0, async_checkpoints=True),
}


def run_variant(name: str, model: str, steps: int, points: int, root: str, inbox: str):
    """One fresh Train job of the trial; returns its end report (sweep/reports.py)."""
    from ray.train import RunConfig, ScalingConfig
    from ray.train.torch import TorchTrainer

    from cliffsweep.sweep.grid import Trial
    from cliffsweep.sweep.reports import EndReport
    from cliffsweep.sweep.gpushare import trainer_share
    from cliffsweep.sweep.spec import RecipeSpec, ResourcesSpec, TaskSpec
    from cliffsweep.trainables.config import WORKER_KEY, TrainConfig
    from cliffsweep.trainables.loop import train_loop_per_worker
    from cliffsweep.trainables.job import report_callback

    v = dict(VARIANTS[name])
    batch = 4
    cfg = TrainConfig(
        trial=Trial(trial_id=f"bench-{name}", model="m", model_path=model, dtype="float32", method="sft",
                    method_params={}, optimizer="adamw", series="sft", lr=1e-5, epochs=1, seed=0),
        recipe=RecipeSpec(batch_size=batch, max_seq_len=128, warmup_steps=1, cooldown_steps=1),
        learn=TaskSpec(name="toy_facts", params={"n_train": steps * batch, "n_eval": 8}),
        retain=TaskSpec(name="toy_arith"), store_uri=f"{root}/store", checkpoint_root=f"{root}/checkpoints",
        stats_uri=None, eval_points=v.pop("points", points), every_epoch=False, strategy="ddp",
        torch_threads=2, max_step_rows=1000, inbox=inbox, gpu_share=trainer_share(ResourcesSpec()), **v)
    TorchTrainer(train_loop_per_worker, train_loop_config={WORKER_KEY: (cfg,)},
                 scaling_config=ScalingConfig(num_workers=1, resources_per_worker={"CPU": 1}),
                 run_config=RunConfig(storage_path=root, name=name, callbacks=[report_callback(inbox)])).fit()
    import ray

    items = ray.get(ray.get_actor(inbox).drain.remote())
    (end,) = [r for _, r in items if isinstance(r, EndReport) and r.trial_id == cfg.trial.trial_id]
    n_ckpt = sum(1 for _, r in items if type(r).__name__ == "CheckpointReport")
    return end, n_ckpt


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--model", default="smollm2:135m-instruct")
    ap.add_argument("--steps", type=int, default=8)
    ap.add_argument("--points", type=int, default=4, help="checkpoints per trial")
    ap.add_argument("--variants", nargs="+", default=list(VARIANTS))
    args = ap.parse_args()
    import ray

    from cliffsweep.models import resolve_model
    from cliffsweep.orchestrator.inbox import start_inbox

    resolve_model(args.model)  # built once, before any timing
    ray.init(num_cpus=2, include_dashboard=False, log_to_driver=False)
    inbox = start_inbox("bench-checkpoints")  # kept: the actor lives as long as this handle
    rows = {}
    with tempfile.TemporaryDirectory(prefix="bench-ckpt-") as root:
        for name in args.variants:
            t0 = time.time()
            end, n = run_variant(name, args.model, args.steps, args.points, os.path.join(root, name), "bench-checkpoints")
            rows[name] = (end, n)
            print(f"{name}: loop {end.train_seconds:.1f} s, {n} checkpoint(s), blocked {end.checkpoint_seconds:.2f} s, "
                  f"{end.checkpoint_bytes / 1e9:.2f} GB written (job {time.time() - t0:.0f} s)", flush=True)
    ray.shutdown()
    del inbox
    base = rows["none"][0].train_seconds if "none" in rows else None
    print(f"\n{args.model}, {args.steps} steps, {args.points} checkpoints; CPU, 2 threads")
    print(f"{'variant':<12} {'loop s':>8} {'lost s/ckpt':>12} {'blocked s/ckpt':>15} {'GB/ckpt':>8}")
    per: dict[str, tuple[float, float]] = {}
    for name, (end, n) in rows.items():
        lost = (end.train_seconds - base) / n if base is not None and n else float("nan")
        gb = end.checkpoint_bytes / 1e9 / n if n else 0.0
        per[name] = (lost, gb)
        blocked = end.checkpoint_seconds / n if n else 0.0
        print(f"{name:<12} {end.train_seconds:>8.1f} {lost:>12.2f} {blocked:>15.2f} {gb:>8.3f}")
    if "today" in per and "new" in per:
        (lt, bt), (ln, bn) = per["today"], per["new"]
        print(f"\nnew / today: time lost per checkpoint {ln / lt:.2f}x, bytes per checkpoint {bn / bt:.2f}x")


if __name__ == "__main__":
    main()
