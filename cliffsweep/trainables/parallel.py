"""How a trial's model is spread over its Ray Train workers (DDP or FSDP), and how a checkpoint
is taken from it.

- `ddp`: Ray's `prepare_model`; every worker holds the whole model, rank 0 saves it.
- `fsdp`: torch FSDP2 (`fully_shard`) on each decoder layer, then on the root. Parameters keep
  their names and shapes (they become DTensors holding one shard each), so methods that only
  change the loss run unchanged. Taking a checkpoint is a collective: every rank joins the
  full-state-dict gather, rank 0 receives the weights on CPU and rebuilds an ordinary model
  (`plain_model`), which the usual export, `save_pretrained` and canary then see.

Why not Ray's `prepare_model(parallel_strategy="fsdp")`: it wraps with FSDP1, which flattens the
parameters (names and shapes vanish, so a rank-0 `save_pretrained` writes one shard of a flat
buffer, and methods that look parameters up by name find nothing) and refuses CPU workers, so
none of it could be tested here. FSDP2 runs over gloo on CPU too (tests/test_fsdp.py).

Methods declare whether they run under FSDP (`Method.fsdp_safe`); optimizers, here.

Gradient accumulation (trainables/microbatch.py) syncs gradients on a step's last micro-batch
only (`grad_sync`): DDP's `no_sync()`, FSDP2's `set_requires_gradient_sync(False)`.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from typing import TYPE_CHECKING

import torch

if TYPE_CHECKING:
    from cliffsweep.sweep.gpushare import GpuShare

FSDP_OPTIMIZERS = frozenset({"adamw"})
"""Optimizers checked to step DTensor shards as they step whole tensors (tests/test_fsdp.py).
Muon orthogonalises whole matrices and sgd normalises by a whole matrix's RMS: unchecked."""


def prepare(model: torch.nn.Module, strategy: str, mixed: bool = False) -> torch.nn.Module:
    """Place `model` on this worker's device and wrap it for data-parallel training. `mixed`
    (recipe.precision fsdp_bf16, trainables/fastpath.py): FSDP2 with bf16 compute over fp32
    weights, whatever the strategy and however many workers (one: a one-rank mesh)."""
    import ray.train.torch

    if mixed:
        return shard(model.to(ray.train.torch.get_device()), mixed=True)
    if strategy == "ddp":
        return ray.train.torch.prepare_model(model, parallel_strategy="ddp")
    if strategy != "fsdp":
        raise ValueError(f"unknown strategy {strategy!r}; valid: ['ddp', 'fsdp']")
    model = model.to(ray.train.torch.get_device())
    # One worker has nothing to shard with (Ray's DDP does not wrap a single worker either).
    return shard(model) if ray.train.get_context().get_world_size() > 1 else model


def apply_gpu_share(share: GpuShare) -> float | None:
    """Caps this process's CUDA memory to `share` (torch.cuda.set_per_process_memory_fraction:
    the caching allocator refuses past it, so a peak here cannot starve a process beside it on
    the same GPU). Returns the fraction applied; None: no CUDA, or a whole GPU of its own."""
    from cliffsweep.evals.backends.share import device_fraction

    frac = device_fraction(share)  # None without CUDA
    if frac is not None:
        torch.cuda.set_per_process_memory_fraction(frac, torch.cuda.current_device())
    return frac


@contextmanager
def grad_sync(model: torch.nn.Module, sync: bool) -> Iterator[None]:
    """Within it, backward passes sync gradients across workers only if `sync`: otherwise they
    only accumulate locally (DDP `no_sync`; FSDP2 keeps unsharded gradients and skips its
    reduce-scatter), and the next synced backward reduces the sum. One worker: no-op."""
    from torch.distributed.fsdp import FSDPModule

    if sync:
        yield
    elif isinstance(model, torch.nn.parallel.DistributedDataParallel):
        with model.no_sync():
            yield
    elif isinstance(model, FSDPModule):
        model.set_requires_gradient_sync(False)
        try:
            yield
        finally:
            model.set_requires_gradient_sync(True)
    else:
        yield


def shard(model: torch.nn.Module, mixed: bool = False) -> torch.nn.Module:
    """FSDP2 over the default process group: each decoder layer is one unit (its weights are
    gathered for its forward and freed after), the root holds the rest (embeddings, norm, head).
    The layer classes are the model's own `_no_split_modules` (transformers names its decoder
    layers there). `mixed`: each unit's gathered weights are bf16 (cast once per unit, not per
    op as under autocast), gradients are reduced in fp32 into the fp32 parameters."""
    from torch.distributed.fsdp import MixedPrecisionPolicy, fully_shard

    from cliffsweep.trainables.fastpath import decoder_layers

    policy = MixedPrecisionPolicy(param_dtype=torch.bfloat16, reduce_dtype=torch.float32) if mixed \
        else MixedPrecisionPolicy()
    for layer in decoder_layers(model):
        fully_shard(layer, mp_policy=policy)
    fully_shard(model, mp_policy=policy)
    return model


def is_sharded(model: torch.nn.Module) -> bool:
    from torch.distributed.tensor import DTensor

    return any(isinstance(p, DTensor) for p in model.parameters())


def local(t: torch.Tensor) -> torch.Tensor:
    """This worker's shard of a DTensor, or the tensor itself."""
    from torch.distributed.tensor import DTensor

    return t.to_local() if isinstance(t, DTensor) else t


def full_value(t: torch.Tensor) -> float:
    """A scalar that may be a DTensor (FSDP's gradient norm) as a float: the same on every rank."""
    from torch.distributed.tensor import DTensor

    return float(t.full_tensor() if isinstance(t, DTensor) else t)


def full_state(model: torch.nn.Module) -> dict[str, torch.Tensor]:
    """The whole model's weights on CPU, on rank 0 ({} on the others). A collective when the
    model is sharded: every rank must call it at the same point."""
    from torch.distributed.checkpoint.state_dict import StateDictOptions, get_model_state_dict

    return get_model_state_dict(model, options=StateDictOptions(full_state_dict=True, cpu_offload=True))


def plain_model(sharded: torch.nn.Module, state: dict[str, torch.Tensor]) -> torch.nn.Module:
    """An ordinary CPU copy of a sharded transformers model, with weights `state` (from
    `full_state`). Built on the meta device, so no memory or time goes to a random init."""
    from transformers import AutoModelForCausalLM

    with torch.device("meta"):
        plain = AutoModelForCausalLM.from_config(sharded.config, dtype=sharded.dtype)
    missing, unexpected = plain.load_state_dict(state, strict=False, assign=True)
    if unexpected:
        raise RuntimeError(f"full state has weights the model does not: {unexpected[:5]}")
    plain.tie_weights()  # a tied head is stored once
    # Buffers outside the state dict (rotary inverse frequencies) are not sharded: copy them.
    buffers = dict(sharded.named_buffers())
    for name, buf in plain.named_buffers():
        if buf.is_meta:
            owner, _, leaf = name.rpartition(".")
            plain.get_submodule(owner).register_buffer(leaf, buffers[name].detach().cpu(), persistent=False)
    left = [n for n, t in [*plain.named_parameters(), *plain.named_buffers()] if t.is_meta]
    if left:
        raise RuntimeError(f"the full state misses {left[:5]} (missing keys: {missing[:5]})")
    return plain
