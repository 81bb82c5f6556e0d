"""Task registry: name -> Task class. Unknown names raise with the valid list."""

from __future__ import annotations

from cliffsweep.registry import lookup
from cliffsweep.evals.tasks.base import EvalExample, Example, Sampling, Score, Task, TaskParams

# name -> "module:Class"; imported lazily so that listing names costs nothing.
TASKS: dict[str, str] = {
    "gsm8k": "cliffsweep.evals.tasks.gsm8k:GSM8K",
    "chem_l3": "cliffsweep.evals.tasks.chem_l3:ChemL3",
    "toy_arith": "cliffsweep.toy.tasks:ToyArith",
    "toy_facts": "cliffsweep.toy.tasks:ToyFacts",
    "dataset": "cliffsweep.evals.tasks.dataset:Dataset",  # the user's own data (issue 30)
    "lm_eval": "cliffsweep.evals.tasks.lm_eval:LmEval",  # any lm-evaluation-harness task (issue 30)
    "loss": "cliffsweep.evals.tasks.loss:Loss",  # held-out NLL, lower is better (issue 30 part 4)
}


def task_class(name: str) -> type[Task]:
    return lookup(TASKS, name, "task")


def build_task(name: str, params: dict | None = None) -> Task:
    cls = task_class(name)
    return cls(cls.Params(**(params or {})))


def task_label(name: str, params: dict | None = None) -> str:
    """The store's name of the task a sweep file's entry builds (Task.label)."""
    return build_task(name, params).label


__all__ = ["TASKS", "task_class", "build_task", "task_label", "Task", "TaskParams", "Example", "EvalExample",
           "Score", "Sampling"]
