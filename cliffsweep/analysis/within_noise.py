"""Which of a series' decisions the evaluation items cannot settle, said in words (issue 59 part 3).

The verdict reads a checkpoint's retention share r = R / R0 against cuts (analysis/classify.py
Thresholds): 1 - forget_min for the highest safe lr, and a pair's drop against cliff_drop for a
cliff's bracket. Where even every item leaves the cut within ``noise_z`` binomial standard errors
of the value read, which side the checkpoint is on is decided by noise: the analysis still picks
a side (its point estimate), and this says that it is a pick, in the form a citation can carry
("highest safe lr 1e-5 or 3e-5: within noise at 420 items"). The tool never states a certainty
it has not measured. Pure functions over per-lr arrays (base first, as classify_arrays takes them).
"""

from __future__ import annotations

import numpy as np

from cliffsweep.analysis.classify import Thresholds, _var
from cliffsweep.analysis.lr_format import lr_text


def _share_se(R: np.ndarray, n: np.ndarray, k: int) -> float:
    """Binomial standard error of r_k = R_k / R0, R0 taken as known (the base scored on every item,
    as the stopping rule's share interval takes it), unpaired (without the items, the pairing that
    narrows a checkpoint's change from its base is unknown: this errs towards "within noise")."""
    return float(np.sqrt(_var(R[[k]], n[[k]])[0]) / R[0])


def notes(lr: np.ndarray, R: np.ndarray, n_R: np.ndarray, safe_lr: float | None, safe_next: float | None,
          bracket: tuple[float | None, float | None], th: Thresholds) -> list[str]:
    """The sentences for the decisions within noise; [] where every one is beyond it or the item
    counts are unknown (then nothing is measured, and the row says nothing it has not)."""
    n = np.asarray(n_R, float)
    if len(lr) < 2 or R[0] <= 0 or not (np.isfinite(n).all() and (n > 0).all()):
        return []
    at = {float(x): k for k, x in enumerate(lr)}

    def items(*ks: int) -> str:  # the items the decision was read from
        m = n[list(ks)]
        return f"{int(m.min()):,}" if m.min() == m.max() else f"{int(m.min()):,}-{int(m.max()):,}"

    out, cut = [], 1.0 - th.forget_min
    close = [x for x in (safe_lr, safe_next) if x is not None and x in at
             and abs(R[at[x]] / R[0] - cut) <= th.noise_z * _share_se(R, n, at[x])]
    if close:
        lo = f"highest safe lr {lr_text(safe_lr)}" if safe_lr is not None else "no lr safe"
        hi = f" or {lr_text(safe_next)}" if safe_next is not None else " or none"
        out.append(f"{lo}{hi}: within noise at {items(*(at[x] for x in close))} items "
                   f"(retention within {th.noise_z:g} standard errors of {cut:.0%} of base)")
    lo, hi = bracket
    if lo is not None and hi is not None and lo in at and hi in at:
        i, j = at[lo], at[hi]
        drop = (R[i] - R[j]) / R[0]
        se = float(np.sqrt(_share_se(R, n, i) ** 2 + _share_se(R, n, j) ** 2))
        if abs(drop - th.cliff_drop) <= th.noise_z * se:
            out.append(f"the drop from lr {lr_text(lo)} to {lr_text(hi)} ({drop:.0%} of base) is within noise of "
                       f"cliff_drop {th.cliff_drop:.0%} at {items(i, j)} items: cliff or not is noise's call")
    return out
