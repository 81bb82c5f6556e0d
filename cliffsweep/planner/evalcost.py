"""Evaluation priced in seconds, not items (issue 61 part 1).

A checkpoint's evaluation is the checkpoint's weights put into the running engine, then one
generation call per task (per stage of a task under the stopping rule). Each call costs

    call_s + max(prompt tokens / prefill rate + generated tokens / decode rate,   (throughput)
                 max_tokens x step_s)                                            (latency floor)

where the floor is what a small call cannot beat: its decode steps run one after another, each
taking `step_s` however few prompts the batch holds, so a stage of 32 prompts costs nearly what
one of 400 does when both generate 64 tokens (issue 61: 0.28 s against 1.22 s on this CPU, and
worse on a GPU, whose throughput only a large batch reaches). Items are not seconds: the rule's
saving in items (Rule.ITEMS) is a smaller saving in seconds, and this module says how much.

The numbers behind a GPU bill (`GPU`) are assumed until a lent GPU measures them
(bench/bench_eval_cost.py, filed in cliffsweep/measured/); the CPU's are measured
(`measured_cpu`) and printed beside them for the form of the model, never priced as GPU time.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path

from cliffsweep.planner.bill import EvalThroughput

MEASURED = Path(__file__).resolve().parents[1] / "measured"


@dataclass(frozen=True)
class EvalCost:
    """What a checkpoint and a call cost beyond their tokens."""
    load_s: float
    """Weights into the running engine (in-place reload, canary check), beside their read."""
    call_s: float
    """One generation call's fixed part (scheduling, the batch's setup, the results back)."""
    step_s: float
    """One decode step of a small batch: a call's floor is max_tokens of them."""
    source: str


GPU = EvalCost(load_s=2.0, call_s=0.05, step_s=0.012,
               source="assumed (H100, vLLM: in-place reload 2 s, 50 ms a call, 12 ms a decode step): not measured")


@dataclass(frozen=True)
class TaskLoad:
    """One task of one evaluation: its prompts, their tokens, and whether it is scored in stages."""
    items: int
    prompt_tokens: float
    max_tokens: int
    staged: bool


def call_seconds(items: float, prompt_tokens: float, max_tokens: int, cost: EvalCost, tput: EvalThroughput) -> float:
    """One generation call of `items` prompts of `prompt_tokens` in all, each generating up to
    `max_tokens` (a loss task's prefill generates none)."""
    tokens = prompt_tokens / tput.prefill_tps + items * max_tokens / tput.decode_tps
    return cost.call_s + max(tokens, max_tokens * cost.step_s)


def checkpoint_seconds(tasks: list[TaskLoad], cost: EvalCost, tput: EvalThroughput, read_s: float,
                       rule: tuple[float, float] | None = None) -> float:
    """One checkpoint's evaluation: its weights read (`read_s`) and loaded, then each task's calls:
    one with every item, or under the rule (`rule`: the share of items it scores and the calls it
    makes per checkpoint and task, Rule.ITEMS and Rule.CALLS, both measured by replay) that many
    calls splitting that share evenly. A task the rule cannot stage: one call, every item."""
    total = read_s + cost.load_s
    for t in tasks:
        if rule is None or not t.staged:
            total += call_seconds(t.items, t.prompt_tokens, t.max_tokens, cost, tput)
            continue
        items, calls = rule
        part = items / calls
        total += calls * call_seconds(t.items * part, t.prompt_tokens * part, t.max_tokens, cost, tput)
    return total


def measured_cpu() -> dict | None:
    """The newest CPU measurement filed in cliffsweep/measured/ (bench/bench_eval_cost.py)."""
    files = sorted(MEASURED.glob("eval-cost-cpu-*.json"))
    return json.loads(files[-1].read_text()) if files else None
