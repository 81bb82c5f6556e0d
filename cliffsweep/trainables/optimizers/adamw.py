"""AdamW, weight decay 0.01: the finetuning optimizer of the cliff paper (000 App. B) and the
pretraining optimizer of its backbones (which 001 says to keep for finetuning)."""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict, Field, field_validator

from cliffsweep.trainables.lazy import torch
from cliffsweep.trainables.optimizers.costs import OptimizerCosts

costs = OptimizerCosts(states=2)  # the first and second moments


class Settings(BaseModel):
    """`recipe.optimizer_settings.adamw`. Defaults: torch's and 000 App. B's; most LLM recipes
    use beta2 = 0.95, and 001 compares optimizers under their own settings."""

    model_config = ConfigDict(extra="forbid", frozen=True)
    betas: tuple[float, float] = (0.9, 0.999)
    eps: float = Field(1e-8, gt=0)

    @field_validator("betas")
    @classmethod
    def _in_unit_interval(cls, betas: tuple[float, float]) -> tuple[float, float]:
        if not all(0.0 <= b < 1.0 for b in betas):
            raise ValueError(f"betas must lie in [0, 1), got {list(betas)}")
        return betas


def build(model: torch.nn.Module, lr: float, weight_decay: float, settings: Settings = Settings()) -> torch.optim.Optimizer:
    params = [p for p in model.parameters() if p.requires_grad]
    # On CUDA, torch's fused kernel: the same update in one kernel per parameter group instead of
    # foreach's several. Measured on an H200 at 1.5B (docs/gpu.md, "Where a step's time goes"):
    # the optimizer's GPU time 32.8 -> 12.3 ms a step, FSDP2's sharded parameters included. On a
    # CPU the default (foreach) stays, so the CPU tests' numbers do not move.
    fused = bool(params) and all(p.is_cuda for p in params)
    return torch.optim.AdamW(params, lr=lr, weight_decay=weight_decay, betas=settings.betas, eps=settings.eps,
                             fused=fused or None)
