"""What a method costs beyond plain SFT, declared in the method's own file (issue 33) and read by
the planner (cliffsweep/planner/costs.py): extra copies of the weights, extra FLOPs, the loss's
held heads, its once-per-model statistics pass, its training state. A method's class sets
`costs = Costs(...)` next to its code; tests/test_methods_registry.py requires every registered
method to declare it (a new method cannot inherit SFT's silently).

Plain data, no torch: the planner imports it without building anything.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal


@dataclass(frozen=True)
class Costs:
    weight_copies: float = 0.0
    """Copies of the weights the method keeps on the training device, in the parameter dtype
    (a frozen base model, theta*, importances; 0.5 = one byte per bf16 weight)."""
    extra_flops: int = 0
    """Training FLOPs per matmul parameter per token beyond SFT's 6: a frozen base's forward
    adds 2; LoRA's frozen weights take no weight gradient (-2)."""
    loss_heads: int = 1
    """Output heads the chunked loss holds at once (KL and IW: the model's and the base's)."""
    stats_data: Literal["retain", "learn", "weights"] | None = None
    """The once-per-model statistics pass (trainables/stats.py), by what it reads: retain data
    (forward and backward), learn data (forward only), the weights alone; None: no pass."""
    stats_flops: int = 0
    """That pass's FLOPs per matmul parameter per token (6: forward + backward, 2: forward)."""
    stats_accumulator: bool = False
    """The pass sums an fp32 importance per weight (EWC's Fisher, MAS's sensitivities)."""
    state_weight_copies: float = 0.0
    """Weight copies in the training state a checkpoint saves, beyond the model and optimizer."""
    state_bytes_per_weight: float = 0.0
    """Further bytes per weight in that state (NanoAdam's bool masks: 1)."""
