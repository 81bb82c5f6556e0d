"""Token-Adaptive Loss Reweighting, TALR (003 Sec. 4.1, Alg. 1, App. D.2).

The entropy-regularised problem min_w <w, l> - tau H(w) over the simplex has the solution
w_i ∝ exp(-l_i / tau) = p_i^(1/tau); 003 uses the unnormalised form:

    w_i = max(stopgrad(p_i)^(1/tau), w_min),   tau = median_s( mean_{t in s} l_{s,t} )
    L   = sum_i w_i l_i / n_tokens

tau is recomputed every step from the batch (003 App. D.2: "the median of the average sequence
loss within a batch"): under DDP / FSDP the global batch, every worker's rows gathered
(`begin_step`), so that the workers share one tau and the step equals one process's on the
global batch (tests/test_methods_loss.py); torch.quantile, i.e. the mean of the two middle values
for an even count. w_min default 0.01: the seed leaves the floor
blank, so 0.01 is this project's choice (docs/methods.md says so). Hard (low-probability) tokens get small weights; easy ones weight ~1.

Under gradient accumulation or several workers tau must be the median over the whole global
batch, which no single micro-batch knows before its backward: `begin_step` runs one extra
no-grad forward over the step's micro-batches to get it (about a third more compute per step,
only when a step has more than one micro-batch or more than one worker), and gathers the
per-row means of every worker (a few floats per row), so the accumulated gradient equals the
whole batch's.
"""

from __future__ import annotations

from pydantic import Field

from cliffsweep.trainables.methods.base import Method, MethodParams
from cliffsweep.trainables.methods.costs import Costs
from cliffsweep.trainables.lazy import dist, lazy_function, no_grad, torch

response_ce = lazy_function("cliffsweep.trainables.losses", "response_ce")
weighted_token_mean = lazy_function("cliffsweep.trainables.losses", "weighted_token_mean")


class TALRParams(MethodParams):
    min_weight: float = Field(0.01, gt=0.0, le=1.0)
    """Lower cutoff of every token weight (003 App. D.2)."""


def sequence_means(ce: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
    """Mean token loss of each row that has response tokens (detached)."""
    ce = ce.detach()
    has = mask.sum(1) > 0
    return (ce * mask).sum(1)[has] / mask.sum(1)[has]


def median_tau(seq_means: torch.Tensor) -> torch.Tensor:
    # tau -> 0 would send every weight to the cutoff; the floor only guards a division by zero.
    return torch.quantile(seq_means, 0.5).clamp_min(1e-8)


def talr_weights(ce: torch.Tensor, mask: torch.Tensor, min_weight: float,
                 tau: torch.Tensor | None = None) -> tuple[torch.Tensor, torch.Tensor]:
    """Token weights (B, T-1) and the temperature tau (this batch's median unless given), both
    detached."""
    if tau is None:
        tau = median_tau(sequence_means(ce, mask))
    w = torch.exp(-ce.detach() / tau).clamp_min(min_weight)
    return w, tau


class TALR(Method):
    name = "talr"
    fsdp_safe = True  # token weights change the loss only
    costs = Costs()
    Params = TALRParams

    step_tau: torch.Tensor | None = None
    """tau of the current step's whole batch when it is split into micro-batches (begin_step);
    None: each batch's own median."""

    @no_grad
    def begin_step(self, model, micro_batches):
        world = dist.get_world_size() if dist.is_available() and dist.is_initialized() else 1
        if len(micro_batches) == 1 and world == 1:
            self.step_tau = None  # data_loss sees the whole batch: no extra forward needed
            return
        means = torch.cat([sequence_means(*response_ce(model, b)) for b in micro_batches])
        if world > 1:  # every worker's rows: one tau for the global batch
            parts: list = [None] * world
            dist.all_gather_object(parts, means.cpu())
            means = torch.cat(parts).to(means.device)
        self.step_tau = median_tau(means)

    def data_loss(self, model, batch, n_tokens=None):
        ce, mask = response_ce(model, batch)
        w, tau = talr_weights(ce, mask, self.params.min_weight, self.step_tau)
        loss = weighted_token_mean(ce, mask, w, n_tokens)
        n = mask.sum().clamp_min(1)
        return loss, {"ce": float(ce.detach().sum() / n), "tau": float(tau), "mean_w": float((w * mask).sum() / n)}
