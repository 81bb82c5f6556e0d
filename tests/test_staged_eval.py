"""A checkpoint scored in stages (issue 51 parts 1 and 4, evaluator/staged.py) on a real store:
it stops where the rule settles, resumes from the stages stored after an interruption without
scoring an item twice, and a top-up scores only the items not yet scored. The items' scores come
from a fixed table (which items this checkpoint gets right), standing in for an engine: what is
under test is which items get scored, when, and what the store then holds."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

from cliffsweep.analysis.scored import within_evaluations
from cliffsweep.analysis.topup import partial, stop_rule
from cliffsweep.evals.result import TaskResult
from cliffsweep.evals.stopping import item_order
from cliffsweep.evaluator.request import EvalRequest, base_request
from cliffsweep.evaluator.results import write_evals, write_result
from cliffsweep.evaluator.staged import base_scores, evaluate_staged, item_ids
from cliffsweep.storage.store import Store
from cliffsweep.sweep.spec import AdaptiveSpec

N = 400
IDS = [f"q{i}" for i in range(N)]
RULE = stop_rule(AdaptiveSpec())


def request(at_least: int = 0, rule=RULE, top_up: tuple[str, ...] = ()) -> EvalRequest:
    return EvalRequest(trial_id="m-sft-lr1", model="m", method="sft", series="sft", optimizer="adamw", lr=1e-3,
                       epochs=1, seed=0, step=10, epoch=1.0, checkpoint="/nowhere", rule=rule, at_least=at_least,
                       top_up=top_up)


class Scorer:
    """Scores items from `right` (which items are answered correctly) and counts every item it
    was asked to score; raises once at stage `fail_at` (an evaluator killed mid-stage)."""

    def __init__(self, right: np.ndarray, fail_at: int | None = None):
        self.right, self.fail_at, self.asked, self.calls = right, fail_at, [], 0

    def __call__(self, items: list[int]) -> TaskResult:
        if self.calls == self.fail_at:
            self.fail_at = None
            raise RuntimeError("killed mid-stage")
        self.calls += 1
        self.asked += items
        ok = [bool(self.right[i]) for i in items]
        return TaskResult("arith", sum(ok) / len(ok), len(ok), samples=[(IDS[i], o, "x") for i, o in zip(items, ok)])


@pytest.fixture
def store(tmp_path) -> Store:
    return with_base(str(tmp_path / "store"))


def with_base(uri: str) -> Store:
    """A store holding the base's evaluation of task `arith` on every item (60 % right)."""
    s = Store(uri)
    rng = np.random.default_rng(1)
    base_right = rng.random(N) < 0.6
    res = TaskResult("arith", float(base_right.mean()), N, samples=[(IDS[i], bool(base_right[i]), "x") for i in range(N)])
    write_result(s, base_request("m"), "retain", "v1", res)
    return s


def run(store: Store, right: np.ndarray, req: EvalRequest, scorer: Scorer | None = None) -> tuple[TaskResult, Scorer]:
    scorer = scorer or Scorer(right)
    base = base_scores(store, "m", "arith", item_ids("m", "arith", IDS)[0])
    res = evaluate_staged(scorer, store, req, "retain", "arith", IDS, base)
    write_evals(store, req, "retain", "v1", res)
    return res, scorer


def stored(store: Store) -> pd.DataFrame:
    s = store.read("samples")
    return s[s["trial_id"] == "m-sft-lr1"]


def test_a_collapsed_checkpoint_stops_early_and_stores_each_scored_item_once(store):
    res, scorer = run(store, np.zeros(N, bool), request())
    assert res.n < N and res.n_items == N and res.accuracy == 0.0
    assert res.interval[1] < 0.6 * (1 - 0.4)  # settled below the collapse's cut
    s = stored(store)
    assert len(s) == res.n == len(scorer.asked) and s["example_id"].is_unique
    ev = store.read("evals").set_index("trial_id").loc["m-sft-lr1"]
    assert (int(ev.n_scored), int(ev.n_items)) == (res.n, N) and bool(ev.settled)  # settled by its cuts


def test_a_checkpoint_stopped_by_its_width_with_a_cut_inside_is_stored_open(store):
    """Issue 59 part 3: the width (0.15) stops a checkpoint 0.005 above the 0.9 cut, the cut still
    inside its interval; the store says so (`settled` false), for the analysis to top it up."""
    base = base_scores(store, "m", "arith", IDS)
    right = base.astype(bool).copy()
    right[np.flatnonzero(right)[: int(0.095 * right.sum())]] = False
    res, _ = run(store, right, request())
    assert res.n < N and not res.settled
    low, high = res.interval
    assert low < 0.9 * base.mean() < high
    ev = store.read("evals").set_index("trial_id").loc["m-sft-lr1"]
    assert int(ev.n_scored) == res.n and not bool(ev.settled)


def test_a_checkpoint_on_a_cut_is_scored_in_full_in_few_stages(store):
    base = base_scores(store, "m", "arith", IDS)  # in index order: right where the base is right
    right = base.astype(bool).copy()
    right[np.flatnonzero(right)[: int(0.1 * right.sum())]] = False  # exactly at 1 - forget_min
    res, scorer = run(store, right, request(rule=stop_rule(AdaptiveSpec(width=0.02))))
    assert res.n == N
    # the forecast sends it to every item in a few stages (32, 96, 288, 400), not in growth-sized
    # steps (32, 48, 72, 108, 162, 243, 365, 400)
    assert scorer.calls <= 4, scorer.calls


def test_an_evaluation_killed_mid_stage_resumes_without_scoring_an_item_twice(store, tmp_path):
    right = np.random.default_rng(2).random(N) < 0.45  # near the base: several stages
    full_res, uninterrupted = run(with_base(str(tmp_path / "twin")), right, request())
    assert uninterrupted.calls >= 2
    killed = Scorer(right, fail_at=1)
    with pytest.raises(RuntimeError, match="killed mid-stage"):
        run(store, right, request(), killed)
    assert len(stored(store)) == len(killed.asked) > 0  # the first stage is in the store, nothing more
    again = Scorer(right)
    res, _ = run(store, right, request(), again)
    assert not set(killed.asked) & set(again.asked)  # the re-run scored only what was not stored
    assert (res.n, res.accuracy) == (full_res.n, full_res.accuracy)
    assert stored(store)["example_id"].is_unique and len(stored(store)) == res.n


def test_a_top_up_scores_only_the_rest_and_the_analysis_reads_what_the_rows_count(store):
    res, first = run(store, np.zeros(N, bool), request())
    assert partial(store.read("evals")) == {("m-sft-lr1", 10)}
    # a top-up interrupted after its first new stage: the rows still count the first evaluation
    interrupted = Scorer(np.zeros(N, bool), fail_at=1)
    with pytest.raises(RuntimeError):
        run(store, np.zeros(N, bool), request(at_least=N), interrupted)
    s, ev = stored(store), store.read("evals")
    assert len(s) > res.n
    assert len(within_evaluations(s, ev)) == res.n  # the analysis reads the items the rows were taken on
    more = Scorer(np.zeros(N, bool))
    topped, _ = run(store, np.zeros(N, bool), request(at_least=N), more)
    assert topped.n == N and not partial(store.read("evals"))
    assert sorted(first.asked + interrupted.asked + more.asked) == list(range(N))  # each item once
    assert stored(store)["example_id"].is_unique and len(within_evaluations(stored(store), store.read("evals"))) == N


def test_a_top_up_of_another_task_scores_nothing_more_on_this_one(store):
    """A top-up names its tasks (analysis/topup.py `TopUp`): this task, not among them, reads its
    stored stages back, scores no item, and its rows keep their count and their seconds."""
    res, _ = run(store, np.zeros(N, bool), request())
    before = store.read("evals")
    assert res.n < N
    other = Scorer(np.zeros(N, bool))
    again, _ = run(store, np.zeros(N, bool), request(at_least=N, top_up=("learn_task",)), other)
    assert other.asked == [] and again.n == res.n
    after = store.read("evals")
    assert after["n_scored"].tolist() == before["n_scored"].tolist()
    assert after["eval_seconds"].tolist() == pytest.approx(before["eval_seconds"].tolist())
    named = Scorer(np.zeros(N, bool))
    topped, _ = run(store, np.zeros(N, bool), request(at_least=N, top_up=("arith",)), named)
    assert topped.n == N and sorted(named.asked) == sorted(set(range(N)) - set(item_order(N, 0, "m/arith")[:res.n]))


def test_without_the_base_only_the_width_stops(tmp_path):
    empty = Store(str(tmp_path / "empty"))
    assert base_scores(empty, "m", "arith", IDS) is None
    res = evaluate_staged(Scorer(np.zeros(N, bool)), empty, request(), "retain", "arith", IDS, None)
    # all wrong: the interval on the accuracy alone narrows below the width well before every item
    assert res.n < N and res.interval[1] - res.interval[0] <= RULE.width
    assert not res.settled  # no base, no cut read: open
