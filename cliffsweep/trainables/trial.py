"""One trial's training (a grid point) on one Ray Train worker: `train_trial` = `setup` (model, method,
statistics, resume, data, optimizer), `train` (the steps), and the reports (sweep/reports.py).

Implements the recipe of 000 App. B (chat template, response-only loss, AdamW wd 0.01, warmup
+ cosine to 0.1x + cool-down) with the method's hooks (methods/base.py), each step's gradient
accumulated over micro-batches (microbatch.py: micro-batching, activation checkpointing, bf16
autocast on GPU). At each evaluation point rank 0 snapshots a checkpoint (an HF folder, LoRA:
an adapter folder, with a canary) and a writer thread writes and reports it while training goes
on (checkpoints.py); the driver hands it to the evaluator pool, so training never waits for
evaluation. A non-finite loss ends the run as diverged (agreed across workers) with its earlier
checkpoints kept.

Heavy imports (torch, transformers through the models) live here, not in loop.py: the Tune
trial process imports loop.py to start the job and never trains.
"""

from __future__ import annotations

import math
import time
from dataclasses import dataclass, replace

import ray.train
import ray.train.torch
import torch

from cliffsweep.evals.tasks import build_task
from cliffsweep.evals.tasks.base import system_for
from cliffsweep.faults import maybe_fail
from cliffsweep.models import load_model, resolve_model
from cliffsweep.storage.ledger import checkpoint_uri, saves_state
from cliffsweep.storage.store import Store
from cliffsweep.sweep.reports import REPORT_KEY, Begin, CheckpointReport, EndReport
from cliffsweep.trainables import data, fastpath, microbatch, parallel, resume
from cliffsweep.sweep.gpushare import GpuShareExceeded
from cliffsweep.evals.backends.share import device_total_gb
from cliffsweep.trainables.parallel import apply_gpu_share
from cliffsweep.evals.canary import canary_record
from cliffsweep.trainables.checkpoints import Checkpointer, Snapshot, host_copy
from cliffsweep.trainables.config import TrainConfig
from cliffsweep.trainables.losses import check_head, unwrap
from cliffsweep.trainables.methods import build_method
from cliffsweep.trainables.optimizers import build_optimizer
from cliffsweep.trainables.optimizers.master import keep_edits
from cliffsweep.trainables.schedule import eval_steps, lr_multiplier, passes, total_steps, warmup_of
from cliffsweep.trainables.stats import load_stats
from cliffsweep.trainables.steplog import StepLog


def report(rec) -> None:
    """Every rank reports the same records (ray.train.report is a barrier); rank 0's reach the driver."""
    ray.train.report({REPORT_KEY: rec})


@dataclass
class TrialTraining:
    """One trial's training on this worker: built by `setup`, advanced by `train`."""

    cfg: TrainConfig
    marks: dict[str, float]
    rank: int
    world: int
    model: torch.nn.Module
    tok: object
    method: object
    learn: list
    retain: list
    pad: int
    per_epoch: int
    total: int
    evals: set[int]
    opt: torch.optim.Optimizer
    sched: object
    start: int
    """The step this attempt continues from (0, or a resumed checkpoint's)."""
    done: set[int]
    """Steps whose checkpoint an earlier attempt completed (reported again, not rewritten)."""
    curve: StepLog
    ckpt: Checkpointer | None
    """Rank 0's checkpoint writer (None on the other ranks)."""
    amp: torch.dtype | None = None
    compute: str = ""
    """The fast path this worker runs (fastpath.FastPath.label)."""
    step: int = 0
    tokens: int = 0
    t_loop: float = 0.0
    state_at: float = 0.0
    """Training seconds at the last checkpoint that saved the training state (resume_every_s)."""

    @property
    def tid(self) -> str:
        return self.cfg.trial.trial_id

    def batches(self, epoch: int) -> list[data.Step]:
        r = self.cfg.recipe
        return data.epoch_steps(self.learn, self.retain, r.batch_size, self.method.retain_fraction,
                                self.cfg.trial.seed, epoch, self.rank, self.world, self.pad, r.micro_batch_size)

    def seconds(self) -> float:
        return time.time() - self.t_loop


def train_trial(cfg: TrainConfig, marks: dict[str, float]) -> None:
    """One trial's training on this worker: `marks` times its setup (setup_phases)."""
    marks["imported"] = time.time()
    report(Begin(cfg.trial.trial_id))  # the driver sees it running; the inbox counts its attempt
    maybe_fail(f"train_start:{cfg.trial.trial_id}")
    try:
        p = setup(cfg, marks)
        end = train(p)
    except torch.OutOfMemoryError as e:  # this worker reached its own cap: say so, its neighbours go on
        raise GpuShareExceeded(cfg.gpu_share.out_of_memory(device_total_gb(), str(e).splitlines()[0][:300])) from e
    if p.ckpt is not None:
        p.ckpt.close()  # every checkpoint reported before the end (the driver drops later ones)
    report(_with_costs(end, p))


def _with_costs(end: EndReport, p: TrialTraining) -> EndReport:
    """The end report once the writer drained: the loop's time includes the wait for the last
    checkpoints (the trial held its workers for it), and what checkpoints cost this attempt."""
    if p.ckpt is None:
        return end
    return replace(end, checkpoint_seconds=p.ckpt.blocked_s, checkpoint_bytes=p.ckpt.bytes,
                   train_seconds=p.seconds() if end.train_seconds is not None else None)


def setup_phases(cfg: TrainConfig, marks: dict[str, float], t_loop: float) -> dict[str, float]:
    """The wall-clock marks of this attempt's setup (the driver turns them into seconds per
    phase against its own start time: orchestrator/driver.py). A job's later trial starts at
    its own `trial_started` (the previous trial's end), not at the job's function."""
    first = {} if "trial_started" in marks else {"job_started": cfg.job_started}
    return {**first, **marks, "loop_started": t_loop}


def all_finite(tensors: list, world: int) -> bool:
    """True on every worker iff every tensor on every worker is finite (agreed via all-reduce,
    so all workers stop at the same step)."""
    import torch.distributed as dist

    from cliffsweep.trainables.parallel import local

    # each worker checks its own shard (FSDP); the all-reduce below makes it global
    ok = all(bool(torch.isfinite(local(t)).all()) for t in tensors)
    bad = torch.tensor([0.0 if ok else 1.0], device=tensors[0].device)  # NCCL needs it on the GPU
    if world > 1:
        dist.all_reduce(bad)
    return bad.item() == 0


# --- setup ------------------------------------------------------------------------------------
def setup(cfg: TrainConfig, marks: dict[str, float]) -> TrialTraining:
    ctx = ray.train.get_context()
    rank, world = ctx.get_world_rank(), ctx.get_world_size()
    torch.manual_seed(cfg.trial.seed)
    if cfg.torch_threads:
        torch.set_num_threads(cfg.torch_threads)
    apply_gpu_share(cfg.gpu_share)  # before the model: the cap bounds every allocation after it
    model, tok, method, found, fast = _model(cfg, marks, rank)
    learn, retain, pad = _data(cfg, tok, method)
    p = TrialTraining(cfg=cfg, marks=marks, rank=rank, world=world, model=model, tok=tok, method=method,
              learn=learn, retain=retain, pad=pad, per_epoch=0, total=0, evals=set(), opt=None, sched=None,
              start=0, done=set(), curve=None, ckpt=None)
    first = p.batches(0)
    p.per_epoch = len(first)
    marks["data_ready"] = time.time()
    device = next(unwrap(model).parameters()).device
    p.amp, p.compute = fast.amp, fast.label
    # The optimizer before any forward: FSDP2 swaps the root's sharded parameters for unsharded
    # (under fsdp_bf16: bf16) ones around a forward, which an optimizer built then would hold.
    _optimizer(p, found[1] if found else None)
    check_head(model, {k: v.to(device) for k, v in first[0].micro[0].items()})
    p.done = {s for s in resume.complete_steps(cfg.checkpoint_root, p.tid) if s > p.start}
    p.curve = StepLog(Store(cfg.store_uri) if rank == 0 else None, p.tid, cfg.attempt, p.start, p.total,
                      cfg.max_step_rows, p.evals)
    if rank == 0:
        p.ckpt = Checkpointer(cfg.store_uri, cfg.checkpoint_root, p.tid, cfg.inbox, tok,
                              blocking=not cfg.async_checkpoints, keep_state=[found[0]] if found else [])
    return p


def _model(cfg: TrainConfig, marks: dict[str, float], rank: int):
    """The base model with the method prepared, the latest resumable state loaded, wrapped for
    DDP/FSDP; returns (model, tokenizer, method, (uri, state) or None)."""
    trial, r = cfg.trial, cfg.recipe
    model, tok = load_model(resolve_model(trial.model_path), trial.dtype)
    marks["model_loaded"] = time.time()
    method = build_method(trial.method, trial.method_params)
    fast = fastpath.resolve(r.precision, r.kernels, r.compile, ray.train.torch.get_device().type,
                            next(model.parameters()).dtype,
                            type(method).fsdp_safe and trial.optimizer in parallel.FSDP_OPTIMIZERS)
    # Kernels before prepare(): a method's frozen base copy is then patched too.
    fastpath.apply_kernels(model, fast.kernels, ray.train.torch.get_device().type, requested=r.kernels)
    model = method.prepare(model, load_stats(cfg.stats_uri) if cfg.stats_uri else {})
    marks["statistics_loaded"] = time.time()
    if r.gradient_checkpointing:
        microbatch.enable_checkpointing(model)
    if fast.compile:
        fastpath.compile_layers(model)
    # A retried or re-run trial continues from its latest state (resume.py). Loaded after
    # prepare(): statistics, anchors and frozen copies come from the base weights. Sharded
    # models (fsdp, fsdp_bf16) save no training state: they restart.
    found = resume.latest(cfg.checkpoint_root, trial.trial_id) if cfg.strategy == "ddp" and not fast.mixed_fsdp \
        else None
    if found is not None:
        model.load_state_dict(found[1]["model"])
    model = parallel.prepare(model, cfg.strategy, mixed=fast.mixed_fsdp)
    marks["resumed_and_wrapped"] = time.time()
    return model, tok, method, found, fast


def _data(cfg: TrainConfig, tok, method) -> tuple[list, list, int]:
    r = cfg.recipe
    task = build_task(cfg.learn.name, cfg.learn.params)
    learn = data.encode(tok, task.train_examples(), r.max_seq_len, system=system_for(task, r.system_prompt))
    retain: list = []
    if method.retain_fraction > 0:
        task = build_task(cfg.retain.name, cfg.retain.params)
        retain = data.encode(tok, task.train_examples(), r.max_seq_len, retain=True,
                             system=system_for(task, r.system_prompt))
    return learn, retain, tok.pad_token_id if tok.pad_token_id is not None else tok.eos_token_id


def _optimizer(p: TrialTraining, state: dict | None) -> None:
    r, trial = p.cfg.recipe, p.cfg.trial
    p.total = total_steps(p.per_epoch, trial.epochs, trial.max_steps)
    p.evals = set(eval_steps(p.total, p.per_epoch, p.cfg.eval_points, p.cfg.every_epoch))
    p.opt = build_optimizer(trial.optimizer, unwrap(p.model), trial.lr, r.weight_decay, r.master_weights,
                            r.optimizer_settings.get(trial.optimizer))
    warmup = warmup_of(p.total, r.warmup_steps, r.warmup_fraction)
    p.sched = torch.optim.lr_scheduler.LambdaLR(p.opt, lambda s: lr_multiplier(
        s, p.total, warmup, r.cooldown_steps, r.min_lr_ratio))
    if state is not None:
        p.opt.load_state_dict(state["optimizer"])
        p.sched.load_state_dict(state["scheduler"])
        p.method.load_state_dict(state["method"])
        p.start = p.step = state["step"]


# --- training ---------------------------------------------------------------------------------
def train(p: TrialTraining) -> EndReport:
    """The steps from `p.start` to the end; the end report (not yet sent)."""
    p.t_loop = time.time()
    p.model.train()
    _report_resumed(p)
    for epoch in range(p.start // p.per_epoch, passes(p.total, p.per_epoch)):
        for i, todo in enumerate(p.batches(epoch)):
            if epoch * p.per_epoch + i >= p.total:
                break  # a step budget's last pass, cut short
            if epoch * p.per_epoch + i < p.start:
                p.tokens += todo.n_tokens
                continue  # trained on before the resume
            loss = step(p, todo)
            if loss is None:
                return _end(p, diverged=True, loss=math.nan)
            if p.step in p.evals:
                p.curve.close_stretch(p.step)  # before the report: a death after it leaves no gap
                # A finite loss can still leave non-finite weights after the step: such a
                # checkpoint is not a "last good" one, so the run ends here as diverged.
                if not all_finite(list(unwrap(p.model).parameters()), p.world):
                    return _end(p, diverged=True, loss=loss)
                checkpoint(p, loss)
    # Resumed at its end (an earlier attempt wrote the final checkpoint, then died), it has no
    # step left, and still says where it stands.
    return _end(p, diverged=False, loss=None)


def _end(p: TrialTraining, diverged: bool, loss: float | None) -> EndReport:
    return EndReport(trial_id=p.tid, diverged=diverged, step=p.step, epoch=p.step / p.per_epoch,
                     total_steps=p.total, loss=loss, train_seconds=p.seconds() if p.step > p.start else None,
                     resumed_from_step=p.start)


def step(p: TrialTraining, todo: data.Step) -> float | None:
    """One optimizer step (its micro-batches accumulated); its loss, or None if it is not finite
    on some worker (the weights then stay the last good ones)."""
    micro = [{k: v.to(next(unwrap(p.model).parameters()).device) for k, v in b.items()} for b in todo.micro]
    terms: dict[str, float] = {}
    loss = microbatch.accumulate(p.model, p.method, micro, todo.n_tokens, p.world, p.amp, logs=terms)
    p.tokens += todo.n_tokens
    logged = p.curve.wants(p.step + 1)
    lr_now = p.opt.param_groups[0]["lr"]
    if not all_finite([loss], p.world):
        p.curve.add(p.step + 1, (p.step + 1) / p.per_epoch, p.tokens, float("nan"), terms, None, lr_now, p.seconds())
        p.curve.flush()
        return None
    p.method.before_step(p.model, p.step)
    params = unwrap(p.model).parameters
    grad_norm = None  # the norm comes free with clipping; without, it is taken for logged steps
    if p.cfg.recipe.grad_clip:
        grad_norm = torch.nn.utils.clip_grad_norm_(params(), p.cfg.recipe.grad_clip)
    elif logged:
        grad_norm = torch.nn.utils.get_total_norm([q.grad for q in params() if q.grad is not None])
    if grad_norm is not None and logged:
        grad_norm = parallel.full_value(grad_norm)
    p.opt.step()
    p.sched.step()
    p.opt.zero_grad(set_to_none=True)
    p.method.after_step(p.model, p.step)
    keep_edits(p.opt)  # fp32 master weights take what after_step changed (optimizers/master.py)
    p.step += 1
    value = float(loss)
    if logged:
        p.curve.add(p.step, p.step / p.per_epoch, p.tokens, value, terms, grad_norm, lr_now, p.seconds())
    p.marks.setdefault("first_step", time.time())
    return value


# --- checkpoints ------------------------------------------------------------------------------
def _report_of(p: TrialTraining, loss: float | None, train_s: float) -> CheckpointReport:
    cfg, tid = p.cfg, p.tid
    return CheckpointReport(
        trial_id=tid, step=p.step, epoch=p.step / p.per_epoch, loss=loss, total_steps=p.total,
        train_seconds=train_s, checkpoint_uri=checkpoint_uri(cfg.checkpoint_root, tid, p.step),
        checkpoint_kind=p.method.checkpoint_kind, loop_started_at=p.t_loop, resumed_from_step=p.start,
        setup_marks=tuple(setup_phases(cfg, p.marks, p.t_loop).items()), compute=p.compute)


def _report_resumed(p: TrialTraining) -> None:
    """The checkpoint this attempt resumes from was completed by an earlier attempt, which may
    have died after its meta file and before recording or reporting it (the writer's order:
    checkpoints.py). No step of this attempt reaches it again, so it is recorded and reported
    here (both idempotent): otherwise it would be resumed from and never evaluated."""
    if p.start == 0 or p.start not in p.evals or p.ckpt is None:
        return
    meta = resume.meta(checkpoint_uri(p.cfg.checkpoint_root, p.tid, p.start))
    p.ckpt.report_existing(_report_of(p, float(meta["loss"]), 0.0))


def checkpoint(p: TrialTraining, loss: float) -> None:
    """Rank 0 snapshots the checkpoint and hands it to its writer (checkpoints.py). A sharded
    (FSDP) model is first gathered by every rank (a collective); no training state then."""
    started = time.time()
    cfg = p.cfg
    train_s = p.seconds()
    rec = _report_of(p, loss, train_s)
    if p.step in p.done:  # an earlier attempt completed this folder: report it, never rewrite it
        if p.ckpt is not None:
            p.ckpt.report_existing(rec)
        return
    live = unwrap(p.model)
    sharded = parallel.is_sharded(live)
    full = parallel.full_state(live) if sharded else None
    if p.ckpt is None:
        return
    with fastpath.host_modules():  # a CPU copy is built and run with transformers' layers
        export = p.method.export(parallel.plain_model(live, full) if sharded else live)
        canary = canary_record(export, p.tok)
    # Written off this thread, the live model's tensors are copied to host memory first, once
    # each (shared by the export and the state); a CPU copy of its own (FSDP's gathered model,
    # WiSE-FT's interpolation) is written as it is. Written synchronously: straight from them.
    memo: dict = {}
    copy = (lambda x: host_copy(x, memo)) if cfg.async_checkpoints else (lambda x: x)  # noqa: E731
    weights = copy(export.state_dict()) if export is live and cfg.async_checkpoints else None
    state = None
    if not sharded and saves_state(train_s, p.state_at, cfg.resume_every_s):  # worth saving
        # as trained (WiSE-FT resumes from its fine-tuned weights, not the interpolation)
        state = copy(resume.training_state(p.step, live, p.opt, p.sched, p.method))
        p.state_at = train_s
    p.ckpt.save(Snapshot(step=p.step, epoch=p.step / p.per_epoch, loss=loss, kind=p.method.checkpoint_kind,
                         export=export, weights=weights, canary=canary, state=state,
                         report=rec), started)
