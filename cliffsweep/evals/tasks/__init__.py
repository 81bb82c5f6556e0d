"""Task registry: name -> Task class. Unknown names raise with the valid list. Tasks outside
evals (the toy world's) register themselves as entry points of the group `cliffsweep.tasks`
(pyproject.toml; registry.py)."""

from __future__ import annotations

from cliffsweep.registry import lookup, table_of
from cliffsweep.evals.tasks.base import EvalExample, Example, Sampling, Score, Task, TaskParams

# name -> "module:Class"; imported lazily so that listing names costs nothing.
TASKS: dict[str, str] = {
    "gsm8k": "cliffsweep.evals.tasks.gsm8k:GSM8K",
    "chem_l3": "cliffsweep.evals.tasks.chem_l3:ChemL3",
    "dataset": "cliffsweep.evals.tasks.dataset:Dataset",  # the user's own data (issue 30)
    "lm_eval": "cliffsweep.evals.tasks.lm_eval:LmEval",  # any lm-evaluation-harness task (issue 30)
    "loss": "cliffsweep.evals.tasks.loss:Loss",  # held-out NLL, lower is better (issue 30 part 4)
}


GROUP = "cliffsweep.tasks"


def task_names() -> list[str]:
    """Every task name a sweep file may use: evals' own and the installed plug-ins'."""
    return sorted(table_of(TASKS, GROUP))


def task_class(name: str) -> type[Task]:
    return lookup(TASKS, name, "task", GROUP)


def build_task(name: str, params: dict | None = None) -> Task:
    cls = task_class(name)
    return cls(cls.Params(**(params or {})))


def task_label(name: str, params: dict | None = None) -> str:
    """The store's name of the task a sweep file's entry builds (Task.label)."""
    return build_task(name, params).label


__all__ = ["TASKS", "GROUP", "task_names", "task_class", "build_task", "task_label", "Task", "TaskParams", "Example", "EvalExample",
           "Score", "Sampling"]
