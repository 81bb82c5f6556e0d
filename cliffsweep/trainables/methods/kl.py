"""KL anchor to the frozen base model (002, "KL anchor"; 003 App. C.4).

    L = CE + beta * mean over response tokens of KL(pi_theta(.|x_<t) || pi_base(.|x_<t))

The KL is exact over the full vocabulary (no top-k or k3 estimator: cliffsweep's models fit a
second copy). beta default 0.05, the middle of 002's range 0.01-0.1 (our default within it).
Cost: one extra no-grad forward of the frozen base per step and a second copy of the weights.
"""

from __future__ import annotations

from pydantic import Field
from torch import nn

from cliffsweep.trainables.losses import frozen_copy, frozen_logits, masked_token_ce, token_kl
from cliffsweep.trainables.methods.base import Method, MethodParams


class KLParams(MethodParams):
    beta: float = Field(0.05, gt=0.0)
    """KL coefficient (002: 0.01-0.1; 0.05 is our default)."""


class KL(Method):
    name = "kl"
    fsdp_safe = True  # each worker keeps a whole frozen base copy; changes the loss only
    Params = KLParams

    def prepare(self, model: nn.Module, stats) -> nn.Module:
        # The base is copied here, on the worker, from the weights the trial starts from.
        self.base = frozen_copy(model)
        return model

    def loss(self, model, batch):
        ids, attn, labels = batch["input_ids"], batch["attention_mask"], batch["labels"]
        logits = model(input_ids=ids, attention_mask=attn).logits
        base_logits = frozen_logits(self.base, batch)
        ce = masked_token_ce(logits, labels)
        kl_tok = token_kl(logits, base_logits, labels)
        kl = kl_tok.sum() / (labels[:, 1:] != -100).sum().clamp_min(1)
        loss = ce + self.params.beta * kl
        return loss, {"ce": float(ce.detach()), "kl": float(kl.detach())}
