"""Adaptive refinement through the real sweep path (issue 11's acceptance): a coarse 10x lr grid
with `refine: {rounds: 2}` adds lrs inside the transition while the sweep runs, and analysis
then brackets the highest safe lr within a factor of 3.2."""

from __future__ import annotations

import pytest

from cliffsweep.orchestrator.specfile import load_spec, parse_spec

pytestmark = [pytest.mark.ray, pytest.mark.slow]


def test_refinement_adds_lrs_inside_the_transition(tmp_path):
    import ray

    from cliffsweep.analysis.run import analyze_store
    from cliffsweep.orchestrator.driver import run_sweep

    data = load_spec("cliffsweep/configs/toy_refine.yaml").model_dump()
    data["store"] = str(tmp_path / "store")
    data["eval"]["backend"] = "hf"  # the refinement path is the point here, not the engine
    # one round of the example's two: its two lrs already cut the 10x bracket to ~2x (asserted
    # below), and each round is a Train job started again (CI: 7.5 min for two rounds beside the
    # cluster tests; the rounds' own logic is tests/test_refine.py's)
    data["refine"]["rounds"] = 1
    # issue 52: verification inside the running sweep, on the refinement tick, once the series'
    # last round is in: one new seed at the two lrs its verdict rests on (asserted below)
    data["verify"] = {"seeds": 1}
    spec = parse_spec(data)
    try:
        store = run_sweep(spec, num_cpus=3)
    finally:
        ray.shutdown()
    trials = store.read("trials")
    verified = trials[trials["seed"] == 1]
    trials = trials[trials["seed"] == 0]
    refined = trials[trials["round"] > 0]
    assert len(refined) >= 2 and set(refined["round"]) == {1}, trials[["lr", "round", "status"]]
    grid = sorted(trials.loc[trials["round"] == 0, "lr"])
    assert grid == [1e-4, 1e-3, 1e-2]
    assert all(1e-4 < lr < 1e-2 for lr in refined["lr"])  # inside the coarse grid's brackets
    from cliffsweep.sweep.grid import expand_grid
    from cliffsweep.orchestrator.refiner import stored_refined_trials

    spec_now = parse_spec(data)
    rebuilt = stored_refined_trials(spec_now, expand_grid(spec_now), trials.to_dict("records"))
    assert {t.trial_id for t in rebuilt} == set(refined["trial_id"])  # a re-run finds them again
    table = analyze_store(store.uri, str(tmp_path / "report"), n_boot=20, report=False)
    row = table.iloc[0]
    verified_where_the_verdict_rests(store, spec_now, trials, verified, row)
    assert row["max_safe_lr"] > 0 and row["max_safe_lr_next"] / row["max_safe_lr"] < 3.2, row
    # the invariant over grid + refined trials: every grid point done and evaluated
    assert (trials["status"] == "done").all(), trials[["trial_id", "status"]]
    assert_invariant_refined(store, spec_now, trials)


def assert_invariant_refined(store, spec, trials):
    ck, ev = store.read("checkpoints"), store.read("evals")
    acc = ev[ev["metric"] == "accuracy"]
    for tid in trials["trial_id"]:
        steps = set(ck.loc[ck["trial_id"] == tid, "step"])
        assert steps and all(set(acc[(acc["trial_id"] == tid) & (acc["step"] == s)]["task"]) ==
                             {"toy_facts", "toy_arith"} for s in steps), tid
    assert not ev.duplicated(["trial_id", "step", "task", "metric"]).any()


def verified_where_the_verdict_rests(store, spec, trials, verified, row):
    """The verification runs went to the lrs of the series' verdict as read before them (its
    cliff bracket or its close call; analysis/verify.py), each with the new seed, each done and
    evaluated, and a re-run finds them again."""
    from cliffsweep.analysis.classify import Thresholds
    from cliffsweep.analysis.frontiers import frontiers
    from cliffsweep.analysis.points import load_store
    from cliffsweep.analysis.verify import verify_lrs
    from cliffsweep.orchestrator.refiner import stored_verification_trials
    from cliffsweep.sweep.grid import expand_grid

    data = load_store(store.uri)
    before = data.points[data.points["seed"].fillna(0) == 0]
    lrs = verify_lrs(frontiers(before, n_boot=0).iloc[0], Thresholds(), spec.verify.margin)
    assert lrs, "the toy_refine series is a cliff or a close call: something to verify"
    assert sorted(verified["lr"]) == sorted(lrs) and (verified["status"] == "done").all(), verified
    assert row["runs_at_bracket"] >= 1 and row["confidence_over"] in ("items", "runs and items"), row
    rebuilt = stored_verification_trials(spec, expand_grid(spec), store.read("trials").to_dict("records"))
    assert {t.trial_id for t in rebuilt} == set(verified["trial_id"])
    assert_invariant_refined(store, spec, verified)
