"""A retention suite: several retain tasks read as one retention R (issue 30 part 3).

Invariant: with one retain task nothing here runs, and R is that task's accuracy, as it always
was (the paper's sweeps give the same numbers). With several, each checkpoint keeps every
task's accuracy in its own column (``R[<task>]``) and R becomes one aggregate of them:

- ``share_of_base`` (default): the mean over tasks of each task's accuracy as a share of its
  base model's, ``R = mean_t R_t / R0_t``. The base point is 1 by construction, so a task the
  base model is poor at weighs as much as one it is good at, and the classifier's "share of base
  retention" (classify.py) reads as the mean share kept.
- ``general_003``: seed 003's "general performance", the plain mean of the tasks' accuracies,
  leaving out every task its base model scores below 0.5 on (003, appendix "experimental
  setup": "we exclude benchmarks where the model's absolute performance is below a threshold
  of 0.5"; general performance there is the mean of IFEval, GSM8K and HumanEval).

Which tasks a model's aggregate uses is decided once, on the base model's measured accuracies,
never per bootstrap replicate: a replicate re-draws every task's items (confidence.py), not the
definition of the suite.
"""

from __future__ import annotations

import numpy as np
import pandas as pd
from cliffsweep.sweep.grid import is_base

AGGREGATES = ("share_of_base", "general_003")
GENERAL_MIN_BASE = 0.5
"""003's cut: a benchmark the base model scores below this is left out of general performance."""


def task_column(task: str) -> str:
    """The points column holding one retain task's accuracy."""
    return f"R[{task}]"


def n_column(task: str) -> str:
    return f"n_R[{task}]"


def suite_label(tasks: list[str], how: str) -> str:
    """How the report and the frontiers name the aggregate."""
    what = "mean share of base" if how == "share_of_base" else "003's general performance"
    return f"suite ({what}) of {', '.join(tasks)}"


def kept_tasks(base: np.ndarray, how: str) -> np.ndarray:
    """Which of a model's tasks (base accuracies ``base``, shape (T,)) enter its aggregate."""
    if how == "share_of_base":
        return base > 0  # a share of nothing is undefined
    if how == "general_003":
        return base >= GENERAL_MIN_BASE
    raise ValueError(f"unknown suite aggregate {how!r}; valid: {list(AGGREGATES)}")


def aggregate(R: np.ndarray, base: np.ndarray, keep: np.ndarray, how: str) -> np.ndarray:
    """The aggregate over the last axis but one of ``R`` (shape (..., T) or (n, T, B)): ``base``
    broadcasts against ``R`` (the base model's accuracy of each task, or its replicates);
    ``keep`` (T,) marks the tasks used. Pure."""
    axis = 1 if R.ndim == 3 else -1
    shape = [1] * R.ndim
    shape[axis] = len(keep)
    mask = keep.reshape(shape)
    if how == "share_of_base":
        share = np.divide(R, base, out=np.zeros(np.broadcast(R, base).shape), where=base > 0)
        return np.where(mask, share, 0.0).sum(axis) / keep.sum()
    return np.where(mask, R, 0.0).sum(axis) / keep.sum()


def _bases(points: pd.DataFrame, tasks: list[str]) -> dict[str, np.ndarray]:
    """Each model's base accuracy per task (mean over its base rows)."""
    base = points[is_base(points)].groupby("model")[[task_column(t) for t in tasks]].mean()
    return {m: row.to_numpy(float) for m, row in base.iterrows()}


def model_kept(points: pd.DataFrame, tasks: list[str], how: str) -> tuple[dict[str, np.ndarray], list[str]]:
    """Model -> the tasks its aggregate uses, and notes. A model without a base evaluation, or
    with no task to keep, has no aggregate (the suite is defined against its base model): it is
    left out and a note says why."""
    bases = _bases(points, tasks)
    out, notes = {}, []
    for model in sorted(points["model"].unique()):
        if model not in bases:
            notes.append(f"model {model!r} left out: it has no base evaluation, and a retention suite is read "
                         "against the base model's scores (evaluate the base, or --retain-task TASK)")
            continue
        keep = kept_tasks(bases[model], how)
        if not keep.any():
            notes.append(f"model {model!r} left out: no retain task enters its {how} aggregate (base scores "
                         f"{dict(zip(tasks, bases[model].round(3)))}); --retain-task TASK reads one")
            continue
        if not keep.all():
            left = [t for t, k in zip(tasks, keep) if not k]
            notes.append(f"{model}: the retention suite leaves out {left} (its base model scores "
                         f"{'0' if how == 'share_of_base' else f'below {GENERAL_MIN_BASE}'} there; {how})")
        out[model] = keep
    return out, notes


def suite_retention(points: pd.DataFrame, tasks: list[str], how: str) -> tuple[pd.Series, list[str]]:
    """The aggregate R of every row of ``points`` (which hold a ``R[<task>]`` column per task;
    NaN for a model left out) and notes naming what was left out."""
    bases = _bases(points, tasks)
    kept, notes = model_kept(points, tasks, how)
    cols = [task_column(t) for t in tasks]
    R = pd.Series(np.nan, index=points.index)
    for model, keep in kept.items():
        rows = points.index[points["model"] == model]
        R.loc[rows] = aggregate(points.loc[rows, cols].to_numpy(float), bases[model], keep, how)
    return R, notes


def suite_replicates(points: pd.DataFrame, tasks: list[str], how: str, task_reps: list[np.ndarray]) -> np.ndarray:
    """Bootstrap replicates of the aggregate (len(points), B) from each task's replicates
    (confidence.replicate_accuracies): each replicate's shares are taken against the same
    replicate of the base model, so the base's own sampling error is carried."""
    kept, _ = model_kept(points, tasks, how)
    stack = np.stack(task_reps, axis=1)  # (n, T, B)
    out = np.full((len(points), stack.shape[2]), np.nan)
    base_rows = is_base(points).to_numpy()
    models = points["model"].to_numpy()
    for model, keep in kept.items():
        rows = models == model
        base = stack[rows & base_rows].mean(0)  # (T, B)
        out[rows] = aggregate(stack[rows], base[None], keep, how)
    return out
