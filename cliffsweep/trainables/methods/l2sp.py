"""L2-SP (Li et al. 2018; "L2 regularization" toward the initialisation in 002, 003, 004):

    L(theta) = L_SFT(theta) + lambda * ||theta - theta*||^2   over every trainable parameter.

lambda = 1 is our default: 004 (Fig. 3, "Q-L2/L-L2") equates full-rank RPSFT with L2-init, and
RPSFT's default lambda is 1, so both methods share the scale (sweep it).
"""

from __future__ import annotations

from pydantic import Field

from cliffsweep.trainables.methods.base import Method, MethodParams
from cliffsweep.trainables.methods.costs import Costs
from cliffsweep.trainables.lazy import nn, penalties


class L2SPParams(MethodParams):
    lam: float = Field(1.0, ge=0.0)
    """lambda (our default 1.0, the scale of full-rank RPSFT in 004)."""


class L2SP(Method):
    name = "l2sp"
    costs = Costs(weight_copies=1)  # theta*
    Params = L2SPParams

    def prepare(self, model: nn.Module, stats) -> nn.Module:
        self.anchor = penalties.snapshot(penalties.trainable(model))
        return model

    def penalty_term(self, model):
        pen = penalties.anchor_penalty(model, self.anchor)
        return self.params.lam * pen, float(pen.detach())
