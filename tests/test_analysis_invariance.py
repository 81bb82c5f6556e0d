"""The regime is a property of the curve, not of the lr grid (issue 11, part 1).

Ground truth comes from random curves of known shape (cliffsweep.analysis.synthetic.random_curve:
sharp cliffs collapsing within 1.05-1.5x of lr after learning saturated; gradual declines over
1.6-3 decades while learning rises), sampled on the grids people use: paper-like (2-2.5x steps),
the toy default's 1-3-10 (3x, 3.33x), half-decade (3.16x), dense (1.4x), half-decade plus
refinement rounds, and decades (10x, too coarse to tell: unresolved until refined).
"""

import numpy as np
import pandas as pd
import pytest

from cliffsweep.analysis.classify import Thresholds, classify
from cliffsweep.analysis.synthetic import (geometric_lrs, mantissa_lrs, random_curve,
                                           simulate_refinement)
from cliffsweep.sweep.spec import RefineSpec

N_CURVES = 40
PAPER_EVAL = (420, 1319)  # ChemL3 test split (20 % of 2,100 MCQs), GSM8K test


def _curves(shape, seed):
    rng = np.random.default_rng(seed)
    for _ in range(N_CURVES):
        c = random_curve(shape, rng)
        # the grid spans the learning side and the collapse, anchored at a random offset
        yield c, 10 ** (c.forget_at - 1.6 - rng.uniform(0, 0.5)), 10 ** (c.forget_at + 1.0)


def _grids(c, lo, hi):
    coarse = geometric_lrs(lo, hi, 10**0.5)
    return {"paper 2-2.5x": mantissa_lrs(lo, hi), "toy 3x/3.33x": mantissa_lrs(lo, hi, (1, 3)),
            "half-decade 3.16x": coarse, "dense 1.4x": geometric_lrs(lo, hi, 1.4),
            "very dense 1.1x": geometric_lrs(lo, hi, 1.1),
            "3.16x + 2 refinement rounds": simulate_refinement(c, coarse, RefineSpec(rounds=2))["lr"].iloc[1:]}


@pytest.mark.parametrize("shape", ["cliff", "gradual"])
def test_same_curve_same_regime_on_every_grid(shape):
    seen = {}
    for c, lo, hi in _curves(shape, seed=1):
        for name, lrs in _grids(c, lo, hi).items():
            seen.setdefault(name, []).append(classify(c.series(lrs)).regime)
    assert {name: sorted(set(r)) for name, r in seen.items()} == {name: [shape] for name in seen}


@pytest.mark.parametrize("shape", ["cliff", "gradual"])
def test_points_on_the_curve_inside_a_bracket_never_flip_the_regime(shape):
    rng = np.random.default_rng(2)
    for c, lo, hi in _curves(shape, seed=3):
        for name, lrs in _grids(c, lo, hi).items():
            lrs = sorted(lrs)
            before = classify(c.series(lrs)).regime
            for _ in range(2):  # twice: add 1-3 lrs inside randomly chosen neighbouring pairs
                k = rng.integers(0, len(lrs) - 1, size=rng.integers(1, 4))
                extra = np.exp(rng.uniform(np.log(np.take(lrs, k)), np.log(np.take(lrs, k + 1))))
                after = classify(c.series([*lrs, *extra])).regime
                assert after == before == shape, (name, c, extra)


def test_a_decade_grid_cannot_tell_and_refinement_settles_it():
    """10x steps: a sharp cliff's collapse step is unresolved (never called gradual); two
    refinement rounds inside it find the cliff, with the true collapse inside the bracket."""
    for c, lo, hi in _curves("cliff", seed=4):
        coarse = c.series(geometric_lrs(lo, hi, 10))
        cls = classify(coarse)
        assert cls.regime == "inconclusive" and "refine" in cls.reason
        assert cls.unresolved_lr_low < 10**c.forget_at < cls.unresolved_lr_high
        refined = classify(simulate_refinement(c, coarse["lr"].iloc[1:], RefineSpec(rounds=2)))
        assert refined.regime == "cliff"
        # the bracket meets the true collapse (10-90 % of the fall)
        assert refined.critical_lr_low < 10 ** (c.forget_at + c.forget_decades / 2)
        assert refined.critical_lr_high > 10 ** (c.forget_at - c.forget_decades / 2)
        assert refined.critical_lr_high / refined.critical_lr_low < 3.2
    for c, lo, hi in _curves("gradual", seed=5):
        assert classify(c.series(geometric_lrs(lo, hi, 10))).regime in ("gradual", "inconclusive")
        assert classify(simulate_refinement(c, geometric_lrs(lo, hi, 10), RefineSpec(rounds=2))).regime == "gradual"


def test_dense_gradual_stays_gradual_even_when_steep():
    """The steepest gradual decline the families hold (1.6 decades, 95 % lost), sampled every
    1.05x: neighbouring points are close, but no 3.5x window loses 40 % of R0."""
    from cliffsweep.analysis.synthetic import Curve

    c = Curve(learn_at=-4.0, learn_decades=1.2, forget_at=-4.0, forget_decades=1.6, floor=0.05)
    assert classify(c.series(geometric_lrs(1e-6, 1e-2, 1.05))).regime == "gradual"
    # ... and the same steepness squeezed into 0.5 decades is a cliff on that grid and on a coarse one
    sharp = Curve(learn_at=-5.0, learn_decades=0.8, forget_at=-4.0, forget_decades=0.5, floor=0.05)
    for step in (1.05, 3.0):
        assert classify(sharp.series(geometric_lrs(1e-6, 1e-2, step))).regime == "cliff"


@pytest.mark.parametrize("shape", ["cliff", "gradual"])
def test_regime_holds_under_paper_eval_noise(shape):
    """Binomial noise at the paper's eval sizes: at least 38 of 40 curves right on each grid
    (bench/bench_refine.py measures the rates on 200 curves per family)."""
    rng = np.random.default_rng(6)
    right: dict[str, int] = {}
    for c, lo, hi in _curves(shape, seed=7):
        for name, lrs in _grids(c, lo, hi).items():
            right[name] = right.get(name, 0) + (classify(c.series(lrs, PAPER_EVAL, rng)).regime == shape)
    assert min(right.values()) >= N_CURVES - 2, right


def test_the_toy_default_sweep_verdicts():
    """The default toy sweep's final points (docs/example-report: base, L gains and R drops at
    each cliff are its frontiers.csv values; the rest read off its vs_lr plots, +-0.005).
    Three verdicts stay; qwen2-tiny/sft turns from gradual into a cliff at 1e-3 -> 3e-3: its
    lr 1e-3 keeps 72 % of R0 (a point inside the collapse, which near_base 0.20 excluded) and
    3e-3 keeps 2 % for +18 % of the learning span."""
    lrs = [0, 1e-4, 3e-4, 1e-3, 3e-3, 1e-2]
    toy = {
        ("llama-tiny", "sft"): ([0.30, 0.29, 0.33, 0.345, 0.43, 0.305], [0.53, 0.53, 0.51, 0.14, 0.01, 0.0]),
        ("llama-tiny", "lora"): ([0.30, 0.30, 0.29, 0.30, 0.335, 0.305], [0.53, 0.52, 0.52, 0.42, 0.05, 0.0]),
        ("qwen2-tiny", "sft"): ([0.295, 0.29, 0.35, 0.385, 0.405, 0.375], [0.50, 0.48, 0.51, 0.36, 0.01, 0.0]),
        ("qwen2-tiny", "lora"): ([0.295, 0.275, 0.28, 0.29, 0.275, 0.305], [0.50, 0.52, 0.51, 0.49, 0.26, 0.02]),
    }
    got = {}
    for key, (L, R) in toy.items():
        c = classify(pd.DataFrame({"lr": lrs, "L": L, "R": R}))
        got[key] = (c.regime, c.critical_lr_low, c.critical_lr_high)
    assert got == {("llama-tiny", "sft"): ("cliff", 3e-4, 1e-3), ("llama-tiny", "lora"): ("gradual", None, None),
                   ("qwen2-tiny", "sft"): ("cliff", 1e-3, 3e-3), ("qwen2-tiny", "lora"): ("cliff", 1e-3, 3e-3)}
    # With the previous near_base the qwen2-tiny/sft verdict was gradual.
    L, R = toy[("qwen2-tiny", "sft")]
    assert classify(pd.DataFrame({"lr": lrs, "L": L, "R": R}), Thresholds(near_base=0.2)).regime == "gradual"
