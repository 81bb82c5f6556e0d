"""Dynamic Fine-Tuning (Wu et al. 2025), a baseline of RPSFT (004, Sec. 5 "baselines"):

    L = sum_t CE_t * stopgrad(p_t) / n_tokens,    p_t = pi_theta(y_t | x, y_<t)

i.e. each token's gradient is rescaled by its own probability. No params.
"""

from __future__ import annotations

from cliffsweep.trainables.methods.base import Method
from cliffsweep.trainables.methods.costs import Costs
from cliffsweep.trainables.lazy import lazy_function

response_ce = lazy_function("cliffsweep.trainables.losses", "response_ce")
weighted_token_mean = lazy_function("cliffsweep.trainables.losses", "weighted_token_mean")


def dft_weights(ce):
    """Token probabilities p_t = exp(-CE_t), detached: the DFT rescaling factors."""
    return (-ce.detach()).exp()


class DFT(Method):
    name = "dft"
    fsdp_safe = True  # changes the loss only
    costs = Costs()

    def data_loss(self, model, batch, n_tokens=None):
        ce, mask = response_ce(model, batch)
        w = dft_weights(ce)
        loss = weighted_token_mean(ce, mask, w, n_tokens)
        n = mask.sum().clamp_min(1)
        return loss, {"ce": float(ce.detach().sum() / n), "mean_p": float((w * mask).sum() / n)}
