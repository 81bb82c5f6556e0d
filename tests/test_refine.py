"""Adaptive lr refinement's pure parts (issue 11, part 3): the policy (analysis/next_lrs.py),
the `refine:` spec section, refined trials as grid points with a `round`, the store column and
`validate`'s bound."""

import math

import pandas as pd
import pytest

from cliffsweep.analysis.classify import Thresholds, classify, lr_curve
from cliffsweep.analysis.points import points_from_evals
from cliffsweep.analysis.safe_lr import max_safe_lr_arrays
from cliffsweep.analysis.synthetic import Curve, geometric_lrs, simulate_refinement
from cliffsweep.cli import main as cli_main
from cliffsweep.sweep.grid import expand_grid, refined_trials, series_key, trial_id
from cliffsweep.analysis.next_lrs import brackets, next_lrs, round_lr, series_curve
from cliffsweep.orchestrator.refiner import max_refine_trials
from cliffsweep.sweep.spec import RefineSpec, SpecError
from cliffsweep.orchestrator.specfile import parse_spec
from cliffsweep.storage.store import SCHEMAS, Store

CFG = RefineSpec(rounds=2, points_per_round=2, target_ratio=1.3)


def pts(lr, L, R):
    return pd.DataFrame({"lr": [0, *lr], "L": [0.25, *L], "R": [0.6, *R]})


# A sharp collapse inside one decade: 1e-4 keeps all, 1e-3 keeps 8 %.
DECADE = pts([1e-5, 1e-4, 1e-3], [0.6, 0.8, 0.8], [0.6, 0.6, 0.05])


def test_geometric_lrs_inside_the_bracket():
    assert classify(DECADE).unresolved_lr_low == 1e-4  # unresolved collapse == safe-lr bracket: one bracket
    assert brackets(DECADE) == [(1e-4, 1e-3)]
    assert next_lrs(DECADE, CFG, 1) == [round_lr(1e-4 * 10 ** (1 / 3)), round_lr(1e-4 * 10 ** (2 / 3))] == [
        0.000215, 0.000464]
    three = next_lrs(DECADE, CFG.model_copy(update={"points_per_round": 3}), 1)
    assert three == [0.000178, 0.000316, 0.000562]


def test_off_spent_or_resolved_gives_nothing():
    assert next_lrs(DECADE, None, 1) == []
    assert next_lrs(DECADE, RefineSpec(rounds=0), 1) == []
    assert next_lrs(DECADE, CFG, 3) == [] and next_lrs(DECADE, CFG, 0) == []
    narrow = pts([1e-5, 1e-4, 1.25e-4], [0.6, 0.8, 0.8], [0.6, 0.6, 0.05])
    assert brackets(narrow) == [(1e-4, 1.25e-4)] and next_lrs(narrow, CFG, 1) == []
    assert next_lrs(narrow, CFG.model_copy(update={"target_ratio": 1.2}), 1) == [0.000108, 0.000116]
    flat = pts([1e-5, 1e-4], [0.5, 0.6], [0.6, 0.59])  # never forgets: no bracket to narrow
    assert brackets(flat) == [] and next_lrs(flat, CFG, 1) == []


def test_never_repeats_a_known_lr():
    # 2.15e-4 is already in the store (e.g. a failed trial, absent from the points): skipped, not moved
    assert next_lrs(DECADE, CFG, 1, known_lrs=[0.000215]) == [0.000464]
    assert next_lrs(DECADE, CFG, 1, known_lrs=[2.154434690031884e-4]) == [0.000464]
    with_it = pd.concat([DECADE, pd.DataFrame({"lr": [0.000464], "L": [0.8], "R": [0.05]})])
    assert next_lrs(with_it, CFG, 1) == [0.000167, 0.000278]  # the bracket moved to 1e-4 -> 4.64e-4


def test_cliff_and_safe_brackets_share_the_points():
    # 1e-4 keeps 87 % (not safe, but can start a cliff); 3e-4 collapses; 3e-5 is the last safe lr.
    p = pts([1e-5, 3e-5, 1e-4, 3e-4], [0.6, 0.7, 0.8, 0.8], [0.6, 0.58, 0.52, 0.05])
    assert brackets(p) == [(1e-4, 3e-4), (3e-5, 1e-4)]
    assert next_lrs(p, CFG, 1) == [round_lr(math.sqrt(3e-5 * 1e-4)), round_lr(math.sqrt(1e-4 * 3e-4))]
    # an odd count: the wider bracket (10/3 vs 3) gets the extra lr
    assert len(next_lrs(p, CFG.model_copy(update={"points_per_round": 3}), 1)) == 3
    assert next_lrs(p, CFG.model_copy(update={"points_per_round": 1}), 1) == [round_lr(math.sqrt(3e-5 * 1e-4))]


def test_overlapping_brackets_keep_the_narrower():
    # cliff 1e-4 -> 2e-4 is witnessed from 1e-4 (keeps 100 %), 1.5e-4 keeps 92 % but drops only 37 % to 2e-4
    p = pts([1e-4, 1.5e-4, 2e-4], [0.8, 0.8, 0.8], [0.6, 0.55, 0.33])
    c = classify(p)
    assert (c.critical_lr_low, c.critical_lr_high) == (1e-4, 2e-4)
    assert brackets(p) == [(1.5e-4, 2e-4)]


def test_no_base_point_is_an_error():
    with pytest.raises(ValueError, match="no base point"):
        next_lrs(DECADE[DECADE["lr"] > 0], CFG, 1)


def test_two_rounds_on_a_decade_grid_meet_the_acceptance():
    """The issue's acceptance on a curve: a 10x grid (1e-4, 1e-3, 1e-2) plus `refine: {rounds: 2}`
    adds lrs inside the transition, and the highest safe lr's next trained lr is < 3.2x above it."""
    curve = Curve(learn_at=-4.3, learn_decades=0.8, forget_at=-3.3, forget_decades=0.1, floor=0.02)
    p = simulate_refinement(curve, [1e-4, 1e-3, 1e-2], RefineSpec(rounds=2))
    # round 1 splits the decade; 4.64e-4 lands inside the collapse (keeps 82 % of R0), so round 2
    # has two brackets, the safe-lr one (2.15e-4 -> 4.64e-4) and the cliff (4.64e-4 -> 1e-3): one lr each
    assert p.groupby("round")["lr"].apply(list).to_dict() == {
        0: [0.0, 1e-4, 1e-3, 1e-2], 1: [0.000215, 0.000464], 2: [0.000316, 0.000681]}
    c = lr_curve(p)
    s = max_safe_lr_arrays(c["lr"].to_numpy(), c["L"].to_numpy(), c["R"].to_numpy(), Thresholds())
    assert (s.max_safe_lr, s.max_safe_lr_next) == (0.000316, 0.000464) and s.bracket_ratio < 3.2
    cls = classify(p)
    assert (cls.regime, cls.critical_lr_low, cls.critical_lr_high) == ("cliff", 0.000464, 0.000681)


def test_same_store_same_lrs():
    curve = Curve(learn_at=-5, learn_decades=1, forget_at=-3.7, forget_decades=2, floor=0.1)
    runs = [simulate_refinement(curve, geometric_lrs(1e-6, 1e-2, 10), RefineSpec(rounds=3)) for _ in range(2)]
    pd.testing.assert_frame_equal(*runs)
    assert runs[0]["lr"].is_unique


SPEC = {"name": "t", "models": [{"name": "a", "path": "toy:qwen2-tiny"}, {"name": "b", "path": "toy:llama-tiny"}],
        "methods": [{"name": "sft"}, {"name": "lora", "params": {"rank": [8, 16]}}], "lrs": [1e-4, 1e-3, 1e-2],
        "epochs": [1, 3], "seeds": [0, 1], "tasks": {"learn": {"name": "toy_facts"}, "retain": [{"name": "toy_arith"}]}}


def test_refine_section_is_off_by_default_and_validated():
    assert parse_spec(SPEC).refine is None
    spec = parse_spec({**SPEC, "refine": {"rounds": 2}})
    assert spec.refine == RefineSpec(rounds=2, points_per_round=2, target_ratio=1.3)
    with pytest.raises(SpecError) as e:
        parse_spec({**SPEC, "refine": {"rounds": -1, "points_per_round": 0, "target_ratio": 1.0, "ratio": 2}})
    assert sorted(p.split(":")[0] for p in e.value.problems) == [
        "refine.points_per_round", "refine.ratio", "refine.rounds", "refine.target_ratio"]


def test_max_refine_trials_and_validate(tmp_path, capsys):
    # 2 models x 3 series (sft, lora r8, lora r16) x 2 epochs = 12 series; x 2 seeds x 2 rounds x 2 lrs
    assert max_refine_trials(parse_spec({**SPEC, "refine": {"rounds": 2}})) == 96
    assert max_refine_trials(parse_spec(SPEC)) == 0
    import yaml

    path = tmp_path / "s.yaml"
    path.write_text(yaml.safe_dump({**SPEC, "refine": {"rounds": 1, "points_per_round": 3}}))
    assert cli_main(["validate", str(path)]) == 0
    assert "+ up to 72 refinement trial(s) = 1 round(s) x 3 lr(s) x 12 series x 2 seed(s)" in capsys.readouterr().out


def test_refined_trials_are_grid_points_with_a_round():
    spec = parse_spec(SPEC)
    grid = expand_grid(spec)
    # round-0 ids are what stores written before refinement hold (the toy sweep's, docs/example-report)
    assert trial_id("llama-tiny", "sft", {}, "adamw", 3e-4, 3, 0) == "llama-tiny-sft-lr0.0003-e3-s0-f9876d79"
    assert {t.round for t in grid} == {0}
    like = next(t for t in grid if t.series == "lora(rank=16)" and t.epochs == 3)
    new = refined_trials(spec, like, [0.000215, 0.000464], 1)
    assert [(t.lr, t.seed, t.round) for t in new] == [(0.000215, 0, 1), (0.000215, 1, 1), (0.000464, 0, 1),
                                                      (0.000464, 1, 1)]
    assert {series_key(t) for t in new} == {series_key(like)}
    assert new[0].trial_id == trial_id(like.model, "lora", {"rank": 16}, "adamw", 0.000215, 3, 0)
    assert len({t.trial_id for t in grid + new}) == len(grid) + len(new)
    with pytest.raises(ValueError, match="start at 1"):
        refined_trials(spec, like, [1e-4], 0)


def test_round_lands_in_the_store_and_old_stores_read_as_grid(tmp_path):
    assert "round" in SCHEMAS["trials"].names
    store = Store(str(tmp_path))
    now = pd.Timestamp.now(tz="UTC")
    rows = {"old": None, "new": 2}
    for tid, rnd in rows.items():
        row = dict(trial_id=tid, model="m", method="sft", series="sft", lr=1e-4, epochs=1, seed=0, status="done",
                   started_at=now, finished_at=now)
        if rnd is not None:
            row["round"] = rnd
        store.write("trials", tid, [row])
    trials = store.read("trials").set_index("trial_id")
    assert pd.isna(trials.loc["old", "round"]) and trials.loc["new", "round"] == 2
    evals = pd.DataFrame([dict(trial_id=t, model="m", method="sft", series="sft", optimizer="adamw", lr=1e-4,
                               epochs=1, seed=0, step=10, epoch=1.0, task=task, role=role, metric="accuracy",
                               value=0.5, n=10) for t in rows for task, role in (("l", "learn"), ("r", "retain"))])
    p, _ = points_from_evals(evals, trials.reset_index(), "l", "r")
    assert dict(zip(p["trial_id"], p["round"])) == {"old": 0, "new": 2}
    assert series_curve(p, "m", "sft", 1)["trial_id"].tolist() == ["new", "old"]
