"""Two shapes several methods share (style.md 1: small, flat; each method's file keeps its own
facts, params and the statistic or loss that makes it that method).

- `Anchored`: 000 App. D, Eq. 3, the quadratic pull towards the starting weights theta*,
  weighted by a per-parameter importance the method computes once per model (EWC's Fisher,
  MAS's output sensitivity): lambda/2 * sum_p Omega_p (theta_p - theta*_p)^2. Both estimate
  it the same way, E_B[transform(grad_p objective(B))] over the retain batches, rescaled to
  mean 1; each method's file says which objective and transform (`importance_pass`).
- `AgainstFrozenBase`: a whole frozen copy of the starting weights, taken on the worker before
  training, that the data loss compares against (KL's divergence, IW's importance weights).
  What that copy costs, and that it is FSDP-safe, follows from the copy: it is stated here.
"""

from __future__ import annotations


from dataclasses import dataclass
from typing import Callable, ClassVar

from pydantic import Field

from cliffsweep.trainables.methods.base import Method, MethodParams
from cliffsweep.trainables.methods.costs import Costs
from cliffsweep.trainables.lazy import lazy_function, nn, penalties, torch

frozen_copy = lazy_function("cliffsweep.trainables.losses", "frozen_copy")


@dataclass(frozen=True)
class Importance:
    """How an `Anchored` method estimates its per-parameter importance Omega_p (000 App. D):
    E_B[transform(grad_p objective(B))] over the retain batches, each objective a sum over the
    batch's tokens divided by count(B) (None: its response tokens), rescaled to mean 1. Each
    method states its own in its file; the pass that computes it is `Anchored.compute_stats`."""

    objective: Callable
    transform: Callable
    estimator: str
    """What the statistics cache records of the estimator (`stats_inputs`)."""
    count: Callable | None = None


class AnchoredParams(MethodParams):
    lam: float = Field(1.0, ge=0.0)
    """lambda of Eq. (3) on the mean-1 importance (our default 1.0; 000 does not report it)."""


class Anchored(Method):
    """Eq. 3 with the importance its `importance` states; `params.lam` weighs it."""

    Params = AnchoredParams
    importance: ClassVar[Importance]

    def stats_inputs(self):
        return {"estimator": self.importance.estimator}

    def compute_stats(self, model: nn.Module, retain_batches, learn_batches,
                      micro_batch_size: int | None = None) -> dict[str, torch.Tensor]:
        how = self.importance
        extra = {} if how.count is None else {"count": how.count}
        stat = penalties.mean_grad_stat(model, retain_batches, how.objective, how.transform,
                                        micro_batch_size=micro_batch_size, **extra)
        return penalties.normalize_mean(stat)

    def prepare(self, model: nn.Module, stats) -> nn.Module:
        self.anchor, self.importance = penalties.importance_anchor(model, stats, self.name)
        return model

    def penalty_term(self, model):
        pen = penalties.anchor_penalty(model, self.anchor, self.importance)
        return 0.5 * self.params.lam * pen, float(pen.detach())


class AgainstFrozenBase(Method):
    """`self.base`: the weights the trial starts from, frozen, copied here on the worker."""

    fsdp_safe = True  # each worker keeps a whole frozen base copy; changes the loss only
    costs = Costs(weight_copies=1, extra_flops=2, loss_heads=2)  # the frozen base: a copy, its forward, its head

    def prepare(self, model: nn.Module, stats) -> nn.Module:
        self.base = frozen_copy(model)
        return model
