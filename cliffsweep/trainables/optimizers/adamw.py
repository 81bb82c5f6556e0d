"""AdamW, weight decay 0.01: the finetuning optimizer of the cliff paper (000 App. B) and the
pretraining optimizer of its backbones (which 001 says to keep for finetuning)."""

from __future__ import annotations

import torch


def build(model: torch.nn.Module, lr: float, weight_decay: float) -> torch.optim.Optimizer:
    params = [p for p in model.parameters() if p.requires_grad]
    return torch.optim.AdamW(params, lr=lr, weight_decay=weight_decay, betas=(0.9, 0.999), eps=1e-8)
