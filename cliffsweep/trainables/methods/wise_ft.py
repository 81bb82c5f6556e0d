"""WiSE-FT (Wortsman et al. 2022; the model-averaging baseline of 003, Fig. 2):

    theta = (1 - a) theta* + a theta_ft,

applied at export: training is plain SFT, every saved checkpoint is the interpolation of the
base weights theta* with the current fine-tuned weights. a = 0.5 is our default (sweep it).

theta* is kept on the CPU (it is only needed at export) and the exported model is built on the
CPU too, so export costs no accelerator memory and never touches the model being trained.
"""

from __future__ import annotations

import copy

from pydantic import Field

from cliffsweep.trainables.methods.base import Method, MethodParams
from cliffsweep.trainables.methods.costs import Costs
from cliffsweep.trainables.lazy import lazy_function, nn, penalties, torch

unwrap = lazy_function("cliffsweep.trainables.losses", "unwrap")


def interpolate(base: torch.Tensor, tuned: torch.Tensor, a: float) -> torch.Tensor:
    """(1 - a) base + a tuned in fp32, cast back; exact at a = 0 and a = 1 (torch.lerp)."""
    return torch.lerp(base.float(), tuned.detach().float().to(base.device), a).to(tuned.dtype)


class WiSEFTParams(MethodParams):
    alpha: float = Field(0.5, ge=0.0, le=1.0)
    """Mixing coefficient a: 0 = base model, 1 = plain SFT (our default 0.5)."""


class WiSEFT(Method):
    name = "wise_ft"
    costs = Costs()  # theta* lives on the CPU
    Params = WiSEFTParams

    def prepare(self, model: nn.Module, stats) -> nn.Module:
        self.anchor = penalties.snapshot(dict(unwrap(model).named_parameters()), device="cpu")
        return model

    def export(self, model: nn.Module) -> nn.Module:
        m = unwrap(model)
        # deepcopy with a memo that maps every live tensor to its CPU replacement: the copy gets
        # the interpolated weights without ever duplicating the model on the accelerator.
        memo = {}
        for name, p in m.named_parameters():
            memo[id(p)] = nn.Parameter(interpolate(self.anchor[name], p, self.params.alpha), requires_grad=False)
        for b in m.buffers():
            memo[id(b)] = b.detach().to("cpu", copy=True)
        return copy.deepcopy(m, memo)
