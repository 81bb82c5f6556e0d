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
