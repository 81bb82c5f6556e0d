"""Bootstrap replicates of every point's accuracies, for the confidence of a regime.

With per-example results (store table ``samples``) we run a *paired* example bootstrap: each
replicate draws the task's examples with replacement once and re-scores every checkpoint on
that same draw, so the correlation between checkpoints (hard examples stay hard) is kept, as in
a paired bootstrap test (Efron & Tibshirani 1993, ch. 16). Without samples for a point we fall
back to its analytic binomial error: ``Binomial(n, p) / n`` draws, which is the example
bootstrap of one accuracy in distribution but unpaired across checkpoints.
"""

from __future__ import annotations

import numpy as np
import pandas as pd

from cliffsweep.analysis.points import AnalysisInputError
from cliffsweep.analysis.suite import suite_replicates, task_column


def _sample_replicates(points: pd.DataFrame, samples: pd.DataFrame, value_col: str, n_boot: int,
                       rng: np.random.Generator) -> tuple[np.ndarray, np.ndarray]:
    """Paired-bootstrap accuracies (len(points), n_boot) for points with samples, and a mask."""
    reps = np.full((len(points), n_boot), np.nan)
    has = np.zeros(len(points), bool)
    if samples.empty:
        return reps, has
    pos = pd.Series(np.arange(len(points)), index=pd.MultiIndex.from_frame(points[["trial_id", "step"]]))
    s = samples[["trial_id", "step", "example_id", "correct"]].copy()
    s["pos"] = pos.reindex(pd.MultiIndex.from_frame(s[["trial_id", "step"]])).to_numpy()
    s = s.dropna(subset=["pos"])
    if s.empty:
        return reps, has
    dup = s.duplicated(["pos", "example_id"])
    if dup.any():
        row = s[dup].iloc[0]
        raise AnalysisInputError(f"duplicate sample rows: trial {row.trial_id!r} step {row.step} "
                                 f"example {row.example_id!r}")
    rows = s["pos"].astype(int).to_numpy()
    ex_codes, examples = pd.factorize(s["example_id"])
    uniq_rows, row_idx = np.unique(rows, return_inverse=True)
    C = np.zeros((len(uniq_rows), len(examples)))
    M = np.zeros_like(C)
    C[row_idx, ex_codes] = s["correct"].astype(float).to_numpy()
    M[row_idx, ex_codes] = 1.0
    means = C.sum(1) / M.sum(1)
    values = points[value_col].to_numpy(float)[uniq_rows]
    off = np.abs(means - values) > 1e-6
    if off.any():
        k = int(np.argmax(off))
        p = points.iloc[uniq_rows[k]]
        raise AnalysisInputError(f"samples of {p.trial_id}@{p.step} give accuracy {means[k]:.6f} but evals "
                                 f"say {values[k]:.6f}: samples and evals disagree")
    W = rng.multinomial(len(examples), np.full(len(examples), 1.0 / len(examples)), size=n_boot).astype(float)
    num, den = C @ W.T, M @ W.T
    # A checkpoint scored on a subset may, rarely, draw none of its examples: keep its value then.
    reps[uniq_rows] = np.where(den > 0, num / np.maximum(den, 1), values[:, None])
    has[uniq_rows] = True
    return reps, has


def _column_replicates(points: pd.DataFrame, samples: pd.DataFrame | None, col: str, task: str | None,
                       n_boot: int, rng: np.random.Generator) -> tuple[np.ndarray, np.ndarray]:
    """Replicates of one accuracy column of ``points`` (task ``task``) and each row's source."""
    task_samples = samples[samples["task"] == task] if samples is not None and task else pd.DataFrame(
        columns=["trial_id", "step", "example_id", "correct"])
    reps, has = _sample_replicates(points, task_samples, col, n_boot, rng)
    n = points[f"n_{col}"].astype("Float64").to_numpy(float, na_value=np.nan) if f"n_{col}" in points \
        else np.full(len(points), np.nan)
    binom = ~has & np.isfinite(n) & (n > 0)
    if binom.any():
        p = points[col].to_numpy(float)[binom]
        nn = n[binom].astype(int)
        reps[binom] = rng.binomial(nn[:, None], p[:, None], size=(binom.sum(), n_boot)) / nn[:, None]
    return reps, np.where(has, "samples", np.where(binom, "binomial", "none"))


def replicate_accuracies(points: pd.DataFrame, samples: pd.DataFrame | None, learn_task: str | None,
                         retain_task: str | list[str] | None, n_boot: int, seed: int = 0,
                         suite: str = "share_of_base") -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Bootstrap replicates of L and R for every row of ``points``.

    Returns ``(L_reps, R_reps, source)``: two (len(points), n_boot) arrays and, per point,
    ``'samples'`` (paired example bootstrap), ``'binomial'`` (analytic fallback from n) or
    ``'none'`` (no n: the row stays NaN and no confidence can be given). Several retain tasks
    (a suite, analysis/suite.py): each task's items are drawn on their own, and R's replicates
    are the suite's aggregate of each replicate (issue 30: bootstrapped over every task's items).
    """
    rng = np.random.default_rng(seed)
    retain = list(retain_task) if isinstance(retain_task, (list, tuple)) else [retain_task]
    columns = [("L", learn_task)] + ([("R", retain[0])] if len(retain) == 1 else
                                     [(task_column(t), t) for t in retain])
    out, sources = zip(*(_column_replicates(points, samples, col, task, n_boot, rng) for col, task in columns))
    R = out[1] if len(retain) == 1 else suite_replicates(points, retain, suite, list(out[1:]))
    none = np.logical_or.reduce([s == "none" for s in sources])
    every = np.logical_and.reduce([s == "samples" for s in sources])
    return out[0], R, np.where(none, "none", np.where(every, "samples", "binomial"))
