"""A rehearsal's Train worker (sweep/rehearsal.py): one trial's planned work as a timed wait,
through the real trial path around it.

It reports what `train_trial` reports (Begin, one CheckpointReport per evaluation point, the
EndReport; every rank reports, `ray.train.report` being a barrier), and rank 0 writes each
checkpoint as the writer does (trainables/checkpoints.py): a folder at `ledger.checkpoint_uri`
with its meta file last, the ledger row, then the report into the sweep's inbox. The folder
holds a one-line stand-in for the weights; the rehearsal's evaluators never read it. A retried
attempt starts again at step 0 (no training state to resume from, as a trial shorter than
`resume_every_s`) and reports the folders an earlier attempt completed again, without rewriting
them. No torch, no model, no CUDA: the fake GPU nodes have none.
"""

from __future__ import annotations

import time
from dataclasses import replace

from cliffsweep.faults import maybe_fail
from cliffsweep.storage.ledger import checkpoint_uri, record_checkpoint
from cliffsweep.storage.store import Store, filesystem
from cliffsweep.sweep.reports import REPORT_KEY, Begin, CheckpointReport, EndReport
from cliffsweep.trainables.config import TrainConfig

STAND_IN = "rehearsal.txt"


def rehearse_trial(cfg: TrainConfig, marks: dict[str, float]) -> None:
    import ray.train

    from cliffsweep.trainables import resume  # torch is there already: Ray Train's workers import it

    tid, work = cfg.trial.trial_id, cfg.rehearsal
    rank = ray.train.get_context().get_world_rank()
    ray.train.report({REPORT_KEY: Begin(tid)})
    maybe_fail(f"train_start:{tid}")
    marks["imported"] = time.time()
    time.sleep(work.setup_s)
    done = set(resume.complete_steps(cfg.checkpoint_root, tid)) if rank == 0 else set()
    t_loop = time.time()
    total, prev = work.steps[-1], 0
    for step in work.steps:
        time.sleep(work.train_s * (step - prev) / total)
        prev = step
        if rank == 0:
            _checkpoint(cfg, step, total, t_loop, marks, written=step in done)
    ray.train.report({REPORT_KEY: EndReport(trial_id=tid, diverged=False, step=total, epoch=float(cfg.trial.epochs),
                                            total_steps=total, loss=0.0, train_seconds=time.time() - t_loop,
                                            resumed_from_step=0)})


def _checkpoint(cfg: TrainConfig, step: int, total: int, t_loop: float, marks: dict[str, float],
                written: bool) -> None:
    import ray

    from cliffsweep.trainables import resume

    tid, root = cfg.trial.trial_id, cfg.checkpoint_root
    uri, epoch = checkpoint_uri(root, tid, step), cfg.trial.epochs * step / total
    if not written:
        resume.clear(uri)
        fs, path = filesystem(uri)
        fs.create_dir(path, recursive=True)
        with fs.open_output_stream(f"{path}/{STAND_IN}") as f:
            f.write(b"rehearsal: no weights\n")
        resume.put_meta(uri, {"step": step, "epoch": epoch, "kind": "full", "loss": 0.0})
    maybe_fail(f"written:{tid}:{step}")
    record_checkpoint(Store(cfg.store_uri), root, tid, step, epoch, "full")
    rec = CheckpointReport(trial_id=tid, step=step, epoch=epoch, loss=0.0, total_steps=total,
                           train_seconds=time.time() - t_loop, checkpoint_uri=uri, checkpoint_kind="full",
                           loop_started_at=t_loop, resumed_from_step=0,
                           setup_marks=tuple(_marks(cfg, marks, t_loop).items()), compute="rehearsal")
    ray.get(ray.get_actor(cfg.inbox).put.remote(tid, replace(rec, reported_at=time.time())))


def _marks(cfg: TrainConfig, marks: dict[str, float], t_loop: float) -> dict[str, float]:
    """As trial.setup_phases: a job's later trial starts at its own `trial_started`."""
    first = {} if "trial_started" in marks else {"job_started": cfg.job_started}
    return {**first, **marks, "loop_started": t_loop}


def timed_stats(seconds: float) -> bytes:
    """A rehearsal's statistics task: its planned length, then a stand-in for the statistics."""
    time.sleep(seconds)
    return b"rehearsal: no statistics\n"
