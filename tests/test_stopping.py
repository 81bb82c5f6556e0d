"""The stopping rule's interval and decisions (evals/stopping.py, issue 51 part 2), pure."""

from __future__ import annotations

import numpy as np
import pytest

from cliffsweep.evals.stopping import (Interval, change_interval, item_order, log_capital, mean_interval,
                                          retention_cuts, share_interval, stages)

ERROR = 0.05


def ever_rejected(draws: np.ndarray, mean: float) -> float:
    """The share of runs (rows) in which the capital bet against the true `mean` ever reaches
    1/ERROR: the runs whose interval left the truth at some look."""
    log_k = np.stack([log_capital(row, [mean], ERROR)[:, 0] for row in draws])
    return float((log_k.max(axis=1) >= np.log(1 / ERROR)).mean())


def wald_misses(draws: np.ndarray, mean: float) -> float:
    """The same for a 95 % Wald interval looked at after every item (valid at one fixed n only)."""
    t = np.arange(1, draws.shape[1] + 1)
    m = np.cumsum(draws, axis=1) / t
    half = 1.96 * np.sqrt(np.maximum(m * (1 - m), 1e-12) / t)
    return float(((m - half > mean) | (m + half < mean)).any(axis=1).mean())


@pytest.mark.parametrize("p", [0.02, 0.3, 0.5])
def test_the_interval_covers_at_every_look_at_once(p):
    """Anytime validity, the property that lets the rule look after every stage (Ville's
    inequality): over 1,000 runs of 420 items, the share in which the truth is ever ruled out
    stays under the error. A Wald interval looked at after every item is ruled out far more
    often: the check tells the two apart."""
    rng = np.random.default_rng(7)
    draws = (rng.random((1000, 420)) < p).astype(float)
    assert ever_rejected(draws, p) <= ERROR
    if p >= 0.3:
        assert wald_misses(draws, p) > 2 * ERROR


def test_items_drawn_without_replacement_from_a_fixed_set_are_covered():
    """A task has a fixed set of items, scored in one shuffled order: the set's accuracy is ruled
    out at some look in at most the error's share of orders (with replacement is the conservative
    case), and the interval from every item holds it."""
    rng = np.random.default_rng(3)
    items = (rng.random(420) < 0.45).astype(float)
    draws = np.stack([rng.permutation(items) for _ in range(500)])
    assert ever_rejected(draws, items.mean()) <= ERROR
    whole = mean_interval(draws[0], ERROR)
    assert whole.low <= items.mean() <= whole.high


def base_and_checkpoint(agree: float, checkpoint_accuracy: float, n: int = 420, seed: int = 0):
    """A base at 0.5 on n items and a checkpoint that keeps the base's answer on `agree` of them
    and is otherwise right with `checkpoint_accuracy`."""
    rng = np.random.default_rng(seed)
    base = (rng.random(n) < 0.5).astype(float)
    own = (rng.random(n) < checkpoint_accuracy).astype(float)
    ckpt = np.where(rng.random(n) < agree, base, own)
    return base, ckpt


def first_settled(base, ckpt, cuts, width=0.0) -> int:
    """Items scored when the retention share's interval first settles (every item: never)."""
    r0 = base.mean()
    for n in stages(len(base)):
        if share_interval(change_interval(ckpt[:n], base[:n], ERROR), r0).settles(cuts, width):
            return n
    return len(base)


def test_a_collapsed_checkpoint_settles_in_its_first_stage():
    cuts = retention_cuts(0.10, 0.40, 0.40)
    base, ckpt = base_and_checkpoint(agree=0.0, checkpoint_accuracy=0.02)
    assert first_settled(base, ckpt, cuts) == 64  # of 420: its share is far below 0.6


def test_a_checkpoint_that_kept_its_base_settles_early_when_paired():
    """97 % of its answers are the base's: paired with the base, its share's interval is narrow
    and above 0.9 long before every item. Unpaired (its accuracy alone against R0), it is not."""
    cuts = retention_cuts(0.10, 0.40, 0.40)
    base, ckpt = base_and_checkpoint(agree=0.97, checkpoint_accuracy=0.5)
    paired = first_settled(base, ckpt, cuts)
    assert paired <= 256
    r0 = base.mean()
    unpaired = next((n for n in stages(420) if Interval(mean_interval(ckpt[:n], ERROR).low / r0,
                                                        mean_interval(ckpt[:n], ERROR).high / r0).settles(cuts, 0.0)), 420)
    assert unpaired > paired


def test_a_checkpoint_at_a_threshold_is_scored_in_full_unless_the_width_stops_it():
    """Its share sits on 0.9 (a tenth of the base's correct answers lost): no interval can say
    which side it is on, so every item is scored, unless eval.adaptive.width ends it first."""
    cuts = retention_cuts(0.10, 0.40, 0.40)
    rng = np.random.default_rng(1)
    base = (rng.random(420) < 0.5).astype(float)
    ckpt = base.copy()
    right = np.flatnonzero(base == 1)
    ckpt[right[: len(right) // 10]] = 0  # loses exactly a tenth of R0, spread by the item order below
    order = item_order(420, 0, "gsm8k")
    base, ckpt = base[order], ckpt[order]
    assert first_settled(base, ckpt, cuts) == 420
    assert first_settled(base, ckpt, cuts, width=0.5) < 420


def test_stages_score_every_item_once_and_the_order_is_one_per_model():
    assert stages(420) == [64, 128, 256, 420]
    assert stages(50) == [50] and stages(0) == []
    s = stages(1000, first=10, growth=1.5)
    assert s[-1] == 1000 and all(a < b for a, b in zip(s, s[1:]))
    a, b = item_order(420, 0, "gsm8k"), item_order(420, 0, "gsm8k")
    assert sorted(a) == list(range(420)) and (a == b).all()  # the same order for every checkpoint
    assert not (a == item_order(420, 0, "chem_l3")).all() and not (a == item_order(420, 1, "gsm8k")).all()


def test_intervals_refuse_values_outside_0_1_and_read_a_base_with_nothing_to_lose():
    with pytest.raises(ValueError):
        mean_interval([0.5, 1.5], ERROR)
    wide = share_interval(Interval(-0.1, 0.1), 0.0)
    assert wide.settles(retention_cuts(0.1, 0.4, 0.4), 0.0) is False


# --- the rule behind an interface (issue 60 part 6) ------------------------------------------------

def _toy_spec(**adaptive):
    from cliffsweep.orchestrator.specfile import parse_spec

    return parse_spec({"name": "s", "models": [{"name": "q", "path": "toy:qwen2-tiny"}], "methods": [{"name": "sft"}],
                       "lrs": [1e-5, 1e-4], "epochs": [1], "eval": {"adaptive": adaptive},
                       "tasks": {"learn": {"name": "toy_facts"}, "retain": [{"name": "toy_arith"}]}})


def test_the_rule_is_looked_up_by_name_and_plan_prices_what_it_says_it_costs(monkeypatch):
    """A second rule is one frozen dataclass named in RULES: the driver builds it from the sweep
    file, and `plan` bills the items it says it scores (its ITEMS), not a number of its own."""
    from dataclasses import dataclass

    from cliffsweep.analysis.topup import stop_rule
    from cliffsweep.evals import stopping
    from cliffsweep.planner.plan import plan_spec

    @dataclass(frozen=True)
    class Frugal(stopping.StopRule):
        ITEMS, CALLS = 0.2, 1.0

    @dataclass(frozen=True)
    class Everything(stopping.StopRule):
        ITEMS, CALLS = 1.0, 5.0

    for name, cls in (("frugal", Frugal), ("everything", Everything)):
        monkeypatch.setattr(stopping, name, cls, raising=False)
        monkeypatch.setitem(stopping.RULES, name, f"cliffsweep.evals.stopping:{name}")
    ours, frugal, everything = _toy_spec(), _toy_spec(rule="frugal"), _toy_spec(rule="everything")
    assert type(stop_rule(ours.eval.adaptive)) is stopping.StopRule
    assert type(stop_rule(frugal.eval.adaptive)) is Frugal
    (a,), (b,), (c,) = plan_spec(ours), plan_spec(frugal), plan_spec(everything)
    assert a.eval_s == pytest.approx(b.eval_s) == pytest.approx(c.eval_s)  # every item: whatever the rule
    # priced in seconds (planner/evalcost.py): fewer items in fewer calls cost less, and a rule
    # that scores every item in five stages costs more than one call of every item
    assert b.eval_rule_s < a.eval_rule_s < c.eval_rule_s and c.eval_rule_s > c.eval_s


def test_an_unknown_rule_is_refused_with_the_names_there_are(tmp_path):
    from cliffsweep.orchestrator.specfile import load_spec
    from cliffsweep.sweep.spec import SpecError

    import yaml

    path = tmp_path / "s.yaml"
    path.write_text(yaml.safe_dump({"name": "s", "models": [{"name": "q", "path": "toy:qwen2-tiny"}],
                                    "methods": [{"name": "sft"}], "lrs": [1e-5], "epochs": [1],
                                    "eval": {"adaptive": {"rule": "hedged"}},
                                    "tasks": {"learn": {"name": "toy_facts"}, "retain": [{"name": "toy_arith"}]}}))
    with pytest.raises(SpecError) as exc:
        load_spec(str(path))
    assert "eval.adaptive.rule" in str(exc.value) and "hedged_cs" in str(exc.value)
