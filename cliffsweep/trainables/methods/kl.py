"""KL anchor to the frozen base model (002, "KL anchor"; 003 App. C.4).

    L = CE + beta * mean over response tokens of KL(pi_theta(.|x_<t) || pi_base(.|x_<t))

The KL is exact over the full vocabulary (no top-k or k3 estimator: cliffsweep's models fit a
second copy). beta default 0.05, the middle of 002's range 0.01-0.1 (our default within it).
Cost: one extra no-grad forward of the frozen base per step and a second copy of the weights.
"""

from __future__ import annotations

from pydantic import Field

from cliffsweep.trainables.methods.base import MethodParams
from cliffsweep.trainables.methods.shared import AgainstFrozenBase
from cliffsweep.trainables.lazy import lazy_function

response_ce_kl = lazy_function("cliffsweep.trainables.losses", "response_ce_kl")
token_norm = lazy_function("cliffsweep.trainables.losses", "token_norm")


class KLParams(MethodParams):
    beta: float = Field(0.05, gt=0.0)
    """KL coefficient (002: 0.01-0.1; 0.05 is our default)."""


class KL(AgainstFrozenBase):  # self.base, its costs, FSDP-safe: methods/shared.py
    name = "kl"
    Params = KLParams


    def data_loss(self, model, batch, n_tokens=None):
        ce_tok, kl_tok, mask = response_ce_kl(model, self.base, batch)
        norm = token_norm(mask, n_tokens)
        loss = (ce_tok.sum() + self.params.beta * kl_tok.sum()) / norm
        n = mask.sum().clamp_min(1)  # logs: this batch's own means
        return loss, {"ce": float(ce_tok.detach().sum() / n), "kl": float(kl_tok.detach().sum() / n)}
