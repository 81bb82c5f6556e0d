"""The Ray Train loop: one trial's SFT run on each worker (DDP over gloo on CPU, NCCL/FSDP on GPU).

Implements the recipe of 000 App. B (chat template, response-only loss, AdamW wd 0.01,
warmup + cosine to 0.1x + cool-down) with the method's hooks (methods/base.py), each step's
gradient accumulated over micro-batches (microbatch.py: micro-batching, activation
checkpointing, bf16 autocast on GPU). At each eval
point rank 0 saves an HF folder (LoRA: an adapter folder) with a canary and reports it; the
driver hands it to the evaluator pool, so training never waits for evaluation. A non-finite
loss ends the run as 'diverged' (agreed across workers) with its earlier checkpoints kept.
"""

from __future__ import annotations

import json
import os
import tempfile
import time

from cliffsweep.trainables.config import WORKER_KEY, TrainConfig


def train_loop_per_worker(config: dict[str, tuple[TrainConfig, ...]]) -> None:
    """One Train worker of a job: trains `config[WORKER_KEY]`'s points (TrainConfigs,
    trainables/config.py) one after the other, each from its base model (trainables/trial.py)."""
    started = time.time()
    for i, cfg in enumerate(config[WORKER_KEY]):
        # The job's first point pays the job's start-up (its setup phases start at the trial
        # function); a later one starts when the previous one ended.
        train_point(cfg, {"worker_started": started} if i == 0 else {"point_started": time.time()})
        _release_memory()


def _release_memory() -> None:
    """What the previous point held goes before the next loads its model (GPU memory above all)."""
    import gc

    import torch

    gc.collect()
    if torch.cuda.is_available():
        torch.cuda.empty_cache()


def train_point(cfg: TrainConfig, marks: dict[str, float]) -> None:
    """One trial's training on this worker: `marks` times its setup (setup_phases)."""
    import ray.train
    import torch

    from cliffsweep.evals.tasks import build_task
    from cliffsweep.faults import maybe_fail
    from cliffsweep.models import load_model, resolve_model
    from cliffsweep.trainables.stats import load_stats
    from cliffsweep.storage.store import Store
    from cliffsweep.trainables import data, microbatch, parallel, resume
    from cliffsweep.trainables.losses import check_head, unwrap
    from cliffsweep.trainables.methods import build_method
    from cliffsweep.trainables.optimizers import build_optimizer
    from cliffsweep.trainables.optimizers.master import keep_edits
    from cliffsweep.trainables.schedule import eval_steps, lr_multiplier
    from cliffsweep.trainables.steplog import StepLog

    marks["imported"] = time.time()
    trial, recipe = cfg.trial, cfg.recipe
    tid = trial.trial_id
    # The driver sees it running from now (a job's first: from the job's start) and the inbox
    # counts its attempt.
    ray.train.report({"trial_id": tid, "event": "begin", "status": "running"})
    maybe_fail(f"train_start:{tid}")
    ctx = ray.train.get_context()
    rank, world = ctx.get_world_rank(), ctx.get_world_size()
    torch.manual_seed(trial.seed)
    threads = cfg.torch_threads
    if threads:
        torch.set_num_threads(threads)

    model, tok = load_model(resolve_model(trial.model_path), trial.dtype)
    marks["model_loaded"] = time.time()
    method = build_method(trial.method, trial.method_params)
    stats = load_stats(cfg.stats_uri) if cfg.stats_uri else {}
    model = method.prepare(model, stats)
    marks["statistics_loaded"] = time.time()
    if recipe.gradient_checkpointing:
        microbatch.enable_checkpointing(model)
    # A retried or re-run trial continues from its latest checkpoint (resume.py). Loaded after
    # prepare(): statistics, anchors and frozen copies come from the base weights.
    found = resume.latest(cfg.checkpoint_root, tid) if cfg.strategy == "ddp" else None
    state = found[1] if found else None
    if state is not None:
        model.load_state_dict(state["model"])
    if found is not None and rank == 0:
        # The checkpoint this attempt continues from was written by an earlier one, which may
        # have died before reporting or recording it (ledger.py): record it (idempotent).
        _record(cfg, found[0])
    model = parallel.prepare(model, cfg.strategy)
    device = next(unwrap(model).parameters()).device
    marks["resumed_and_wrapped"] = time.time()

    learn_task = build_task(cfg.learn.name, cfg.learn.params)
    learn = data.encode(tok, learn_task.train_examples(), recipe.max_seq_len)
    retain: list = []
    if method.retain_fraction > 0:
        retain_task = build_task(cfg.retain.name, cfg.retain.params)
        retain = data.encode(tok, retain_task.train_examples(), recipe.max_seq_len, retain=True)
    pad = tok.pad_token_id if tok.pad_token_id is not None else tok.eos_token_id

    def steps(epoch: int) -> list[data.Step]:
        return data.epoch_steps(learn, retain, recipe.batch_size, method.retain_fraction,
                                trial.seed, epoch, rank, world, pad, recipe.micro_batch_size)

    first = steps(0)
    per_epoch = len(first)
    marks["data_ready"] = time.time()
    amp = microbatch.autocast_dtype(next(unwrap(model).parameters()).dtype, device.type)
    check_head(model, {k: v.to(device) for k, v in first[0].micro[0].items()})
    total = per_epoch * trial.epochs
    evals = set(eval_steps(total, per_epoch, cfg.eval_points, cfg.every_epoch))
    opt = build_optimizer(trial.optimizer, unwrap(model), trial.lr, recipe.weight_decay, recipe.master_weights)
    sched = torch.optim.lr_scheduler.LambdaLR(opt, lambda s: lr_multiplier(
        s, total, recipe.warmup_steps, recipe.cooldown_steps, recipe.min_lr_ratio))

    start = 0
    if state is not None:
        opt.load_state_dict(state["optimizer"])
        sched.load_state_dict(state["scheduler"])
        method.load_state_dict(state["method"])
        start = state["step"]

    # checkpoints holding training state, oldest first (resume.keep_latest)
    with_state = [found[0]] if state is not None else []
    step, train_s = start, 0.0
    # the training curve (steplog.py): rank 0 writes it; the other ranks only step
    curve = StepLog(Store(cfg.store_uri) if rank == 0 else None, trial.trial_id, cfg.attempt, start,
                    total, cfg.max_step_rows, evals)
    tokens = 0  # response tokens of the global batches so far (the steps before a resume included)
    t_loop = time.time()
    model.train()
    for epoch in range(start // per_epoch, trial.epochs):
        for i, todo in enumerate(steps(epoch)):
            if epoch * per_epoch + i < start:
                tokens += todo.n_tokens
                continue  # trained on before the resume
            micro = [{k: v.to(device) for k, v in b.items()} for b in todo.micro]
            terms: dict[str, float] = {}
            loss = microbatch.accumulate(model, method, micro, todo.n_tokens, world, amp, logs=terms)
            tokens += todo.n_tokens
            logged = curve.wants(step + 1)
            if not all_finite([loss], world):  # before the step: the weights stay the last good ones
                curve.add(step + 1, (step + 1) / per_epoch, tokens, float("nan"), terms, None,
                          opt.param_groups[0]["lr"], time.time() - t_loop)
                curve.flush()
                ray.train.report({"trial_id": tid, "final": True, "status": "diverged", "step": step,
                                  "epoch": step / per_epoch, "loss": float("nan"), "total_steps": total,
                                  "train_seconds": time.time() - t_loop})
                return
            method.before_step(model, step)
            grad_norm = None  # the norm comes free with clipping; without, it is taken for logged steps
            if recipe.grad_clip:
                grad_norm = torch.nn.utils.clip_grad_norm_(unwrap(model).parameters(), recipe.grad_clip)
            elif logged:
                grad_norm = torch.nn.utils.get_total_norm(
                    [p.grad for p in unwrap(model).parameters() if p.grad is not None])
            if grad_norm is not None and logged:
                grad_norm = parallel.full_value(grad_norm)
            lr_now = opt.param_groups[0]["lr"]
            opt.step()
            sched.step()
            opt.zero_grad(set_to_none=True)
            method.after_step(model, step)
            keep_edits(opt)  # fp32 master weights take what after_step changed (optimizers/master.py)
            step += 1
            loss_val = float(loss)
            if logged:
                curve.add(step, step / per_epoch, tokens, loss_val, terms, grad_norm, lr_now, time.time() - t_loop)
            marks.setdefault("first_step", time.time())
            if step in evals:
                train_s = time.time() - t_loop
                # A finite loss can still leave non-finite weights after the step: such a
                # checkpoint is not a "last good" one, so the run ends here as diverged.
                curve.close_stretch(step)  # before the report: a death after it leaves no gap
                if not all_finite(list(unwrap(model).parameters()), world):
                    ray.train.report({"trial_id": tid, "final": True, "status": "diverged", "step": step,
                                      "epoch": step / per_epoch, "loss": loss_val, "total_steps": total,
                                      "train_seconds": train_s})
                    return
                _report_checkpoint(cfg, method, model, tok, (opt, sched), step, per_epoch, total, loss_val,
                                   t_loop, rank, start, with_state, setup_phases(cfg, marks, t_loop))
    # The trial's training ended: the driver records it `trained` (and the inbox keeps a retried
    # job from training it again). Resumed at its end (an earlier attempt wrote the final
    # checkpoint, then died), it has no step left, and still says where it stands.
    ray.train.report({"trial_id": tid, "final": True, "status": "running", "step": step,
                      "epoch": step / per_epoch, "total_steps": total, "resumed_from_step": start,
                      **({"train_seconds": train_s} if step > start else {})})


# The phases of a trial's setup, in order: (name, the mark that ends it). Each lasts from the end
# of the previous one; the first starts when the driver saw the trial start (its `started_at`).
SETUP_PHASES = (
    ("placement", "trial_fn_started"),          # Tune placed the trial, its actor started, imported
    ("train_workers", "worker_started"),        # Train controller, worker group, process group
    ("imports", "imported"),                    # torch, transformers, cliffsweep in the worker
    ("model_load", "model_loaded"),
    ("statistics", "statistics_loaded"),        # the method's statistics and prepare()
    ("resume_and_wrap", "resumed_and_wrapped"),  # a resume's state, DDP/FSDP wrapping
    ("data", "data_ready"),                     # tokenisation and the first epoch's batches
    ("optimizer", "loop_started"),              # head check, optimizer, schedule, resume state
    ("first_step", "first_step"),
)


def setup_phases(cfg: TrainConfig, marks: dict[str, float], t_loop: float) -> dict[str, float]:
    """The wall-clock marks of this attempt's setup (the driver turns them into seconds per
    phase against its own start time: orchestrator/driver.py). A job's later point starts at
    its own `point_started` (the previous point's end), not at the job's trial function."""
    first = {} if "point_started" in marks else {"trial_fn_started": cfg.trial_fn_started}
    return {**first, **marks, "loop_started": t_loop}


def phase_seconds(started_at: float, marks: dict[str, float]) -> dict[str, float]:
    """Seconds per setup phase (SETUP_PHASES) from the driver's start time of the trial and the
    attempt's marks; a phase whose mark is missing is left out. Pure (tests/test_policies.py)."""
    out, prev = {}, started_at
    for name, mark in SETUP_PHASES:
        if mark in marks:
            out[name] = round(marks[mark] - prev, 3)
            prev = marks[mark]
    return out


def all_finite(tensors: list, world: int) -> bool:
    """True on every worker iff every tensor on every worker is finite (agreed via all-reduce,
    so all workers stop at the same step)."""
    import torch
    import torch.distributed as dist

    from cliffsweep.trainables.parallel import local

    # each worker checks its own shard (FSDP); the all-reduce below makes it global
    ok = all(bool(torch.isfinite(local(t)).all()) for t in tensors)
    bad = torch.tensor([0.0 if ok else 1.0], device=tensors[0].device)  # NCCL needs it on the GPU
    if world > 1:
        dist.all_reduce(bad)
    return bad.item() == 0


def _record(cfg: TrainConfig, uri: str) -> None:
    """Record a checkpoint written by an earlier attempt in the store (from its meta file)."""
    from cliffsweep.storage.ledger import record_checkpoint
    from cliffsweep.storage.store import Store
    from cliffsweep.trainables import resume

    meta = resume.meta(uri)
    record_checkpoint(Store(cfg.store_uri), cfg.checkpoint_root, cfg.trial.trial_id,
                      meta["step"], meta["epoch"], meta["kind"])


def _report_checkpoint(cfg, method, model, tok, optim, step, per_epoch, total, loss, t_loop, rank,
                       resumed_from, with_state: list, phases: dict[str, float]) -> None:
    """Rank 0 writes the checkpoint folder where the ledger says it lives (resume.upload), with
    the training state to resume from (resume.py; not for FSDP), and drops older ones'
    (resume.keep_latest); every rank reports (report is a barrier). A sharded (FSDP) model is
    first gathered by every rank (parallel.py). `t_loop`: when the training loop began (the
    driver derives the trial's setup time from it)."""
    import ray.train

    from cliffsweep.evals.canary import write_canary
    from cliffsweep.faults import maybe_fail
    from cliffsweep.storage.ledger import checkpoint_uri, record_checkpoint
    from cliffsweep.storage.store import Store
    from cliffsweep.trainables import parallel, resume
    from cliffsweep.trainables.losses import unwrap

    tid = cfg.trial.trial_id
    uri = checkpoint_uri(cfg.checkpoint_root, tid, step)
    metrics = {"trial_id": tid, "status": "running", "step": step, "epoch": step / per_epoch, "loss": loss,
               "total_steps": total, "train_seconds": time.time() - t_loop,
               "checkpoint_kind": method.checkpoint_kind, "loop_started_at": t_loop,
               "resumed_from_step": resumed_from, "setup_marks": phases, "checkpoint_path": uri}
    sharded = parallel.is_sharded(unwrap(model))
    state = parallel.full_state(unwrap(model)) if sharded else None
    if rank != 0:
        ray.train.report(metrics)
        return
    with tempfile.TemporaryDirectory(prefix="cliffsweep-ckpt-") as tmp:
        if not sharded:  # before export: WiSE-FT resumes from its fine-tuned weights
            resume.save(tmp, step, unwrap(model), *optim, method)
        trained = parallel.plain_model(unwrap(model), state) if sharded else unwrap(model)
        to_save = method.export(trained)
        to_save.save_pretrained(tmp, safe_serialization=True)
        tok.save_pretrained(tmp)
        write_canary(to_save, tok, tmp)
        # Written last (resume.upload): read back when a retried trial resumes from it.
        with open(os.path.join(tmp, resume.META), "w") as f:
            json.dump({"step": step, "epoch": step / per_epoch, "kind": method.checkpoint_kind,
                       "loss": loss}, f)
        resume.upload(tmp, uri)
    ray.train.report(metrics)
    maybe_fail(f"reported:{tid}:{step}")
    # The folder is complete in storage and reported. The store's row is what makes it a
    # checkpoint to evaluate, whatever happens to this run or the driver (ledger.py).
    record_checkpoint(Store(cfg.store_uri), cfg.checkpoint_root, tid, step,
                      step / per_epoch, method.checkpoint_kind)
    if not sharded:
        with_state.append(uri)
        resume.keep_latest(with_state)
