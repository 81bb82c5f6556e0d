"""Two shapes several methods share (style.md 1: small, flat; each method's file keeps its own
facts, params and the statistic or loss that makes it that method).

- `Anchored`: 000 App. D, Eq. 3, the quadratic pull towards the starting weights theta*,
  weighted by a per-parameter importance the method computes once per model (EWC's Fisher,
  MAS's output sensitivity): lambda/2 * sum_p Omega_p (theta_p - theta*_p)^2.
- `AgainstFrozenBase`: a whole frozen copy of the starting weights, taken on the worker before
  training, that the data loss compares against (KL's divergence, IW's importance weights).
"""

from __future__ import annotations


from cliffsweep.trainables.methods.base import Method
from cliffsweep.trainables.lazy import lazy_function, nn, penalties

frozen_copy = lazy_function("cliffsweep.trainables.losses", "frozen_copy")


class Anchored(Method):
    """Eq. 3 with the importance from `compute_stats`; subclasses set `params.lam`."""

    def prepare(self, model: nn.Module, stats) -> nn.Module:
        self.anchor, self.importance = penalties.importance_anchor(model, stats, self.name)
        return model

    def penalty_term(self, model):
        pen = penalties.anchor_penalty(model, self.anchor, self.importance)
        return 0.5 * self.params.lam * pen, float(pen.detach())


class AgainstFrozenBase(Method):
    """`self.base`: the weights the trial starts from, frozen, copied here on the worker."""

    def prepare(self, model: nn.Module, stats) -> nn.Module:
        self.base = frozen_copy(model)
        return model
