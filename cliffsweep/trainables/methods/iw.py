"""Importance-weighted SFT (Qin & Springenberg 2025), a baseline of RPSFT (004, Sec. 5):
each sequence's loss is scaled by a clipped, stop-gradient importance ratio of the current
policy to the frozen base,

    w_s = min(exp(mean_{t in resp(s)} [log pi_theta(y_t) - log pi_base(y_t)]), clip)
    L   = sum_{s,t} stopgrad(w_s) * CE_{s,t} / n_tokens

clip default 16 (docs/methods.md). The mean (not sum) of token log-ratios keeps long responses from
saturating the clip; at step 0 w_s = 1, so IW starts as plain SFT. Needs a frozen base copy
(one extra no-grad forward per step).
"""

from __future__ import annotations

from pydantic import Field

from cliffsweep.trainables.methods.base import MethodParams
from cliffsweep.trainables.methods.shared import AgainstFrozenBase
from cliffsweep.trainables.lazy import lazy_function, torch

frozen_response_ce = lazy_function("cliffsweep.trainables.losses", "frozen_response_ce")
response_ce = lazy_function("cliffsweep.trainables.losses", "response_ce")
weighted_token_mean = lazy_function("cliffsweep.trainables.losses", "weighted_token_mean")


class IWParams(MethodParams):
    clip: float = Field(16.0, gt=0.0)
    """Upper clip of the sequence importance weight (004 baseline setting)."""


def iw_weights(ce: torch.Tensor, base_ce: torch.Tensor, mask: torch.Tensor, clip: float) -> torch.Tensor:
    """Per-sequence weights (B, 1): min(exp(mean log pi_theta - log pi_base), clip), detached.
    Token log-probs are -CE."""
    n = mask.sum(1).clamp_min(1)
    log_ratio = ((base_ce - ce).detach() * mask).sum(1) / n
    return log_ratio.exp().clamp_max(clip).unsqueeze(1)


class IW(AgainstFrozenBase):  # self.base, its costs, FSDP-safe: methods/shared.py
    name = "iw"
    Params = IWParams


    def data_loss(self, model, batch, n_tokens=None):
        ce, mask = response_ce(model, batch)
        base_ce, _ = frozen_response_ce(self.base, batch)
        w = iw_weights(ce, base_ce, mask, self.params.clip)
        loss = weighted_token_mean(ce, mask, w, n_tokens)
        n = mask.sum().clamp_min(1)
        return loss, {"ce": float(ce.detach().sum() / n), "mean_w": float(w.mean())}
