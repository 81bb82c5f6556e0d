"""A retention suite (issue 30 part 3): several retain tasks read as one aggregate retention,
with each task's own reading beside it (analysis/suite.py, analysis/suite_tables.py)."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

from cliffsweep.analysis.confidence import replicate_accuracies
from cliffsweep.analysis.frontiers import frontiers
from cliffsweep.analysis.points import load_store
from cliffsweep.analysis.suite import aggregate, kept_tasks, task_column
from cliffsweep.analysis.synthetic import SyntheticSweep, write_synthetic_store


def test_share_of_base_is_the_mean_share_kept_and_general_003_leaves_out_weak_tasks():
    R = np.array([[0.3, 0.8, 0.1], [0.6, 0.4, 0.2]])
    base = np.array([0.6, 0.8, 0.4])
    share = aggregate(R, base, kept_tasks(base, "share_of_base"), "share_of_base")
    np.testing.assert_allclose(share, [(0.5 + 1.0 + 0.25) / 3, (1.0 + 0.5 + 0.5) / 3])
    keep = kept_tasks(base, "general_003")  # 003: benchmarks the base scores below 0.5 on are left out
    assert keep.tolist() == [True, True, False]
    np.testing.assert_allclose(aggregate(R, base, keep, "general_003"), [(0.3 + 0.8) / 2, (0.6 + 0.4) / 2])
    # the base model itself keeps all of its retention, whatever its scores
    np.testing.assert_allclose(aggregate(base[None], base, kept_tasks(base, "share_of_base"), "share_of_base"), [1.0])


def _suite_store(path, other=("toy_old", "flat", 0.7), models=None):
    sw = SyntheticSweep(models=models or {"toy-a": "cliff", "toy-b": "gradual"}, series=(("sft", "sft"),),
                        epochs=(1,), more_retain=(other,), n_retain=150)
    return write_synthetic_store(str(path), sw)


def test_a_suite_reads_each_task_and_its_aggregate(tmp_path):
    """Each checkpoint keeps every task's accuracy; R is their mean share of base; --retain-task
    reads one task exactly as its own column."""
    _suite_store(tmp_path / "s")
    d = load_store(str(tmp_path / "s"))
    assert d.retain_tasks == ("toy_arith", "toy_old")
    p = d.points
    for model, rows in p.groupby("model"):
        b = rows[rows["series"] == "base"].iloc[0]
        want = (rows["R[toy_arith]"] / b["R[toy_arith]"] + rows["R[toy_old]"] / b["R[toy_old]"]) / 2
        np.testing.assert_allclose(rows["R"], want)
    assert (p["n_R"] == 300).all()
    one = load_store(str(tmp_path / "s"), retain_task="toy_old").points
    np.testing.assert_allclose(one.set_index("point_id")["R"], p.set_index("point_id")["R[toy_old]"].loc[one["point_id"]])


def test_general_003_with_one_strong_task_classifies_exactly_as_that_task_alone(tmp_path):
    """A suite whose other task the base model scores under 0.5 on is, under 003's reading, that
    one strong task: same R, same regimes, same confidence (the same replicates)."""
    _suite_store(tmp_path / "s", other=("toy_weak", "", 0.3))
    d = load_store(str(tmp_path / "s"), suite="general_003")
    assert any("leaves out ['toy_weak']" in n for n in d.notes), d.notes
    alone = load_store(str(tmp_path / "s"), retain_task="toy_arith")
    np.testing.assert_allclose(d.points["R"], alone.points["R"])
    suite = frontiers(d.points, d.samples, learn_task=d.learn_task, retain_task=list(d.retain_tasks),
                      n_boot=0)
    single = frontiers(alone.points, alone.samples, learn_task=alone.learn_task, retain_task="toy_arith", n_boot=0)
    assert suite["regime"].tolist() == single["regime"].tolist() == ["cliff", "gradual"]


def test_the_suites_bootstrap_draws_every_tasks_items(tmp_path):
    """Replicates of the aggregate come from each task's own paired item bootstrap: the base
    model is 1 in every replicate (its shares of itself), trained points vary, and the spread
    of the aggregate is what the two tasks' spreads give, not zero and not either one's."""
    _suite_store(tmp_path / "s")
    d = load_store(str(tmp_path / "s"))
    pts = d.points
    L, R, src = replicate_accuracies(pts, d.samples, d.learn_task, list(d.retain_tasks), 300, seed=1)
    assert (src == "samples").all()
    base = (pts["series"] == "base").to_numpy()
    np.testing.assert_allclose(R[base], 1.0)
    trained = ~base
    assert np.all(R[trained].std(1) > 0)
    np.testing.assert_allclose(R[trained].mean(1), pts.loc[trained, "R"], atol=0.03)
    # flat task only: the aggregate moves half as much as the toy_arith share does
    arith = replicate_accuracies(pts.assign(R=pts["R[toy_arith]"], n_R=pts["n_R[toy_arith]"]), d.samples,
                                 d.learn_task, "toy_arith", 300, seed=1)[1]
    assert np.median(R[trained].std(1)) < np.median((arith[trained] / pts.loc[base, "R[toy_arith]"].iloc[0]).std(1))


def test_analyze_names_the_task_that_falls_first_and_reports_each_task(tmp_path, capsys):
    """On the cliff model, toy_arith collapses and toy_old never falls: toy_arith falls first,
    toy_old reads no_forgetting, and the aggregate keeps the cliff; the report shows both."""
    from cliffsweep.analysis.cli import main

    _suite_store(tmp_path / "s")
    out = tmp_path / "out"
    assert main([str(tmp_path / "s"), "--out", str(out), "--n-boot", "50"]) == 0
    printed = capsys.readouterr().out
    per_task = pd.read_parquet(out / "suite.parquet")
    a = per_task[per_task["model"] == "toy-a"].set_index("task")
    assert a.loc["toy_arith", "regime"] == "cliff" and a.loc["toy_old", "regime"] == "no_forgetting"
    assert a.loc["toy_arith", "first_to_fall"] and not a.loc["toy_old", "first_to_fall"]
    assert a.loc["toy_arith", "falls_at"] == a.loc["toy_arith", "critical_lr_high"]
    table = pd.read_parquet(out / "frontiers.parquet").set_index("model")
    assert table.loc["toy-a", "regime_point_estimate"] == "cliff"
    assert table.loc["toy-a", "base_R"] == pytest.approx(1.0)  # shares of base
    assert "toy-a" in printed and "toy_arith (at lr" in printed
    md = (out / "report.md").read_text()
    assert "Retention suite: each task beside the aggregate" in md and "suite_toy-a.png" in md
    assert (out / "suite_toy-a.png").stat().st_size > 10_000
    # read one task: no suite table is left behind from the earlier reading
    assert main([str(tmp_path / "s"), "--out", str(out), "--n-boot", "0", "--retain-task", "toy_arith"]) == 0
    assert not (out / "suite.parquet").exists()


def test_a_model_without_a_base_evaluation_is_left_out_of_a_suite_with_a_note(tmp_path):
    store = _suite_store(tmp_path / "s")
    ev = store.read("evals")
    keep = ev[~((ev["model"] == "toy-b") & (ev["series"] == "base"))]
    other = tmp_path / "t"
    from cliffsweep.storage.store import Store

    Store(str(other)).write("evals", "all", keep)
    Store(str(other)).write("trials", "all", store.read("trials"))
    d = load_store(str(other))
    assert set(d.points["model"]) == {"toy-a"}
    assert any("'toy-b' left out: it has no base evaluation" in n for n in d.notes), d.notes
    assert task_column("x") == "R[x]"


def test_a_learn_suite_is_the_mean_of_its_tasks_and_its_pooled_items_give_the_same_mean():
    """Issue 40 part 6 (004's ID average): L of a learn suite is the plain mean of its tasks'
    accuracies at each checkpoint evaluated on all of them; its pooled, weighted items average
    to that same mean (the bootstrap's check), and a checkpoint missing a task has no L."""
    from cliffsweep.analysis.learnsuite import suite_evals, suite_samples, suite_label

    def ev(trial, step, task, value, n):
        return dict(trial_id=trial, step=step, task=task, metric="accuracy", value=value, n=n, role="learn",
                    scorer_version="v", model="m", series="sft", method="sft", optimizer="adamw", lr=1e-3,
                    epochs=1, seed=0, epoch=1.0)

    evals = pd.DataFrame([ev("a", 2, "x", 0.5, 4), ev("a", 2, "y", 1 / 3, 3), ev("a", 4, "x", 1.0, 4)])
    out = suite_evals(evals, ["x", "y"])
    assert len(out) == 1 and out.iloc[0]["value"] == pytest.approx((0.5 + 1 / 3) / 2) and out.iloc[0]["n"] == 7
    assert out.iloc[0]["task"] == suite_label(["x", "y"]) and list(out.columns) == list(evals.columns)
    rows = [("x", i, c) for i, c in enumerate([1, 0, 1, 0])] + [("y", i, c) for i, c in enumerate([1, 0, 0])]
    samples = pd.DataFrame([dict(trial_id="a", step=2, task=t, example_id=str(i), correct=bool(c)) for t, i, c in rows]
                           + [dict(trial_id="a", step=4, task="x", example_id="0", correct=True)])
    pooled = suite_samples(samples, ["x", "y"])
    assert len(pooled) == 7 and pooled["example_id"].is_unique  # step 4 lacks y: no pooled items
    assert pooled["correct"].mean() == pytest.approx(out.iloc[0]["value"])
