"""MAS (Aljundi et al. 2018) as used by the cliff paper (000 App. D, Eq. 3):

    L(theta) = L_SFT(theta) + lambda/2 * sum_p Omega_p (theta_p - theta*_p)^2,
    Omega_p = E_{B ~ D_R} | grad_p ||f_theta(B)||^2 |      (label-free output sensitivity).

f_theta(B) = the output logits. Our normalisation of ||f(B)||^2: the squared L2 norm of the
logit vector summed over the vocabulary and averaged over the attended tokens of the batch
(prompt and response alike, since MAS uses no labels), so batch size and length do not scale
it. Per-batch gradients, as the expectation over B in 000 App. D. As for EWC, Omega is then
rescaled to mean 1 over all parameters and lambda = 1 (our defaults; 000 gives no value).
"""

from __future__ import annotations

from cliffsweep.trainables.methods.costs import Costs
from cliffsweep.trainables.methods.shared import Anchored, Importance
from cliffsweep.trainables.lazy import lazy_function, nn, torch

chunk_rows = lazy_function("cliffsweep.trainables.losses", "chunk_rows")
final_hidden = lazy_function("cliffsweep.trainables.losses", "final_hidden")
lm_head = lazy_function("cliffsweep.trainables.losses", "lm_head")
over_chunks = lazy_function("cliffsweep.trainables.losses", "over_chunks")


def output_sq_norm(model: nn.Module, batch: dict[str, torch.Tensor], n_tokens: float | None = None) -> torch.Tensor:
    """||f_theta(B)||^2: sum over the vocabulary of squared logits, summed over attended tokens
    and divided by `n_tokens` (None: this batch's attended tokens; a micro-batch of B passes B's
    count). The logits are taken through the head in chunks of tokens, never for the whole
    batch at once (issue 15)."""
    hidden = final_hidden(model, batch)
    mask = batch["attention_mask"].bool()
    head = lm_head(model)
    per_token = over_chunks(lambda h: head(h).float().square().sum(-1), chunk_rows(head), hidden[mask])
    return per_token.sum() / (attended(batch) if n_tokens is None else n_tokens)


def attended(batch: dict[str, torch.Tensor]) -> int:
    """Attended tokens of a batch (prompt and response): what ||f(B)||^2 averages over."""
    return max(1, int(batch["attention_mask"].sum()))


class MAS(Anchored):  # Eq. 3's penalty, its lambda (params.lam) and the statistics pass: methods/shared.py
    name = "mas"
    costs = Costs(weight_copies=2, stats_data="retain", stats_flops=6, stats_accumulator=True)  # theta*, the importances
    # Omega_p: |grad ||f(B)||^2| per retain batch, over its attended tokens
    importance = Importance(output_sq_norm, lazy_function("torch", "abs"),
                            "per-batch |grad ||logits||^2|, token-mean, mean-1 normalised", count=attended)
