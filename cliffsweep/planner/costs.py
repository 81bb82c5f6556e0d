"""What one trial costs, as pure functions of an architecture (archs.py), token lengths
(tokenstats.py), the recipe's numbers and the method's declared costs (its own file:
trainables/methods/costs.py): training FLOPs, checkpoint bytes, and the peak memory of one
training GPU and of a method's statistics pass.

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

import math
from dataclasses import dataclass, field

from cliffsweep.planner.archs import Arch
from cliffsweep.planner.tokenstats import Lengths
from cliffsweep.trainables.methods import method_class
from cliffsweep.trainables.methods.costs import Costs


def costs_of(method: str) -> Costs:
    return method_class(method).costs


BYTES = {"float32": 4, "bfloat16": 2, "float16": 2}

# A method's own costs (extra weight copies, FLOPs, statistics pass, state) are declared in its
# file (trainables/methods/costs.py), an optimizer's state in its own (trainables/optimizers/
# costs.py); both are read here through the registries.
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
    return (6 + costs_of(method).extra_flops + (2 if grad_ckpt else 0)) * arch.matmul_params


@dataclass(frozen=True)
class TrialCost:
    steps: int
    tokens: float
    """Real (unpadded) tokens trained on."""
    flops: float
    eval_points: int


def trial_cost(arch: Arch, method: str, steps: int, eval_points: int, b: Batching,
               learn: Lengths, retain: Lengths | None, replay_rows: int, cap: int, grad_ckpt: bool) -> TrialCost:
    """`steps` optimizer steps (epochs x steps per epoch, or a step budget: schedule.total_steps)."""
    learn_rows = b.workers * b.rows_per_worker - replay_rows
    real = learn_rows * learn.mean(cap) + (replay_rows * retain.mean(cap) if replay_rows else 0.0)
    padded = padded_tokens_per_step(b, learn, cap)  # replay rows padded like learn rows (approx.)
    return TrialCost(steps, steps * real, steps * padded * flops_per_token(arch, method, grad_ckpt), eval_points)


def stats_flops(arch: Arch, method: str, stats_examples: int, learn: Lengths, retain: Lengths | None, cap: int) -> float:
    c = costs_of(method)
    data, per = c.stats_data, c.stats_flops
    if data == "retain" and retain is not None:
        return per * arch.matmul_params * min(stats_examples, retain.n) * retain.mean(cap)
    if data == "learn":
        return per * arch.matmul_params * learn.n * learn.mean(cap)
    return 0.0


# --- checkpoints -----------------------------------------------------------------------------
def optimizer_state_elements(arch: Arch, optimizer: str, trainable: int, lora: bool) -> float:
    """The optimizer's state, in elements, as its file declares it (optimizers/costs.py)."""
    from cliffsweep.trainables.optimizers import optimizer_costs

    hidden_2d = arch.layers * sum(a * b for a, b in arch.layer_linears().values())
    return optimizer_costs(optimizer).state_elements(trainable, hidden_2d, lora)


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


def checkpoint_bytes(arch: Arch, method: str, method_params: dict, optimizer: str, dtype: str,
                     strategy: str) -> CheckpointBytes:
    b = BYTES[dtype]
    adapter = method_class(method).trainable_params(arch, method_params)  # None: every weight trains
    lora = adapter is not None
    trainable = adapter if lora else arch.params
    export = trainable * b if lora else arch.params * b
    if strategy == "fsdp":
        return CheckpointBytes(export, 0.0)
    model_state = arch.params * b + (trainable * b if lora else 0)
    optim = optimizer_state_elements(arch, optimizer, trainable, lora) * b
    c = costs_of(method)
    method_state = arch.params * (c.state_weight_copies * b + c.state_bytes_per_weight)
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
    adapter = method_class(method).trainable_params(arch, method_params)  # None: every weight trains
    lora = adapter is not None
    trainable = adapter if lora else arch.params
    parts = {
        "weights": arch.params * prec.weight / shard + (trainable * prec.weight if lora else 0),
        "grads": trainable * prec.grad / shard,
        "optimizer": optimizer_state_elements(arch, optimizer, trainable, lora) * prec.moment / shard,
    }
    if prec.master:
        parts["master_weights"] = trainable * prec.master / shard
    c = costs_of(method)
    parts["method"] = (c.weight_copies * arch.params * prec.weight
                       + method_class(method).extra_fp32_elements(arch, method_params) * 4)
    if strategy == "fsdp":  # one layer gathered, one prefetched
        parts["fsdp_gather"] = 2 * arch.layer_params() * prec.weight
    tokens = micro_rows * seq
    per_layer = activation_elements_per_token_layer(arch)
    saved = arch.layers * arch.hidden + per_layer if grad_ckpt else arch.layers * per_layer
    parts["activations"] = tokens * saved * prec.act
    chunks = 3 * c.loss_heads
    parts["loss"] = min(LOSS_CHUNK_ELEMENTS, tokens * arch.vocab) * chunks * 4
    return Memory(parts)


def stats_memory(arch: Arch, method: str, method_params: dict, prec: Precision, micro_rows: int, seq: int,
                 grad_ckpt: bool) -> Memory:
    """Peak bytes of a method's once-per-model statistics task (trainables/stats.py), which
    runs on one GPU in the recipe's micro-batches with its checkpointing (issue 15): the whole
    model, plus per method: gradients and an fp32 accumulator (ewc, mas), gradients (sib: the
    alphas come from them), nothing trained (flow: a forward without autograd), an SVD at a time
    and the bases (rpsft)."""
    c = costs_of(method)
    kind = c.stats_data
    parts = {"weights": arch.params * prec.weight}
    tokens = micro_rows * seq
    per_layer = activation_elements_per_token_layer(arch)
    chunk = min(LOSS_CHUNK_ELEMENTS, tokens * arch.vocab) * 3 * 4
    if kind == "retain":  # forward + backward of the retain loss (MAS: of the logits' norm)
        parts["grads"] = arch.params * prec.grad
        if c.stats_accumulator:
            parts["accumulator"] = arch.params * 4
        saved = arch.layers * arch.hidden + per_layer if grad_ckpt else arch.layers * per_layer
        parts["activations"] = tokens * saved * prec.act
        parts["loss"] = chunk
    elif kind == "learn":  # flow: per-sequence CE, no autograd: one layer's tensors at a time
        parts["activations"] = tokens * (arch.layers * arch.hidden + per_layer) * prec.act
        parts["loss"] = chunk
    else:  # rpsft: the bases, and one weight's SVD (its fp32 copy, U, S, V) at a time
        largest = max(a * b for a, b in arch.layer_linears().values())
        parts["bases"] = method_class(method).extra_fp32_elements(arch, method_params) * 4
        parts["svd"] = 3 * largest * 4
    return Memory(parts)
