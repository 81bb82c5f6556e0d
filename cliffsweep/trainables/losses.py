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
