"""Evaluation priced in seconds (issue 61 part 1, planner/evalcost.py): a call's latency floor,
the rule's stages on its schedule, and a checkpoint's seconds under the rule beside every item."""

from __future__ import annotations

import pytest

from cliffsweep.planner.bill import EvalThroughput
from cliffsweep.planner.evalcost import EvalCost, TaskLoad, call_seconds, checkpoint_seconds

TPUT = EvalThroughput(1e9, 40_000, 12_000, "test")
COST = EvalCost(load_s=2.0, call_s=0.05, step_s=0.012, source="test")


def test_a_small_call_costs_its_decode_steps_whatever_its_size():
    small = call_seconds(32, 32 * 100, 64, COST, TPUT)
    large = call_seconds(400, 400 * 100, 64, COST, TPUT)
    assert small == pytest.approx(COST.call_s + 64 * COST.step_s)  # the floor: 64 steps
    assert large > small and large / small < 400 / 32  # items grow 12.5x, seconds far less


def test_the_rule_saves_fewer_seconds_than_items_and_nothing_on_what_it_cannot_stage():
    staged = [TaskLoad(420, 420 * 120.0, 64, True)]
    full = checkpoint_seconds(staged, COST, TPUT, read_s=1.0)
    rule = checkpoint_seconds(staged, COST, TPUT, read_s=1.0, rule=(0.4, 2.7))
    assert rule < full and (full - rule) / full < 0.6  # 60 % of the items saved, less of the seconds
    # each of the 2.7 calls of 62 items is decode-latency bound: the floor, not the items, prices it
    assert rule == pytest.approx(1.0 + COST.load_s + 2.7 * (COST.call_s + 64 * COST.step_s))
    many_calls = checkpoint_seconds(staged, COST, TPUT, read_s=1.0, rule=(0.4, 8.0))
    assert many_calls > full  # a rule of many small stages costs more than one call of every item
    unstaged = [TaskLoad(420, 420 * 120.0, 64, False)]
    assert checkpoint_seconds(unstaged, COST, TPUT, 1.0, rule=(0.4, 2.7)) == pytest.approx(
        checkpoint_seconds(unstaged, COST, TPUT, 1.0))
    assert full == pytest.approx(1.0 + COST.load_s + call_seconds(420, 420 * 120.0, 64, COST, TPUT))


def test_no_stage_is_smaller_than_a_call_is_worth_nor_leaves_less_behind():
    """Issue 61 part 1: the rule's stages come from the seconds model. A call's fixed part (its
    call_s and its latency floor) is worth `call_items` items; the rule's first stage is no
    smaller, nor any later one, and a stage that would leave fewer behind takes every item."""
    import math

    from cliffsweep.analysis.topup import stop_rule
    from cliffsweep.evals.stopping import Reading, Interval
    from cliffsweep.planner.evalcost import call_items
    from cliffsweep.sweep.spec import AdaptiveSpec

    worth = call_items(COST, TPUT, max_tokens=64)
    per_item = 64 / TPUT.decode_tps
    assert worth * per_item == pytest.approx(COST.call_s + 64 * COST.step_s)  # a call's fixed part, in items
    assert call_items(COST, TPUT, 64, prompt_tokens=120) < worth  # dearer items: fewer of them are a call
    floor = math.ceil(worth)
    plain = stop_rule(AdaptiveSpec(first=32, growth=1.5))
    floored = stop_rule(AdaptiveSpec(first=32, growth=1.5), call_items=(("t", worth),))
    reading = Reading(Interval(0.2, 0.8), settled=False, need=10.0)
    assert plain.next_total(0, 2000, None, "t") == 32 and floored.next_total(0, 2000, None, "t") == floor > 32
    assert plain.next_total(100, 2000, reading, "t") == 150
    assert floored.next_total(100, 2000, reading, "t") == 100 + floor
    assert floored.next_total(0, 2000, None, "other") == 32  # a task without a floor: today's stages
    # a stage that would leave fewer than a call's worth behind ends at the last item
    assert floored.next_total(0, floor + floor // 2, None, "t") == floor + floor // 2
    n = 100 + floor + floor * 2 // 3  # after a floored stage from 100, less than a call's worth is left
    assert floored.next_total(100, n, reading, "t") == n
    assert plain.next_total(100, n, reading, "t") == 150  # without a floor: growth


def test_the_sweeps_floors_are_a_gpus_and_none_where_nothing_priced_them():
    """stage_floors: a vLLM sweep on GPUs gets a floor per task from the GPU's costs (GSM8K-shaped
    toy_arith: 64 tokens, more items than toy_facts' 4); on a CPU, or with transformers'
    generate, none (docs/benchmarks.md: the CPU's engine-only floors cost the toy sweep time).
    On a GPU a small model's call is mostly fixed part: both floors exceed toy_facts' 200 items."""
    from cliffsweep.orchestrator.specfile import default_spec_path, load_spec
    from cliffsweep.planner.evalcost import stage_floors

    spec = load_spec(default_spec_path())
    assert stage_floors(spec, "vllm") == () and stage_floors(spec, "hf") == ()
    gpu = spec.model_copy(update={"eval": spec.eval.model_copy(update={"gpus_per_evaluator": 0.5})})
    floors = dict(stage_floors(gpu, "vllm"))
    assert set(floors) == {"toy_arith", "toy_facts"} and min(floors.values()) > 32, floors
    assert floors["toy_facts"] > floors["toy_arith"] > 200, floors  # more than toy_facts holds: one call
    assert stage_floors(gpu, "hf") == ()
    # a loss task generates nothing and is scored whole: no floor (and no division by its 0 tokens)
    import yaml

    from cliffsweep.orchestrator.specfile import parse_spec

    data = yaml.safe_load(open(default_spec_path()))
    data["eval"]["gpus_per_evaluator"] = 0.5
    data["tasks"]["retain"].append({"name": "loss", "params": {"of": {"name": "toy_arith"}}})
    assert dict(stage_floors(parse_spec(data), "vllm")) == floors
