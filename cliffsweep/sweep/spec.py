"""The sweep file's types: a typed, self-validating spec (style.md 3), the vocabulary every layer
shares (the driver, the trainables' configs, analysis, tracking), so it sits below all of them
and imports nothing of theirs.

Pydantic checks each field's type and range here; the names that need a registry (methods,
tasks, optimizers, toy models) and each plug-in's own params are checked by the orchestrator
when it reads a sweep file (orchestrator/specfile.py: `load_spec`, `parse_spec`), which raises
one `SpecError` listing every problem. Unknown keys are errors, never defaults.
"""

from __future__ import annotations

import math
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator

from cliffsweep.sweep.tracking import TrackingSpec


class SpecError(ValueError):
    """A sweep file with problems. `problems` lists every one as 'field.path: message'."""

    def __init__(self, source: str, problems: list[str]):
        self.source = source
        self.problems = problems
        lines = "\n".join(f"  - {p}" for p in problems)
        super().__init__(f"{source}: {len(problems)} problem(s) in the sweep file:\n{lines}")


MAX_EPOCHS = 1000
"""Bounds on the counts that size a sweep, so that a typo cannot make `plan` or `run` spin."""
MAX_POINTS_PER_TRIAL = 1000


def lr_problems(v: list[float]) -> list[str]:
    """An lr axis holds finite, positive, distinct values."""
    bad = [x for x in v if not (math.isfinite(x) and x > 0)]
    repeated = sorted({x for x in v if v.count(x) > 1})
    return ([f"learning rates must be finite and > 0 (the base model is the lr=0 point; YAML reads "
             f"1.0e+400 as infinity), got {bad}"] if bad else []) + (
        [f"lrs lists {repeated} more than once (each value is one grid axis point)"] if repeated else [])


def _distinct(axis: str, v: list) -> list:
    """A grid axis lists each value once: a repeat would repeat trial ids (the same trial twice)."""
    repeated = sorted({x for x in v if v.count(x) > 1}, key=str)
    if repeated:
        raise ValueError(f"{axis} lists {repeated} more than once (each value is one grid axis point)")
    return v


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class ModelSpec(_Strict):
    name: str = Field(pattern=r"^[A-Za-z0-9_.\-]+$")
    """Short label used in trial ids, the store and plots."""
    path: str
    """'toy:<name>' (a toy base model cliffsweep builds), 'smollm2:135m-instruct' (a real instruct
    model built from a PyPI wheel, docs/models.md), a local HF folder, or a hub id."""
    dtype: Literal["float32", "bfloat16", "float16"] = "float32"
    """Training and evaluation dtype. bf16 on GPU for real backbones."""
    pretrain_optimizer: str | None = None
    """The optimizer the model was pretrained with (001: finetune with it). The analysis's
    optimizer tables then compare every other optimizer against SFT under this one; None: against
    SFT's plain series (the first optimizer)."""
    epochs: list[int] | None = Field(None, min_length=1)
    """This model's epoch axis; None = the sweep's `epochs` (issue 52: 004 trains Qwen for 12
    epochs and Llama for 20). Not with `recipe.max_steps`, whose budgets are in steps."""

    @field_validator("epochs")
    @classmethod
    def _positive_epochs(cls, v: list[int] | None) -> list[int] | None:
        if v is not None and any(e < 1 for e in v):
            raise ValueError(f"epochs must be at least 1, got {v}")
        return v


class MethodSpec(_Strict):
    name: str
    params: dict[str, Any] = {}
    """Method hyperparameters. A list value is a grid axis (wrap a list-valued param in a list)."""
    optimizers: list[str] | None = Field(None, min_length=1)
    """This method's optimizer axis; None = the sweep's `optimizers`."""
    lrs: list[float] | None = Field(None, min_length=1)
    """This method's lr axis; None = the sweep's `lrs` (the seeds sweep each method over its own
    range: LoRA's lrs sit about 10x above full finetuning's)."""

    @field_validator("lrs")
    @classmethod
    def _method_lrs(cls, v: list[float] | None) -> list[float] | None:
        if v is not None and (problems := lr_problems(v)):
            raise ValueError("; ".join(problems))
        return v


LOCAL_PATH_KEYS = ("path", "eval_path", "include_path")


def absolute_paths(params: dict[str, Any]) -> dict[str, Any]:
    """`params` with each relative local path made absolute from the current directory, also
    inside a task it refers to (`of: {name, params}`). Why: the sweep file is read, and its files
    checked, where the user runs it, but Tune moves each trial into its own directory and a
    cluster's workers start elsewhere, so `tests/data/...` named no file there (on the lent H100,
    every trial failed with "no *.jsonl files" after the driver had read the same folder). A
    value naming nothing here (a hub dataset id, a URI, a missing file that `validate` reports)
    is left as written."""
    from pathlib import Path

    out = dict(params)
    for key in LOCAL_PATH_KEYS:
        value = out.get(key)
        if isinstance(value, str) and "://" not in value and not Path(value).is_absolute() and Path(value).exists():
            out[key] = str(Path(value).absolute())
    ref = out.get("of")
    if isinstance(ref, dict) and isinstance(ref.get("params"), dict):
        out["of"] = {**ref, "params": absolute_paths(ref["params"])}
    return out


class TaskSpec(_Strict):
    name: str
    params: dict[str, Any] = {}
    """Task options (path, n_train, n_eval, seed, ...); see the task's Params. Local paths are
    made absolute when the file is read (absolute_paths)."""

    @field_validator("params")
    @classmethod
    def _absolute(cls, v: dict[str, Any]) -> dict[str, Any]:
        return absolute_paths(v)


class TasksSpec(_Strict):
    learn: TaskSpec
    """The finetuning task (ChemL3 in the cliff paper). Trained on, and evaluated."""
    retain: list[TaskSpec] = Field(min_length=1)
    """Retention tasks (GSM8K in the paper), evaluated at every checkpoint."""
    retain_data: TaskSpec | None = None
    """The retain set D_R whose training split the methods that need one draw from (replay's
    mixed-in rows, EWC / MAS / SIB / FLOW statistics). None: the first retain task (the cliff
    paper's reading: GSM8K train). 002 replays a separate, pretraining-like mix, and an lm_eval
    benchmark may have no training split: name the data here (any task with a training split)."""

    learn_suite: list[TaskSpec] = []
    """In-domain benchmarks read as the learning axis, with role learn (004 averages six math
    benchmarks against six out-of-domain ones): evaluated at every checkpoint like the retain
    tasks, and `analyze` reads learning as the plain mean of their accuracies (a learn suite,
    analysis/learnsuite.py) instead of the learn task's own held-out score, which is still
    evaluated and stored (`--learn-task` reads it). Empty: the learn task alone, as the cliff
    paper does."""

    @property
    def replay(self) -> TaskSpec:
        """D_R: `retain_data`, else the first retain task."""
        return self.retain_data if self.retain_data is not None else self.retain[0]

    @property
    def evaluated(self) -> list[tuple[str, str, TaskSpec]]:
        """(where in the file, role, task) of every task each checkpoint is evaluated on, in order."""
        return ([("tasks.learn", "learn", self.learn)]
                + [(f"tasks.learn_suite.{i}", "learn", t) for i, t in enumerate(self.learn_suite)]
                + [(f"tasks.retain.{i}", "retain", t) for i, t in enumerate(self.retain)])


class RecipeSpec(_Strict):
    """The SFT recipe of the cliff paper, App. B. Defaults are the paper's."""

    batch_size: int = Field(16, ge=1)
    """Global batch size (split across workers)."""
    micro_batch_size: int | None = Field(None, ge=1)
    """Rows per forward/backward pass on each worker (ours, for memory): a worker's share of
    the global batch runs in micro-batches whose gradients accumulate into one optimizer step,
    equal to the whole batch's (trainables/microbatch.py). None = the whole share in one pass."""
    master_weights: bool = True
    """For a model loaded in bf16/fp16 (`models[].dtype`): the optimizer steps fp32 copies of the
    weights and keeps its state in fp32, so small-lr updates accumulate instead of rounding away
    (trainables/optimizers/master.py). Off: pure low-precision training, 6 bytes/param less.
    fp32 models (the default dtype) are unaffected."""
    gradient_checkpointing: bool = False
    """Recompute each decoder layer's activations in backward instead of keeping them (ours,
    for memory; about a third more compute per step)."""
    max_seq_len: int = Field(512, ge=8)
    system_prompt: str = ""
    """A system prompt before every training example and every evaluation prompt that has none of
    its own (lm_eval tasks: lm-eval's system_instruction). "" = none, as in the cliff paper."""
    weight_decay: float = Field(0.01, ge=0)
    optimizer_settings: dict[str, dict[str, Any]] = {}
    """Per optimizer, its settings: `{adamw: {betas: [0.9, 0.95], eps: 1.0e-8}, sgd: {momentum: 0.9},
    muon: {momentum, adam_betas, adam_eps}}`; each optimizer's file lists them (`Settings`).
    Unset: torch's and the seeds' defaults."""
    warmup_steps: int = Field(20, ge=0)
    warmup_fraction: float | None = Field(None, ge=0, lt=1)
    """Warmup as a share of each trial's optimizer steps (most LLM recipes: 0.03-0.1); when set,
    it replaces warmup_steps."""
    cooldown_steps: int = Field(50, ge=0)
    """Final steps decaying linearly from min_lr_ratio * peak to 0 (our reading of App. B)."""
    min_lr_ratio: float = Field(0.1, ge=0, le=1)
    grad_clip: float | None = Field(1.0, gt=0)
    stats_examples: int = Field(256, ge=1)
    """Retain-set examples used for once-per-model statistics (Fisher, SIB, MAS, ...)."""
    precision: Literal["auto", "autocast", "fsdp_bf16"] = "auto"
    """How an fp32 model computes on a GPU (ours, for speed; trainables/fastpath.py). autocast:
    bf16 autocast over fp32 weights (a cast per op). fsdp_bf16: FSDP2 mixed precision, bf16
    compute cast once per layer, fp32 weights, gradients reduced and AdamW state kept in fp32
    (shard-safe methods and AdamW only; the model is sharded even on one worker, so like fsdp
    such a trial restarts rather than resumes mid-trial). auto: on a GPU fsdp_bf16 where the
    method and optimizer allow it, else autocast; on a CPU fp32 throughout (CPU numbers never
    change). fsdp_bf16 set explicitly applies on a CPU too (slow there: for tests). A bf16/fp16
    model computes in its own dtype (`master_weights`) whatever this says."""
    kernels: Literal["auto", "liger", "none"] = "auto"
    """Fused kernels (ours, for speed and memory; trainables/fastpath.py). liger: Liger-Kernel's
    fused linear cross-entropy for every method's response CE, and its RMSNorm, SwiGLU and RoPE
    in the model (CUDA). none: the chunked torch loss (trainables/losses.py). auto: liger on a
    GPU, none on a CPU. liger on a CPU runs the loss kernel under Triton's interpreter
    (TRITON_INTERPRET=1, for tests) and fails without it."""
    compile: bool = False
    """torch.compile each decoder layer (head and loss stay eager: Liger's fused CE breaks under
    compile with ignored targets, Liger issue 174). First steps pay the compilation."""

    max_steps: list[int] | None = None
    """A step budget instead of epochs (001 compares optimizers at fixed iteration counts: Alpaca
    800, MetaMathQA 6,100, Magicoder 1,800): each value is a grid point, as each of `epochs` is;
    a trial trains exactly that many optimizer steps, going round its data as often as needed
    (the last pass cut short). Checkpoints, warmup and cooldown fractions, `plan` and the bill
    follow the budget. An int is a one-point axis. Set it or the sweep's `epochs`, not both."""

    @field_validator("max_steps", mode="before")
    @classmethod
    def _steps_axis(cls, v):
        return [v] if isinstance(v, int) and not isinstance(v, bool) else v

    @field_validator("max_steps")
    @classmethod
    def _positive_steps(cls, v: list[int] | None) -> list[int] | None:
        if v is None:
            return v
        if not v or any(s < 1 for s in v):
            raise ValueError(f"max_steps must be positive integers, got {v}")
        return _distinct("max_steps", v)

    @model_validator(mode="after")
    def _micro_within_batch(self) -> "RecipeSpec":
        if self.micro_batch_size is not None and self.micro_batch_size > self.batch_size:
            raise ValueError(f"micro_batch_size ({self.micro_batch_size}, rows per worker) exceeds "
                             f"batch_size ({self.batch_size}, the global batch)")
        return self


DEFAULT_MAX_MODEL_LEN = 4096


class AdaptiveSpec(_Strict):
    """Evaluate until the verdict is settled (issue 51, evals/stopping.py, docs/design.md): each
    checkpoint is scored in stages on one seeded item order per model (the base: every item)
    until every decision the analysis reads from it is settled at `error` (a retain task: no
    cut inside its interval; else every item), a learn task until its interval is narrower than
    `width`. Tasks scored by lm-eval, loss tasks and sampled ones are scored in
    full (docs/tasks.md)."""

    error: float = Field(0.05, gt=0, lt=0.5)
    """The chance that a stopped checkpoint's interval misses its accuracy on every item."""
    width: float = Field(0.15, gt=0, le=1)
    """An interval this narrow (in accuracy) stops a learn task, and a checkpoint whose base is
    not scored yet; never a retain task with a cut inside its interval (issue 59)."""
    first: int = Field(32, ge=8)
    """Items of the first stage."""
    growth: float = Field(1.5, gt=1, le=4)
    """Each stage's items over the one before; the last stage is every item."""
    rule: str = "hedged_cs"
    """The stopping rule, by name (evals/stopping.py RULES): the hedged capital confidence
    sequence, the one the project ships."""


class EvalSpec(_Strict):
    adaptive: AdaptiveSpec | None = Field(default_factory=AdaptiveSpec)
    """The staged rule (AdaptiveSpec), on unless `adaptive: false`: then every checkpoint is
    scored on every item, as the seeds' protocols do (docs/design.md "Evaluating until the verdict
    is settled": the replay's agreement and the toy sweep's time, the reasons it is the default)."""
    points_per_trial: int = Field(3, ge=1, le=MAX_POINTS_PER_TRIAL)
    """Evenly spaced checkpoints per trial; the last is the end of training."""

    @field_validator("adaptive", mode="before")
    @classmethod
    def _adaptive_switch(cls, v: Any) -> Any:
        if v is True:
            return {}
        return None if v is False else v
    every_epoch: bool = False
    """Also evaluate at each epoch end."""
    backend: Literal["vllm", "hf"] = "vllm"
    evaluators_per_model: int = Field(1, ge=1)
    """Evaluator actors per model for the whole sweep (each started once)."""
    max_evaluators_per_model: int | None = Field(None, ge=1)
    """The most evaluators per model when evaluations wait and the cluster has room (issue 22:
    extra ones start for a backlog once no Train job waits for resources, and stop when idle).
    None: as many as free GPUs allow with GPU evaluators; evaluators_per_model on CPUs."""
    cpus_per_evaluator: float = Field(1.0, ge=0)
    gpus_per_evaluator: float = Field(0.0, ge=0)
    gpu_memory_gb: float | None = Field(None, gt=0)
    """GPU memory each evaluator may use (its cap, sweep/gpushare.py); None: its share of the
    GPU, gpus_per_evaluator of the device's memory. vLLM sizes its KV cache from what the cap
    leaves after the weights."""
    kv_cache_mb: int = Field(64, ge=1)
    """vLLM KV-cache size per engine (CPU needs it set, or vLLM claims most of the RAM)."""
    max_model_len: int | None = Field(None, ge=16)
    """Context of the engine; at most the model's own (the toy models: 256; `validate` checks
    it against each local model's config.json). None = the model's own, capped at
    DEFAULT_MAX_MODEL_LEN (a longer one only costs KV cache: GSM8K needs about 1,000 tokens)."""
    enforce_eager: bool | None = None
    """vLLM without compilation/graph capture. None = on when evaluators have no GPU (on CPU
    it cuts engine start several-fold, see docs/evals.md)."""
    engine_in_process: bool | None = None
    """Run vLLM's engine core inside the evaluator actor (VLLM_ENABLE_V1_MULTIPROCESSING=0)
    instead of in two more processes. None = in process when evaluators have no GPU: on a CPU
    machine the engine core and its worker spin-wait on each other, which burns the cores
    training needs (docs/benchmarks.md: engine start 28 s -> 3 s, CPU per eval roughly halved)."""


class ResourcesSpec(_Strict):
    workers_per_trial: int = Field(1, ge=1)
    cpus_per_worker: float = Field(1.0, gt=0)
    gpus_per_worker: float = Field(0.0, ge=0)
    gpu: str = "H100-SXM"
    """The GPU type, for `plan` and `validate`'s packing check (planner/mfu.GPUS: A100-80GB,
    H100-SXM, H200; `plan --gpu` overrides)."""
    gpu_memory_gb: float | None = Field(None, gt=0)
    """GPU memory each Train worker may use (its cap, sweep/gpushare.py); None: its share of the
    GPU, gpus_per_worker of the device's memory. A Ray GPU fraction only schedules: without a
    cap, one process's peak starves the others sharing its GPU."""
    strategy: Literal["ddp", "fsdp"] = "ddp"
    """ddp: every worker holds the whole model. fsdp: torch FSDP2, weights sharded over the
    workers (for backbones whose weights and optimizer state do not fit one GPU); runs over
    gloo on CPU too, where it saves memory, not time. Only methods with `fsdp_safe` and the
    optimizers in trainables/parallel.py FSDP_OPTIMIZERS run under it."""
    max_concurrent_trials: int | None = Field(None, ge=1)
    max_retries: int = Field(1, ge=0)
    """Retries of a crashed trial before it is recorded as failed (counted per Train job: a
    retried job resumes the trial it was training and goes on with the others)."""
    trials_per_job: int | None = Field(None, ge=1)
    """Grid points of one model trained one after the other in one Ray Train job, so that the
    job's start-up (Train controller, worker processes, imports, process group) is paid once for
    all of them (issue 15, docs/benchmarks.md). Each point is still its own trial in the store.
    None: one job per concurrent slot, at most 16 points each (policies.trials_per_job); 1: one
    job per grid point."""
    cluster_roles: bool = False
    """Place each kind of work on the node type the shipped cluster configs (clusters/) give it,
    through their custom resources: trial drivers and Train controllers on the on-demand head
    (`cliffsweep_driver`), Train workers on `cliffsweep_trainer` nodes (spot GPUs), evaluators on
    `cliffsweep_evaluator` nodes (their own GPUs). The autoscaler adds the node type a pending
    request names. Off: plain CPU/GPU requests, any node."""


class RefineSpec(_Strict):
    """Adaptive lr refinement (off unless the sweep file has a `refine:` section): after a
    series' grid points are in, add lrs geometrically inside its cliff bracket (or a collapse
    the grid cannot resolve) and its highest-safe-lr bracket, round after round, until each is
    narrower than `target_ratio`. The policy: cliffsweep/analysis/next_lrs.py; docs/analysis.md."""

    rounds: int = Field(2, ge=0)
    """Extra rounds after the grid (round 0); 0 = off."""
    points_per_round: int = Field(2, ge=1)
    """New lrs per series per round (each run with every seed of the sweep)."""
    target_ratio: float = Field(1.3, gt=1.01)
    """Stop refining a bracket once its upper lr is at most this factor above its lower one.
    Above 1.01 because new lrs are rounded to 3 significant digits (readable trial ids)."""


class VerifySpec(_Strict):
    """Verification runs (off unless the sweep file has a `verify:` section; issue 52,
    analysis/verify.py): once a series' lrs are all in (its last refinement round included), a
    series whose point estimate is a cliff, or a close call, is trained again with `seeds` new
    seeds at the two lrs that decided it, so its verdict's confidence covers training runs too."""

    seeds: int = Field(2, ge=1, le=8)
    """New seeds per verified lr (the sweep's seeds continued: [0] and 2 -> seeds 1 and 2)."""
    margin: float = Field(1.0, ge=0, le=10)
    """A close call: a series whose closest pair of lrs within cliff_lr_ratio falls short of a
    cliff_drop collapse by at most this many standard errors of its drop, run-to-run noise
    included (the sweep's own where it has several seeds, else a prior of 0.10 of R0 per run:
    analysis/runs.py RUN_SD_PRIOR). Our default 1.0: at one run per lr and 500 items, a drop
    within about 0.15 of R0 of cliff_drop (issue 59: the margin was 0.10 of R0, sized from item
    noise, and a near miss 0.12 short went unverified)."""


class SourcesSpec(_Strict):
    """Where the file's settings come from (issue 52; sweep/sources.py): the paper it follows,
    and per setting path a label, the paper's reference or 'ours ...' for the project's choice.
    Every setting that shapes the experiment needs one (`validate` lists those without)."""

    paper: str = Field(min_length=1)
    settings: dict[str, str] = Field(min_length=1)


class SweepSpec(_Strict):
    name: str = Field(pattern=r"^[A-Za-z0-9_.\-]+$")
    models: list[ModelSpec] = Field(min_length=1)
    methods: list[MethodSpec] = Field(min_length=1)
    optimizers: list[str] = Field(["adamw"], min_length=1)
    """Optimizer axis (001): adamw, muon, sgd; crossed with every method."""
    lrs: list[float] = Field(min_length=1)
    """Peak learning rates."""
    epochs: list[int] = Field([3], min_length=1)
    seeds: list[int] = Field([0], min_length=1)
    tasks: TasksSpec
    recipe: RecipeSpec = RecipeSpec()
    eval: EvalSpec = EvalSpec()
    resources: ResourcesSpec = ResourcesSpec()
    refine: RefineSpec | None = None
    """Adaptive lr refinement; None (no `refine:` section) = the grid only."""
    verify: VerifySpec | None = None
    """Verification runs at cliffs' brackets and close calls; None (no `verify:` section) = one
    run per lr and seed of the grid."""
    sources: SourcesSpec | None = None
    """Where each setting comes from (sweep/sources.py); None: the file names no paper."""
    store: str = "results/{name}"
    """Local path or pyarrow/fsspec URI; '{name}' is replaced by the sweep name."""
    checkpoints: str | None = None
    """Where trials write checkpoints; None = '<store>/checkpoints'. Must be reachable by the
    evaluators (shared storage on a cluster)."""
    keep_checkpoints: Literal["final", "all"] = "final"
    """Once a trial is done (every checkpoint evaluated): 'final' deletes its other checkpoint
    folders and the final one's training state, so a long sweep does not fill the bucket
    (docs/benchmarks.md: bytes kept per trial); 'all' keeps everything."""
    resume_every_s: float = Field(300.0, ge=0)
    """Training seconds between checkpoints that also save the training state (the weights as
    trained, AdamW's moments, the schedule, the method's state: ~3x the export's bytes) for a
    crashed or re-run trial to resume from. A trial shorter than this saves none: a retry
    re-trains it from step 0, and re-reports the checkpoints already written instead of writing
    them again. 0: with every checkpoint (a retry loses no step; the fault tests use it). The
    trade-off, measured: docs/design.md ("Checkpoint lifecycle")."""
    async_checkpoints: bool = True
    """Write and upload each checkpoint on a background thread of rank 0 while training goes on
    (trainables/checkpoints.py: a snapshot in host memory, one waiting at most). False: training
    waits for every write (the path before issue 21; bench/bench_checkpoints.py compares them)."""
    ray_address: str | None = None
    """None = start a local Ray cluster; 'auto' or 'ray://host:10001' = join one."""
    tracking: TrackingSpec = TrackingSpec()
    """Experiment trackers that mirror the store (MLflow, W&B, TensorBoard: docs/tracking.md),
    and how many training-curve rows per trial the store keeps."""

    @field_validator("lrs")
    @classmethod
    def _positive_lrs(cls, v: list[float]) -> list[float]:
        if problems := lr_problems(v):
            raise ValueError("; ".join(problems))
        return v

    @field_validator("epochs")
    @classmethod
    def _positive_epochs(cls, v: list[int]) -> list[int]:
        if any(e < 1 or e > MAX_EPOCHS for e in v):
            raise ValueError(f"epochs must be integers from 1 to {MAX_EPOCHS}, got {v}")
        return _distinct("epochs", v)

    @field_validator("seeds", "optimizers")
    @classmethod
    def _distinct_axis(cls, v: list, info) -> list:
        return _distinct(info.field_name, v)

    @model_validator(mode="after")
    def _one_length_axis(self) -> "SweepSpec":
        if self.recipe.max_steps is not None and "epochs" in self.model_fields_set:
            raise ValueError(f"set epochs ({self.epochs}) or recipe.max_steps ({self.recipe.max_steps}), not both: "
                             "each says how long a trial trains")
        own = [m.name for m in self.models if m.epochs is not None]
        if self.recipe.max_steps is not None and own:
            raise ValueError(f"models {own} set their own epochs, and recipe.max_steps budgets every trial in steps: "
                             "set one of the two")
        return self

    @property
    def lengths(self) -> list[tuple[int, int | None]]:
        """The training-length axis: (epochs, None) per `epochs` value, or (0, steps) per
        `recipe.max_steps` value (0 epochs: the trial is budgeted in steps)."""
        if self.recipe.max_steps is not None:
            return [(0, s) for s in self.recipe.max_steps]
        return [(e, None) for e in self.epochs]

    def lengths_of(self, model: ModelSpec) -> list[tuple[int, int | None]]:
        """`lengths` for one model: its own `epochs` where it has them."""
        if model.epochs is not None and self.recipe.max_steps is None:
            return [(e, None) for e in model.epochs]
        return self.lengths

    @property
    def store_uri(self) -> str:
        return self.store.replace("{name}", self.name)

    @property
    def checkpoint_uri(self) -> str:
        return self.checkpoints or self.store_uri.rstrip("/") + "/checkpoints"
