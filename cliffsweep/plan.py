"""`cliffsweep plan`: what a sweep will cost, before it runs, offline.

Per model and in total: trials, training tokens, training FLOPs, GPU-hours per GPU type at a
stated MFU, evaluation generations and generated tokens, checkpoint bytes written and kept, and
the peak memory of one training GPU per method. All but `plan_spec`, `lengths_for` and
`plan_text` (plan_text.py; they read configs and data) are pure functions of an architecture (archs.py),
token lengths (tokenstats.py) and the spec's numbers.

Stated assumptions (printed with every plan):
- FLOPs = 6 N D (Kaplan et al. 2020): N = matmul parameters (all but the input embedding; the LM
  head counted, tied or not), D = token positions processed, padding included (collate pads a
  micro-batch to its longest row). The attention-score term (12 L s h per token, half that with
  causal kernels) is left out: relative to 6 N it is about s / (6 h), 3 % at s = 256 and h = 1536.
  Per method: KL and IW run one more forward of the frozen base (+2 N D); LoRA skips the
  weight-gradient matmuls of the frozen weights (-2 N D, adapters negligible); activation
  checkpointing recomputes the forward (+2 N D).
- Memory per training GPU: weights + gradients + optimizer state (+ the method's copies) +
  activations of one micro-batch at max_seq_len (the worst case: batches pad to their longest
  row). fp32 on GPU = mixed precision (fp32 weights, grads and AdamW moments, bf16 activations:
  trainables/microbatch.py autocast); bf16 = everything in bf16 (AdamW moments in the parameter
  dtype). Not counted: the CUDA context and allocator fragmentation (docs/gpu.md: to measure).
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass, field
from pathlib import Path

from cliffsweep import bill
from cliffsweep.archs import Arch
from cliffsweep.tokenstats import Lengths

GB = 1e9


@dataclass(frozen=True)
class GPU:
    name: str
    bf16_tflops: float
    """Dense bf16 tensor-core peak (no sparsity), NVIDIA datasheets."""
    memory_gb: float


GPUS: tuple[GPU, ...] = (GPU("A100-80GB", 312.0, 80.0), GPU("H100-SXM", 989.0, 80.0), GPU("H200", 989.0, 141.0))
DEFAULT_MFU = 0.35
"""The MFU assumed where nothing is measured for a model's training path (no GPU, --mfu)."""


@dataclass(frozen=True)
class MeasuredMFU:
    params: float
    path: str
    """The precision path (`compute_path`): "autocast" (fp32 weights + bf16 autocast), "fsdp_bf16"
    (fp32 weights, FSDP2 bf16 compute), "bf16_master" (bf16 weights, fp32 masters), "bf16"."""
    mfu: float
    source: str
    kernels: str = "none"
    compile: bool = False


MEASURED_MFU: tuple[MeasuredMFU, ...] = (
    # H100 80 GB, one GPU, seq 1024, the project's SFT loss, 6N FLOPs per token: issue 15 (2026-11-24)
    MeasuredMFU(0.49e9, "autocast", 0.124, "Qwen2.5-0.5B, H100, micro 16"),
    MeasuredMFU(1.54e9, "autocast", 0.204, "Qwen2.5-1.5B, H100, micro 8"),
    MeasuredMFU(8.03e9, "bf16", 0.422, "Llama-3.1-8B pure bf16 + checkpointing, H100, micro 4"),
)
"""Measured MFU per model size and precision path, built in (issue 15's bench/bench_gpu.py runs).
`plan` adds the rows of every GPU check (bench/gpu_check.sh's gpu_check.json) in
cliffsweep/measured/ and those given with --measured, and takes the measurement of the nearest
size (log scale) on the model's path, preferring the recipe's kernels."""

FALLBACK_PATH = {"fsdp_bf16": "autocast", "bf16_master": "bf16"}
"""Where nothing is measured on a path yet, the path whose rows stand in (and the plan says so):
fsdp_bf16 does the work of autocast with fewer casts, bf16 masters that of pure bf16 plus an fp32
optimizer step, so the stand-ins are lower bounds of their MFU."""
MEASURED_DIR = Path(__file__).parent / "measured"


def compute_path(dtype: str, precision: str = "auto", master_weights: bool = True) -> str:
    """The precision path a model of `dtype` trains on a GPU under recipe.precision: what
    trainables/fastpath.resolve decides for a shard-safe method (the common case), a bf16/fp16
    model's path named by its master weights."""
    import torch

    from cliffsweep.trainables.fastpath import resolve

    path = resolve(precision, "none", False, "cuda", getattr(torch, dtype), True).precision
    if path == "weights":
        return "bf16_master" if master_weights else "bf16"
    return path


def gpu_check_rows(path: str | Path) -> list[MeasuredMFU]:
    """The training rows of a GPU check's JSON (bench/gpu_check.sh: gpu_check.json, or one stage's
    file) that measured an MFU."""
    data = json.loads(Path(path).read_text())
    stages = [data] if "rows" in data else [v for v in data.values() if isinstance(v, dict) and "rows" in v]
    out = []
    for row in (r for s in stages for r in s["rows"]):
        if row.get("mfu") is None or "recipe" not in row:
            continue
        name = row["model"].split("/")[-1].removesuffix("-Instruct")
        out.append(MeasuredMFU(row["params"], row["path"], row["mfu"],
                               f"{name} {row['recipe']}, {row['gpu']}, {row['date']}, micro {row['micro']}",
                               row["kernels"], row["compile"]))
    return out


def measured_rows(files: tuple[str, ...] = ()) -> tuple[MeasuredMFU, ...]:
    """The built-in rows, those of every GPU check filed in cliffsweep/measured/, and `files`."""
    filed = sorted(MEASURED_DIR.glob("*.json")) if MEASURED_DIR.is_dir() else []
    return MEASURED_MFU + tuple(r for f in [*filed, *files] for r in gpu_check_rows(f))


def measured_mfu(params: float, dtype: str, precision: str = "auto", master_weights: bool = True,
                 kernels: str = "liger", rows: tuple[MeasuredMFU, ...] | None = None) -> tuple[float, str]:
    """(MFU, where it comes from) for a model of `params` trained in `dtype` on a GPU under the
    recipe's `precision`, `master_weights` and `kernels` (auto = liger on a GPU)."""
    rows = measured_rows() if rows is None else rows
    path = compute_path(dtype, precision, master_weights)
    on_path, used = [m for m in rows if m.path == path], path
    if not on_path and path in FALLBACK_PATH:
        used = FALLBACK_PATH[path]
        on_path = [m for m in rows if m.path == used]
    if not on_path:
        return DEFAULT_MFU, "assumed, nothing measured"
    kern = "liger" if kernels == "auto" else kernels
    same = [m for m in on_path if m.kernels == kern and not m.compile]
    near = min(same or on_path, key=lambda m: abs(math.log(m.params / params)))
    notes = [] if abs(math.log(near.params / params)) < 0.1 else ["nearest size measured"]
    if used != path:
        notes.append(f"{used} path; {path} not measured yet")
    return near.mfu, f"measured: {near.source}" + (f" ({'; '.join(notes)})" if notes else "")

BYTES = {"float32": 4, "bfloat16": 2, "float16": 2}

# --- per-method facts ------------------------------------------------------------------------
# Copies of the weights a method keeps on the training device, in the parameter dtype (read off
# each method file; tests/test_plan.py requires an entry for every registered method).
EXTRA_COPIES: dict[str, float] = {
    "sft": 0, "lora": 0, "sib": 0, "replay": 0, "talr": 0, "dft": 0, "flow": 0, "migu": 0,
    "wise_ft": 0,  # theta* lives on the CPU (methods/wise_ft.py)
    "kl": 1, "iw": 1,  # frozen base copy (whole on every worker, also under FSDP)
    "l2sp": 1,  # theta*
    "ewc": 2, "mas": 2,  # theta* and the importances
    "rpsft": 1,  # theta*, plus the U_k / V_k bases (rpsft_basis_elements)
    "nanoadam": 1.5,  # anchors (a weight copy) and bool masks (1 byte per weight, in bf16 units: 0.5)
}
# Once-per-model statistics passes: (data the pass reads, FLOPs per matmul parameter per token).
STATS_PASSES: dict[str, tuple[str, int]] = {
    "ewc": ("retain", 6), "mas": ("retain", 6), "sib": ("retain", 6), "rpsft": ("none", 0), "flow": ("learn", 2),
}
EXTRA_FLOPS: dict[str, int] = {"kl": 2, "iw": 2, "lora": -2}
OPTIMIZER_STATES: dict[str, int] = {"adamw": 2, "muon": 1, "sgd": 1}
"""State tensors per trained weight (muon: momentum on hidden matrices; its AdamW part on
embeddings/head/1-D parameters keeps 2, see optimizer_state_elements)."""
LOSS_CHUNK_ELEMENTS = 1 << 24
"""Logits per chunk of the chunked CE/KL (h-recipe's trainables/losses.py CHUNK_ELEMENTS);
backward holds about three chunks in fp32. Without chunking the full logits would add
micro x seq x vocab x 12 bytes."""


@dataclass(frozen=True)
class Precision:
    weight: int
    grad: int
    moment: int
    act: int
    label: str
    master: int = 0
    """Bytes per trainable parameter for fp32 master weights and their gradient copy
    (trainables/optimizers/master.py)."""


def precision(dtype: str, on_gpu: bool, master_weights: bool = True) -> Precision:
    if dtype == "float32":
        if on_gpu:
            return Precision(4, 4, 4, 2, "fp32 weights/grads/AdamW, bf16 autocast")
        return Precision(4, 4, 4, 4, "fp32 throughout (CPU)")
    b = BYTES[dtype]
    if master_weights:  # recipe.master_weights
        return Precision(b, b, 4, b, f"{dtype} weights/grads, fp32 master weights and AdamW state", master=8)
    return Precision(b, b, b, b, f"{dtype} throughout (AdamW moments in {dtype})")


# --- training compute ------------------------------------------------------------------------
@dataclass(frozen=True)
class Batching:
    workers: int
    rows_per_worker: int
    micro_rows: int
    micro_per_worker: int

    @classmethod
    def of(cls, batch_size: int, workers: int, micro_batch_size: int | None) -> Batching:
        rows = math.ceil(batch_size / workers)
        micro = min(rows, micro_batch_size or rows)
        return cls(workers, rows, micro, math.ceil(rows / micro))


def padded_tokens_per_step(b: Batching, lengths: Lengths, cap: int) -> float:
    """Token positions one optimizer step processes over all workers (micro-batches padded to
    their longest row)."""
    return b.workers * b.micro_per_worker * b.micro_rows * lengths.expected_max(b.micro_rows, cap)


def flops_per_token(arch: Arch, method: str, grad_ckpt: bool) -> int:
    return (6 + EXTRA_FLOPS.get(method, 0) + (2 if grad_ckpt else 0)) * arch.matmul_params


@dataclass(frozen=True)
class TrialCost:
    steps: int
    tokens: float
    """Real (unpadded) tokens trained on."""
    flops: float
    eval_points: int


def trial_cost(arch: Arch, method: str, epochs: int, steps_per_epoch: int, eval_points: int, b: Batching,
               learn: Lengths, retain: Lengths | None, replay_rows: int, cap: int, grad_ckpt: bool) -> TrialCost:
    steps = steps_per_epoch * epochs
    learn_rows = b.workers * b.rows_per_worker - replay_rows
    real = learn_rows * learn.mean(cap) + (replay_rows * retain.mean(cap) if replay_rows else 0.0)
    padded = padded_tokens_per_step(b, learn, cap)  # replay rows padded like learn rows (approx.)
    return TrialCost(steps, steps * real, steps * padded * flops_per_token(arch, method, grad_ckpt), eval_points)


def stats_flops(arch: Arch, method: str, stats_examples: int, learn: Lengths, retain: Lengths | None, cap: int) -> float:
    data, per = STATS_PASSES.get(method, ("none", 0))
    if data == "retain" and retain is not None:
        return per * arch.matmul_params * min(stats_examples, retain.n) * retain.mean(cap)
    if data == "learn":
        return per * arch.matmul_params * learn.n * learn.mean(cap)
    return 0.0


def gpu_hours(flops: float, gpu: GPU, mfu: float) -> float:
    return flops / (mfu * gpu.bf16_tflops * 1e12) / 3600


# --- checkpoints -----------------------------------------------------------------------------
def optimizer_state_elements(arch: Arch, optimizer: str, trainable: int, lora: bool) -> float:
    if optimizer == "muon" and not lora:
        # AdamW (2 states) on embeddings, head and 1-D parameters; momentum (1) on hidden matrices
        hidden_2d = arch.layers * sum(a * b for a, b in arch.layer_linears().values())
        return hidden_2d + 2 * (trainable - hidden_2d)
    return OPTIMIZER_STATES[optimizer] * trainable


@dataclass(frozen=True)
class CheckpointBytes:
    export: float
    """The evaluated folder: full weights, or the LoRA adapter."""
    train_state: float
    """train_state.pt (trainables/resume.py): weights as trained + optimizer + method state;
    0 under FSDP (restarts from step 0)."""

    def written(self, points: int) -> float:
        return points * (self.export + self.train_state)

    def kept(self, points: int, keep: str = "final", states: int | None = None) -> float:
        """After the trial is done (spec.keep_checkpoints, ledger.prunable): 'final' keeps the
        final export only; 'all' keeps every export and the two latest training states."""
        return self.export if keep == "final" else self.running(points, states)

    def running(self, points: int, states: int | None = None) -> float:
        """Most a running trial holds: every export so far and its two latest training states
        (`states`: how many of its checkpoints save one, bill.state_points; None: all)."""
        return points * self.export + min(2, points if states is None else states) * self.train_state


def checkpoint_bytes(arch: Arch, method: str, optimizer: str, dtype: str, lora_rank: int | None,
                     strategy: str) -> CheckpointBytes:
    b = BYTES[dtype]
    lora = lora_rank is not None
    trainable = arch.lora_params(lora_rank) if lora else arch.params
    export = trainable * b if lora else arch.params * b
    if strategy == "fsdp":
        return CheckpointBytes(export, 0.0)
    model_state = arch.params * b + (trainable * b if lora else 0)
    optim = optimizer_state_elements(arch, optimizer, trainable, lora) * b
    method_state = arch.params * (b + 1) if method == "nanoadam" else 0.0  # anchors + bool masks
    return CheckpointBytes(export, model_state + optim + method_state)


# --- memory per training GPU ------------------------------------------------------------------
def activation_elements_per_token_layer(arch: Arch) -> int:
    """Tensors a Llama-style layer saves for backward, per token, with fused (SDPA/flash)
    attention, which stores no s x s matrix: residual input, two norm outputs and the residual
    after attention (4 h); q, attention output and RoPE'd q (3 q); k, v and RoPE'd k (3 kv);
    gate, up, silu(gate) and their product (4 I); Qwen3 and OLMo2 normalise q and k too (their
    RMSNorms save input, scale and output: 3 q + 3 kv more). Checked against the tensors autograd
    saves (tests/test_plan.py)."""
    q, kv = arch.heads * arch.hd, arch.kv_heads * arch.hd
    qk_norm = 3 * q + 3 * kv if arch.model_type in ("qwen3", "olmo2") else 0
    return 4 * arch.hidden + 3 * q + 3 * kv + 4 * arch.intermediate + qk_norm


def rpsft_basis_elements(arch: Arch, k: int) -> int:
    return arch.layers * sum(min(k, a, b) * (a + b) for a, b in arch.layer_linears().values())


@dataclass(frozen=True)
class Memory:
    parts: dict[str, float] = field(default_factory=dict)

    @property
    def total(self) -> float:
        return sum(self.parts.values())


def train_memory(arch: Arch, method: str, method_params: dict, optimizer: str, prec: Precision,
                 strategy: str, workers: int, micro_rows: int, seq: int, grad_ckpt: bool) -> Memory:
    """Peak bytes on one training GPU (see the module docstring for what is and is not counted)."""
    shard = workers if strategy == "fsdp" else 1
    lora = method == "lora"
    trainable = arch.lora_params(method_params.get("rank", 16)) if lora else arch.params
    parts = {
        "weights": arch.params * prec.weight / shard + (trainable * prec.weight if lora else 0),
        "grads": trainable * prec.grad / shard,
        "optimizer": optimizer_state_elements(arch, optimizer, trainable, lora) * prec.moment / shard,
    }
    if prec.master:
        parts["master_weights"] = trainable * prec.master / shard
    extra = EXTRA_COPIES[method] * arch.params * prec.weight
    if method == "rpsft":
        extra += rpsft_basis_elements(arch, method_params.get("k", 768)) * 4  # fp32 SVD bases
    parts["method"] = extra
    if strategy == "fsdp":  # one layer gathered, one prefetched
        parts["fsdp_gather"] = 2 * arch.layer_params() * prec.weight
    tokens = micro_rows * seq
    per_layer = activation_elements_per_token_layer(arch)
    saved = arch.layers * arch.hidden + per_layer if grad_ckpt else arch.layers * per_layer
    parts["activations"] = tokens * saved * prec.act
    chunks = 3 * (2 if method in ("kl", "iw") else 1)
    parts["loss"] = min(LOSS_CHUNK_ELEMENTS, tokens * arch.vocab) * chunks * 4
    return Memory(parts)


def stats_memory(arch: Arch, method: str, method_params: dict, prec: Precision, micro_rows: int, seq: int,
                 grad_ckpt: bool) -> Memory:
    """Peak bytes of a method's once-per-model statistics task (trainables/stats.py), which
    runs on one GPU in the recipe's micro-batches with its checkpointing (issue 15): the whole
    model, plus per method: gradients and an fp32 accumulator (ewc, mas), gradients (sib: the
    alphas come from them), nothing trained (flow: a forward without autograd), an SVD at a time
    and the bases (rpsft)."""
    kind = STATS_PASSES[method][0]
    parts = {"weights": arch.params * prec.weight}
    tokens = micro_rows * seq
    per_layer = activation_elements_per_token_layer(arch)
    chunk = min(LOSS_CHUNK_ELEMENTS, tokens * arch.vocab) * 3 * 4
    if kind == "retain":  # forward + backward of the retain loss (MAS: of the logits' norm)
        parts["grads"] = arch.params * prec.grad
        if method in ("ewc", "mas"):
            parts["accumulator"] = arch.params * 4
        saved = arch.layers * arch.hidden + per_layer if grad_ckpt else arch.layers * per_layer
        parts["activations"] = tokens * saved * prec.act
        parts["loss"] = chunk
    elif kind == "learn":  # flow: per-sequence CE, no autograd: one layer's tensors at a time
        parts["activations"] = tokens * (arch.layers * arch.hidden + per_layer) * prec.act
        parts["loss"] = chunk
    else:  # rpsft: the bases, and one weight's SVD (its fp32 copy, U, S, V) at a time
        largest = max(a * b for a, b in arch.layer_linears().values())
        parts["bases"] = rpsft_basis_elements(arch, method_params.get("k", 768)) * 4
        parts["svd"] = 3 * largest * 4
    return Memory(parts)


# --- the whole sweep ---------------------------------------------------------------------------
@dataclass
class ModelPlan:
    name: str
    arch: Arch
    trials: int = 0
    tokens: float = 0.0
    train_flops: float = 0.0
    stats_flops: float = 0.0
    generations: int = 0
    gen_tokens: int = 0
    ckpt_written: float = 0.0
    ckpt_kept: float = 0.0
    prompt_tokens: float = 0.0
    """Prompt tokens of every evaluation (prefill), from the tasks' example lengths."""
    eval_s: float = 0.0
    """GPU-seconds of evaluation (bill.eval_seconds)."""
    ckpt_blocked_s: float = 0.0
    """GPU-seconds training GPUs wait on checkpoints (bill.blocked_seconds, H100 pace)."""
    setup_s: float = 0.0
    """GPU-seconds of per-point setup (bill.setup_seconds)."""
    eval_source: str = ""
    ckpt_running: float = 0.0
    """Largest single running trial's checkpoint bytes (times concurrent trials = the peak)."""
    dtype: str = "float32"
    mfu: float = DEFAULT_MFU
    mfu_source: str = "assumed"
    memory: dict[str, Memory] = field(default_factory=dict)
    """series -> peak memory per training GPU."""
    stats_memory: dict[str, Memory] = field(default_factory=dict)
    """series -> peak memory of its once-per-model statistics task (methods that have one)."""
    notes: list[str] = field(default_factory=list)
    points: list[bill.PointCost] = field(default_factory=list)
    """Each trial's pieces of work, priced, for a schedule simulation (cliffsweep/simulate)."""
    stats_s: dict[str, float] = field(default_factory=dict)
    """Seconds of each distinct statistics task on one GPU (key as PointCost.stats_key)."""
    base_eval_s: float = 0.0

    @property
    def flops(self) -> float:
        return self.train_flops + self.stats_flops


def eval_load(tasks: list[tuple[int, int]]) -> tuple[int, int]:
    """(generations, generated tokens at most) of one evaluation over tasks (n_eval, max_tokens)."""
    return sum(n for n, _ in tasks), sum(n * m for n, m in tasks)


def recipe_extras(recipe) -> tuple[int | None, bool]:
    """(micro_batch_size, gradient_checkpointing) of the recipe. The fields come with the
    micro-batching change (branch h-recipe); until then: None (the whole per-worker batch in one
    pass) and False."""
    fields = recipe.model_dump()
    return fields.get("micro_batch_size"), bool(fields.get("gradient_checkpointing", False))


def plan_spec(spec, bandwidth: float = bill.BANDWIDTH, measured: tuple[MeasuredMFU, ...] | None = None) -> list[ModelPlan]:
    """Budget of every model of a validated SweepSpec (reads configs and data; see module doc),
    checkpoints priced at `bandwidth` bytes/s to storage, training at the MFU of `measured` (default:
    `measured_rows()`)."""
    from cliffsweep.archs import arch_for
    from cliffsweep.evals.tasks import build_task
    from cliffsweep.sweep.grid import expand_grid
    from cliffsweep.trainables import data
    from cliffsweep.trainables.methods import build_method
    from cliffsweep.trainables.schedule import eval_steps

    r, res, ev = spec.recipe, spec.resources, spec.eval
    measured = measured_rows() if measured is None else measured
    micro, grad_ckpt = recipe_extras(r)
    b = Batching.of(r.batch_size, res.workers_per_trial, micro)
    learn_t, retain_t = spec.tasks.learn, spec.tasks.retain[0]
    built = [build_task(s.name, s.params) for s in (learn_t, *spec.tasks.retain)]
    per_eval = eval_load([(t.params.n_eval, t.sampling.max_tokens) for t in built])
    grid = expand_grid(spec)
    gpus_per_trial = res.workers_per_trial * max(1.0, res.gpus_per_worker)
    plans = []
    for m in spec.models:
        plan = ModelPlan(m.name, arch_for(m.path), dtype=m.dtype)
        plan.mfu, plan.mfu_source = measured_mfu(plan.arch.params, m.dtype, r.precision, r.master_weights,
                                                 r.kernels, measured)
        arch, prec = plan.arch, precision(m.dtype, res.gpus_per_worker > 0, r.master_weights)
        learn = lengths_for(m.path, learn_t.name, learn_t.params, plan.notes)
        prompts = eval_prompt_tokens(m.path, built, plan.notes)
        tput = bill.eval_throughput(arch.params)
        plan.eval_source = tput.source
        per_eval_s = bill.eval_seconds(prompts, per_eval[1], tput)
        retain: Lengths | None = None
        stats_done: set[str] = set()
        for t in (t for t in grid if t.model == m.name):
            method = build_method(t.method, t.method_params)
            needs = STATS_PASSES.get(t.method, ("none", 0))[0] == "retain" or method.retain_fraction > 0
            if needs and retain is None:
                retain = lengths_for(m.path, retain_t.name, retain_t.params, plan.notes)
            per_epoch = data.steps_per_epoch(learn.n, r.batch_size, method.retain_fraction)
            points = len(eval_steps(per_epoch * t.epochs, per_epoch, ev.points_per_trial, ev.every_epoch))
            rows = data.replay_rows(r.batch_size, method.retain_fraction)
            cost = trial_cost(arch, t.method, t.epochs, per_epoch, points, b, learn, retain, rows,
                              r.max_seq_len, grad_ckpt)
            rank = t.method_params.get("rank", 16) if t.method == "lora" else None
            ck = checkpoint_bytes(arch, t.method, t.optimizer, m.dtype, rank, res.strategy)
            plan.trials += 1
            plan.tokens += cost.tokens
            plan.train_flops += cost.flops
            plan.generations += points * per_eval[0]
            plan.gen_tokens += points * per_eval[1]
            plan.prompt_tokens += points * prompts
            plan.eval_s += points * per_eval_s
            # the trial's wall time of training on its GPUs at the H100's pace (the bill's unit)
            train_s = gpu_hours(cost.flops, GPUS[1], plan.mfu) * 3600 / gpus_per_trial
            ckb = bill.checkpoint_bill(points, train_s, ck.export, ck.train_state, spec.resume_every_s,
                                       bandwidth, spec.async_checkpoints)
            plan.ckpt_written += ckb.written
            plan.ckpt_blocked_s += ckb.blocked_s * gpus_per_trial
            plan.setup_s += bill.setup_seconds(arch.params * BYTES[m.dtype], bandwidth) * gpus_per_trial
            states = sum(bill.state_points(points, train_s, spec.resume_every_s)) if ck.train_state else 0
            plan.ckpt_kept += ck.kept(points, spec.keep_checkpoints, states)
            plan.ckpt_running = max(plan.ckpt_running, ck.running(points, states))
            plan.memory[t.series] = train_memory(arch, t.method, t.method_params, t.optimizer, prec, res.strategy,
                                                 res.workers_per_trial, b.micro_rows, r.max_seq_len, grad_ckpt)
            key = f"{t.method}:{method.stats_inputs()}"
            if method.stats_inputs() is not None:
                plan.stats_memory[t.series] = stats_memory(arch, t.method, t.method_params, prec, b.micro_rows,
                                                           r.max_seq_len, grad_ckpt)
            if method.stats_inputs() is not None and key not in stats_done:
                stats_done.add(key)
                sf = stats_flops(arch, t.method, r.stats_examples, learn, retain, r.max_seq_len)
                plan.stats_flops += sf
                plan.stats_s[key] = gpu_hours(sf, GPUS[1], plan.mfu) * 3600
            plan.points.append(bill.PointCost(
                t.trial_id, m.name, gpus_per_trial, bill.setup_seconds(arch.params * BYTES[m.dtype], bandwidth),
                train_s, ckb.blocked_s, points, per_eval_s, key if method.stats_inputs() is not None else None))
        plan.generations += per_eval[0]  # the base model, once
        plan.gen_tokens += per_eval[1]
        plan.prompt_tokens += prompts
        plan.eval_s += per_eval_s
        plan.base_eval_s = per_eval_s
        plans.append(plan)
    return plans


def eval_prompt_tokens(model_path: str, tasks, notes: list[str]) -> float:
    """Prompt tokens of one evaluation over `tasks` (built eval tasks): n_eval prompts each,
    a prompt as long as the task's mean training example times (1 + its few-shot examples)."""
    total = 0.0
    for t in tasks:
        shots = int(t.params.model_dump().get("num_fewshot") or 0)
        if t.params.model_dump().get("protocol") == "zeroshot":
            shots = 0
        lengths = lengths_for(model_path, t.name, t.params.model_dump(), [])
        total += t.params.n_eval * (1 + shots) * lengths.mean(1 << 20)
    return total


def lengths_for(model_path: str, task: str, params: dict, notes: list[str]) -> Lengths:
    """Exact token lengths when the data and the model's tokenizer are local, else the packaged
    proxy (tokenstats.py); the choice is noted in the plan."""
    from cliffsweep import tokenstats
    from cliffsweep.archs import local_folder

    folder = local_folder(model_path)
    if folder is not None and tokenstats.task_is_local(task, params):
        from transformers import AutoTokenizer

        got = tokenstats.measure(AutoTokenizer.from_pretrained(folder), task, params)
        notes.append(f"{task}: {got.n} training examples, exact lengths (the model's tokenizer, local data)")
        return got
    got = tokenstats.packaged(task, params)
    why = "hub model, offline" if folder is None else "data not local"
    notes.append(f"{task}: {got.n} training examples, lengths from the packaged proxy ({why}): {got.source}")
    return got
