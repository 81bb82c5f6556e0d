"""Regime of one learning-forgetting series: cliff, gradual, no forgetting, or inconclusive.

The cliff paper (seed 000, "Learning-Forgetting Optimality in Supervised Finetuning: A Cliff
Perspective", Sec. 5.2, Fig. 3-5 and 7) sweeps the SFT learning rate and plots retention
(GSM8K) against learning (ChemL3). Two regimes arise:

- **gradual** (Fig. 3): retention falls progressively as learning rises;
- **cliff** (Fig. 4, 7): small learning rates learn without forgetting, then one learning-rate
  step flips into catastrophic forgetting with no learning gain.

The paper gives no numeric test; the one here and its thresholds are our defaults. A *series*
is the points of one model x method (x epochs) across learning rates plus the base model
(lr = 0). Every quantity is relative, so the test means the same for a 25 %-chance MCQ and a
generative benchmark:

- retention share ``r = R / R0``: the share of the base retention kept (``1 - r`` = forgetting);
- learning gain across a collapse is compared with the series' learning span
  ``max(max L - L0, min_span * (1 - L0))``: the share of all the learning the series achieves.

**The cliff is a property of the curve, not of the grid.** "One lr step" of the paper is read
as an lr *factor*: a cliff is a collapse of at least ``cliff_drop`` of base retention within an
lr factor of at most ``cliff_lr_ratio``, with at most ``max_gain_share`` of the learning span
gained across it. The collapse is witnessed by any two trained lrs ``lr_i < lr_j`` with
``lr_j / lr_i <= cliff_lr_ratio``, not only by neighbours: trained lrs between them (the points
a refinement adds inside a bracket) belong to the collapse. So adding points on the curve never
removes a witness, and a gradual decline (which loses less than ``cliff_drop`` within any
``cliff_lr_ratio`` factor) has none on any grid. A grid step wider than ``cliff_lr_ratio`` that
loses ``cliff_drop`` is *unresolved*: it may hide a sharp cliff or a steep gradual decline, and
only lrs inside it (``refine:`` in the sweep file) can tell.

Rules, in order (every threshold is a field of :class:`Thresholds`):

1. inconclusive if there is no base point, fewer than ``min_lrs`` trained learning rates, or
   ``R0 = 0`` (forgetting is unmeasurable);
2. no_forgetting if every trained point keeps more than ``1 - forget_min`` of ``R0``;
3. inconclusive if the lowest trained lr already lost at least ``cliff_drop``: the sweep never
   shows the learn-without-forgetting side (sweep lower lrs);
4. cliff if some trained lr ``lr_i`` keeping at least ``1 - near_base`` of ``R0`` and a higher
   one ``lr_j <= cliff_lr_ratio * lr_i`` differ by at least ``cliff_drop`` of ``R0`` in
   retention while learning gains at most ``max_gain_share`` of the span, and the collapse
   persists (no lr above ``lr_j`` climbs back to ``1 - near_base``). The lowest such ``lr_j``
   and the highest ``lr_i`` that witnesses it are the critical bracket;
5. inconclusive if such a collapse exists but does not persist (non-monotone: an outlier);
6. inconclusive (unresolved) if two neighbouring trained lrs more than ``cliff_lr_ratio``
   apart collapse by ``cliff_drop`` from ``1 - near_base`` (whatever the learning gain: the
   gain may come before the collapse inside the step); the bracket is reported for refinement;
7. otherwise retention falls meaningfully with no collapse within ``cliff_lr_ratio``, and the
   series is **gradual** where the lrs that forget learned beyond noise over the best lr that
   keeps retention (the base included): the paper's trade-off (000 Fig. 3, where a method such
   as SIB can help); else **forgetting**: retention lost with no learning beyond noise to show
   for it (issue 59: rule 7 was the catch-all, and a series that only forgets read gradual at
   confidence 1.00).

**Learning in standard errors** (issue 59 part 2). Where the learn task's item counts are known
(``n_L``), every "did it learn" test reads the gain in binomial standard errors of the
difference of the two accuracies, beside the share tests: across a collapse (rule 4: a gain is
learning only when it is above ``max_gain_share`` of the span *and* above ``noise_z`` standard
errors; the span's floor ``min_span`` is smaller than one learn score's noise at a few hundred
items, so a 0.24 -> 0.26 wiggle across a 90 % collapse was "learning" in 39 % of draws), before
it (the paper's ``collapse_without_learning``), after it (``learned_after_cliff``), and rule 7's
trade-off, whose best-of-k comparison passes ``z_bar(noise_z, k)``, Bonferroni over the k lrs
that forget. Without counts the share tests stay alone, and the reason says so.

**The paper's cliff, and ours.** The paper's cliff (000 Fig. 4, Sec. 3) has two sides: small lrs
that *learn with minimal forgetting*, then a sharp transition into catastrophic forgetting *with
no further learning*. Rule 4 asks only for the collapse (kept retention, then a loss with no
learning gain across it), so a series that never learns and then forgets is a cliff by rule 4
(issue 16 found one: qwen2-tiny/lora, largest learning gain 0.010). :func:`paper_regime` reads a
rule-4 cliff as the paper does, each of its conditions a label of its own:

- ``collapse_without_learning``: the safe side (critical_lr_low) learned less than
  ``paper_min_learning`` of the headroom ``1 - L0``;
- ``forgot_before_cliff``: the small lrs had already lost ``forget_min`` or more of R0 (not
  "minimal forgetting"; issue 31: a series at 65 % of R0 before its collapse read cliff),
  measured a whole transition width (``cliff_lr_ratio``) below the collapse's end, so that a
  point on the collapse's own shoulder does not count;
- ``unmeasured_before_cliff``: no trained lr lies that far below the collapse, so the small
  lrs' "minimal forgetting" is not measured, and an unmeasured side is no pass (issue 40: lrs
  1e-5, 3e-5, 1e-4 at 65 % of R0 from the smallest read cliff); sweep lower lrs;
- ``learned_after_cliff``: past the collapse, higher lrs still learned more than the best the
  safe side learned (not "no further learning"; issue 31: 6 % of the headroom before, 86 % more
  after, read cliff). It is measured from the safe side's best, not from the first collapsed lr,
  whose learning may dip (issue 40: 0.60 safe, 0.45 collapsed, 0.61 after is no further
  learning). Strict where the learn task's item counts are known (issue 52): a gain beyond
  ``noise_z`` standard errors is further learning. The share of the span let learning through
  (L .72 -> .80 past a collapse, 5 standard errors at 420 items, was 20 % of a span that itself
  held that gain); without item counts the gain is read as a share of the safe side's own
  learning, above ``max_gain_share``.

The frontiers table reports both (``regime`` and ``regime_paper``), and the report counts regimes
both ways.

Seeds at the same lr are averaged before classification. Comparisons at a threshold are
inclusive up to 1e-9 of float rounding (a drop equal to ``cliff_drop`` is a collapse), so ties
resolve the same way every time.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass
from statistics import NormalDist

import numpy as np
import pandas as pd
from pydantic import BaseModel, ConfigDict, Field

from cliffsweep.analysis.regimes import (  # noqa: F401  (REGIMES, PAPER_REGIMES: their home; re-exported)
    CLIFF, COLLAPSE_WITHOUT_LEARNING, FORGETTING, FORGOT_BEFORE_CLIFF, GRADUAL, INCONCLUSIVE, LEARNED_AFTER_CLIFF,
    NO_FORGETTING, PAPER_REGIMES, REGIMES, UNMEASURED_BEFORE_CLIFF)

_NORMAL = NormalDist()
_EPS = 1e-9  # float slack so that a value equal to a threshold up to rounding counts as equal


class Thresholds(BaseModel):
    """Classification thresholds; all relative (shares of base retention / learning span)."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    forget_min: float = Field(0.10, gt=0, lt=1)
    """Forgetting below this share of base retention is not meaningful (no_forgetting); also
    the bar of the highest safe lr. Our default 0.10: the binomial error of a 200-example
    accuracy near 0.5 is ~0.035, so a 10 % relative loss is beyond noise for typical eval sizes."""
    near_base: float = Field(0.40, gt=0, lt=1)
    """The start of a cliff keeps at least 1 - near_base of R0. Our default 0.40, equal to
    cliff_drop, so that a trained lr landing inside a sharp collapse cannot hide it: if it kept
    more than 1 - cliff_drop it can start the collapse, else the lr below it already witnesses
    a cliff_drop loss. (With 0.20, a point left at 60-80 % of R0 inside the collapse made
    the cliff look gradual on one grid and a cliff on another.)"""
    cliff_drop: float = Field(0.40, gt=0, le=1)
    """A cliff loses at least this share of R0 ("catastrophic"). Our default 0.40:
    the paper's cliffs lose most of GSM8K in one step; 0.40 keeps slightly softer ones."""
    cliff_lr_ratio: float = Field(3.5, gt=1)
    """The widest lr factor a cliff's collapse may span. Our default 3.5: one step of the
    paper's grids (2-2.5x), of 1-3-10 grids (3x, 3.33x) and of half-decade grids (3.16x), so a
    one-step collapse on any of them is a cliff; a uniform decline in log lr is a cliff only if
    it loses more than cliff_drop / log10(3.5) = 74 % of base retention per decade."""
    max_gain_share: float = Field(0.25, ge=0, le=1)
    """Across a cliff, learning gains at most this share of the series' learning span
    ("no learning gain"). Our default 0.25."""
    min_span: float = Field(0.05, gt=0, le=1)
    """Floor of the learning span as a share of the headroom 1 - L0, so that noise in a
    series that learns nothing is not read as a large relative gain. Our default 0.05."""
    paper_min_learning: float = Field(0.05, ge=0, le=1)
    """The paper's cliff learns before it collapses: at the cliff's last safe lr the series has
    gained at least this share of the headroom 1 - L0 (regime_paper; rule 4 itself does not ask).
    Our default 0.05: on a 4-choice task at chance (L0 = 0.25) 3.75 accuracy points, about one
    binomial standard error of a 200-question eval, so "learned" means beyond noise."""
    min_lrs: int = Field(2, ge=1)
    """Trained learning rates needed besides the base point. Our default 2 (3 points)."""
    noise_z: float = Field(2.0, gt=0)
    """How many standard errors make a difference real rather than noise (issue 52): learning
    past a collapse (``learned_after_cliff``) and runs at one lr that disagree. Our default 2:
    about a 2.3 % one-sided chance that noise alone passes it."""


@dataclass(frozen=True)
class Classification:
    """Result of :func:`classify`. Cliff fields are None unless ``regime == 'cliff'``."""

    regime: str
    reason: str
    n_points: int
    critical_lr_low: float | None = None
    """Highest lr on the safe side of the cliff that witnesses it."""
    critical_lr_high: float | None = None
    """Lowest lr past the cliff."""
    drop_at_cliff: float | None = None
    """Share of base retention lost across the cliff (r_low - r_high)."""
    drop_at_cliff_abs: float | None = None
    """Same in accuracy points (R_low - R_high)."""
    gain_at_cliff: float | None = None
    """Learning gain across the cliff in accuracy points (L_high - L_low; may be < 0)."""
    gain_at_cliff_share: float | None = None
    """Same as a share of the series' learning span."""
    max_forgetting: float | None = None
    """Largest share of base retention lost by any trained lr."""
    max_learning: float | None = None
    """Largest learning gain (L - L0) of any trained lr, in accuracy points."""
    learned_before_cliff: float | None = None
    """Cliffs only: learning gain at critical_lr_low as a share of the headroom 1 - L0 (the
    paper's "learning without forgetting" side; :func:`paper_regime`)."""
    learned_before_cliff_z: float | None = None
    """Cliffs only, where the learn task's item counts are known: that gain (L at critical_lr_low
    - L0) in standard errors of the difference; at most noise_z is no learning (issue 59)."""
    kept_before_cliff: float | None = None
    """Cliffs only: retention as a share of R0 at the highest trained lr a whole transition
    width below the collapse (lr <= critical_lr_high / cliff_lr_ratio): the paper's "small lrs"
    with their "minimal forgetting". Not at critical_lr_low itself, which may sit on the
    collapse's shoulder (a sigmoid collapse sampled on a grid); None when no trained lr is that
    low."""
    learned_after_cliff: float | None = None
    """Cliffs only: how much more than the safe side's best (lr <= critical_lr_low) any lr from
    critical_lr_high on learned, as a share of what the safe side itself learned (its best
    minus L0, floored at min_span of the headroom), 0 when none did (the paper's "no further
    learning" after the transition). Not a share of the whole span: that span already holds
    the gain past the collapse (issue 52)."""
    learned_after_cliff_z: float | None = None
    """Cliffs only, where the learn task's item counts are known: that same gain in standard
    errors of the difference of the two accuracies (binomial, from the items scored). Above
    ``noise_z`` the paper's reading is ``learned_after_cliff`` (issue 52)."""
    closest_lr_low: float | None = None
    """The lower lr of the pair within cliff_lr_ratio that comes closest to a collapse (rule 4):
    a cliff's witness, or a gradual verdict's closest call, the lrs that decided it (issue 52's
    verification runs and runs_at_bracket)."""
    closest_lr_high: float | None = None
    """The upper lr of that pair."""
    closest_drop: float | None = None
    """Its retention drop, as a share of base retention."""
    closest_shortfall: float | None = None
    """How far it falls short of rule 4: the largest of (1 - near_base) - r_low, cliff_drop -
    drop, and gain share - max_gain_share (0 for a cliff's witness)."""
    unresolved_lr_low: float | None = None
    """Rule 6 only: the lower lr of a collapsing grid step wider than cliff_lr_ratio."""
    unresolved_lr_high: float | None = None
    """Rule 6 only: the upper lr of that step (refine between the two)."""
    deciding_lrs: tuple[float, ...] = ()
    """The trained lrs whose points decided the verdict (issue 59 part 3): a cliff's bracket, the
    lr its "small lrs" are read at and the pair its further learning is read from; a decline's
    closest call and the pair its learning test compared; the lr that came closest to forgetting
    for no_forgetting. The top-up scores them on every item and reads the verdict again."""
    learn_only_lrs: tuple[float, ...] = ()
    """Of deciding_lrs, those read on the learn axis alone (a learning test's pair and its
    contenders, where no retention decision reads them): their top-up scores the learn task only."""
    retain_only_lrs: tuple[float, ...] = ()
    """Of deciding_lrs, those read on retention alone (a cliff's "small lrs", no_forgetting's
    closest): their top-up scores the retain tasks only."""

    def as_dict(self) -> dict:
        return asdict(self)


def lr_curve(points: pd.DataFrame) -> pd.DataFrame:
    """Mean L and R per lr (seeds averaged), sorted by lr; lr = 0 is the base point.

    ``points`` needs columns ``lr``, ``L``, ``R``; other columns are ignored.
    """
    missing = {"lr", "L", "R"} - set(points.columns)
    if missing:
        raise ValueError(f"points need columns lr, L, R; missing {sorted(missing)}")
    lrs, L, R = lr_curve_arrays(*(points[c].to_numpy(float) for c in ("lr", "L", "R")))
    return pd.DataFrame({"lr": lrs, "L": L, "R": R})


def lr_curve_arrays(lr: np.ndarray, L: np.ndarray, R: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """:func:`lr_curve` on arrays: (unique lrs sorted, mean L, mean R). numpy rather than
    groupby: this runs once per series, refinement decision and bootstrap series."""
    ok = np.isfinite(lr) & np.isfinite(L) & np.isfinite(R)
    if not ok.all():
        i = int(np.flatnonzero(~ok)[0])
        raise ValueError(f"non-finite lr/L/R in {(~ok).sum()} point(s), first: lr={lr[i]}, L={L[i]}, R={R[i]}")
    if (lr < 0).any():
        raise ValueError("learning rates must be >= 0 (0 = base model)")
    lrs, inv = np.unique(lr, return_inverse=True)
    n = np.bincount(inv, minlength=len(lrs))
    return lrs, np.bincount(inv, L, len(lrs)) / n, np.bincount(inv, R, len(lrs)) / n


def classify(points: pd.DataFrame, thresholds: Thresholds | None = None) -> Classification:
    """Classify one series (see the module docstring for the definitions and rules).

    ``points``: a DataFrame with ``lr``, ``L`` (learn-task accuracy), ``R`` (retain-task
    accuracy); rows with ``lr == 0`` are the base model. Several rows per lr (seeds) are
    averaged.
    """
    curve = lr_curve(points)
    return classify_arrays(curve["lr"].to_numpy(float), curve["L"].to_numpy(float),
                           curve["R"].to_numpy(float), thresholds or Thresholds())


def _witnesses(lr: np.ndarray, L: np.ndarray, r: np.ndarray, span: float, th: Thresholds,
               gain_z: np.ndarray | None = None) -> np.ndarray:
    """(n, n) mask: [i, j] is True where lr_i -> lr_j (i < j) is a collapse within the factor
    (rule 4 without persistence). Learning across it counts only when it is both material (above
    max_gain_share of the span) and, where item counts are known (``gain_z``), real (above
    noise_z standard errors): the span's floor (min_span) is smaller than one learn score's noise
    at a few hundred items, so a wiggle across a collapse was "learning" (issue 59)."""
    close = (lr[None, :] <= th.cliff_lr_ratio * lr[:, None] * (1 + _EPS)) & np.triu(np.ones((len(lr),) * 2, bool), 1)
    start = (r >= 1.0 - th.near_base - _EPS)[:, None]
    drop = (r[:, None] - r[None, :]) >= th.cliff_drop - _EPS
    gain = (L[None, :] - L[:, None]) <= th.max_gain_share * span + _EPS
    if gain_z is not None:
        gain |= gain_z <= th.noise_z + _EPS
    return close & start & drop & gain


def _closest(lr: np.ndarray, L: np.ndarray, r: np.ndarray, span: float, th: Thresholds) -> dict:
    """The pair of trained lrs within cliff_lr_ratio that comes closest to rule 4's collapse: the
    smallest shortfall, over its three conditions, of kept retention at the lower lr (1 -
    near_base), drop (cliff_drop, shares of R0) and gain (at most max_gain_share of the span).
    A cliff's witnesses fall short by 0; a steep decline that learns as it falls is far."""
    close = (lr[None, :] <= th.cliff_lr_ratio * lr[:, None] * (1 + _EPS)) & np.triu(np.ones((len(lr),) * 2, bool), 1)
    if not close.any():
        return {}
    drop = r[:, None] - r[None, :]
    short = np.maximum.reduce([np.broadcast_to((1.0 - th.near_base - r)[:, None], drop.shape), th.cliff_drop - drop,
                               (L[None, :] - L[:, None]) / span - th.max_gain_share, np.zeros_like(drop)])
    short = np.where(close, short, np.inf)
    i, j = np.unravel_index(int(np.argmin(short - 1e-6 * drop)), short.shape)  # ties: the larger drop
    return {"closest_lr_low": float(lr[i]), "closest_lr_high": float(lr[j]), "closest_drop": float(drop[i, j]),
            "closest_shortfall": float(short[i, j])}


def _var(p: np.ndarray, n: np.ndarray) -> np.ndarray:
    """Binomial variance of an accuracy p read from n items, floored: 0 of n is not certainty."""
    return np.maximum(p * (1 - p), 1.0 / n) / n


def z_bar(noise_z: float, k: int) -> float:
    """The bar a gain's z must pass to be real when it is the best of ``k`` comparisons: noise_z's
    one-sided error split over the k (Bonferroni), so that picking the best of many lrs does not
    make noise look like learning. k = 1 is noise_z itself."""
    if k <= 1:
        return noise_z
    alpha = 1.0 - _NORMAL.cdf(noise_z)
    return float(_NORMAL.inv_cdf(1.0 - alpha / k))


def _after_z(L: np.ndarray, n_L: np.ndarray | None, a: int, b: int) -> float | None:
    """(L_b - L_a) in binomial standard errors of the difference; None without item counts."""
    if n_L is None or not (np.isfinite(n_L[[a, b]]).all() and (n_L[[a, b]] > 0).all()):
        return None
    return float((L[b] - L[a]) / np.sqrt(_var(L[[a, b]], n_L[[a, b]]).sum()))


def _after_cliff(L: np.ndarray, n_L: np.ndarray | None, L0: float, i: int, j: int, th: Thresholds) -> dict:
    """The paper's "no further learning" measures of a cliff i -> j (Classification fields)."""
    a = int(np.argmax(L[:i + 1]))
    b = j + int(np.argmax(L[j:]))
    own = max(L[a] - L0, th.min_span * (1.0 - L0), 1e-12)
    return {"learned_after_cliff": float(max(0.0, L[b] - L[a]) / own),
            "learned_after_cliff_z": _after_z(L, n_L, a, b)}


@dataclass(frozen=True)
class _Learn:
    """The learn task's numbers one classification reads: L per lr with the base first, and its
    item counts where every point has them (None: learning is read as a share, issue 59 part 2)."""

    L: np.ndarray
    n: np.ndarray | None

    def z(self, a: int, b: int) -> float | None:
        return None if self.n is None else _after_z(self.L, self.n, a, b)

    def near(self, best: int, among: np.ndarray, z: float) -> list[int]:
        """Positions in ``among`` whose L is within ``z`` standard errors of the difference from
        L[best]: the lrs that noise alone could make the best instead (none without counts)."""
        if self.n is None:
            return []
        v = _var(self.L, self.n)
        return [int(k) for k in among if k != best and abs(self.L[best] - self.L[k]) <= z * np.sqrt(v[k] + v[best])]

    def gain_matrix_z(self) -> np.ndarray | None:
        """[a, b]: (L_b - L_a) in standard errors of the difference (trained lrs, base excluded)."""
        if self.n is None:
            return None
        L, v = self.L[1:], _var(self.L[1:], self.n[1:])
        return (L[None, :] - L[:, None]) / np.sqrt(v[:, None] + v[None, :])


def _learning(learn: _Learn, lost: np.ndarray, th: Thresholds) -> tuple[bool, str, tuple[int, ...]]:
    """Whether the lrs that forget learned beyond noise over the best of those that do not (the
    base included): the trade-off that makes a series gradual (000 Fig. 3: retention falls as
    learning rises). With item counts the gain of the best forgetting lr over the best keeping
    one must pass z_bar(noise_z, k) standard errors, k the forgetting lrs it was the best of;
    without them it must reach paper_min_learning of the headroom, as the row's reason says.
    Returns the pair compared, then every lr within noise_z standard errors of either end (which
    lr is "the best" is itself a reading of noise: each of them decides, issue 59 part 3)."""
    L = learn.L
    forgets = np.flatnonzero(lost >= th.forget_min - _EPS) + 1  # positions in L (base at 0)
    keeps = np.concatenate([[0], np.flatnonzero(lost < th.forget_min - _EPS) + 1])
    a, b = int(keeps[np.argmax(L[keeps])]), int(forgets[np.argmax(L[forgets])])
    pair = (a, b, *learn.near(a, keeps, th.noise_z), *learn.near(b, forgets, th.noise_z))
    gain = L[b] - L[a]
    z = learn.z(a, b)
    if z is not None:
        bar = z_bar(th.noise_z, len(forgets))
        return z > bar + _EPS, f"{gain:+.3f} in L, {z:.1f} standard errors (bar {bar:.1f})", pair
    bar = th.paper_min_learning * (1.0 - L[0])
    return gain >= bar - _EPS, (f"{gain:+.3f} in L against a bar of {bar:.3f} ({th.paper_min_learning:.0%} of the "
                                "headroom; no item counts, so no standard error)"), pair


def classify_arrays(lr: np.ndarray, L: np.ndarray, R: np.ndarray, th: Thresholds,
                    n_L: np.ndarray | None = None) -> Classification:
    """:func:`classify` on per-lr arrays sorted by lr with unique lrs (the bootstrap's hot path).
    ``n_L``: the learn task's items scored per lr (summed over its runs; base first). Where every
    point has them, every "did it learn" test reads the gain in standard errors (issue 59 part 2);
    without them, as a share of the learning span or headroom."""
    n_points = len(lr)
    if n_points == 0 or lr[0] != 0:
        return Classification(INCONCLUSIVE, "no base point (lr = 0)", n_points)
    if len(lr) - 1 < th.min_lrs:
        return Classification(INCONCLUSIVE, f"{len(lr) - 1} trained lr(s); need >= {th.min_lrs}", n_points)
    if R[0] <= 0:
        return Classification(INCONCLUSIVE, "base retention is 0: forgetting is unmeasurable", n_points)
    n_all = None if n_L is None else np.asarray(n_L, float)
    counted = n_all is not None and len(n_all) == n_points and bool(np.isfinite(n_all).all() and (n_all > 0).all())
    learn = _Learn(np.asarray(L, float), n_all if counted else None)
    L0, R0, lr, L, R = L[0], R[0], lr[1:], L[1:], R[1:]
    r = R / R0
    lost = 1.0 - r
    span = max(L.max() - L0, th.min_span * (1.0 - L0), 1e-12)
    summary = {"max_forgetting": float(lost.max()), "max_learning": float(L.max() - L0), **_closest(lr, L, r, span, th)}
    if lost.max() < th.forget_min:
        return Classification(NO_FORGETTING, f"every lr keeps > {1 - th.forget_min:.0%} of base retention",
                              n_points, deciding_lrs=_lrs(lr, int(np.argmax(lost))),
                              retain_only_lrs=_lrs(lr, int(np.argmax(lost))), **summary)
    if lost[0] >= th.cliff_drop:
        return Classification(INCONCLUSIVE, f"the lowest lr ({lr[0]:g}) already loses {lost[0]:.0%} of base "
                              "retention; sweep lower lrs", n_points, deciding_lrs=_lrs(lr, 0), **summary)
    back = 1.0 - th.near_base - _EPS
    # recovers[j]: some lr above lr_j keeps 1 - near_base again, so a collapse ending at j is transient.
    recovers = np.append(np.maximum.accumulate((r >= back)[::-1])[::-1][1:], False)
    wit = _witnesses(lr, L, r, span, th, learn.gain_matrix_z())
    ends = np.flatnonzero(wit.any(axis=0) & ~recovers)
    if len(ends):
        return _cliff(lr, L, R, r, L0, span, learn, int(ends[0]), wit, th, n_points, summary)
    if wit.any():
        i, j = (int(x[0]) for x in np.nonzero(wit))
        return Classification(INCONCLUSIVE, f"retention collapses at lr {lr[i]:g} -> {lr[j]:g} but recovers "
                              "at a higher lr (non-monotone)", n_points,
                              deciding_lrs=_lrs(lr, i, j, j + 1 + int(np.argmax(r[j + 1:]))), **summary)
    wide = (lr[1:] > th.cliff_lr_ratio * lr[:-1] * (1 + _EPS)) & (r[:-1] >= back) \
        & (r[:-1] - r[1:] >= th.cliff_drop - _EPS) & ~recovers[1:]
    if wide.any():
        k = int(np.flatnonzero(wide)[0])
        return Classification(
            INCONCLUSIVE, f"retention collapses by {r[k] - r[k + 1]:.0%} of base between lr {lr[k]:g} and "
            f"{lr[k + 1]:g}, {lr[k + 1] / lr[k]:.2g}x apart (> cliff_lr_ratio {th.cliff_lr_ratio:g}): a cliff "
            "or a steep decline; refine the bracket", n_points,
            unresolved_lr_low=float(lr[k]), unresolved_lr_high=float(lr[k + 1]), deciding_lrs=_lrs(lr, k, k + 1),
            **summary)
    learns, how, pair = _learning(learn, lost, th)
    learning = set(_lrs(lr, *(k - 1 for k in pair if k > 0)))
    deciding = tuple(sorted(learning | set(_lrs_of(summary))))
    learn_only = tuple(sorted(learning - set(_lrs_of(summary))))
    if not learns:
        return Classification(FORGETTING, f"retention falls up to {lost.max():.0%} of base, and the lrs that "
                              f"forget learned no more than those that keep it, beyond noise ({how}): forgetting "
                              "without a trade-off", n_points, deciding_lrs=deciding, learn_only_lrs=learn_only,
                              **summary)
    return Classification(GRADUAL, f"retention falls up to {lost.max():.0%} of base as learning rises ({how}), "
                          f"with no collapse within {th.cliff_lr_ratio:g}x of lr lacking learning", n_points,
                          deciding_lrs=deciding, learn_only_lrs=learn_only, **summary)


def _cliff(lr, L, R, r, L0, span, learn: _Learn, j: int, wit: np.ndarray, th: Thresholds, n_points: int,
           summary: dict) -> Classification:
    """Rule 4's verdict for the collapse ending at trained lr index ``j`` (its highest witness i)."""
    i = int(np.flatnonzero(wit[:, j])[-1])
    drop, gain = r[i] - r[j], L[j] - L[i]
    below = np.flatnonzero(lr <= lr[j] / th.cliff_lr_ratio * (1 + _EPS))
    learning, small = {int(np.argmax(L[:i + 1])), j + int(np.argmax(L[j:]))}, set(below[-1:].tolist())
    deciding = _lrs(lr, i, j, *learning, *small)
    return Classification(
        CLIFF, f"lr {lr[i]:g} -> {lr[j]:g} ({lr[j] / lr[i]:.2g}x) loses {drop:.0%} of base retention for "
        f"{gain / span:+.0%} of the learning span", n_points,
        critical_lr_low=float(lr[i]), critical_lr_high=float(lr[j]), drop_at_cliff=float(drop),
        drop_at_cliff_abs=float(R[i] - R[j]), gain_at_cliff=float(gain),
        gain_at_cliff_share=float(gain / span), learned_before_cliff=float((L[i] - L0) / max(1.0 - L0, 1e-12)),
        learned_before_cliff_z=learn.z(0, i + 1),
        kept_before_cliff=_kept_below(lr, r, lr[j] / th.cliff_lr_ratio),
        deciding_lrs=deciding, learn_only_lrs=_lrs(lr, *(learning - small - {i, j})),
        retain_only_lrs=_lrs(lr, *(small - learning - {i, j})),
        **_after_cliff(L, None if learn.n is None else learn.n[1:], L0, i, j, th),
        **summary)


def _lrs(lr: np.ndarray, *at: int) -> tuple[float, ...]:
    """The lrs at trained positions ``at``, sorted, once each."""
    return tuple(sorted({float(lr[k]) for k in at}))


def _lrs_of(summary: dict) -> tuple[float, ...]:
    """The closest call's pair (a decline's verdict rests on it falling short of a collapse)."""
    return tuple(float(summary[k]) for k in ("closest_lr_low", "closest_lr_high") if k in summary)


def paper_regime(regime: str, learned_before_cliff: float | None, th: Thresholds,
                 kept_before_cliff: float | None = None, learned_after_cliff: float | None = None,
                 learned_after_cliff_z: float | None = None, learned_before_cliff_z: float | None = None) -> str:
    """The paper's reading of a regime (module docstring): a rule-4 cliff is the paper's cliff
    only if its safe side learned (``collapse_without_learning`` otherwise) with minimal
    forgetting (``forgot_before_cliff``) and nothing more is learned past it
    (``learned_after_cliff``); every other regime reads the same. The small lrs' side must be
    measured (``unmeasured_before_cliff``: no lr a transition width below the collapse).
    "Learned" before the collapse is at least paper_min_learning of the headroom and, where the
    learn task's item counts are known, beyond noise_z standard errors (issue 59). "Nothing more"
    is strict where the counts are known: any gain over the safe side's best beyond ``noise_z``
    standard errors is further learning; without them, a gain above ``max_gain_share`` of the
    safe side's own learning (issue 52)."""
    if regime != CLIFF:
        return regime
    if learned_before_cliff is None or learned_before_cliff < th.paper_min_learning - _EPS \
            or (_known(learned_before_cliff_z) and learned_before_cliff_z <= th.noise_z + _EPS):
        return COLLAPSE_WITHOUT_LEARNING
    if not _known(kept_before_cliff):
        return UNMEASURED_BEFORE_CLIFF
    if kept_before_cliff < 1.0 - th.forget_min - _EPS:
        return FORGOT_BEFORE_CLIFF
    if _known(learned_after_cliff_z):
        return LEARNED_AFTER_CLIFF if learned_after_cliff_z > th.noise_z + _EPS else regime
    if _known(learned_after_cliff) and learned_after_cliff > th.max_gain_share + _EPS:
        return LEARNED_AFTER_CLIFF
    return regime


def why_readings_differ(regime: str, regime_paper: str, learned_before_cliff: float | None,
                        kept_before_cliff: float | None, learned_after_cliff: float | None) -> str:
    """One sentence on why the paper's reading of a series differs from ours ("" where they
    agree), from the measures that decided it (the report puts it beside the paper's reading)."""
    if regime_paper == regime:
        return ""
    if regime_paper == COLLAPSE_WITHOUT_LEARNING:
        return f"the last safe lr learned {learned_before_cliff:.0%} of the headroom: the collapse came before any learning"
    if regime_paper == FORGOT_BEFORE_CLIFF:
        return f"the small lrs had already lost {1 - kept_before_cliff:.0%} of base R before the collapse"
    if regime_paper == UNMEASURED_BEFORE_CLIFF:
        return "no lr was swept a transition width below the collapse: the small lrs are unmeasured"
    if regime_paper == LEARNED_AFTER_CLIFF:
        return f"higher lrs learned {learned_after_cliff:.0%} more than the safe side's own learning"
    return ""


def _kept_below(lr: np.ndarray, r: np.ndarray, limit: float) -> float | None:
    """Retention share at the highest trained lr <= limit (None if there is none)."""
    below = np.flatnonzero(lr <= limit * (1 + _EPS))
    return float(r[below[-1]]) if len(below) else None


def _known(x: float | None) -> bool:
    return x is not None and x == x
