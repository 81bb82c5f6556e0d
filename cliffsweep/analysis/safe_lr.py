"""The highest safe learning rate of a series: how far can the model learn without forgetting?

The cliff paper (seed 000, Sec. 6) ends by reframing the trade-off as "to what learning rate
and hyperparameter setting can the model learn while not forgetting?". Per series we answer it
with the highest trained lr that keeps at least ``1 - forget_min`` of base retention (the
no-forgetting bar of :class:`~cliffsweep.analysis.classify.Thresholds`), the next trained lr
above it (which forgets: the answer lies between the two, and refinement narrows that
bracket), and the learning gained at the safe lr.

"Highest", literally: with non-monotone data a lower lr may forget while a higher one does not;
the higher one is the answer, so every trained lr above ``max_safe_lr`` forgets.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass

import numpy as np

from cliffsweep.analysis.classify import _EPS, Thresholds


@dataclass(frozen=True)
class SafeLR:
    max_safe_lr: float | None = None
    """Highest trained lr keeping >= 1 - forget_min of base retention; None if none does
    (or there is no usable base point)."""
    max_safe_lr_next: float | None = None
    """The next trained lr above it (it forgets); None if max_safe_lr is the highest trained
    lr. With no safe lr: the lowest trained lr (the bracket is (0, that lr): sweep lower)."""
    learn_at_max_safe_lr: float | None = None
    """Learning gain L - L0 at max_safe_lr, in accuracy points."""

    def as_dict(self) -> dict:
        return asdict(self)

    @property
    def bracket_ratio(self) -> float | None:
        """max_safe_lr_next / max_safe_lr, the factor the answer is known to; None if open."""
        if self.max_safe_lr is None or self.max_safe_lr_next is None:
            return None
        return self.max_safe_lr_next / self.max_safe_lr


def max_safe_lr_arrays(lr: np.ndarray, L: np.ndarray, R: np.ndarray, th: Thresholds) -> SafeLR:
    """:class:`SafeLR` of per-lr arrays sorted by lr with unique lrs, lr[0] = 0 the base point
    (as :func:`~cliffsweep.analysis.classify.classify_arrays` takes them)."""
    if len(lr) < 2 or lr[0] != 0 or R[0] <= 0:
        return SafeLR()
    L0, R0, lr, L, R = L[0], R[0], lr[1:], L[1:], R[1:]
    safe = np.flatnonzero(R / R0 >= 1.0 - th.forget_min - _EPS)
    if not len(safe):
        return SafeLR(max_safe_lr_next=float(lr[0]))
    k = int(safe[-1])
    return SafeLR(max_safe_lr=float(lr[k]), max_safe_lr_next=float(lr[k + 1]) if k + 1 < len(lr) else None,
                  learn_at_max_safe_lr=float(L[k] - L0))
