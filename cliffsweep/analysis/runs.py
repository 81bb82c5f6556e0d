"""Several training runs at one lr: how many there are where a verdict is decided, whether they
reproduce a collapse, and the weights of a bootstrap over them (issue 52).

A series' verdict rests on one training run per lr unless the sweep has several seeds or
verification runs (`verify:`). An evaluation-item bootstrap cannot see run-to-run training
variance, which is largest near a transition: one run's deviation of -0.11 at one lr can turn a
gradual series into a cliff. So, where an lr has several runs:

- the bootstrap is hierarchical (Davison & Hinkley 1997, Sec. 3.8, "two-stage" resampling):
  each replicate draws that lr's runs with replacement, then (confidence.py) items within each
  run; the replicate's point at that lr is the mean of the runs drawn;
- a collapse is a cliff only if every run past its bracket shows it, within that run's own
  item noise: each run at the bracket's upper lr lost ``cliff_drop`` of R0 from the safe lr's
  mean. A collapse one run makes and another does not is no cliff in either reading. (A run at
  the safe lr that has already collapsed is not a disagreement: where a sharp transition falls
  moves from run to run, and the paper-sized synthetic sweep's seeds do exactly that.)

Pure functions over per-point arrays (one row per checkpoint, base rows at lr 0).
"""

from __future__ import annotations

import numpy as np

_EPS = 1e-9
RUN_SD_PRIOR = 0.10
"""Run-to-run standard deviation of a retention share R / R0 at one lr, where the sweep has one
run per lr and so measures none (issue 59 part 4). Ours: the project's own example deviates by
0.22 of R0 at one lr (tests/test_verdict_noise.py, -0.11 at R0 = 0.5), read as a two-sigma
deviation; item noise is far smaller (0.03-0.05 of R0 at 200-500 items), so a margin sized from
items alone (issue 52's 0.10 of R0) left near misses of 0.12 unverified."""


def run_sd(lr: np.ndarray, R: np.ndarray, R0: float) -> float:
    """The run-to-run standard deviation of R / R0 the sweep measures: pooled over the lrs with
    several runs (``lr``, ``R``: one entry per run); RUN_SD_PRIOR where no lr has two."""
    lrs, inv, counts = np.unique(lr, return_inverse=True, return_counts=True)
    several = counts[inv] >= 2
    if not several.any() or R0 <= 0:
        return RUN_SD_PRIOR
    r = R / R0
    means = np.bincount(inv, r, len(lrs)) / counts
    dev = (r - means[inv])[several]
    return float(np.sqrt((dev ** 2).sum() / (counts[counts >= 2] - 1).sum()))


def shortfall_se(lr: np.ndarray, R: np.ndarray, n_R: np.ndarray, R0: float, low: float | None, high: float | None,
                 drop: float | None, cliff_drop: float) -> float:
    """How far the pair (``low``, ``high``) falls short of a ``cliff_drop`` collapse, in standard
    errors of its drop: run noise (``run_sd``, twice: one per lr, over the runs each lr averages)
    and each lr's item noise; NaN where the pair or the drop is unknown. One unit for every close
    call, so the verification margin means the same for any series (issue 59 part 4)."""
    if low is None or high is None or drop is None or not np.isfinite(drop) or R0 <= 0:
        return float("nan")
    sd = run_sd(lr, R, R0)
    var = 0.0
    for x in (low, high):
        at = np.isclose(lr, x, rtol=1e-9, atol=0)
        k = max(int(at.sum()), 1)
        var += sd ** 2 / k + float(np.mean(_share_se(R[at], n_R[at], R0) ** 2)) / k if at.any() else sd ** 2
    return float(max(0.0, cliff_drop - drop) / np.sqrt(var)) if var > 0 else float("nan")


def runs_at(lr: np.ndarray, *lrs: float | None) -> int | None:
    """The fewest runs (points) at any of ``lrs`` (None: no lr given or none known)."""
    known = [x for x in lrs if x is not None and x == x]
    if not known:
        return None
    return int(min(np.isclose(lr, x, rtol=1e-9, atol=0).sum() for x in known))


def run_weights(lr: np.ndarray, n_boot: int, rng: np.random.Generator) -> np.ndarray | None:
    """(len(lr), n_boot) weights: per replicate, each lr's runs drawn with replacement, a run's
    weight the times it was drawn over the lr's run count (the weights of one lr sum to 1).
    None where every lr has one run: the item bootstrap alone is then the whole bootstrap."""
    lrs, inv, counts = np.unique(lr, return_inverse=True, return_counts=True)
    if counts.max() < 2:
        return None
    w = np.zeros((len(lr), n_boot))
    for u in np.flatnonzero(counts > 1):
        rows = np.flatnonzero(inv == u)
        k = len(rows)
        w[rows] = rng.multinomial(k, np.full(k, 1.0 / k), size=n_boot).T / k
    single = counts[inv] == 1
    w[single] = 1.0
    return w


def _share_se(R: np.ndarray, n: np.ndarray, R0: float) -> np.ndarray:
    """A run's binomial standard error of its retention share R / R0 (0 where n is unknown)."""
    ok = np.isfinite(n) & (n > 0)
    nn = np.where(ok, n, 1.0)
    return np.where(ok, np.sqrt(np.maximum(R * (1 - R), 1.0 / nn) / nn), 0.0) / R0


def unreproduced(lr: np.ndarray, R: np.ndarray, n_R: np.ndarray, R0: float, low: float, high: float,
                 cliff_drop: float, z: float, cliff: bool = True, names: np.ndarray | None = None) -> str | None:
    """Why the runs at a verdict's deciding pair (``low`` -> ``high``) disagree with it, or None
    where they agree (or where the upper lr has one run: nothing to compare). ``lr``, ``R``,
    ``n_R``: the series' trained points (one per run); ``names``: each run's name for the reason.

    Checked both ways (issue 59 part 4): for a cliff (``cliff``), every run at the upper lr must
    have lost ``cliff_drop`` of R0 from the safe lr's mean within its own item noise; for a
    verdict that is not a cliff (its closest call's pair), no run at the upper lr may have lost
    ``cliff_drop`` beyond its noise, for that run alone is a collapse the mean hides (two gradual
    seeds and one that cliffs averaged to "gradual" at 63 %)."""
    at_low, at_high = (np.isclose(lr, x, rtol=1e-9, atol=0) for x in (low, high))
    if at_high.sum() < 2 or not at_low.any():
        return None
    r, tol = R / R0, z * _share_se(R, n_R, R0)
    safe = float(r[at_low].mean())
    who = np.asarray(names, dtype=object)[at_high] if names is not None else np.array(
        [f"run {k}" for k in range(int(at_high.sum()))], dtype=object)
    if cliff:
        fell = safe - r[at_high] + tol[at_high] >= cliff_drop - _EPS
        if not fell.all():
            k = int(np.argmax(np.where(fell, -np.inf, r[at_high])))
            return (f"a run at lr {high:g} ({who[k]}) kept {r[at_high][k]:.0%} of base retention, more than its "
                    f"noise allows for a collapse of {cliff_drop:.0%} from lr {low:g}: the runs at the cliff's "
                    "bracket disagree")
        return None
    fell = safe - r[at_high] - tol[at_high] >= cliff_drop - _EPS
    if fell.any() and not fell.all():
        k = int(np.argmin(np.where(fell, r[at_high], np.inf)))
        return (f"a run at lr {high:g} ({who[k]}) fell to {r[at_high][k]:.0%} of base retention, a collapse of "
                f"{cliff_drop:.0%} or more from lr {low:g} beyond its noise, where the other runs did not: the runs "
                "at the closest call disagree about a cliff")
    return None
