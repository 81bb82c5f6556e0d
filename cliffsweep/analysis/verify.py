"""Verification runs at a cliff's bracket (issue 52 part 1): which lrs of a series get training
runs with new seeds, so that its verdict rests on more than one run per lr.

A series read from one training run per lr cannot tell a collapse from one run's deviation, and
run-to-run variance is largest near a transition (a deviation of -0.11 at one lr turned a
gradual series into a 52 % "cliff" in the issue's example). So where the verdict is in doubt,
the sweep trains the two lrs that decided it again with ``verify.seeds`` new seeds:

- a series whose point estimate is a cliff: the two lrs of its critical bracket;
- a close call: a series that is not a cliff but whose closest pair of lrs within
  cliff_lr_ratio falls short of a cliff_drop collapse by at most ``verify.margin`` standard
  errors of its drop (frontiers' ``closest_shortfall_se``: run-to-run noise as the sweep
  measures it where it has several seeds, else runs.RUN_SD_PRIOR, plus item noise; issue 59
  part 4: one unit for every series, sized from runs rather than items): those two lrs. A
  collapse without learning beyond noise is a cliff's estimate, verified as one.

Nothing else is verified: a clearly gradual series and a series with no forgetting are left as
they are. The verdict is read from the sweep's own runs only, and the seeds are the sweep's seeds
continued (seeds [0], verify 2: seeds 1 and 2), so a re-run computes the same trials with the
same ids (exactly-once and resume come from the trial ids, as for refined trials). Pure
functions; the glue is orchestrator/refiner.py.
"""

from __future__ import annotations

import numpy as np
import pandas as pd

from cliffsweep.analysis.classify import Thresholds
from cliffsweep.analysis.regimes import CLIFF, FORGETTING, GRADUAL, INCONCLUSIVE


def verify_seeds(seeds: list[int], n: int) -> list[int]:
    """The ``n`` seeds after the sweep's own: [0] and 2 -> [1, 2]."""
    top = max(seeds)
    return [top + k for k in range(1, n + 1)]


def verify_lrs(row: pd.Series | dict, th: Thresholds, margin: float) -> list[float]:
    """The lrs of a series' verdict that verification runs go to (a frontiers row): its
    bracket when its point estimate is a cliff, the closest call's lrs when that falls short of
    a collapse by at most ``margin`` standard errors of its drop, else none."""
    estimate = row["regime_point_estimate"]
    short = row.get("closest_shortfall_se", np.nan)
    if estimate == CLIFF:
        pair = (row["critical_lr_low"], row["critical_lr_high"])
        if not all(np.isfinite(pair)):  # the frontiers row blanks cliff fields of a series it overruled
            pair = (row["closest_lr_low"], row["closest_lr_high"])
    elif estimate in (GRADUAL, FORGETTING, INCONCLUSIVE) and np.isfinite(short) and short <= margin:
        pair = (row["closest_lr_low"], row["closest_lr_high"])
    else:
        return []
    return [float(x) for x in pair if np.isfinite(x)]
