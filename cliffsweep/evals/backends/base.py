"""The eval-backend interface: one engine for one base model, serving checkpoints in turn.

An evaluator actor owns one backend for its whole life (engine start is paid once per model).
`load()` swaps in a checkpoint (full weights: in-place reload; LoRA: an adapter request) and
must verify with the checkpoint's canary that the engine really serves it (vLLM has had
stale-weight reload bugs). `generate()` is greedy, with explicit max_tokens and stop strings.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal, Protocol

from cliffsweep.evals.tasks.base import Sampling

CANARY_FILE = "cliffsweep_canary.json"
"""Written by the trainer into every checkpoint folder: {"token_ids": [...], "logprobs": [...]},
the log-probabilities the trained model itself gives each token of a fixed text."""


@dataclass(frozen=True)
class CheckpointRef:
    """Where a checkpoint lives. kind='full': an HF model folder; kind='lora': a peft adapter
    folder for the evaluator's base model. path=None means the base model itself."""

    path: str | None
    kind: Literal["full", "lora"] = "full"


class StaleWeightsError(RuntimeError):
    """The engine does not serve the checkpoint it was asked to load (canary mismatch)."""


class Backend(Protocol):
    name: str

    def load(self, ckpt: CheckpointRef) -> None:
        """Serve `ckpt` from now on; raise StaleWeightsError if the canary disagrees."""

    def generate(self, prompts: list[str], sampling: Sampling) -> list[str]:
        """Greedy completions of user `prompts`, each wrapped in the model's chat template."""

    def close(self) -> None: ...
