"""What an optimizer keeps per trained weight, declared in the optimizer's own file (issue 38, as
methods declare theirs: trainables/methods/costs.py) and read by the planner
(cliffsweep/planner/costs.py) for memory and checkpoint sizes. Plain data, no torch."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class OptimizerCosts:
    states: int
    """State tensors per trained weight, each the weight's size (AdamW: two moments)."""
    hidden_matrix_states: int | None = None
    """On the transformer blocks' hidden 2-D weights, when it differs (Muon: one momentum there,
    its AdamW part keeps two on embeddings, head and 1-D parameters)."""

    def state_elements(self, trainable: int, hidden_2d: int, lora: bool) -> float:
        """State elements for `trainable` weights of which `hidden_2d` are hidden matrices. LoRA's
        adapters are all 2-D: they take the hidden-matrix rule."""
        if self.hidden_matrix_states is None:
            return float(self.states * trainable)
        if lora:
            return float(self.hidden_matrix_states * trainable)
        return float(self.hidden_matrix_states * hidden_2d + self.states * (trainable - hidden_2d))
