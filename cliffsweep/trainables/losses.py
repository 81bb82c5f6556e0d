"""Plain loss functions shared by methods. Labels use -100 for masked (prompt/pad) tokens."""

from __future__ import annotations

import torch
import torch.nn.functional as F

IGNORE = -100


def shift(logits: torch.Tensor, labels: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """Align next-token logits with their targets: logits[:, t] predicts labels[:, t+1]."""
    return logits[:, :-1, :], labels[:, 1:]


def token_ce(logits: torch.Tensor, labels: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """Per-token cross-entropy (B, T-1) in fp32 and the mask of tokens that count."""
    lg, lb = shift(logits, labels)
    mask = lb != IGNORE
    ce = F.cross_entropy(lg.float().transpose(1, 2), lb.clamp_min(0), reduction="none")
    return ce * mask, mask


def masked_token_ce(logits: torch.Tensor, labels: torch.Tensor) -> torch.Tensor:
    """Mean CE over response tokens of the batch (the SFT objective of 000 App. B)."""
    ce, mask = token_ce(logits, labels)
    return ce.sum() / mask.sum().clamp_min(1)


def sequence_mean_ce(logits: torch.Tensor, labels: torch.Tensor) -> torch.Tensor:
    """Mean response-token CE of each sequence (B,)."""
    ce, mask = token_ce(logits, labels)
    return ce.sum(1) / mask.sum(1).clamp_min(1)


def unwrap(model: torch.nn.Module) -> torch.nn.Module:
    """The module under a DDP wrapper (FSDP2 modules are not wrapped)."""
    return model.module if isinstance(model, torch.nn.parallel.DistributedDataParallel) else model


def token_kl(logits: torch.Tensor, base_logits: torch.Tensor, labels: torch.Tensor) -> torch.Tensor:
    """KL(pi_theta || pi_base) over the full vocabulary at each response position (B, T-1),
    zero on masked positions (002's KL anchor, the forward direction of 003 App. C.4)."""
    lg, lb = shift(logits, labels)
    base = shift(base_logits, labels)[0]
    logp = F.log_softmax(lg.float(), dim=-1)
    logq = F.log_softmax(base.float(), dim=-1)
    kl = (logp.exp() * (logp - logq)).sum(-1)
    return kl * (lb != IGNORE)


def weighted_token_mean(ce: torch.Tensor, mask: torch.Tensor, weights: torch.Tensor) -> torch.Tensor:
    """sum_i w_i l_i / n_tokens: a reweighted SFT loss that equals `masked_token_ce` when all
    weights are 1 (so reweighting methods keep the lr scale of plain SFT). `weights` broadcasts
    against the (B, T-1) token losses: (B, T-1) per token or (B, 1) per sequence."""
    return (weights * ce * mask).sum() / mask.sum().clamp_min(1)


def frozen_copy(model: torch.nn.Module) -> torch.nn.Module:
    """A frozen base-model copy (eval mode, no grads) for methods that compare to pi_base.
    Kept outside the trained module so it is neither optimised, DDP-synced nor saved."""
    import copy

    base = copy.deepcopy(unwrap(model)).eval()
    for p in base.parameters():
        p.requires_grad_(False)
    return base


def follow_device(module: torch.nn.Module, device: torch.device) -> None:
    """Move a method-held module (e.g. a frozen base) to the batch's device the first time it
    differs: methods build such copies in prepare(), before the trainer moves the model."""
    if next(module.parameters()).device != device:
        module.to(device)


def frozen_logits(base: torch.nn.Module, batch: dict[str, torch.Tensor]) -> torch.Tensor:
    """Logits of a frozen copy (frozen_copy) on a training batch, without autograd."""
    follow_device(base, batch["input_ids"].device)
    with torch.no_grad():
        return base(input_ids=batch["input_ids"], attention_mask=batch["attention_mask"]).logits
