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
(bench/bench_eval_cost.py, filed in cliffsweep/measured/); this CPU's are measured (`cpu_cost`:
the form of the model checked, residuals in docs/benchmarks.md) and priced in the replay
benchmarks' `--device cpu`, never as GPU time. The same numbers give the stopping rule's stage
floors on GPUs (`stage_floors`).
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


def call_items(cost: EvalCost, tput: EvalThroughput, max_tokens: int, prompt_tokens: float = 0.0) -> float:
    """The items whose tokens cost what one generation call's fixed part does: its `call_s` and
    its latency floor (`max_tokens` decode steps, paid by a small batch whatever its size), over
    one item's tokens at the engine's throughput (`prompt_tokens`: one item's prompt). A stage
    of fewer items spends more on being a call than on its items (the stopping rule's floor,
    evals/stopping.StopRule.call_items)."""
    per_item = prompt_tokens / tput.prefill_tps + max_tokens / tput.decode_tps
    return (cost.call_s + max_tokens * cost.step_s) / per_item


def cpu_cost() -> tuple[EvalCost, EvalThroughput] | None:
    """This CPU's measured costs in the model's terms, from the newest file bench/bench_eval_cost.py
    filed in cliffsweep/measured/; None where none is filed."""
    files = sorted(MEASURED.glob("eval-cost-cpu-*.json"))
    if not files:
        return None
    got = json.loads(files[-1].read_text())
    src = f"measured on {got['device']} ({got['engine']}, {got['model']}, {got['date']})"
    return (EvalCost(load_s=got["load_from_storage_s"], call_s=got["call_s"], step_s=got["step_s"], source=src),
            EvalThroughput(0.0, got["prefill_tps"], got["decode_tps"], src))


def stage_floors(spec, backend: str) -> tuple[tuple[str, float], ...]:
    """(task label, `call_items`) of each task a sweep evaluates, where its evaluators run vLLM on
    GPUs: the GPU's assumed costs (`GPU`, at the throughput of the sweep's largest model: the
    fewest items a call is worth). Prompt tokens are left out (they would need every task
    tokenized at start-up): an item then looks cheaper than it is and its floor larger, by the
    prefill's share of an item (on a GPU, about half for a 200-token prompt and 64 generated
    tokens).

    None on a CPU, measured: this CPU's engine costs (`cpu_cost`, bench/bench_eval_cost.py) give
    floors of 61 (toy_arith) and 72 (toy_facts) items, and the default toy sweep with them spent
    3.5 % more evaluator seconds and 7 % more wall time than without (regimes the same;
    docs/benchmarks.md): an item costs the evaluator 3-10 times what the engine alone measures
    (its prompt rendered, its answer scored, its sample row written), which the engine's
    benchmark does not see, so its floors are too large. None for transformers' `generate` (the
    hf backend), which no benchmark priced."""
    from cliffsweep.evals.stopping import stageable
    from cliffsweep.evals.tasks import build_task
    from cliffsweep.planner.archs import UnknownArch, arch_for
    from cliffsweep.planner.bill import EVAL_THROUGHPUT, eval_throughput

    if backend != "vllm" or spec.eval.gpus_per_evaluator <= 0:
        return ()

    def params(path: str) -> float:
        try:
            return arch_for(path).params
        except UnknownArch:  # not readable offline: priced as the largest row, the smallest floor
            return EVAL_THROUGHPUT[-1].params

    tput = eval_throughput(max(params(m.path) for m in spec.models))
    built = [build_task(t.name, t.params) for _, _, t in spec.tasks.evaluated]
    # only the tasks the rule stages (a loss task generates nothing, lm-eval's are scored whole)
    return tuple((task.label, call_items(GPU, tput, task.sampling.max_tokens))
                 for task in built if stageable(task) and task.sampling.max_tokens > 0)
