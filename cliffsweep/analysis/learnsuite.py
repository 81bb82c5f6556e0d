"""A learn suite: several in-domain benchmarks read as one learning axis L (issue 40 part 6).

004 (RPSFT, Sec. 5 and Table 2) trains on one math corpus and reads learning as the average of
six in-domain benchmarks ("ID Avg"), against six out-of-domain ones: L = mean_t L_t, the plain
mean of the suite's accuracies (``tasks.learn_suite``; each evaluated with role learn).

Invariant: without a learn suite nothing here runs. With one, the suite enters the analysis as
one more learn task, whose accuracy at a checkpoint is the mean of its tasks' accuracies there
(a checkpoint missing any of them has none), so every reader of L (frontiers, classification,
refinement, the report) reads the suite unchanged. Its per-item rows for the bootstrap are the
suite's items pooled, each item's score weighted by N / (T n_t) (N items in all, T tasks, n_t of
its own task), so that an item mean over the pool is the mean of the task means: a replicate
re-draws items from the pool (confidence.py), which varies each task's share of the draw a
little; the point estimate is exact.
"""

from __future__ import annotations

import pandas as pd


def suite_label(tasks: list[str]) -> str:
    """The learn suite's name in the store's analysis: the task L is read on."""
    return f"learn suite (mean of {', '.join(tasks)})"


def suite_evals(evals: pd.DataFrame, tasks: list[str]) -> pd.DataFrame:
    """One accuracy row per checkpoint evaluated on every task of the suite: the mean of their
    accuracies, n the sum of their items (pure; `evals` holds accuracy rows, analysis' scores_of)."""
    mine = evals[evals["task"].isin(tasks) & (evals["metric"] == "accuracy")]
    keys = ["trial_id", "step"]
    complete = mine.groupby(keys)["task"].transform("nunique") == len(tasks)
    mine = mine[complete]
    if mine.empty:
        return evals.iloc[:0]
    first = mine.drop_duplicates(keys).set_index(keys)
    agg = mine.groupby(keys).agg(value=("value", "mean"), n=("n", "sum"))
    out = first.drop(columns=["value", "n"]).join(agg).reset_index()
    return out.assign(task=suite_label(tasks), role="learn",
                      scorer_version="suite:" + ",".join(tasks))[evals.columns]


def suite_samples(samples: pd.DataFrame, tasks: list[str]) -> pd.DataFrame:
    """The suite's items at each checkpoint that has samples of every task, pooled and weighted
    (module doc); pure."""
    mine = samples[samples["task"].isin(tasks)]
    if mine.empty:
        return samples.iloc[:0]
    keys = ["trial_id", "step"]
    n_task = mine.groupby([*keys, "task"])["example_id"].transform("size")
    n_all = mine.groupby(keys)["example_id"].transform("size")
    n_tasks = mine.groupby(keys)["task"].transform("nunique")
    # a checkpoint whose samples lack a task (an older evaluation) gets none: its pooled mean
    # would not be the suite's, and the bootstrap falls back to the binomial from n
    whole = n_tasks == len(tasks)
    mine, weight = mine[whole], (n_all / (n_tasks * n_task))[whole]
    return mine.assign(correct=mine["correct"].astype(float) * weight,
                       example_id=mine["task"] + "/" + mine["example_id"].astype(str),
                       task=suite_label(tasks))


def with_learn_suite(evals: pd.DataFrame, samples: pd.DataFrame, tasks: list[str]
                     ) -> tuple[pd.DataFrame, pd.DataFrame, str]:
    """`evals` and `samples` with the suite's rows added; the suite's task name."""
    label = suite_label(tasks)
    return (pd.concat([evals, suite_evals(evals, tasks)], ignore_index=True),
            pd.concat([samples, suite_samples(samples, tasks)], ignore_index=True), label)
