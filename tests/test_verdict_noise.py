"""Issue 52 parts 2 and 3: a cliff survives its own noise. The issue's two series, through
`analysis.frontiers.frontiers`: a gradual series that one run's deviation turns into a cliff
(three runs per lr average it out; one run is marked as such), and a cliff that keeps learning
past its collapse (the strict paper reading). Item counts are the paper's: ChemL3 420, GSM8K 500."""

import numpy as np
import pandas as pd
import pytest

from cliffsweep.analysis.classify import Thresholds, classify_arrays, paper_regime
from cliffsweep.analysis.frontiers import frontiers
from cliffsweep.analysis.runs import run_weights, runs_at, unreproduced

LRS5 = [1e-6, 3e-6, 1e-5, 3e-5, 1e-4]
GRADUAL_L, GRADUAL_R = [0.40, 0.48, 0.55, 0.60, 0.62], [0.485, 0.43, 0.31, 0.20, 0.11]
DEVIATION = [0.0, 0.025, 0.04, -0.11, -0.035]  # one run's, on the last four retentions


def points(lrs, runs, base=(0.30, 0.50), n=(420, 500)) -> pd.DataFrame:
    """A series' points: the base, then one row per (run, lr); `runs`: [(L list, R list)]."""
    rows = [{"model": "m", "series": "base", "epochs": 0, "lr": 0.0, "L": base[0], "R": base[1]}]
    for k, (Ls, Rs) in enumerate(runs):
        rows += [{"model": "m", "series": "sft", "epochs": 1, "lr": lr, "L": l, "R": r, "seed": k}
                 for lr, l, r in zip(lrs, Ls, Rs)]
    out = pd.DataFrame(rows)
    out["n_L"], out["n_R"] = n
    return out


def row(pts, **kw) -> pd.Series:
    t = frontiers(pts, **kw)
    return t[t["series"] == "sft"].iloc[0]


def test_one_runs_deviation_reads_a_cliff_marked_one_run_and_three_runs_name_it():
    deviant = list(np.add(GRADUAL_R, DEVIATION))
    clean = row(points(LRS5, [(GRADUAL_L, GRADUAL_R)]), n_boot=200)
    assert clean["regime"] == "gradual", clean["reason"]
    one = row(points(LRS5, [(GRADUAL_L, deviant)]), n_boot=200)
    # the numbers: lr 1e-5 -> 3e-5 loses 52 % of base retention for +16 % of the span
    assert one["regime"] == "cliff", one["reason"]
    # (the strict paper reading also sees .55 -> .62 past it, 2.1 standard errors at 420 items)
    assert one["regime_paper"] == "learned_after_cliff" and one["learned_after_cliff_z"] > 2
    assert one["drop_at_cliff"] == pytest.approx(0.52) and one["gain_at_cliff_share"] == pytest.approx(0.05 / 0.32)
    assert one["runs_at_bracket"] == 1 and one["confidence_over"] == "items"
    three = row(points(LRS5, [(GRADUAL_L, deviant), (GRADUAL_L, GRADUAL_R), (GRADUAL_L, GRADUAL_R)]), n_boot=200)
    # the mean of the three is gradual, but the deviant run alone collapses at the closest call
    # beyond its noise: runs checked both ways (issue 59 part 4) make it inconclusive, naming it
    assert three["regime_point_estimate"] == "gradual" and three["regime"] == "inconclusive", three["reason"]
    assert "seed 0" in three["reason"] and "disagree" in three["reason"], three["reason"]
    assert three["runs_at_bracket"] == 3 and three["confidence_over"] == "runs and items"
    # the bootstrap over runs sees the deviant run: some replicates draw it twice or thrice and read
    # a cliff, which an item bootstrap of the run means cannot
    assert 0 < three["regime_shares"].count("cliff") and 0.6 <= three["confidence"] < 1.0, three["regime_shares"]


def test_learning_past_the_collapse_beyond_the_learn_tasks_noise_is_no_papers_cliff():
    lrs = [1e-6, 3e-6, 1e-5, 3e-5, 1e-4, 3e-4, 1e-3]
    L, R = [0.50, 0.62, 0.70, 0.72, 0.75, 0.78, 0.80], [0.70, 0.69, 0.67, 0.12, 0.06, 0.04, 0.02]
    late = row(points(lrs, [(L, R)], base=(0.30, 0.70)), n_boot=0)
    assert late["regime"] == "cliff" and (late["critical_lr_low"], late["critical_lr_high"]) == (1e-5, 3e-5)
    # .70 -> .80 at 420 items each: 3.4 standard errors of the difference; a quarter of the safe side's .40
    assert late["learned_after_cliff_z"] == pytest.approx(0.10 / np.sqrt((0.7 * 0.3 + 0.8 * 0.2) / 420))
    assert late["learned_after_cliff"] == pytest.approx(0.25)
    assert late["regime_paper"] == "learned_after_cliff"
    # the paper's own shape: learning after the collapse moves within noise (.70 -> .72, 0.7 SE)
    within = [0.50, 0.62, 0.70, 0.69, 0.72, 0.70, 0.71]
    clean = row(points(lrs, [(within, R)], base=(0.30, 0.70)), n_boot=0)
    assert clean["regime_paper"] == "cliff" and clean["learned_after_cliff_z"] < 2, clean
    # without item counts, a gain above max_gain_share of the safe side's own learning (not of the span)
    th = Thresholds()
    assert paper_regime("cliff", 0.57, th, 0.99, 0.30) == "learned_after_cliff"
    assert paper_regime("cliff", 0.57, th, 0.99, 0.20) == "cliff"
    assert paper_regime("cliff", 0.57, th, 0.99, 0.30, 1.5) == "cliff"  # within noise where it is known


def test_a_collapse_the_runs_at_its_bracket_do_not_reproduce_is_no_cliff():
    """Three runs at each lr; at the bracket's upper lr one run keeps its retention: the other
    two's collapse is not reproduced, in either reading. Where all three collapse it stays a cliff."""
    lrs, L = [1e-5, 3e-5, 1e-4, 3e-4], [0.5, 0.6, 0.65, 0.66]
    fell, kept = [0.49, 0.48, 0.10, 0.08], [0.49, 0.48, 0.45, 0.08]
    mixed = row(points(lrs, [(L, fell), (L, fell), (L, kept)]), n_boot=0)
    assert mixed["regime_point_estimate"] == "cliff" and mixed["regime"] == "inconclusive", mixed
    assert mixed["regime_paper"] == "inconclusive" and "disagree" in mixed["reason"], mixed["reason"]
    agreed = row(points(lrs, [(L, fell), (L, fell), (L, [0.49, 0.47, 0.13, 0.07])]), n_boot=0)
    assert agreed["regime"] == "cliff" and agreed["runs_at_bracket"] == 3, agreed["reason"]


def test_runs_helpers():
    lr = np.array([1e-5, 1e-5, 3e-5, 1e-4, 1e-4, 1e-4])
    assert runs_at(lr, 1e-5, 1e-4) == 2 and runs_at(lr, 3e-5, 1e-4) == 1 and runs_at(lr, None, None) is None
    w = run_weights(lr, 500, np.random.default_rng(0))
    assert w.shape == (6, 500) and np.allclose(w[[0, 1]].sum(0), 1) and np.allclose(w[3:].sum(0), 1)
    assert (w[2] == 1).all() and (w[0] != 0.5).any()  # the single run always counts; the pairs get drawn
    assert run_weights(np.array([1e-5, 3e-5]), 10, np.random.default_rng(0)) is None
    # one run: nothing to compare
    assert unreproduced(np.array([1e-5, 3e-5]), np.array([0.5, 0.1]), np.array([500, 500]), 0.5, 1e-5, 3e-5,
                        0.4, 2.0) is None
    # where the transition falls moves from run to run: a run at the safe lr already collapsed is
    # no disagreement while every run past it collapsed too
    lrs = np.array([1e-5, 1e-5, 1e-5, 3e-5, 3e-5, 3e-5])
    assert unreproduced(lrs, np.array([0.5, 0.48, 0.05, 0.04, 0.05, 0.03]), np.full(6, 500), 0.5, 1e-5, 3e-5,
                        0.4, 2.0) is None
    # classify_arrays' closest call: a gradual series' largest drop within cliff_lr_ratio
    c = classify_arrays(np.array([0.0, *LRS5]), np.array([0.3, *GRADUAL_L]), np.array([0.5, *GRADUAL_R]), Thresholds())
    assert c.regime == "gradual" and (c.closest_lr_low, c.closest_lr_high) == (3e-6, 1e-5)
    assert c.closest_drop == pytest.approx((0.43 - 0.31) / 0.5)


def test_verification_goes_to_a_cliffs_bracket_and_a_close_call_only():
    """Issue 52 part 1's policy (analysis/verify.py): a cliff's two bracket lrs, a close call's
    two lrs (a drop within verify.margin of cliff_drop), nothing for a clear gradual series; the
    seeds continue the sweep's."""
    from cliffsweep.analysis.verify import verify_lrs, verify_seeds

    th = Thresholds()
    assert verify_seeds([0], 2) == [1, 2] and verify_seeds([0, 3], 1) == [4]
    cliff = row(points(LRS5, [(GRADUAL_L, list(np.add(GRADUAL_R, DEVIATION)))]), n_boot=0)
    assert verify_lrs(cliff, th, 1.0) == [1e-5, 3e-5]
    gradual = row(points(LRS5, [(GRADUAL_L, GRADUAL_R)]), n_boot=0)  # largest drop 24 % of base R
    # 0.16 short of cliff_drop: one standard error of the drop, run noise (the prior: one run per lr) included
    assert gradual["closest_drop"] == pytest.approx(0.24) and 0.9 < gradual["closest_shortfall_se"] < 1.2
    assert verify_lrs(gradual, th, 0.5) == []
    assert verify_lrs(gradual, th, 2.0) == [3e-6, 1e-5]  # within two standard errors: a close call
    flat = row(points(LRS5, [(GRADUAL_L, [0.5] * 5)]), n_boot=0)
    assert flat["regime"] == "no_forgetting" and verify_lrs(flat, th, 5.0) == []
    # the near miss: 0.12 short of cliff_drop read gradual at confidence 1.00 and got no
    # verification under a margin of 0.10 of R0 sized from item noise; under the runs' noise it does
    near = [0.485, 0.47, 0.46, 0.32, 0.30]  # 92 % -> 64 % of R0 in one 3x step
    near_row = row(points(LRS5, [(GRADUAL_L, near)]), n_boot=0)
    assert near_row["regime_point_estimate"] != "cliff" and near_row["closest_drop"] == pytest.approx(0.28)
    from cliffsweep.sweep.spec import VerifySpec
    assert verify_lrs(near_row, th, VerifySpec().margin) == [1e-5, 3e-5]


def test_step_budgets_are_series_of_their_own_in_every_claims_table():
    """Issue 52 part 4: with `recipe.max_steps: [9, 18]` every series has epochs 0, and the claims
    keyed SFT's reference on (model, epochs): one SFT series served both budgets, and
    `sft[muon]@9steps` kept its `[muon]` in the forgetting order (tau NaN). Now each budget
    compares within itself, in every table, with no NaN where a number is due."""
    from cliffsweep.analysis.paper_tables import paper_tables
    from cliffsweep.sweep.grid import series_label

    rows = [{"model": "m", "series": "base", "method": "base", "optimizer": "", "epochs": 0, "lr": 0.0, "L": 0.3,
             "R": 0.5, "seed": 0}]
    for steps, shift in ((9, 0.0), (18, 0.05)):
        for opt, dip in (("adamw", 0.0), ("muon", 0.1)):
            for method, keep in (("sft", 0.0), ("l2", 0.05)):
                label = series_label(method, {}, opt, steps)
                rows += [{"model": "m", "series": label, "method": method, "optimizer": opt if opt != "adamw" else "",
                          "epochs": 0, "lr": lr, "L": l + shift, "R": min(r - dip + keep, 0.5), "seed": 0}
                         for lr, l, r in zip(LRS5, GRADUAL_L, GRADUAL_R)]
    pts = pd.DataFrame(rows).assign(n_L=420, n_R=500, classified=True, final=True, step=1,
                                    trial_id=lambda t: t["series"] + t["lr"].astype(str))
    pts["point_id"] = pts.index.astype(str)
    table = frontiers(pts, n_boot=0)
    assert len(table) == 8
    out = paper_tables(pts, table, None, [])
    gains = out["matched_gain"]
    assert len(gains) == 6 and set(gains["budget"]) == {"9 steps", "18 steps"}, gains
    for r in gains.itertuples():  # each series against SFT at its own budget
        assert r.reference == f"sft@{r.budget.split()[0]}steps", (r.series, r.reference)
    assert not gains[["gain_max", "learning_over_sft"]].isna().any().any(), gains
    opt = out["optimizers"]
    assert sorted(opt["series"]) == ["sft[muon]@18steps", "sft[muon]@9steps"], opt
    order = out["forgetting_order"]
    assert len(order) == 4 and not order["kendall_tau"].isna().any(), order  # 2 budgets x 2 optimizers
    assert set(order["order"].str.split(" > ").sum()) == {"sft", "l2"}  # [muon] and @steps stripped
    eff = out["epochs_effect"]
    assert len(eff) == 8 and set(eff["n_epochs"]) == {2}, eff  # each series across its two budgets
    safe = eff["max_safe_lr"].notna()  # (the muon series forget at every lr: no safe lr, no slope)
    assert safe.sum() == 4 and not eff.loc[safe, "max_safe_lr_slope"].isna().any(), eff
    size = out["size_effect"]
    assert sorted(size["budget"]) == ["18 steps", "9 steps"], size


def test_001s_gain_pools_every_checkpoint_and_a_robust_margin_applies_to_dominance():
    """Issue 52 part 4: SFT under another optimizer (001's claim) is compared on every
    checkpoint, intermediate ones too (001 Sec. 2: "we evaluate intermediate checkpoints ...
    gather all the data points"); a method against SFT keeps the final points. With the robust
    frontier's c, a dominance within c is none."""
    from cliffsweep.analysis.paper_claims import matched_gain

    rows = [{"model": "m", "series": "base", "method": "base", "optimizer": "", "epochs": 3, "lr": 0.0, "L": 0.3,
             "R": 0.5, "final": True, "step": 0}]
    for series, opt, L, R in (("sft", "", [0.5, 0.6, 0.7], [0.45, 0.40, 0.10]),
                              ("sft[muon]", "muon", [0.48, 0.58, 0.66], [0.44, 0.40, 0.12])):
        for lr, l, r in zip([1e-5, 1e-4, 1e-3], L, R):
            rows.append({"model": "m", "series": series, "method": "sft", "optimizer": opt, "epochs": 3, "lr": lr,
                         "L": l, "R": r, "final": True, "step": 2})
            # an intermediate checkpoint (half the steps): muon's at 1e-4 keeps far more at L .55
            mid = (0.55, 0.49) if (series, lr) == ("sft[muon]", 1e-4) else (l - 0.1, r)
            rows.append({"model": "m", "series": series, "method": "sft", "optimizer": opt, "epochs": 3, "lr": lr,
                         "L": mid[0], "R": mid[1], "final": False, "step": 1})
    pts = pd.DataFrame(rows).assign(n_L=420, n_R=500, seed=0)
    pts["classified"] = pts["final"]
    pts["point_id"] = pts.index.astype(str)
    pts["trial_id"] = pts["series"] + pts["lr"].astype(str)
    table = frontiers(pts, n_boot=0)
    gain = matched_gain(pts.assign(_row=range(len(pts))), table).set_index("series").loc["sft[muon]"]
    assert bool(gain["pooled_checkpoints"])
    # .49 at L .55 against SFT's best at L >= .55 - se: its final .40 at L .60 -> +.09
    assert gain["gain_max"] == pytest.approx(0.09), gain
    # a series 0.01 above SFT at every checkpoint dominates it, but not beyond a margin c of 0.05
    above = pts[pts["series"] == "sft"].assign(series="l2", method="l2", R=lambda t: t["R"] + 0.01,
                                               trial_id=lambda t: "l2" + t["lr"].astype(str))
    both = pd.concat([pts, above], ignore_index=True).assign(point_id=lambda t: t.index.astype(str))
    plain = frontiers(both, n_boot=0).set_index("series")
    robust = frontiers(both, n_boot=0, robust=0.05).set_index("series")
    assert plain.loc["sft", "dominated_by"] == ["l2"] and robust.loc["sft", "dominated_by"] == []
