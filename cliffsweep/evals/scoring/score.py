"""What scoring one generation gives (shared by the scorers and the tasks that use them)."""

from __future__ import annotations

from dataclasses import dataclass, field


@dataclass(frozen=True)
class Score:
    """The outcome of scoring one generation. `correct` is the primary metric (accuracy);
    `extra` holds secondary 0/1 metrics (e.g. GSM8K strict vs flexible extraction)."""

    correct: bool
    prediction: str
    extra: dict[str, bool] = field(default_factory=dict)
