"""Regime classification and Pareto helpers on small synthetic series (pure functions)."""

import numpy as np
import pandas as pd
import pytest
from pydantic import ValidationError

from cliffsweep.analysis import Thresholds, classify, frontier_area, pareto_mask
from cliffsweep.analysis.pareto import dominates_all

LRS = [0, 1e-5, 3e-5, 1e-4, 3e-4, 1e-3]


def series(L, R, lrs=LRS):
    return pd.DataFrame({"lr": lrs[: len(L)], "L": L, "R": R})


CLIFF = series([0.25, 0.55, 0.75, 0.80, 0.81, 0.80], [0.60, 0.59, 0.58, 0.57, 0.06, 0.04])
GRADUAL = series([0.25, 0.40, 0.55, 0.65, 0.75, 0.82], [0.60, 0.54, 0.46, 0.37, 0.27, 0.18])
FLAT = series([0.25, 0.40, 0.55, 0.65, 0.75, 0.82], [0.60, 0.61, 0.59, 0.60, 0.58, 0.57])


def test_cliff_bracket_drop_and_gain():
    c = classify(CLIFF)
    assert c.regime == "cliff"
    assert (c.critical_lr_low, c.critical_lr_high) == (1e-4, 3e-4)
    assert c.drop_at_cliff == pytest.approx((0.57 - 0.06) / 0.60)
    assert c.drop_at_cliff_abs == pytest.approx(0.51)
    assert c.gain_at_cliff == pytest.approx(0.01)
    assert c.gain_at_cliff_share == pytest.approx(0.01 / (0.81 - 0.25))
    assert c.n_points == 6


def test_gradual_and_no_forgetting():
    g = classify(GRADUAL)
    assert g.regime == "gradual" and g.critical_lr_low is None
    assert g.max_forgetting == pytest.approx(0.7)
    assert classify(FLAT).regime == "no_forgetting"


def test_collapse_with_large_learning_gain_is_not_a_cliff():
    # Same retention collapse as CLIFF, but the collapsing step brings most of the learning.
    s = series([0.25, 0.30, 0.32, 0.35, 0.80, 0.82], [0.60, 0.59, 0.58, 0.57, 0.06, 0.04])
    assert classify(s).regime == "gradual"


def test_relative_quantities_mcq_vs_generative():
    # A generative benchmark with tiny base learning and a different retention scale: same shape.
    gen = CLIFF.assign(L=0.02 + (CLIFF["L"] - 0.25) * (0.98 / 0.75), R=CLIFF["R"] * 0.4)
    a, b = classify(CLIFF), classify(gen)
    assert (a.regime, a.critical_lr_low, a.critical_lr_high) == (b.regime, b.critical_lr_low, b.critical_lr_high)
    assert a.drop_at_cliff == pytest.approx(b.drop_at_cliff)
    assert a.gain_at_cliff_share == pytest.approx(b.gain_at_cliff_share)


def test_noisy_cliff_still_found():
    rng = np.random.default_rng(0)
    noisy = CLIFF.assign(L=CLIFF["L"] + rng.normal(0, 0.01, 6), R=CLIFF["R"] + rng.normal(0, 0.01, 6))
    c = classify(noisy)
    assert c.regime == "cliff" and (c.critical_lr_low, c.critical_lr_high) == (1e-4, 3e-4)


def test_non_monotone_transient_collapse_is_inconclusive():
    # One outlier collapses, a higher lr retains again: not a persistent cliff.
    s = series([0.25, 0.70, 0.72, 0.80, 0.81, 0.80], [0.60, 0.59, 0.05, 0.58, 0.57, 0.56])
    c = classify(s)
    assert c.regime == "inconclusive" and "non-monotone" in c.reason


def test_non_monotone_wiggle_in_gradual_series_stays_gradual():
    s = series([0.25, 0.40, 0.38, 0.60, 0.75, 0.82], [0.60, 0.50, 0.52, 0.40, 0.30, 0.20])
    assert classify(s).regime == "gradual"


def test_single_point_and_too_few_lrs():
    assert classify(series([0.25], [0.6])).regime == "inconclusive"
    c = classify(series([0.25, 0.8], [0.6, 0.05]))
    assert c.regime == "inconclusive" and "need >= 2" in c.reason
    assert classify(series([0.25, 0.8], [0.6, 0.05]), Thresholds(min_lrs=1)).regime == "inconclusive"  # lr1 collapsed


def test_missing_base_is_inconclusive():
    c = classify(CLIFF[CLIFF["lr"] > 0])
    assert c.regime == "inconclusive" and "no base" in c.reason


def test_zero_base_retention_and_first_lr_collapse():
    assert "unmeasurable" in classify(CLIFF.assign(R=[0.0, 0, 0, 0, 0, 0])).reason
    s = series([0.25, 0.70, 0.80, 0.81], [0.60, 0.20, 0.05, 0.04])
    c = classify(s)
    assert c.regime == "inconclusive" and "sweep lower lrs" in c.reason


def test_ties_seeds_at_one_lr_are_averaged():
    # Two seeds at lr 3e-4: one collapsed (0.02), one not (0.40); mean 0.21 -> drop (0.57-0.21)/0.6 = 0.6.
    extra = pd.DataFrame({"lr": [3e-4], "L": [0.81], "R": [0.40]})
    two = pd.concat([CLIFF.assign(R=CLIFF["R"].where(CLIFF["lr"] != 3e-4, 0.02)), extra])
    c = classify(two)
    assert c.regime == "cliff" and c.n_points == 6
    assert c.drop_at_cliff == pytest.approx((0.57 - 0.21) / 0.6)


def test_threshold_ties_are_inclusive():
    # Drop exactly cliff_drop of R0 (0.4 * 0.5 = 0.2 points) counts as a collapse; nudged below, it does not.
    s = series([0.2, 0.6, 0.7, 0.7], [0.5, 0.5, 0.5, 0.3], lrs=[0, 1, 2, 4])
    assert classify(s, Thresholds(cliff_drop=0.4)).regime == "cliff"
    # (not a cliff; and lr 4 learned nothing over lr 2, which kept R0: forgetting, no trade-off)
    assert classify(s, Thresholds(cliff_drop=0.41)).regime == "forgetting"
    # Gain exactly max_gain_share of the span is "no learning gain".
    s2 = series([0.2, 0.6, 0.7, 0.8], [0.5, 0.5, 0.5, 0.1], lrs=[0, 1, 2, 4])
    assert classify(s2, Thresholds(max_gain_share=1 / 6)).regime == "cliff"
    assert classify(s2, Thresholds(max_gain_share=0.16)).regime == "gradual"


def test_cliff_is_an_lr_factor_not_a_grid_step():
    # 1.0 -> 0.7 -> 0.4 -> 0.1 of R0 in 3x steps: each step loses 30 %, every 9x loses 60 %.
    s = series([0.25, 0.60, 0.75, 0.76, 0.76, 0.75], [0.60, 0.60, 0.42, 0.24, 0.06, 0.05])
    assert classify(s).regime == "gradual"
    c = classify(s, Thresholds(cliff_lr_ratio=10))
    assert c.regime == "cliff" and (c.critical_lr_low, c.critical_lr_high) == (3e-5, 3e-4)
    # A point inside the collapse (a refined lr) belongs to it: the bracket still witnesses the cliff.
    inner = pd.concat([s, pd.DataFrame({"lr": [1.7e-4], "L": [0.76], "R": [0.15]})])
    assert classify(inner, Thresholds(cliff_lr_ratio=10)).regime == "cliff"


def test_point_inside_a_sharp_collapse_does_not_hide_it():
    # 3x grid; lr 3e-4 landed inside a sharp collapse at 70 % of R0. Neither 1e-4 -> 3e-4 (30 %)
    # nor 1e-3 alone shows it from the plateau, but 3e-4 -> 1e-3 loses 63 %: near_base (0.40)
    # >= cliff_drop lets the point inside the collapse start it.
    s = series([0.25, 0.70, 0.80, 0.80, 0.81, 0.80], [0.60, 0.60, 0.60, 0.60, 0.42, 0.04])
    c = classify(s)
    assert c.regime == "cliff" and (c.critical_lr_low, c.critical_lr_high) == (3e-4, 1e-3)
    assert classify(s, Thresholds(near_base=0.2)).regime == "forgetting"  # no cliff; no learning past 0.80


def test_collapse_over_a_step_wider_than_the_ratio_is_unresolved():
    s = series([0.25, 0.70, 0.80, 0.80], [0.60, 0.60, 0.59, 0.05], lrs=[0, 1e-5, 1e-4, 1e-3])
    c = classify(s)
    assert c.regime == "inconclusive" and "refine" in c.reason
    assert (c.unresolved_lr_low, c.unresolved_lr_high) == (1e-4, 1e-3) and c.critical_lr_low is None
    # Inside the step, a sharp collapse shows up as a cliff, a spread one as a decline (forgetting: L
    # stays at 0.80, where the lrs that keep R0 already are; issue 59).
    sharp = pd.concat([s, pd.DataFrame({"lr": [2.2e-4, 4.6e-4], "L": [0.8, 0.8], "R": [0.59, 0.05]})])
    assert classify(sharp).regime == "cliff"
    spread = pd.concat([s, pd.DataFrame({"lr": [2.2e-4, 4.6e-4], "L": [0.8, 0.8], "R": [0.42, 0.24]})])
    assert classify(spread).regime == "forgetting"
    # With learning gained across the wide step it is still unresolved: the gain may precede the collapse.
    gain = s.assign(L=[0.25, 0.3, 0.35, 0.8])
    assert classify(gain).unresolved_lr_low == 1e-4


def test_thresholds_are_validated():
    with pytest.raises(ValidationError):
        Thresholds(cliff_dorp=0.5)
    with pytest.raises(ValidationError):
        Thresholds(cliff_drop=1.5)
    with pytest.raises(ValueError, match="missing"):
        classify(pd.DataFrame({"lr": [0], "L": [0.2]}))
    with pytest.raises(ValueError, match="non-finite"):
        classify(series([0.25, np.nan], [0.6, 0.5]))


def test_pareto_mask_with_ties():
    L = np.array([0.2, 0.5, 0.5, 0.4, 0.8, 0.5])
    R = np.array([0.6, 0.5, 0.5, 0.4, 0.1, 0.3])
    assert pareto_mask(L, R).tolist() == [True, True, True, False, True, False]


def test_dominates_all():
    assert dominates_all([0.5, 0.8], [0.6, 0.4], [0.4, 0.7], [0.5, 0.3])
    assert not dominates_all([0.5], [0.6], [0.4, 0.9], [0.5, 0.1])
    assert not dominates_all([0.5], [0.6], [0.5], [0.6])  # identical: no strict improvement
    # 001's robust margin c (issue 52): every point of b beaten by c on one axis, else no dominance
    assert dominates_all([0.5, 0.8], [0.6, 0.4], [0.4, 0.7], [0.5, 0.3], robust=0.05)
    assert not dominates_all([0.5, 0.8], [0.6, 0.4], [0.49, 0.7], [0.59, 0.3], robust=0.05)
    assert dominates_all([0.5, 0.8], [0.6, 0.4], [0.49, 0.7], [0.59, 0.3])  # without c it does


def test_frontier_area():
    assert frontier_area([1.0], [0.6], 0.25, 0.6) == pytest.approx(1.0)
    assert frontier_area([0.25], [0.6], 0.25, 0.6) == pytest.approx(0.0)
    # (learning share 0.5, keeps all) and (share 1.0, keeps half): 0.5*1 + 0.5*0.5
    assert frontier_area([0.625, 1.0], [0.6, 0.3], 0.25, 0.6) == pytest.approx(0.75)
    # a dominated point adds nothing; retention above base is clipped at 1
    assert frontier_area([0.625, 1.0, 0.5], [0.7, 0.3, 0.2], 0.25, 0.6) == pytest.approx(0.75)
    assert np.isnan(frontier_area([0.5], [0.5], 0.25, 0.0))


def test_paper_reading_of_a_cliff_needs_learning_before_the_collapse():
    """Issue 16 part 6, on the held-out synthetic families (analysis/synthetic.random_curve):
    every sharp cliff that learns first is a cliff in both readings; the same collapse with the
    learning coming only after it (the curve of qwen2-tiny/lora in the old example report) is a
    cliff by rule 4 and a collapse_without_learning in the paper's reading."""
    from cliffsweep.analysis.classify import paper_regime
    from cliffsweep.analysis.synthetic import Curve, mantissa_lrs, random_curve

    th = Thresholds()
    rng = np.random.default_rng(16)
    lrs = mantissa_lrs(1e-7, 1e-1)
    for _ in range(50):
        c = classify(random_curve("cliff", rng).series(lrs), th)
        assert c.regime == "cliff" and c.learned_before_cliff >= 0.3, c
        assert paper_regime(c.regime, c.learned_before_cliff, th, c.kept_before_cliff, c.learned_after_cliff) == "cliff", c
    for _ in range(50):
        cliff = random_curve("cliff", rng)
        late = Curve(learn_at=cliff.forget_at + 0.5, learn_decades=0.5, forget_at=cliff.forget_at,
                     forget_decades=cliff.forget_decades, floor=cliff.floor, base=cliff.base)
        c = classify(late.series(lrs), th)
        assert c.regime == "cliff" and c.learned_before_cliff < th.paper_min_learning, c
        assert paper_regime(c.regime, c.learned_before_cliff, th) == "collapse_without_learning"
    for regime in ("gradual", "no_forgetting", "inconclusive"):
        assert paper_regime(regime, None, th) == regime
    # the threshold is explicit: with paper_min_learning 0 both readings agree on every cliff
    # whose small lrs are measured and kept retention
    assert paper_regime("cliff", 0.0, Thresholds(paper_min_learning=0.0), 1.0, 0.0) == "cliff"


def test_the_papers_cliff_keeps_retention_before_the_collapse_and_learns_nothing_after_it():
    """Issue 31, the two series the issue found reading `cliff` in both readings: one that had
    already lost 35 % of base retention before its collapse (the paper's safe side forgets
    minimally), and one that learned 6 % of the headroom before the collapse and 86 % more at
    higher lrs after it (the paper's collapse brings no further learning). Rule 4 keeps both as
    cliffs; the paper's reading names what each lacks."""
    from cliffsweep.analysis.classify import paper_regime

    th = Thresholds()
    lrs = [0.0, 1e-5, 2e-5, 4e-5, 8e-5, 1.6e-4]
    forgot = classify(series([0.2, 0.5, 0.7, 0.75, 0.76, 0.76], [0.8, 0.72, 0.6, 0.52, 0.05, 0.04], lrs), th)
    # the collapse ends at 8e-5; a whole transition width below it (<= 8e-5 / 3.5) is 2e-5, at 75 % of R0
    assert forgot.regime == "cliff" and forgot.kept_before_cliff == pytest.approx(0.75), forgot
    assert paper_regime(forgot.regime, forgot.learned_before_cliff, th, forgot.kept_before_cliff,
                        forgot.learned_after_cliff) == "forgot_before_cliff"
    late = classify(series([0.2, 0.22, 0.248, 0.25, 0.6, 0.9], [0.8, 0.8, 0.79, 0.1, 0.08, 0.05], lrs), th)
    assert late.regime == "cliff" and late.learned_before_cliff == pytest.approx(0.06), late
    assert late.learned_after_cliff > th.max_gain_share, late
    assert paper_regime(late.regime, late.learned_before_cliff, th, late.kept_before_cliff,
                        late.learned_after_cliff) == "learned_after_cliff"
    # the paper's own shape: learns while keeping retention, collapses, learns no more
    clean = classify(series([0.2, 0.5, 0.8, 0.9, 0.9, 0.88], [0.8, 0.8, 0.78, 0.77, 0.1, 0.05], lrs), th)
    assert clean.regime == "cliff" and paper_regime(clean.regime, clean.learned_before_cliff, th,
                                                    clean.kept_before_cliff, clean.learned_after_cliff) == "cliff"


def test_the_papers_reading_has_no_loophole_for_an_unmeasured_safe_side_or_a_dip_at_the_collapse():
    """Issue 40 part 4. (a) lrs 1e-5, 3e-5, 1e-4 with retention at 65 % of base from the smallest:
    no trained lr lies a transition width below the collapse, so "minimal forgetting" on the small
    lrs is unmeasured, and that is no pass. (b) "Learned after" counts from the safe side's best:
    a series that learns 0.60, dips to 0.45 at the collapse and reaches 0.61 after it learned
    nothing further (cliff), while one whose higher lrs pass the safe side's best by more than
    max_gain_share of the safe side's own learning did (learned_after_cliff)."""
    from cliffsweep.analysis.classify import paper_regime

    th = Thresholds()

    def paper(c):
        return paper_regime(c.regime, c.learned_before_cliff, th, c.kept_before_cliff, c.learned_after_cliff)

    unmeasured = classify(series([0.2, 0.6, 0.62, 0.63], [1.0, 0.65, 0.1, 0.05], [0.0, 1e-5, 3e-5, 1e-4]), th)
    assert unmeasured.regime == "cliff" and unmeasured.kept_before_cliff is None, unmeasured
    assert paper(unmeasured) == "unmeasured_before_cliff"

    lrs = [0.0, 1e-5, 2e-5, 4e-5, 8e-5, 1.6e-4]
    dip = classify(series([0.2, 0.5, 0.60, 0.45, 0.61, 0.6], [1.0, 0.98, 0.97, 0.2, 0.1, 0.1], lrs), th)
    # shares of the safe side's own learning, 0.60 - 0.20 (issue 52: not of the span, which holds the gain)
    assert dip.regime == "cliff" and dip.learned_after_cliff == pytest.approx(0.01 / 0.40), dip
    assert paper(dip) == "cliff"
    beyond = classify(series([0.2, 0.5, 0.60, 0.45, 0.9, 0.9], [1.0, 0.98, 0.97, 0.2, 0.1, 0.1], lrs), th)
    assert beyond.regime == "cliff" and beyond.learned_after_cliff == pytest.approx(0.3 / 0.4), beyond
    assert paper(beyond) == "learned_after_cliff"


def test_the_report_says_why_the_two_readings_differ():
    """Where the paper's reading differs from ours the report says why, from the measure that
    decided it; where they agree it says nothing (issue 40 part 4)."""
    from cliffsweep.analysis.classify import why_readings_differ

    assert why_readings_differ("cliff", "cliff", 0.5, 0.95, 0.0) == ""
    assert why_readings_differ("gradual", "gradual", None, None, None) == ""
    assert "2% of the headroom" in why_readings_differ("cliff", "collapse_without_learning", 0.02, 0.95, 0.0)
    assert "lost 35% of base R" in why_readings_differ("cliff", "forgot_before_cliff", 0.5, 0.65, 0.0)
    assert "unmeasured" in why_readings_differ("cliff", "unmeasured_before_cliff", 0.5, None, 0.0)
    assert "learned 43% more than the safe side" in why_readings_differ("cliff", "learned_after_cliff", 0.5, 0.95, 0.43)


def test_regime_names_are_spelt_only_in_their_vocabulary_module():
    """Issue 60 part 5: package code compares with analysis/regimes.py's names, never with a string
    of its own (one regime added, e.g. issue 59's `forgetting`, then reaches every room). The one
    exception is the frontiers column `learned_after_cliff` (the measure), which shares its name
    with the paper regime it decides; the dashboard reads `is_cliff` from its API."""
    import io
    import tokenize
    from pathlib import Path

    from cliffsweep.analysis.regimes import LEARNED_AFTER_CLIFF, PAPER_REGIMES

    root = Path(__file__).resolve().parents[1] / "cliffsweep"
    found = []
    for path in sorted(root.rglob("*.py")):
        if path.name == "regimes.py":
            continue
        for tok in tokenize.generate_tokens(io.StringIO(path.read_text()).readline):
            word = tok.string[1:-1] if tok.type == tokenize.STRING and tok.string[:1] in "\"'" else None
            if word in PAPER_REGIMES and word != LEARNED_AFTER_CLIFF:
                found.append(f"{path.relative_to(root)}:{tok.start[0]} {tok.string}")
    assert not found, found
    js = (root / "dashboard" / "static" / "app.js").read_text()
    assert not [r for r in PAPER_REGIMES if f'"{r}"' in js], "app.js spells a regime name"
