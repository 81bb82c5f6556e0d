"""What evaluating one task on one checkpoint gives (evals/runner.py, evals/harness.py): the
evaluator actor turns it into `evals` and `samples` rows (evaluator/results.py)."""

from __future__ import annotations

from dataclasses import dataclass, field


@dataclass(frozen=True)
class TaskResult:
    task: str
    accuracy: float
    """The primary metric's value (`metric`): mean correctness, or a loss task's mean NLL."""
    n: int
    extra: dict[str, float] = field(default_factory=dict)
    """Secondary metrics: name -> mean over examples (GSM8K strict_match / flexible_extract /
    numeric_match; MCQ sciknoweval_match / logprob_accuracy; `<metric>/<group>` per subtask,
    `accuracy/<group>` included)."""
    samples: list[tuple[str, bool, str]] = field(default_factory=list)
    """(example_id, correct, prediction) per example, for bootstrap confidence intervals."""
    seconds: float = 0.0
    """Generation + scoring wall time."""
    scorer_version: str = ""
    metric: str = "accuracy"
    """The primary metric's name (Task.metric): "accuracy" or "loss"."""
    draws: list[tuple[str, int, bool, str]] = field(default_factory=list)
    """A sampled evaluation's every sample (example_id, sample index, correct, prediction); its
    avg@n and pass@k are in `extra` (evals/scoring/passk.py). Empty: greedy only."""
    references: list[str] = field(default_factory=list)
    """Each item's reference answer as text, in the order of `samples` (what the dashboard shows
    beside a generation); empty where a task has none to show (lm-eval's own, loss tasks)."""
    n_items: int | None = None
    """The task's items; more than `n` when a staged evaluation stopped early (issue 51,
    evaluator/staged.py). None: `n`, every item."""
    interval: tuple[float, float] | None = None
    """A staged evaluation's anytime-valid interval on the accuracy on every item
    (evals/stopping.py); None for a full one."""
    settled: bool = True
    """False where a staged evaluation stopped by its width with a cut still inside its interval
    (evals/stopping.py `Reading.open`): the analysis scores it in full before a verdict reads it."""
    scores: list[float] = field(default_factory=list)
    """Each sample's own value where it is not right/wrong (a loss task: the item's mean per-token
    NLL), in the order of `samples`; empty otherwise."""
