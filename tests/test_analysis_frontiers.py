"""Frontiers table from Parquet stores: regimes vs known ground truth, bootstrap confidence,
Pareto points, and the input errors analysis must raise."""

import os

import numpy as np
import pandas as pd
import pytest

from cliffsweep.analysis import AnalysisInputError, frontiers, load_store
from cliffsweep.analysis.points import load_stores
from cliffsweep.analysis.cli import main as analyze_main
from cliffsweep.analysis.synthetic import SyntheticSweep, write_synthetic_store
from cliffsweep.storage.store import Store, eval_key


@pytest.fixture(scope="module")
def truth_store(tmp_path_factory):
    path = str(tmp_path_factory.mktemp("store"))
    write_synthetic_store(path, SyntheticSweep(
        models={"m-cliff": "cliff", "m-grad": "gradual", "m-flat": "flat"},
        series=(("sft", "sft"), ("ewc", "ewc(lam=10)")), epochs=(1,), n_learn=150, n_retain=150))
    return path


def test_regimes_match_ground_truth(truth_store):
    data = load_store(truth_store)
    assert (data.learn_task, data.retain_task, data.notes) == ("toy_facts", "toy_arith", [])
    t = frontiers(data.points, data.samples, learn_task=data.learn_task, retain_task=data.retain_task, n_boot=100)
    regimes = dict(zip(t["model"] + "/" + t["series"], t["regime"]))
    assert regimes == {"m-cliff/sft": "cliff", "m-cliff/ewc(lam=10)": "cliff", "m-grad/sft": "gradual",
                       "m-grad/ewc(lam=10)": "gradual", "m-flat/sft": "no_forgetting",
                       "m-flat/ewc(lam=10)": "no_forgetting"}
    cliffs = t[t["regime"] == "cliff"]
    # ground truth: retention collapses between lr 3e-4 (log10 -3.52) and 1e-3 (-3)
    assert (cliffs["critical_lr_low"] == 3e-4).all() and (cliffs["critical_lr_high"] == 1e-3).all()
    assert (cliffs["drop_at_cliff"] > 0.8).all() and (cliffs["gain_at_cliff_share"].abs() < 0.1).all()
    assert (t["confidence_method"] == "bootstrap").all() and (t["confidence"] > 0.9).all()
    assert (t["n_points"] == 7).all() and t["critical_lr_low"].isna().sum() == 4
    # EWC keeps more retention along the gradual trade-off: it dominates SFT and has the larger area
    g = t[t["model"] == "m-grad"].set_index("series")
    assert g.loc["ewc(lam=10)", "frontier_area"] > g.loc["sft", "frontier_area"] + 0.1
    assert g.loc["ewc(lam=10)", "model_pareto_share"] > g.loc["sft", "model_pareto_share"]
    assert g["model_pareto_share"].sum() == pytest.approx(1.0)
    ids = set(data.points["point_id"])
    assert all(set(p) <= ids and p for p in t["pareto_point_ids"])


def test_dominance_and_model_frontier_from_points():
    base = dict(model="m", series="base", epochs=0, lr=0.0, L=0.25, R=0.6)
    rows = [base] + [dict(model="m", series=s, epochs=1, lr=lr, L=L, R=R - shift)
                     for s, shift in (("sft", 0.1), ("ewc", 0.0))
                     for lr, L, R in ((1e-5, 0.4, 0.55), (1e-4, 0.6, 0.45), (1e-3, 0.8, 0.3))]
    pts = pd.DataFrame(rows).assign(point_id=lambda d: d["series"] + d["lr"].astype(str))
    t = frontiers(pts, n_boot=0).set_index("series")
    assert t.loc["sft", "dominated_by"] == ["ewc"] and t.loc["ewc", "dominated_by"] == []
    assert t.loc["ewc", "model_pareto_share"] == 1.0 and t.loc["sft", "model_pareto_point_ids"] == []
    assert t.loc["ewc", "regime"] == t.loc["sft", "regime"] == "gradual"
    assert t.loc["ewc", "frontier_area"] > t.loc["sft", "frontier_area"]


def _borderline(n):
    """A cliff whose collapse (42 % of base R) is just past cliff_drop = 40 %."""
    lrs = [0, 1e-5, 3e-5, 1e-4, 3e-4]
    return pd.DataFrame({"model": "m", "series": ["base", "sft", "sft", "sft", "sft"], "epochs": [0, 3, 3, 3, 3],
                         "lr": lrs, "L": [0.25, 0.6, 0.7, 0.72, 0.72], "R": [0.6, 0.6, 0.6, 0.6, 0.348],
                         "n_L": n, "n_R": n, "point_id": [f"p{i}" for i in range(5)]})


def test_noise_lowers_confidence():
    small = frontiers(_borderline(30), n_boot=300).iloc[0]
    big = frontiers(_borderline(100_000), n_boot=300).iloc[0]
    assert small["regime_point_estimate"] == big["regime_point_estimate"] == "cliff"
    assert small["confidence_method"] == "binomial"
    assert big["confidence"] > 0.98 and big["regime"] == "cliff"
    assert small["confidence"] < 0.8
    assert (small["regime"] == "inconclusive") == (small["confidence"] < 0.6)
    no_boot = frontiers(_borderline(30), n_boot=0).iloc[0]
    assert no_boot["confidence_method"] == "none" and np.isnan(no_boot["confidence"])
    assert no_boot["regime"] == "cliff"


def test_samples_fallback_to_binomial(tmp_path):
    path = str(tmp_path / "s")
    write_synthetic_store(path, SyntheticSweep(models={"m": "cliff"}, series=(("sft", "sft"),), epochs=(1,),
                                               lrs=(1e-5, 1e-4, 1e-3), n_learn=40, n_retain=40))
    t = _frontiers_of(path)
    assert t["confidence_method"].tolist() == ["bootstrap"]
    trial = [f for f in os.listdir(f"{path}/samples") if "lr0.001" in f][0]
    os.remove(f"{path}/samples/{trial}")
    t = _frontiers_of(path)
    assert t["confidence_method"].tolist() == ["bootstrap+binomial"]


def _frontiers_of(path):
    d = load_store(path)
    return frontiers(d.points, d.samples, learn_task=d.learn_task, retain_task=d.retain_task, n_boot=50)


def _write(store, trial_id, step, task, role, value, n=100, series="sft", lr=1e-4, version="v1", model="m"):
    store.write("evals", eval_key(trial_id, step, task), [dict(
        trial_id=trial_id, model=model, method=series.split("(")[0], series=series, optimizer="adamw", lr=lr,
        epochs=1, seed=0, step=step, epoch=float(step), task=task, role=role, metric="accuracy", value=value, n=n,
        scorer_version=version, evaluated_at=pd.Timestamp.now(tz="UTC"), eval_seconds=0.1)])


def _tiny(path, lrs=(5e-5, 1e-4, 1.5e-4), L=(0.5, 0.7, 0.72), R=(0.6, 0.58, 0.05), retain=("gsm8k",)):
    store = Store(path)
    for task in retain:
        _write(store, "m-base", 0, task, "retain", 0.6, series="base", lr=0.0)
    _write(store, "m-base", 0, "chem", "learn", 0.25, series="base", lr=0.0)
    for lr, lv, rv in zip(lrs, L, R):
        tid = f"m-sft-lr{lr:g}"
        _write(store, tid, 10, "chem", "learn", lv, lr=lr)
        for task in retain:
            _write(store, tid, 10, task, "retain", rv, lr=lr)
    return store


def test_mixed_scorer_versions_refused(tmp_path):
    store = _tiny(str(tmp_path))
    _write(store, "m-sft-lr0.0001", 10, "gsm8k", "retain", 0.58, lr=1e-4, version="v2")
    with pytest.raises(AnalysisInputError, match=r"gsm8k.*mixes scorer versions \['v1', 'v2'\]"):
        load_store(str(tmp_path))
    out = str(tmp_path / "out")
    assert analyze_main([str(tmp_path), "--out", out]) == 2
    assert not os.path.exists(f"{out}/frontiers.parquet")


def test_retain_task_choice(tmp_path):
    """One retain task is read as it is; several are a suite (their aggregate, in the spec's
    order where the store keeps its spec); --retain-task reads one of them."""
    store = _tiny(str(tmp_path), retain=("gsm8k", "arc"))
    d = load_store(str(tmp_path))
    assert d.retain_tasks == ("arc", "gsm8k") and d.suite == "share_of_base" and d.retain_task.startswith("suite")
    one = load_store(str(tmp_path), retain_task="arc")
    assert (one.retain_task, one.retain_tasks, one.suite) == ("arc", ("arc",), None)
    with pytest.raises(AnalysisInputError, match="not in the store"):
        load_store(str(tmp_path), retain_task="mmlu")
    store.write_json("spec.json", {"tasks": {"learn": {"name": "chem"}, "retain": [{"name": "gsm8k"}, {"name": "arc"}]}})
    assert load_store(str(tmp_path)).retain_tasks == ("gsm8k", "arc")


def test_not_done_trials_and_intermediate_checkpoints(tmp_path):
    store = _tiny(str(tmp_path))
    # lr 1.5e-4 also has an earlier checkpoint that learned well and kept retention: Pareto-optimal.
    _write(store, "m-sft-lr0.00015", 5, "chem", "learn", 0.75, lr=1.5e-4)
    _write(store, "m-sft-lr0.00015", 5, "gsm8k", "retain", 0.59, lr=1.5e-4)
    # lr 1e-4 is still running: its checkpoint is not classified.
    store.write("trials", "m-sft-lr0.0001", [dict(trial_id="m-sft-lr0.0001", model="m", method="sft", series="sft",
                                                  lr=1e-4, epochs=1, seed=0, status="running",
                                                  started_at=pd.Timestamp.now(tz="UTC"),
                                                  finished_at=pd.Timestamp.now(tz="UTC"))])
    data = load_store(str(tmp_path))
    assert any("not done" in n for n in data.notes) and any("no trials row" in n for n in data.notes)
    t = frontiers(data.points, n_boot=0).iloc[0]
    assert t["n_points"] == 3 and t["n_checkpoints"] == 4
    assert "m-sft-lr0.00015@5" in t["pareto_point_ids"] and "m-sft-lr0.00015@10" not in t["pareto_point_ids"]
    # With the running lr 1e-4 (L .70, R .58) left out, 5e-5 -> 1.5e-4 gains 47 % of the learning span:
    # no cliff can be claimed. Counting it would give a cliff at 1e-4 -> 1.5e-4.
    assert t["regime"] == "gradual"
    assert frontiers(data.points.assign(classified=data.points["final"]), n_boot=0).iloc[0]["critical_lr_low"] == 1e-4


def test_half_evaluated_checkpoint_is_noted(tmp_path):
    store = _tiny(str(tmp_path))
    _write(store, "m-sft-lr0.003", 10, "chem", "learn", 0.7, lr=3e-3)
    data = load_store(str(tmp_path))
    assert any("only some of chem/gsm8k" in n for n in data.notes)
    assert "m-sft-lr0.003@10" not in set(data.points["point_id"])


def test_samples_must_agree_with_evals(tmp_path):
    store = _tiny(str(tmp_path))
    store.write("samples", eval_key("m-sft-lr0.0001", 10, "gsm8k"), pd.DataFrame({
        "trial_id": "m-sft-lr0.0001", "step": 10, "task": "gsm8k", "example_id": [str(i) for i in range(100)],
        "correct": [True] * 30 + [False] * 70, "prediction": ""}))
    d = load_store(str(tmp_path))
    with pytest.raises(AnalysisInputError, match="samples and evals disagree"):
        frontiers(d.points, d.samples, learn_task=d.learn_task, retain_task=d.retain_task, n_boot=10)


def test_empty_store_is_a_clear_error(tmp_path):
    with pytest.raises(AnalysisInputError, match="no accuracy evals"):
        load_store(str(tmp_path))


def test_cli_threshold_flags(tmp_path):
    _tiny(str(tmp_path / "s"))
    for flags, regime in (([], "cliff"), (["--cliff-drop", "0.95"], "forgetting")):
        out = str(tmp_path / f"out{len(flags)}")
        assert analyze_main([str(tmp_path / "s"), "--out", out, "--n-boot", "0", "--no-report", *flags]) == 0
        t = pd.read_parquet(f"{out}/frontiers.parquet")
        assert t["regime"].tolist() == [regime] and not os.path.exists(f"{out}/report.html")


def test_several_stores_are_analysed_as_one(tmp_path):
    """Issue 16 part 1: `cliffsweep analyze A B` reads the paper grid's stores as one. The same
    model in two stores (SFT in one, LoRA in the other, as paper.yaml / paper_lora.yaml) gives one
    frontier per series and one base point: its base evaluation, held by both stores, is used
    once (from the first store), and the notes say so."""
    a, b = str(tmp_path / "a"), str(tmp_path / "b")
    write_synthetic_store(a, SyntheticSweep(models={"m-cliff": "cliff"}, series=(("sft", "sft"),), epochs=(1,),
                                            n_learn=100, n_retain=100))
    write_synthetic_store(b, SyntheticSweep(models={"m-cliff": "cliff", "m-grad": "gradual"},
                                            series=(("lora", "lora"),), epochs=(1,), n_learn=100, n_retain=100))
    one = load_store(a)
    both = load_stores([a, b])
    series = both.points.groupby(["model", "series"]).size()
    assert {("m-cliff", "sft"), ("m-cliff", "lora"), ("m-grad", "lora"), ("m-cliff", "base"),
            ("m-grad", "base")} == set(series.index)
    assert series[("m-cliff", "base")] == 1 and series[("m-cliff", "sft")] == len(one.points) - 1
    assert any("more than one store" in n and "m-cliff-base" in n for n in both.notes), both.notes
    out = str(tmp_path / "out")
    assert analyze_main([a, b, "--out", out, "--n-boot", "0"]) == 0
    table = pd.read_parquet(f"{out}/frontiers.parquet")
    assert set(zip(table["model"], table["series"])) == {("m-cliff", "sft"), ("m-cliff", "lora"), ("m-grad", "lora")}
    assert f"{a}, {b}" in open(f"{out}/report.html").read()


def test_sft_under_another_optimizer_is_compared_with_sft_itself(tmp_path):
    """Issue 31 / seed 001: `sft[muon]` keeps method sft, and matched_gain used to skip every sft
    series; now SFT under each other optimizer is compared with SFT's own series, in an
    optimizers table of its own (not among the methods' effects)."""
    from cliffsweep.analysis import paper_claims as claims

    store = _tiny(str(tmp_path / "s"))  # sft (adamw): learns, then a cliff at 1.5e-4
    for lr, lv, rv in zip((5e-5, 1e-4, 1.5e-4), (0.5, 0.7, 0.72), (0.6, 0.6, 0.59)):  # muon: keeps retention
        tid = f"m-sft-muon-lr{lr:g}"
        for task, role, value in (("chem", "learn", lv), ("gsm8k", "retain", rv)):
            store.write("evals", eval_key(tid, 10, task), [dict(
                trial_id=tid, model="m", method="sft", series="sft[muon]", optimizer="muon", lr=lr, epochs=1, seed=0,
                step=10, epoch=10.0, task=task, role=role, metric="accuracy", value=value, n=100, scorer_version="v1",
                evaluated_at=pd.Timestamp.now(tz="UTC"), eval_seconds=0.1)])
    d = load_store(str(tmp_path / "s"))
    table = frontiers(d.points, n_boot=0)
    gains = claims.matched_gain(d.points.assign(_row=range(len(d.points))), table)
    opt = claims.optimizer_consistency(gains)
    assert list(opt["series"]) == ["sft[muon]"] and opt.loc[0, "reference"] == "sft", opt
    # at matched learning (within one binomial s.e. of L, n = 100) SFT's best retention is its 1e-4
    # point (0.58): muon's 1e-4 point keeps 0.60, +0.02; muon dominates SFT's frontier
    assert opt.loc[0, "gain_max"] == pytest.approx(0.02, abs=1e-9) and opt.loc[0, "dominates_sft"], opt
    assert claims.by_sft_regime(gains).empty  # no other method: SFT's optimizers are not a method effect
    # 001's claim is about the model's own pretraining optimizer (issue 40): the sweep file says
    # models[].pretrain_optimizer: muon, and SFT under AdamW is compared with SFT under Muon
    store.write_json("spec.json", {"models": [{"name": "m", "path": "x", "pretrain_optimizer": "muon"}],
                                   "tasks": {"retain": [{"name": "gsm8k"}]}})
    d = load_store(str(tmp_path / "s"))
    assert d.models.set_index("model").loc["m", "pretrain_optimizer"] == "muon"
    table = frontiers(d.points, n_boot=0, models=d.models)
    opt = claims.optimizer_consistency(claims.matched_gain(d.points.assign(_row=range(len(d.points))), table))
    assert list(opt["series"]) == ["sft"] and opt.loc[0, "reference"] == "sft[muon]", opt
    assert not opt.loc[0, "dominates_sft"] and opt.loc[0, "dominated_by_sft"], opt


def test_best_learn_checkpoint_is_classified_when_asked(tmp_path):
    """003 reads each run at its best checkpoint on the target task: `analyze --checkpoint
    best_learn` classifies that checkpoint (the earliest of ties), not the trial's last."""
    from cliffsweep.analysis.points import points_from_evals

    store = _tiny(str(tmp_path / "s"))
    for lr in (5e-5, 1e-4, 1.5e-4):  # an earlier checkpoint that learned more and forgot less
        tid = f"m-sft-lr{lr:g}"
        _write(store, tid, 5, "chem", "learn", 0.9, lr=lr)
        _write(store, tid, 5, "gsm8k", "retain", 0.59, lr=lr)
    evals, trials = store.read("evals"), store.read("trials")
    final, _ = points_from_evals(evals, trials, "chem", "gsm8k")
    best, notes = points_from_evals(evals, trials, "chem", "gsm8k", pick="best_learn")
    assert set(final.loc[final["classified"] & (final["series"] == "sft"), "step"]) == {10}
    assert set(best.loc[best["classified"] & (best["series"] == "sft"), "step"]) == {5}
    assert (best.loc[best["series"] == "base", "classified"]).all() and any("best_learn" in n for n in notes)
    assert not any("not done" in n for n in notes), notes
    assert frontiers(final, n_boot=0).iloc[0]["regime"] == "cliff"
    assert frontiers(best, n_boot=0).iloc[0]["regime"] == "no_forgetting"


def test_the_robust_frontier_keeps_only_points_that_beat_every_other_by_c():
    """Seed 001's robust frontier: a Pareto point within c of another on both axes is dropped
    (a hair's gain is not a frontier point); c = 0 is the plain frontier; a duplicate is one point."""
    from cliffsweep.analysis.pareto import pareto_mask

    L = np.array([0.50, 0.5004, 0.60, 0.70, 0.70, 0.40])
    R = np.array([0.80, 0.7998, 0.70, 0.50, 0.50, 0.30])
    assert pareto_mask(L, R).tolist() == [True, True, True, True, True, False]
    # points 0 and 1 are each within 0.001 of the other on both axes: neither clearly beats it
    assert pareto_mask(L, R, robust=0.001).tolist() == [False, False, True, True, True, False]
    assert pareto_mask(L, R, robust=0.0001).tolist() == [True, True, True, True, True, False]


def test_the_robust_frontiers_c_is_measured_on_a_loss_tasks_loss():
    """001 applies c to the loss (issue 40): two points whose likelihoods differ by more than c
    but whose losses differ by less are one point on the robust frontier, and the margins of a
    loss task's axis are its negated mean loss (points.with_margins), of any other its score."""
    from cliffsweep.analysis.pareto import pareto_mask
    from cliffsweep.analysis.points import with_margins

    L, R = np.array([0.500, 0.503]), np.array([0.803, 0.800])  # 0.003 apart on each axis
    loss_L, loss_R = np.array([-2.0000, -1.9995]), np.array([-1.9995, -2.0000])  # 0.0005 apart
    assert pareto_mask(L, R, robust=0.001).tolist() == [True, True]
    assert pareto_mask(L, R, robust=0.001, margin=(loss_L, loss_R)).tolist() == [False, False]
    points = pd.DataFrame({"trial_id": ["a", "a"], "step": [1, 2], "L": L, "R": R})
    raw = pd.DataFrame({"trial_id": ["a", "a", "a"], "step": [1, 2, 1], "task": ["loss:x", "loss:x", "acc"],
                        "metric": ["loss", "loss", "accuracy"], "value": [2.0, 1.9995, 0.9]})
    out = with_margins(points, raw, "loss:x", ["acc"])
    assert out["L_margin"].tolist() == [-2.0, -1.9995] and out["R_margin"].tolist() == R.tolist()


def test_the_forgetting_order_of_methods_under_each_optimizer():
    """001's claim on methods: the order by frontier area under muon against adamw's, as Kendall's
    tau over the methods both ran; a swapped pair shows as tau < 1."""
    from cliffsweep.analysis.paper_claims import forgetting_order

    rows = [("sft", "adamw", 0.5), ("ewc(lam=1)", "adamw", 0.7), ("lora(rank=8)", "adamw", 0.6),
            ("sft[muon]", "muon", 0.55), ("ewc(lam=1)[muon]", "muon", 0.75), ("lora(rank=8)[muon]", "muon", 0.65),
            ("sft[sgd]", "sgd", 0.6), ("ewc(lam=1)[sgd]", "sgd", 0.5), ("lora(rank=8)[sgd]", "sgd", 0.7)]
    table = pd.DataFrame([{"model": "m", "epochs": 3, "label": label, "optimizer": opt, "frontier_area": a}
                          for label, opt, a in rows])
    out = forgetting_order(table).set_index("optimizer")
    assert out.loc["adamw", "order"] == "ewc(lam=1) > lora(rank=8) > sft"
    assert out.loc["muon", "same_order"] and out.loc["muon", "kendall_tau"] == 1.0
    assert out.loc["sgd", "order"] == "lora(rank=8) > sft > ewc(lam=1)" and not out.loc["sgd", "same_order"]
    assert out.loc["sgd", "kendall_tau"] == pytest.approx(-1 / 3)
    assert forgetting_order(table[table["optimizer"] == "adamw"]).empty  # one optimizer: no claim


def test_the_sorted_frontier_and_dominance_are_the_pairwise_definitions():
    """Issue 62 part 3: pareto_mask and dominates_all without a margin sort instead of comparing
    every pair; on small grids with ties and NaNs they keep exactly the points the definition
    keeps (no other point >= on both axes and > on one; identical points do not dominate each
    other; a NaN compares false) and say exactly when every point of b is dominated."""
    from cliffsweep.analysis.pareto import dominates_all, pareto_mask

    def front(L, R):
        ge = (L[None, :] >= L[:, None]) & (R[None, :] >= R[:, None])
        return ~(ge & ((L[None, :] > L[:, None]) | (R[None, :] > R[:, None]))).any(axis=1)

    def covers(La, Ra, Lb, Rb):
        ge = (La[None, :] >= Lb[:, None]) & (Ra[None, :] >= Rb[:, None])
        strict = ge & ((La[None, :] > Lb[:, None]) | (Ra[None, :] > Rb[:, None]))
        return bool(len(La) and len(Lb) and ge.any(axis=1).all() and strict.any())

    rng = np.random.default_rng(0)
    said = set()
    for k in range(4000):
        na, nb = rng.integers(0, 9, 2)
        La, Ra, Lb, Rb = (rng.integers(0, 4, n).astype(float) for n in (na, na, nb, nb))  # many ties
        if k % 4 == 0:
            for x in (La, Ra, Lb, Rb):
                x[rng.random(len(x)) < 0.15] = np.nan
        assert (pareto_mask(La, Ra) == front(La, Ra)).all(), (La, Ra)
        said.add(got := dominates_all(La, Ra, Lb, Rb))
        assert got == covers(La, Ra, Lb, Rb), (La, Ra, Lb, Rb)
    assert said == {True, False}


def test_the_large_synthetic_store_reads_as_a_finished_sweep_with_its_shapes(tmp_path):
    """analysis/synthetic_large.py (issue 62 part 3's 100,000-trial store, written compacted and
    column by column) writes what the readers read as a finished sweep: every trial done, every
    checkpoint evaluated on both tasks with its items, and each model's ground truth (even models
    cliff, odd ones gradual) read back for SFT."""
    from cliffsweep.analysis.synthetic_large import LargeGrid, write_large_store
    from cliffsweep.storage import ledger

    grid = LargeGrid(models=2, seeds=1, items=60, series=("sft", "lora"), epochs=(1,))
    store = write_large_store(str(tmp_path / "large"), grid)
    trials, ck, ev, samples = (store.read(t) for t in ("trials", "checkpoints", "evals", "samples"))
    assert len(trials) == 2 * grid.per_model == 40 and (trials["status"] == "done").all()
    assert len(ck) == 3 * len(trials) and not ledger.unevaluated(ck, ev, ["chem_l3", "gsm8k"], set(trials["trial_id"]))
    assert len(samples) == len(ev) * 60
    assert not samples.duplicated(["trial_id", "step", "task", "example_id"]).any()
    table = frontiers(load_store(str(tmp_path / "large")).points, n_boot=0).set_index(["model", "series"])
    assert table.loc[("m000", "sft"), "regime"] == "cliff" and table.loc[("m001", "sft"), "regime"] == "gradual"
