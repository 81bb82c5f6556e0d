"""Evaluate one task on whatever checkpoint a backend currently serves.

Pure glue: all prompts go to the backend in one batched call (engines batch far better than a
loop), then every generation is scored by the task's own scorer.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field

from cliffsweep.evals.backends.base import Backend
from cliffsweep.evals.tasks.base import Task


@dataclass(frozen=True)
class TaskResult:
    task: str
    accuracy: float
    """Mean primary correctness (what analysis uses)."""
    n: int
    extra: dict[str, float] = field(default_factory=dict)
    """Secondary metrics: name -> mean over examples (GSM8K strict_match / flexible_match)."""
    samples: list[tuple[str, bool, str]] = field(default_factory=list)
    """(example_id, correct, prediction) per example, for bootstrap confidence intervals."""
    seconds: float = 0.0
    """Generation + scoring wall time."""
    scorer_version: str = ""


def evaluate_task(backend: Backend, task: Task) -> TaskResult:
    start = time.perf_counter()
    examples = task.eval_examples()
    if not examples:
        raise ValueError(f"task {task.name}: no evaluation examples")
    generations = backend.generate([ex.prompt for ex in examples], task.sampling)
    if len(generations) != len(examples):
        raise RuntimeError(f"backend returned {len(generations)} generations for {len(examples)} prompts")
    scores = [task.score(gen, ex.reference) for gen, ex in zip(generations, examples)]
    extra_names = sorted({k for s in scores for k in s.extra})
    extra = {k: sum(bool(s.extra.get(k, False)) for s in scores) / len(scores) for k in extra_names}
    return TaskResult(
        task=task.name,
        accuracy=sum(s.correct for s in scores) / len(scores),
        n=len(scores),
        extra=extra,
        samples=[(ex.id, s.correct, s.prediction) for ex, s in zip(examples, scores)],
        seconds=time.perf_counter() - start,
        scorer_version=task.scorer_version,
    )
