"""Token-Adaptive Loss Reweighting, TALR (003 Sec. 4.1, Alg. 1, App. D.2).

The entropy-regularised problem min_w <w, l> - tau H(w) over the simplex has the solution
w_i ∝ exp(-l_i / tau) = p_i^(1/tau); 003 uses the unnormalised form:

    w_i = max(stopgrad(p_i)^(1/tau), w_min),   tau = median_s( mean_{t in s} l_{s,t} )
    L   = sum_i w_i l_i / n_tokens

tau is recomputed every step from the batch (003 App. D.2: "the median of the average sequence
loss within a batch"); the median is taken over this worker's rows (torch.quantile, i.e. the
mean of the two middle values for an even count). w_min default 0.01 (003 App. D.2 cutoff as
given in METHODS.md). Hard (low-probability) tokens get small weights; easy ones weight ~1.
"""

from __future__ import annotations

import torch
from pydantic import Field

from cliffsweep.trainables.losses import token_ce, weighted_token_mean
from cliffsweep.trainables.methods.base import Method, MethodParams


class TALRParams(MethodParams):
    min_weight: float = Field(0.01, gt=0.0, le=1.0)
    """Lower cutoff of every token weight (003 App. D.2)."""


def talr_weights(ce: torch.Tensor, mask: torch.Tensor, min_weight: float) -> tuple[torch.Tensor, torch.Tensor]:
    """Token weights (B, T-1) and the temperature tau, both detached."""
    ce = ce.detach()
    has = mask.sum(1) > 0
    seq_mean = (ce * mask).sum(1)[has] / mask.sum(1)[has]
    # tau -> 0 would send every weight to the cutoff; the floor only guards a division by zero.
    tau = torch.quantile(seq_mean, 0.5).clamp_min(1e-8)
    w = torch.exp(-ce / tau).clamp_min(min_weight)
    return w, tau


class TALR(Method):
    name = "talr"
    fsdp_safe = True  # token weights change the loss only
    Params = TALRParams

    def loss(self, model, batch):
        logits = model(input_ids=batch["input_ids"], attention_mask=batch["attention_mask"]).logits
        ce, mask = token_ce(logits, batch["labels"])
        w, tau = talr_weights(ce, mask, self.params.min_weight)
        loss = weighted_token_mean(ce, mask, w)
        n = mask.sum().clamp_min(1)
        return loss, {"ce": float(ce.detach().sum() / n), "tau": float(tau), "mean_w": float((w * mask).sum() / n)}
