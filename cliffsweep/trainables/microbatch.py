"""One optimizer step's gradients on one worker, sized to fit: micro-batches with gradient
accumulation, activation checkpointing and bf16 autocast (issue 9, "a recipe that fits real
sizes"; the recipe itself is 000 App. B).

A step's rows (this worker's share of the global batch, `data.epoch_steps`) run as micro-batches
of at most `recipe.micro_batch_size` rows, one forward and backward each; `.grad` sums them and
the optimizer steps once. The sum equals the whole batch's gradient because

- every data term is a sum over response tokens divided by one number for the whole step: the
  global batch's response-token count over the number of workers (DDP and FSDP average the
  workers' gradients, so the workers' sums add up to the global batch's token mean);
- penalty terms (EWC, MAS, L2-SP, RPSFT) depend only on the parameters: added once, to the last
  micro-batch's loss;
- whole-batch statistics are taken before the first micro-batch (`Method.begin_step`: TALR's tau);
- gradients are synced across workers on the last micro-batch only (`parallel.grad_sync`); the
  others accumulate locally, without communication.
"""

from __future__ import annotations

from contextlib import contextmanager, nullcontext
from typing import Protocol

import torch
from torch import nn

from cliffsweep.trainables import parallel


def autocast_dtype(param_dtype: torch.dtype, device_type: str) -> torch.dtype | None:
    """bf16 autocast for an fp32 model on a GPU (mixed precision: fp32 weights, gradients and
    optimizer state, bf16 matmuls and activations); None otherwise. A model loaded in bf16/fp16
    already computes in its dtype, and on the CPU nothing changes: the toy world and every test
    keep their fp32 numbers, and CPU bf16 matmuls are not faster on most CPUs."""
    return torch.bfloat16 if device_type == "cuda" and param_dtype == torch.float32 else None


def enable_checkpointing(model: nn.Module) -> None:
    """Activation checkpointing of every decoder layer (transformers' gradient checkpointing):
    backward recomputes a layer's activations instead of keeping them from the forward.
    Non-reentrant, which needs no input gradients (LoRA's frozen embeddings) and composes with
    DDP's no_sync and FSDP2. Call before the DDP/FSDP wrap, after the method's prepare()."""
    model.gradient_checkpointing_enable(gradient_checkpointing_kwargs={"use_reentrant": False})


@contextmanager
def stats_mode(model: nn.Module):
    """Eval mode (no dropout) for once-per-model statistics, keeping activation checkpointing
    where the recipe turned it on: transformers checkpoints a decoder layer only while that
    layer is in training mode, so those layers alone are flagged as training. Nothing inside
    them reads the flag but the checkpointing (attention dropout reads its own module's)."""
    from transformers.modeling_layers import GradientCheckpointingLayer

    was_training = model.training
    model.eval()
    layers = [m for m in model.modules() if isinstance(m, GradientCheckpointingLayer) and m.gradient_checkpointing]
    for m in layers:
        m.training = True
    try:
        yield model
    finally:
        model.train(was_training)


class StepHooks(Protocol):
    """What a step needs of a method (trainables/methods/base.py `Method` has it): declared here
    so that this module does not import the methods, which use its `stats_mode`."""

    def begin_step(self, model: nn.Module, micro_batches: list[dict[str, torch.Tensor]]) -> None: ...

    def data_loss(self, model: nn.Module, batch: dict[str, torch.Tensor],
                  n_tokens: float | None = None) -> tuple[torch.Tensor, dict[str, float]]: ...

    def penalty_term(self, model: nn.Module) -> tuple[torch.Tensor, float] | None: ...


def accumulate(model: nn.Module, method: StepHooks, micro: list[dict[str, torch.Tensor]], n_tokens: int,
               world: int, amp: torch.dtype | None = None, logs: dict[str, float] | None = None) -> torch.Tensor:
    """Forward and backward over one step's micro-batches, leaving the step's gradient in .grad
    (synced across workers). Returns the step's loss on this worker (detached): the whole batch's
    loss with one worker; with several, their mean is. `micro`: on the model's device. `logs`,
    when given, receives the method's logged terms (the micro-batches' mean of each, and the
    penalty's raw value): the training curve's `terms` (steplog.py)."""
    device = micro[0]["input_ids"].device
    cast = (lambda: torch.autocast(device.type, dtype=amp)) if amp is not None else nullcontext
    norm = max(n_tokens, 1) / world
    with cast():
        method.begin_step(model, micro)
    total = torch.zeros((), device=device)
    for j, batch in enumerate(micro):
        last = j == len(micro) - 1
        with parallel.grad_sync(model, sync=last):
            with cast():
                loss, terms = method.data_loss(model, batch, norm)
            if logs is not None:
                for k, v in terms.items():
                    logs[k] = logs.get(k, 0.0) + float(v) / len(micro)
            if last:  # outside autocast: penalties are computed in fp32
                term = method.penalty_term(model)
                if term is not None:
                    loss = loss + term[0]
                    if logs is not None:
                        logs["penalty"] = float(term[1])
            loss.backward()
        total += loss.detach()
    return total
