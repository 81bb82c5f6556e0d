"""Muon (Jordan et al. 2024) in the RMS-aligned form that 001 uses (App. A.1, after Liu et al.
2025), with AdamW for the parameters Muon is not meant for.

Hidden 2-D weights of the transformer blocks (every 2-D parameter except embeddings and the
LM head), per matrix W in R^{m x n}:

    M_t = beta M_{t-1} + (1 - beta) G_t                    (beta = 0.9, 001 App. A.1)
    U_t = (1 - beta) G_t + beta M_t                        (Nesterov, as in Jordan et al.)
    O_t = NewtonSchulz5(U_t)                               (~ U V^T of U_t = U S V^T)
    W  <- W - lr * wd * W - lr * 0.2 * sqrt(max(m, n)) * O_t

The 0.2 sqrt(max(m, n)) factor gives the update the RMS of an AdamW update (~0.2), so one lr
serves both groups. Embeddings, LM head and 1-D params: AdamW with 001's (beta1, beta2) =
(0.9, 0.95), eps 1e-8. The quintic Newton-Schulz coefficients (3.4445, -4.7750, 2.0315) and 5
steps are Jordan et al.'s; they push singular values into about [0.7, 1.2], not exactly 1.
"""

from __future__ import annotations

import functools
import math

from pydantic import BaseModel, ConfigDict, Field

from cliffsweep.trainables.lazy import lazy_function, nn, torch
from cliffsweep.trainables.optimizers.costs import OptimizerCosts

unwrap = lazy_function("cliffsweep.trainables.losses", "unwrap")

costs = OptimizerCosts(states=2, hidden_matrix_states=1)  # momentum on hidden matrices, AdamW elsewhere

UPDATE_RMS = 0.2
NS_COEFFS = (3.4445, -4.7750, 2.0315)


def newton_schulz(g: torch.Tensor, steps: int = 5) -> torch.Tensor:
    """Approximate orthogonalisation U V^T of a 2-D matrix by a quintic Newton-Schulz iteration."""
    a, b, c = NS_COEFFS
    # bf16 on accelerators as in Jordan et al.; fp32 on CPU, where bf16 matmuls are slow.
    x = g.to(torch.bfloat16 if g.is_cuda else torch.float32)
    tall = x.size(0) > x.size(1)
    if tall:
        x = x.T
    x = x / (x.norm() + 1e-7)  # spectral norm <= Frobenius norm <= 1: inside NS's convergence region
    for _ in range(steps):
        s = x @ x.T
        x = a * x + (b * s + c * s @ s) @ x
    return (x.T if tall else x).to(g.dtype)


def ema_momenta(state, params, beta: float):
    """(p, G, M) for each of `params` that has a gradient G (in fp32), its EMA momentum updated in
    place first: M = beta M + (1 - beta) G, an fp32 state created at zero (001 App. A.1: Muon's
    and RMS-aligned SGD's momentum, the one state both keep)."""
    for p in params:
        if p.grad is None:
            continue
        s = state[p]
        if not s:
            s["momentum"] = torch.zeros_like(p, dtype=torch.float32)
        g = p.grad.float()
        yield p, g, s["momentum"].lerp_(g, 1 - beta)


@functools.cache
def muon_class() -> type:
    """Muon as a torch optimizer, defined on first use: torch loads then, not when `plan`
    reads this file's Settings and costs (trainables/lazy.py)."""
    import torch

    class Muon(torch.optim.Optimizer):
        """Param groups carry `use_muon`; the lr schedule scales every group's lr alike."""

        def __init__(self, param_groups, lr: float, weight_decay: float = 0.0, momentum: float = 0.9,
                     adam_betas: tuple[float, float] = (0.9, 0.95), adam_eps: float = 1e-8):
            defaults = dict(lr=lr, weight_decay=weight_decay, momentum=momentum, betas=adam_betas, eps=adam_eps)
            super().__init__(param_groups, defaults)
            for g in self.param_groups:
                if "use_muon" not in g:
                    raise ValueError("every Muon param group needs use_muon=True/False")
                if g["use_muon"] and any(p.ndim != 2 for p in g["params"]):
                    raise ValueError("Muon groups take 2-D weights only")

        @torch.no_grad()
        def step(self, closure=None):
            loss = closure() if closure is not None else None
            for group in self.param_groups:
                (self._muon if group["use_muon"] else self._adamw)(group)
            return loss

        def _muon(self, group) -> None:
            lr, wd, beta = group["lr"], group["weight_decay"], group["momentum"]
            for p, g, m in ema_momenta(self.state, group["params"], beta):
                o = newton_schulz(g.lerp(m, beta))
                p.mul_(1 - lr * wd)
                p.add_(o.to(p.dtype), alpha=-lr * UPDATE_RMS * math.sqrt(max(p.shape)))

        def _adamw(self, group) -> None:
            lr, wd, (b1, b2), eps = group["lr"], group["weight_decay"], group["betas"], group["eps"]
            for p in group["params"]:
                if p.grad is None:
                    continue
                state = self.state[p]
                if not state:
                    state["step"] = 0
                    state["exp_avg"] = torch.zeros_like(p, dtype=torch.float32)
                    state["exp_avg_sq"] = torch.zeros_like(p, dtype=torch.float32)
                state["step"] += 1
                t = state["step"]
                g = p.grad.float()
                state["exp_avg"].lerp_(g, 1 - b1)
                state["exp_avg_sq"].mul_(b2).addcmul_(g, g, value=1 - b2)
                denom = (state["exp_avg_sq"] / (1 - b2**t)).sqrt_().add_(eps)
                p.mul_(1 - lr * wd)
                p.add_((state["exp_avg"] / (1 - b1**t) / denom).to(p.dtype), alpha=-lr)

    return Muon


def split_params(model: nn.Module) -> tuple[list[nn.Parameter], list[nn.Parameter]]:
    """(hidden 2-D weights for Muon, everything else for AdamW), trainable params only."""
    not_hidden = {id(m.weight) for m in model.modules() if isinstance(m, nn.Embedding)}
    head = model.get_output_embeddings() if hasattr(model, "get_output_embeddings") else None
    if head is not None:
        not_hidden.add(id(head.weight))
    muon, adam = [], []
    for p in model.parameters():
        if p.requires_grad:
            (muon if p.ndim == 2 and id(p) not in not_hidden else adam).append(p)
    return muon, adam


class Settings(BaseModel):
    """`recipe.optimizer_settings.muon`: Muon's momentum and the AdamW settings of the tensors
    Muon does not take (embeddings, head, 1-D)."""

    model_config = ConfigDict(extra="forbid", frozen=True)
    momentum: float = Field(0.9, ge=0.0, lt=1.0)
    adam_betas: tuple[float, float] = (0.9, 0.95)
    adam_eps: float = Field(1e-8, gt=0)


def build(model: torch.nn.Module, lr: float, weight_decay: float, settings: Settings = Settings()) -> torch.optim.Optimizer:
    muon, adam = split_params(unwrap(model))  # the LM head is found on the unwrapped model
    groups = [g for g in ({"params": muon, "use_muon": True}, {"params": adam, "use_muon": False}) if g["params"]]
    return muon_class()(groups, lr=lr, weight_decay=weight_decay, momentum=settings.momentum, adam_betas=settings.adam_betas,
                adam_eps=settings.adam_eps)
