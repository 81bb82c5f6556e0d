"""What shares a GPU, and whether it fits (issue 39 part 3).

Each process that holds a fraction of a GPU is capped at that fraction of the GPU's memory (or at
its explicit `gpu_memory_gb`: sweep/gpushare.py). So a packing fits when every process's peak
fits its own cap, and the caps of the processes Ray may place on one GPU add up to at most the
GPU. This module prices both sides per model and series:

- a Train worker: planner/costs.train_memory (weights, gradients, optimizer state, the method's
  copies, activations at the micro-batch and max_seq_len, the chunked loss), plus a CUDA context;
- an evaluator: its weights, plus for vLLM the KV cache of one max_model_len sequence (vLLM
  refuses to start with less) and the prompt log-probabilities over one such sequence, for hf
  the scoring pass (evals/backends/hf_backend.py: SCORE_TOKEN_BUDGET tokens through the
  decoder, LOGIT_CHUNK positions through the head), plus a CUDA context.

Estimates from the architecture, as the rest of `plan` (no allocator fragmentation beyond the
context allowance). `validate` refuses a packing in which a process cannot fit its cap, in one
sentence per process kind with the fix; `plan` prints the table.
"""

from __future__ import annotations

from dataclasses import dataclass

from cliffsweep.planner.archs import Arch, UnknownArch, arch_for
from cliffsweep.planner.costs import BYTES, Batching, precision, train_memory
from cliffsweep.planner.mfu import GB, GPU, GPUS
from cliffsweep.sweep.spec import DEFAULT_MAX_MODEL_LEN
from cliffsweep.sweep.gpushare import LOGIT_CHUNK, SCORE_TOKEN_BUDGET, GpuShare, evaluator_share, trainer_share

CUDA_CONTEXT_GB = 0.6
"""Per process: the CUDA context and the caching allocator's slack (measured about 0.5 GB for a
process that has run one kernel; docs/gpu.md)."""
DEFAULT_GPU = "H100-SXM"


@dataclass(frozen=True)
class Need:
    """One kind of process on a shared GPU: what it needs at its peak, and its cap."""

    role: str
    label: str
    need: float
    cap: float
    per_gpu: int


def gpu_named(name: str | None) -> GPU:
    by_name = {g.name: g for g in GPUS}
    if (name or DEFAULT_GPU) not in by_name:
        raise ValueError(f"unknown GPU {name!r}; known: {sorted(by_name)}")
    return by_name[name or DEFAULT_GPU]


def evaluator_bytes(arch: Arch, dtype: str, backend: str, max_model_len: int) -> float:
    """Peak bytes of one evaluator of `arch` (module docstring)."""
    b = BYTES.get(dtype, 4)
    weights = arch.params * b
    if backend == "vllm":
        head_dim = arch.head_dim or arch.hidden // arch.heads
        kv = 2 * arch.layers * arch.kv_heads * head_dim * b * max_model_len
        return weights + kv + max_model_len * arch.vocab * 4 + CUDA_CONTEXT_GB * GB
    tokens = SCORE_TOKEN_BUDGET
    activations = tokens * (4 * arch.hidden + 2 * arch.intermediate) * b  # one layer's, in flight
    return weights + activations + LOGIT_CHUNK * arch.vocab * 4 * 2 + CUDA_CONTEXT_GB * GB


def per_gpu(gpus: float, processes: int) -> int:
    """How many of `processes` holding `gpus` each Ray may place on one GPU."""
    return max(1, min(processes, int(1 / gpus + 1e-9))) if 0 < gpus < 1 else 1


def needs(spec, gpu: GPU) -> list[Need]:
    """Each model's evaluators and each series' Train workers, against their caps on `gpu`."""
    from cliffsweep.sweep.grid import expand_grid

    r, e = spec.resources, spec.eval
    total = gpu.memory_gb
    t_share, e_share = trainer_share(r), evaluator_share(e)
    out: list[Need] = []
    grid = expand_grid(spec)
    trainers = (r.max_concurrent_trials or len(grid)) * r.workers_per_trial
    evaluators = e.evaluators_per_model * len(spec.models)
    b = Batching.of(spec.recipe.batch_size, r.workers_per_trial, spec.recipe.micro_batch_size)
    for m in spec.models:
        try:
            arch = arch_for(m.path)
        except UnknownArch:
            continue  # `plan` names it; validate checks what it can size
        if e.gpus_per_evaluator > 0:
            need = evaluator_bytes(arch, m.dtype, e.backend, e.max_model_len or min(arch.max_positions, DEFAULT_MAX_MODEL_LEN))
            out.append(Need("evaluator", m.name, need, _cap(e_share, total), per_gpu(e.gpus_per_evaluator, evaluators)))
        if r.gpus_per_worker <= 0:
            continue
        seen = set()
        for t in grid:
            if t.model != m.name or t.series in seen:
                continue
            seen.add(t.series)
            prec = precision(m.dtype, True, spec.recipe.master_weights)
            mem = train_memory(arch, t.method, t.method_params, t.optimizer, prec, r.strategy, r.workers_per_trial,
                               b.micro_rows, spec.recipe.max_seq_len, spec.recipe.gradient_checkpointing)
            out.append(Need("Train worker", f"{m.name} / {t.series}", mem.total + CUDA_CONTEXT_GB * GB,
                            _cap(t_share, total), per_gpu(r.gpus_per_worker, trainers)))
    return out


def _cap(share: GpuShare, total_gb: float) -> float:
    frac = share.fraction(total_gb)
    return (frac if frac is not None else 1.0) * total_gb * GB


def packing_problems(spec, gpu_name: str | None = None) -> list[str]:
    """What `validate` refuses: a process kind that cannot fit its cap, one sentence each, with
    the share that would fit; explicit budgets that overfill a GPU."""
    r, e = spec.resources, spec.eval
    if r.gpus_per_worker <= 0 and e.gpus_per_evaluator <= 0:
        return []
    gpu = gpu_named(gpu_name or r.gpu)
    out = []
    for n in needs(spec, gpu):
        if n.need <= n.cap:
            continue
        trainer = n.role == "Train worker"
        field = "resources.gpus_per_worker" if trainer else "eval.gpus_per_evaluator"
        less = "recipe.micro_batch_size, recipe.gradient_checkpointing" if trainer else "eval.max_model_len"
        fits = n.need / (gpu.memory_gb * GB)
        out.append(f"{field}: a {n.role} of {n.label} needs about {n.need / GB:.1f} GB at its peak but its share of "
                   f"the {gpu.name} ({gpu.memory_gb:g} GB) is {n.cap / GB:.1f} GB; give it a share of at least "
                   f"{fits:.2f} (fewer processes per GPU), or need less ({less})")
    budgets = [(r.gpu_memory_gb, r.gpus_per_worker, "Train workers"), (e.gpu_memory_gb, e.gpus_per_evaluator, "evaluators")]
    for gb, gpus, who in budgets:
        if gb is not None and 0 < gpus < 1 and int(1 / gpus + 1e-9) * gb > gpu.memory_gb:
            out.append(f"{'resources' if who.startswith('Train') else 'eval'}.gpu_memory_gb: {int(1 / gpus + 1e-9)} "
                       f"{who} at {gpus:g} GPU each fit one {gpu.name}, and {gb:g} GB each is more than its "
                       f"{gpu.memory_gb:g} GB")
    return out


def shares_a_gpu(spec) -> bool:
    """Whether any process of `spec` holds a fraction of a GPU (others may share it)."""
    return any(0 < g < 1 for g in (spec.resources.gpus_per_worker, spec.eval.gpus_per_evaluator))


def packing_text(spec, gpu_name: str | None = None) -> list[str]:
    """`plan`'s table when processes share a GPU: per process kind, how many share one GPU, its
    cap and its peak (nothing when every process has whole GPUs: nothing to pack)."""
    r = spec.resources
    if not shares_a_gpu(spec):
        return []
    gpu = gpu_named(gpu_name or r.gpu)
    rows = [f"  {n.role:12s} {n.label:40s} x{n.per_gpu:<2d} cap {n.cap / GB:6.1f} GB  peak {n.need / GB:6.1f} GB"
            f"{'' if n.need <= n.cap else '  DOES NOT FIT'}" for n in needs(spec, gpu)]
    return ["", f"What shares one GPU ({gpu.name}, {gpu.memory_gb:g} GB; each process capped at its share, "
                f"sweep/gpushare.py; peaks estimated with a {CUDA_CONTEXT_GB} GB CUDA context each):", *rows]
