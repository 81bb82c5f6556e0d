"""LoRA (Hu et al. 2021) through peft, as compared with full FT in the cliff paper (000 Fig. 8).

W = W0 + (alpha / r) B A with W0 frozen; defaults rank 16, alpha = 2r, all linear layers of the
transformer blocks (docs/methods.md). Checkpoints are adapter folders, which a GPU evaluator serves
with a LoRARequest on the base model's engine and a CPU one merged into its weights
(evals/backends/held.merged_adapter).
"""

from __future__ import annotations

from typing import Any

from pydantic import Field

from cliffsweep.trainables.methods.base import Method, MethodParams
from cliffsweep.trainables.methods.costs import Costs
from cliffsweep.trainables.lazy import nn


class LoRAParams(MethodParams):
    rank: int = Field(16, ge=1, le=256)
    """Adapter rank r (the cliff paper sweeps 8-64)."""
    alpha: float | None = None
    """Scale numerator; None = 2 * rank (docs/methods.md)."""
    dropout: float = Field(0.0, ge=0.0, lt=1.0)
    target_modules: str = "all-linear"
    """peft target: 'all-linear' = every Linear but the LM head."""


class LoRA(Method):
    name = "lora"
    costs = Costs(extra_flops=-2)  # frozen weights take no weight gradient; trainable_params

    @classmethod
    def trainable_params(cls, arch: Any, params: dict) -> int | None:
        return arch.lora_params(cls.Params(**params).rank)  # A and B of every adapted linear
    Params = LoRAParams
    checkpoint_kind = "lora"

    def prepare(self, model: nn.Module, stats) -> nn.Module:
        from peft import LoraConfig, get_peft_model

        p = self.params
        cfg = LoraConfig(
            r=p.rank,
            lora_alpha=p.alpha if p.alpha is not None else 2 * p.rank,
            lora_dropout=p.dropout,
            target_modules=p.target_modules,
            task_type="CAUSAL_LM",
        )
        return get_peft_model(model, cfg)
