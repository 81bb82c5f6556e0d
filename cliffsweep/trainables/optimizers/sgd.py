"""SGD with update-RMS alignment (001, App. A.3, Algorithm 3), per tensor W:

    M_t     = beta M_{t-1} + (1 - beta) G_t          (EMA momentum, beta = 0.9, 001 App. A.1)
    W_{t+1} = W_t - lr_t * 0.2 * M_t / RMS(M_t)      (RMS(M) = ||M||_F / sqrt(numel))

so every tensor's update has RMS exactly 0.2 * lr, like RMS-aligned Muon (Liu et al. 2025).
Our defaults: Algorithm 3 is written for matrices; we apply it to every trainable tensor
(embeddings and 1-D params too), and add the recipe's decoupled weight decay
W <- W - lr * wd * W (000 App. B uses wd 0.01 with AdamW; Alg. 3 has none).
"""

from __future__ import annotations

import functools

from pydantic import BaseModel, ConfigDict, Field

from cliffsweep.trainables.lazy import torch
from cliffsweep.trainables.optimizers.costs import OptimizerCosts
from cliffsweep.trainables.optimizers.muon import UPDATE_RMS, ema_momenta

costs = OptimizerCosts(states=1)  # the EMA momentum


@functools.cache
def sgd_class() -> type:
    """The optimizer, defined on first use: torch loads then (trainables/lazy.py)."""
    import torch

    class RMSAlignedSGD(torch.optim.Optimizer):
        def __init__(self, params, lr: float, weight_decay: float = 0.0, momentum: float = 0.9):
            if not 0.0 <= momentum < 1.0:
                raise ValueError(f"momentum must be in [0, 1), got {momentum}")
            super().__init__(params, dict(lr=lr, weight_decay=weight_decay, momentum=momentum))

        @torch.no_grad()
        def step(self, closure=None):
            loss = closure() if closure is not None else None
            for group in self.param_groups:
                lr, wd, beta = group["lr"], group["weight_decay"], group["momentum"]
                for p, _, m in ema_momenta(self.state, group["params"], beta):  # M = beta M + (1 - beta) G
                    rms = m.square().mean().sqrt()
                    if wd:
                        p.mul_(1 - lr * wd)
                    # A zero momentum (a tensor never reached by the loss) gives a zero update.
                    p.add_((m / rms.clamp_min(1e-30)).to(p.dtype), alpha=-lr * UPDATE_RMS)
            return loss

    return RMSAlignedSGD


class Settings(BaseModel):
    """`recipe.optimizer_settings.sgd`: the EMA momentum beta (001 App. A.1: 0.9)."""

    model_config = ConfigDict(extra="forbid", frozen=True)
    momentum: float = Field(0.9, ge=0.0, lt=1.0)


def build(model: torch.nn.Module, lr: float, weight_decay: float, settings: Settings = Settings()) -> torch.optim.Optimizer:
    params = [p for p in model.parameters() if p.requires_grad]
    return sgd_class()(params, lr=lr, weight_decay=weight_decay, momentum=settings.momentum)
