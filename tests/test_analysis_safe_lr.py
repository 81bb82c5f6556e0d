"""The highest safe learning rate per series (issue 11, part 2): definition, edge cases, its
bootstrap confidence and the frontiers / report / plot outputs."""

import os

import numpy as np
import pandas as pd
import pytest

from cliffsweep.analysis import Thresholds, frontiers
from cliffsweep.analysis.classify import lr_curve
from cliffsweep.analysis.refinement_gain import refinement_table
from cliffsweep.analysis.run import analyze_store
from cliffsweep.analysis.safe_lr import max_safe_lr_arrays
from cliffsweep.analysis.synthetic import SyntheticSweep, write_synthetic_store
from cliffsweep.storage.store import Store


def safe(lr, L, R, th=None):
    c = lr_curve(pd.DataFrame({"lr": lr, "L": L, "R": R}))
    return max_safe_lr_arrays(c["lr"].to_numpy(float), c["L"].to_numpy(float), c["R"].to_numpy(float),
                              th or Thresholds())


def test_highest_lr_keeping_the_bar_its_successor_and_its_learning():
    s = safe([0, 1e-5, 3e-5, 1e-4, 3e-4], [0.25, 0.5, 0.6, 0.7, 0.72], [0.6, 0.6, 0.55, 0.4, 0.05])
    # 3e-5 keeps 0.55 / 0.6 = 92 % >= 90 %; 1e-4 keeps 67 %
    assert (s.max_safe_lr, s.max_safe_lr_next) == (3e-5, 1e-4)
    assert s.learn_at_max_safe_lr == pytest.approx(0.35) and s.bracket_ratio == pytest.approx(10 / 3)


def test_bar_is_inclusive_and_follows_forget_min():
    lr, L, R = [0, 1, 2, 4], [0.2, 0.3, 0.4, 0.5], [0.5, 0.5, 0.45, 0.3]  # 2 keeps exactly 90 %
    assert safe(lr, L, R).max_safe_lr == 2
    assert safe(lr, L, R, Thresholds(forget_min=0.09)).max_safe_lr == 1


def test_non_monotone_takes_the_highest_and_seeds_are_averaged():
    s = safe([0, 1, 2, 3, 4], [0.2] * 5, [0.5, 0.5, 0.3, 0.49, 0.1])
    assert (s.max_safe_lr, s.max_safe_lr_next) == (3, 4)
    # two seeds at lr 2: 0.5 and 0.4 -> 0.45 = 90 %: safe
    s = safe([0, 1, 2, 2, 4], [0.2] * 5, [0.5, 0.5, 0.5, 0.4, 0.1])
    assert s.max_safe_lr == 2


def test_open_brackets_and_missing_base():
    none_safe = safe([0, 1, 2], [0.2, 0.3, 0.4], [0.5, 0.3, 0.1])
    assert none_safe.max_safe_lr is None and none_safe.max_safe_lr_next == 1 and none_safe.bracket_ratio is None
    all_safe = safe([0, 1, 2], [0.2, 0.3, 0.4], [0.5, 0.5, 0.49])
    assert (all_safe.max_safe_lr, all_safe.max_safe_lr_next) == (2, None)
    assert safe([1, 2], [0.3, 0.4], [0.5, 0.4]).max_safe_lr is None  # no base point
    assert safe([0, 1], [0.2, 0.3], [0.0, 0.0]).max_safe_lr is None  # R0 = 0


def _pts(n):
    lrs = [0, 1e-5, 3e-5, 1e-4, 3e-4]
    return pd.DataFrame({"model": "m", "series": ["base"] + ["sft"] * 4, "epochs": [0, 3, 3, 3, 3], "lr": lrs,
                         "L": [0.25, 0.6, 0.7, 0.72, 0.72], "R": [0.6, 0.6, 0.55, 0.3, 0.05], "n_L": n, "n_R": n,
                         "point_id": [f"p{i}" for i in range(5)]})


def test_frontiers_columns_and_bootstrap_confidence():
    big = frontiers(_pts(100_000), n_boot=200).iloc[0]
    assert (big["max_safe_lr"], big["max_safe_lr_next"]) == (3e-5, 1e-4)
    assert big["learn_at_max_safe_lr"] == pytest.approx(0.45) and big["max_safe_lr_confidence"] > 0.99
    # 3e-5 keeps 91.7 %, 1.7 points of R0 above the bar: 50 examples cannot tell
    small = frontiers(_pts(50), n_boot=200).iloc[0]
    assert small["max_safe_lr"] == 3e-5 and 0.3 < small["max_safe_lr_confidence"] < 0.8
    assert np.isnan(frontiers(_pts(50), n_boot=0).iloc[0]["max_safe_lr_confidence"])
    assert frontiers(_pts(50), n_boot=0).iloc[0]["n_refined_lrs"] == 0


def test_refined_lrs_are_counted_and_bracketed_before_and_after():
    p = _pts(1000).assign(round=0)
    extra = pd.DataFrame({"model": "m", "series": "sft", "epochs": 3, "lr": [4.6e-5, 6.8e-5], "L": [0.71, 0.72],
                          "R": [0.54, 0.45], "n_L": 1000, "n_R": 1000, "point_id": ["q1", "q2"], "round": 1})
    both = pd.concat([p, extra], ignore_index=True)
    assert frontiers(both, n_boot=0).iloc[0]["n_refined_lrs"] == 2
    t = refinement_table(both).iloc[0]
    assert (t["n_grid_lrs"], t["n_refined_lrs"], t["grid_regime"]) == (4, 2, t["regime"])
    assert (t["grid_max_safe_lr"], t["grid_max_safe_lr_next"]) == (3e-5, 1e-4)
    assert (t["max_safe_lr"], t["max_safe_lr_next"]) == (4.6e-5, 6.8e-5)
    assert refinement_table(p).empty


def test_report_and_plots_show_the_safe_lr(tmp_path):
    store, out = str(tmp_path / "s"), str(tmp_path / "out")
    write_synthetic_store(store, SyntheticSweep(models={"m": "cliff"}, series=(("sft", "sft"),), epochs=(1,),
                                                n_learn=80, n_retain=80))
    table = analyze_store(store, out, n_boot=20)
    row = table.iloc[0]
    assert row["max_safe_lr"] == 3e-4 and row["max_safe_lr_next"] == 1e-3  # synthetic cliff at log10 lr -3.3
    csv = pd.read_csv(f"{out}/frontiers.csv")
    assert csv.loc[0, "max_safe_lr"] == 3e-4
    md = open(f"{out}/report.md").read()
    assert "highest safe lr -> next (forgets)" in md and "| 3e-4 -> 1e-3 (3.3x) |" in md
    for png in ("frontier_m.png", "vs_lr_m.png"):
        assert os.path.getsize(f"{out}/{png}") > 10_000


def test_report_states_brackets_before_and_after_refinement(tmp_path):
    """A store where lrs 4.5e-4 and 5.5e-4 came from refinement round 1 inside the grid's cliff
    bracket 3e-4 -> 1e-3 (synthetic cliff at log10 lr -3.3 = 5.0e-4)."""
    store, out = str(tmp_path / "s"), str(tmp_path / "out")
    write_synthetic_store(store, SyntheticSweep(models={"m": "cliff"}, series=(("sft", "sft"),), epochs=(1,),
                                                lrs=(1e-5, 3e-5, 1e-4, 3e-4, 4.5e-4, 5.5e-4, 1e-3),
                                                n_learn=80, n_retain=80))
    s = Store(store)
    trials = s.read("trials")
    for _, row in trials[trials["lr"].isin([4.5e-4, 5.5e-4])].iterrows():
        s.write("trials", row["trial_id"], [{**row.to_dict(), "round": 1}])
    table = analyze_store(store, out, n_boot=0)
    row = table.iloc[0]
    assert (row["regime"], row["critical_lr_low"], row["critical_lr_high"]) == ("cliff", 4.5e-4, 5.5e-4)
    assert (row["max_safe_lr"], row["max_safe_lr_next"], row["n_refined_lrs"]) == (4.5e-4, 5.5e-4, 2)
    md = open(f"{out}/report.md").read()
    assert "### m: brackets on the grid (round 0) and after the refinement rounds" in md
    assert "| sft | 5 | 2 | cliff | cliff | 3e-4 -> 1e-3 (3.3x) | 4.5e-4 -> 5.5e-4 (1.2x) |" in md
    assert "brackets on the grid" in open(f"{out}/report.html").read()
