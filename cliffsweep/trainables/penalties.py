"""Plain functions shared by the parameter-space methods (EWC, MAS, L2-SP, RPSFT, WiSE-FT, SIB):
snapshots of theta*, the importance-weighted quadratic anchor, and per-batch gradient statistics.

The anchor is the penalty of the cliff paper's Eq. (3) (000 App. D) without its lambda/2:
    sum_p Omega_p (theta_p - theta*_p)^2
(Omega = 1 gives L2-SP). Callers apply their own lambda.
"""

from __future__ import annotations

from collections.abc import Callable

import torch
from torch import nn

from cliffsweep.trainables.losses import response_ce, token_norm, unwrap

Batch = dict[str, torch.Tensor]


def trainable(model: nn.Module) -> dict[str, nn.Parameter]:
    """Named parameters that receive gradients, on the unwrapped module (names match stats keys)."""
    return {n: p for n, p in unwrap(model).named_parameters() if p.requires_grad}


def snapshot(params: dict[str, torch.Tensor], device: torch.device | str | None = None) -> dict[str, torch.Tensor]:
    """theta*: detached copies (no grad) of `params`, on `device` (default: where each lives)."""
    return {n: p.detach().to(device if device is not None else p.device, copy=True) for n, p in params.items()}


def follow(tensors: dict[str, torch.Tensor], params: dict[str, torch.Tensor]) -> None:
    """Move method-held tensors (theta*, importances, bases) onto their parameter's device, in
    place: prepare() runs before the trainer moves the model to the accelerator."""
    for name, t in tensors.items():
        device = params[name].device
        if t.device != device:
            tensors[name] = t.to(device)


def to_device(batch: Batch, device: torch.device) -> Batch:
    return {k: v.to(device) for k, v in batch.items()}


def batch_ce(model: nn.Module, batch: Batch, n_tokens: float | None = None) -> torch.Tensor:
    """Response-token CE of one batch (the retain loss L(B) whose gradients SIB and EWC use): a
    sum over its response tokens divided by `n_tokens` (None: its own count; a micro-batch of B
    passes B's count, so that the micro-batches' gradients add up to L(B)'s), through the
    model's head in chunks (never the whole batch's full-vocabulary logits)."""
    ce, mask = response_ce(model, batch)
    return ce.sum() / token_norm(mask, n_tokens)


def response_count(batch: Batch) -> int:
    """Response tokens of a batch: the ones `batch_ce` averages over."""
    return int((batch["labels"][:, 1:] != -100).sum())


def micro_batches(batch: Batch, rows: int | None) -> list[Batch]:
    """`batch` in row slices of at most `rows` (None: the whole batch)."""
    n = batch["input_ids"].shape[0]
    rows = rows or n
    return [{k: v[i:i + rows] for k, v in batch.items()} for i in range(0, n, rows)]


def require(stats: dict[str, torch.Tensor], keys: list[str], method: str) -> None:
    """Fail loudly when statistics do not match the model (e.g. computed for another model)."""
    missing = [k for k in keys if k not in stats]
    if missing:
        raise KeyError(
            f"{method}: statistics lack {len(missing)} of {len(keys)} expected entries "
            f"(first: {missing[:3]}); were they computed on this model?"
        )


class _Quadratic(torch.autograd.Function):
    """sum Omega (p - a)^2 in fp32 with the closed-form backward 2 Omega (p - a).

    Why a custom Function: plain autograd would keep every (p - a) difference alive until
    backward, a full extra copy of the model; here backward recomputes it from p, a, Omega
    (tensors that exist anyway)."""

    @staticmethod
    def forward(ctx, p, anchor, omega):
        diff = (p.detach() - anchor).float()
        ctx.save_for_backward(p, anchor, omega)
        weighted = diff * diff if omega is None else omega.float() * diff * diff
        return weighted.sum()

    @staticmethod
    def backward(ctx, grad_out):
        p, anchor, omega = ctx.saved_tensors
        g = 2 * (p.detach() - anchor).float()
        if omega is not None:
            g = g * omega.float()
        return (grad_out * g).to(p.dtype), None, None


def quadratic_penalty(
    params: dict[str, torch.Tensor],
    anchor: dict[str, torch.Tensor],
    importance: dict[str, torch.Tensor] | None = None,
) -> torch.Tensor:
    """sum_p Omega_p (theta_p - theta*_p)^2 over the names in `anchor` (fp32 scalar).
    importance None means Omega = 1 (L2-SP)."""
    total = None
    for name, a in anchor.items():
        omega = None if importance is None else importance[name]
        term = _Quadratic.apply(params[name], a, omega)
        total = term if total is None else total + term
    if total is None:
        raise ValueError("quadratic_penalty: empty anchor (no parameters to regularise)")
    return total


def importance_anchor(
    model: nn.Module, stats: dict[str, torch.Tensor], method: str
) -> tuple[dict[str, torch.Tensor], dict[str, torch.Tensor]]:
    """(theta*, Omega) for Eq. (3) over every trainable parameter; Omega read from `stats`."""
    params = trainable(model)
    require(stats, list(params), method)
    return snapshot(params), {n: stats[n].to(p.device, p.dtype) for n, p in params.items()}


def anchor_penalty(
    model: nn.Module, anchor: dict[str, torch.Tensor], importance: dict[str, torch.Tensor] | None = None
) -> torch.Tensor:
    """quadratic_penalty on the (unwrapped) model's current parameters, after moving the held
    tensors to wherever the trainer has put the model."""
    params = trainable(model)
    follow(anchor, params)
    if importance is not None:
        follow(importance, params)
    return quadratic_penalty(params, anchor, importance)


def mean_grad_stat(
    model: nn.Module,
    batches: list[Batch],
    objective: Callable[[nn.Module, Batch, float], torch.Tensor],
    transform: Callable[[torch.Tensor], torch.Tensor],
    count: Callable[[Batch], float] = response_count,
    micro_batch_size: int | None = None,
) -> dict[str, torch.Tensor]:
    """E_B[transform(grad_p objective(B))] for every trainable parameter (accumulated in fp32,
    returned in each parameter's dtype). Each batch B runs as micro-batches of at most
    `micro_batch_size` rows whose gradients add up to B's: `objective(model, micro, n)` is a sum
    over the micro-batch's tokens divided by n = `count(B)` (issue 15: statistics in the
    training step's memory, not a whole batch's activations). Runs in eval mode (no dropout),
    with activation checkpointing if the model has it on, and leaves no gradients behind."""
    from cliffsweep.trainables.microbatch import stats_mode

    if not batches:
        raise ValueError("mean_grad_stat: no batches (the retain set is empty?)")
    params = trainable(model)
    device = next(iter(params.values())).device
    acc = {n: torch.zeros_like(p, dtype=torch.float32) for n, p in params.items()}
    with stats_mode(model):
        for b in batches:
            model.zero_grad(set_to_none=True)
            n_tokens = count(b)
            for micro in micro_batches(b, micro_batch_size):
                objective(model, to_device(micro, device), n_tokens).backward()
            for n, p in params.items():
                if p.grad is not None:
                    acc[n] += transform(p.grad.float())
        model.zero_grad(set_to_none=True)
    return {n: (a / len(batches)).to(params[n].dtype) for n, a in acc.items()}


def normalize_mean(importance: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
    """Rescale importances so their mean over every covered entry is 1 (our default for EWC and
    MAS: raw Fisher/MAS values span orders of magnitude across models, so without this a lambda
    would not transfer between models; with it Omega = 1 everywhere is exactly L2-SP's scale)."""
    total = sum(float(v.float().sum()) for v in importance.values())
    count = sum(v.numel() for v in importance.values())
    if total <= 0:
        raise ValueError("importances are all zero: no gradient reached the parameters")
    scale = count / total
    return {n: (v.float() * scale).to(v.dtype) for n, v in importance.items()}
