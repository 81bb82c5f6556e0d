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


from cliffsweep.trainables.methods.base import Method
from cliffsweep.trainables.methods.costs import Costs
from cliffsweep.trainables.lazy import lazy_function, nn, penalties, torch

frozen_copy = lazy_function("cliffsweep.trainables.losses", "frozen_copy")


class Anchored(Method):
    """Eq. 3 with the importance from `compute_stats`; subclasses set `params.lam` and say how
    the importance is estimated (`importance_pass`)."""

    def importance_pass(self):
        """(objective, transform, count) of penalties.mean_grad_stat: the importance is
        E_B[transform(grad_p objective(B))] over the retain batches, each objective a sum over
        the batch's tokens divided by count(B) (None: its response tokens)."""
        raise NotImplementedError

    def compute_stats(self, model: nn.Module, retain_batches, learn_batches,
                      micro_batch_size: int | None = None) -> dict[str, torch.Tensor]:
        objective, transform, count = self.importance_pass()
        extra = {} if count is None else {"count": count}
        stat = penalties.mean_grad_stat(model, retain_batches, objective, transform,
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
