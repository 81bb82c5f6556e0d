"""Plain full finetuning: the SFT recipe of the cliff paper (000, App. B) with no additions."""

from __future__ import annotations

from cliffsweep.trainables.methods.base import Method
from cliffsweep.trainables.methods.costs import Costs


class SFT(Method):
    name = "sft"
    fsdp_safe = True  # the empty method
    costs = Costs()
