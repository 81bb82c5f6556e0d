"""Sampled evaluation (issue 40 part 2; 004 reports avg@k and pass@k): n samples per question
beside the greedy reply, avg@n and the unbiased pass@k stored beside greedy accuracy, every
sample kept in the store so both can be recomputed by hand."""

from __future__ import annotations

import math
from itertools import combinations

import pytest

from cliffsweep.evals.scoring.passk import pass_at_k, sampled_metrics


@pytest.mark.parametrize("n,c,k", [(4, 0, 1), (4, 1, 1), (4, 1, 2), (5, 2, 3), (6, 6, 2), (8, 3, 8), (10, 1, 4)])
def test_pass_at_k_is_the_chance_that_k_of_the_n_samples_hold_a_correct_one(n, c, k):
    """Chen et al. (2021) Eq. 1 against counting: of all C(n, k) k-subsets of the n samples,
    the share that contain at least one of the c correct ones."""
    right = set(range(c))
    hits = sum(bool(right & set(sub)) for sub in combinations(range(n), k))
    assert pass_at_k(n, c, k) == pytest.approx(hits / math.comb(n, k))
    assert pass_at_k(n, c, k) == pytest.approx(1 - math.comb(n - c, k) / math.comb(n, k))


def test_avg_is_the_mean_share_correct_and_pass_at_1_equals_it():
    m = sampled_metrics([[True, False, False, False], [True, True, False, True]], [1, 2, 4])
    assert m["avg@4"] == pytest.approx((1 / 4 + 3 / 4) / 2) == pytest.approx(m["pass@1"])
    assert m["pass@4"] == 1.0 and m["pass@2"] == pytest.approx((0.5 + 1.0) / 2)
    with pytest.raises(ValueError, match="same number of samples"):
        sampled_metrics([[True], [True, False]], [1])
    with pytest.raises(ValueError, match="1 <= k <= n"):
        pass_at_k(4, 1, 5)


def test_a_sampled_task_stores_avg_and_pass_at_k_that_match_its_stored_samples(tmp_path):
    """The trained toy model (it knows arithmetic) on toy_arith with 6 samples at temperature 2.5
    through the runner and the evaluator's row writer into a real store: the stored avg@6,
    pass@1, pass@3 and pass@6 are what the stored samples give by hand; the greedy rows are
    untouched (analysis reads them) and greedy accuracy is stored as before."""
    from cliffsweep.evals.backends import build_backend
    from cliffsweep.evals.runner import evaluate_task
    from cliffsweep.evals.tasks import build_task
    from cliffsweep.evaluator.request import base_request
    from cliffsweep.evaluator.results import write_result
    from cliffsweep.models import resolve_model
    from cliffsweep.storage.store import SAMPLED_SUFFIX, Store

    task = build_task("toy_arith", {"n_eval": 12, "sampling": {"n": 6, "temperature": 2.5, "seed": 3, "k": [1, 3, 6]}})
    backend = build_backend("hf", resolve_model("toy:qwen2-tiny"), batch_size=12)
    try:
        res = evaluate_task(backend, task)
    finally:
        backend.close()
    store = Store(str(tmp_path / "store"))
    write_result(store, base_request("q"), "retain", task.scorer_version, res)
    ev = store.read("evals").set_index("metric")["value"]
    samples = store.read("samples")
    greedy, drawn = samples[samples["task"] == "toy_arith"], samples[samples["task"] == "toy_arith" + SAMPLED_SUFFIX]
    assert len(greedy) == 12 and ev["accuracy"] == pytest.approx(greedy["correct"].mean())
    assert len(drawn) == 12 * 6 and drawn["example_id"].str.rsplit("#", n=1).str[1].astype(int).between(0, 5).all()
    counts = drawn.assign(q=drawn["example_id"].str.rsplit("#", n=1).str[0]).groupby("q")["correct"].sum()
    assert sorted(counts.index) == sorted(greedy["example_id"])
    assert ev["avg@6"] == pytest.approx((counts / 6).mean())
    for k in (1, 3, 6):
        assert ev[f"pass@{k}"] == pytest.approx(sum(1 - math.comb(6 - c, k) / math.comb(6, k) for c in counts) / 12)
    assert ev["pass@6"] >= ev["pass@3"] >= ev["pass@1"] and 0 < ev["avg@6"] < 1  # it knows some, not all


def test_tasks_that_cannot_sample_say_so():
    from cliffsweep.evals.tasks import build_task

    with pytest.raises(Exception, match="generates nothing"):
        build_task("loss", {"of": {"name": "toy_arith"}, "sampling": {"n": 2}})
    with pytest.raises(Exception, match="not both"):  # an lm-eval task samples one way (issue 52)
        build_task("lm_eval", {"task": "toy_arith_lm", "include_path": "toy", "sampling": {"n": 2},
                               "overrides": {"repeats": 2}})
    with pytest.raises(Exception, match="from 1 to n"):
        build_task("toy_arith", {"sampling": {"n": 2, "k": [4]}})


def test_plan_prices_the_samples_and_a_wrong_k_is_named_in_the_sweep_file():
    """Each question of a sampled task is generated 1 + n times (greedy and n samples): `plan`'s
    bill counts them; k above n is one of the file's listed problems, named by its field."""
    from cliffsweep.orchestrator.specfile import parse_spec
    from cliffsweep.planner.plan import plan_spec
    from cliffsweep.sweep.spec import SpecError

    def spec(retain_params):
        return parse_spec({"name": "s", "models": [{"name": "m", "path": "toy:qwen2-tiny"}],
                           "methods": [{"name": "sft"}], "lrs": [1e-3], "epochs": [1],
                           "tasks": {"learn": {"name": "toy_facts", "params": {"n_eval": 10}},
                                     "retain": [{"name": "toy_arith", "params": retain_params}]}})

    greedy = plan_spec(spec({"n_eval": 20}))[0]
    sampled = plan_spec(spec({"n_eval": 20, "sampling": {"n": 3}}))[0]
    evaluations = greedy.generations // (10 + 20)
    assert sampled.generations == evaluations * (10 + 20 * 4)
    with pytest.raises(SpecError, match=r"tasks.retain.0.*sampling.k must be from 1 to n \(3\)"):
        spec({"sampling": {"n": 3, "k": [5]}})
