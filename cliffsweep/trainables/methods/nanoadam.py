"""NanoAdam (000 App. D, "Update-shaping methods", ref. [32]): the standard Adam(W) step, applied
only to the k smallest-magnitude weights of each tensor; large-magnitude weights, assumed to
carry pretrained features, stay frozen. The mask is refreshed every m steps (m = 1: "at each
iteration", as 000 selects them).

    S_t = indices of the ceil(k * numel) smallest |W| entries of each trainable tensor
          (recomputed at step 0 and after every m-th step)
    grad W[~S] <- 0 (before the step);  W[~S] <- W_anchor[~S] (after the step)

Zeroing gradients alone is not enough: AdamW's momentum from earlier steps and its decoupled
weight decay would still move unselected entries, so after every step they are restored to their
values at the last refresh (exactly: the anchor is a copy in the parameter's dtype). This costs
one copy of the trainable weights plus a bool mask.

Defaults: m = 1, 000's "at each iteration" (issue 40; it was 100 before, and the toy results in
docs/methods.md were measured at 100); k = 0.1 of every trainable tensor (1-D norms and
embeddings included) is ours (000 gives none). A refresh is a top-k over every trainable weight
and a copy of them into the anchor, so m = 1 pays that each step; `refresh_every` spaces it out
(docs/methods.md gives its cost).
"""

from __future__ import annotations

import math

from pydantic import Field

from cliffsweep.trainables.methods.base import Method, MethodParams
from cliffsweep.trainables.methods.costs import Costs
from cliffsweep.trainables.lazy import nn, no_grad, torch


class NanoAdamParams(MethodParams):
    fraction: float = Field(0.1, gt=0.0, le=1.0)
    """k: share of each tensor's entries (smallest |W|) that Adam may update (our default)."""
    refresh_every: int = Field(1, ge=1)
    """m: steps between mask refreshes (000 App. D: every step)."""


def smallest_magnitude_mask(w: torch.Tensor, fraction: float) -> torch.Tensor:
    """Bool mask of exactly ceil(fraction * numel) smallest-|w| entries (ties broken by topk)."""
    k = max(1, math.ceil(fraction * w.numel()))
    idx = torch.topk(w.detach().abs().flatten().float(), k, largest=False).indices
    mask = torch.zeros(w.numel(), dtype=torch.bool, device=w.device)
    mask[idx] = True
    return mask.view_as(w)


class NanoAdam(Method):
    name = "nanoadam"
    costs = Costs(weight_copies=1.5, state_weight_copies=1, state_bytes_per_weight=1)  # anchors, bool masks
    Params = NanoAdamParams

    def prepare(self, model: nn.Module, stats) -> nn.Module:
        self.tensors = [p for p in model.parameters() if p.requires_grad]
        # Masks and anchors are built at the first step, on the device the trainer moved the
        # weights to (prepare runs before that move).
        self.masks: list[torch.Tensor] | None = None
        return model

    @no_grad
    def refresh(self) -> None:
        self.masks = [smallest_magnitude_mask(p, self.params.fraction) for p in self.tensors]
        self.anchors = [p.detach().clone() for p in self.tensors]

    @no_grad
    def before_step(self, model: nn.Module, step: int) -> None:
        if self.masks is None:
            self.refresh()
        for p, m in zip(self.tensors, self.masks):
            if p.grad is not None:
                p.grad.mul_(m)

    def state_dict(self) -> dict:
        # the masks and anchors of the current refresh period (a resume mid-period keeps them)
        return {} if self.masks is None else {"masks": self.masks, "anchors": self.anchors}

    def load_state_dict(self, state: dict) -> None:
        if state:
            self.masks = [m.to(p.device) for m, p in zip(state["masks"], self.tensors)]
            self.anchors = [a.to(p.device) for a, p in zip(state["anchors"], self.tensors)]

    @no_grad
    def after_step(self, model: nn.Module, step: int) -> None:
        for p, m, a in zip(self.tensors, self.masks, self.anchors):
            p.copy_(torch.where(m, p, a))
        if (step + 1) % self.params.refresh_every == 0:
            self.refresh()
