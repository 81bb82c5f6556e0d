"""`cliffsweep plan`: what a sweep will cost, before it runs, offline.

Per model and in total: trials, training tokens, training FLOPs, GPU-hours per GPU type at a
measured MFU (mfu.py), evaluation generations and generated tokens, checkpoint bytes written and
kept, and the peak memory of one training GPU per method. The costs of one trial are pure
functions (costs.py, with its stated assumptions); this module walks a validated spec's grid
through them, reading each model's config and each task's data (`plan_spec`, `lengths_for`);
text.py prints the result, bill.py prices the time around the compute, simulate/ schedules it.
"""

from __future__ import annotations

import functools
import json
import os
from dataclasses import dataclass, field
from typing import Any

from cliffsweep.planner import bill, evalcost
from cliffsweep.planner.archs import Arch
from cliffsweep.planner.costs import (BYTES, Batching, Memory, Precision, checkpoint_bytes, costs_of, precision,
                                      stats_flops, stats_memory, train_memory, trial_cost)
from cliffsweep.planner.mfu import DEFAULT_MFU, GPUS, MeasuredMFU, gpu_hours, measured_mfu, measured_rows
from cliffsweep.planner.tokenstats import Lengths


# --- the whole sweep ---------------------------------------------------------------------------
@dataclass
class ModelPlan:
    name: str
    arch: Arch
    trials: int = 0
    tokens: float = 0.0
    train_flops: float = 0.0
    stats_flops: float = 0.0
    generations: int = 0
    gen_tokens: int = 0
    ckpt_written: float = 0.0
    ckpt_kept: float = 0.0
    prompt_tokens: float = 0.0
    """Prompt tokens of every evaluation (prefill), from the tasks' example lengths."""
    eval_s: float = 0.0
    """GPU-seconds of evaluation (bill.eval_seconds), every item of every checkpoint."""
    eval_rule_s: float = 0.0
    """The same under the stopping rule (eval.adaptive: the rule's ITEMS share of a checkpoint's
    stageable tasks' items; the base in full)."""
    adaptive: bool = False
    """Whether the sweep evaluates under the rule: its bill counts eval_rule_s."""
    ckpt_blocked_s: float = 0.0
    """GPU-seconds training GPUs wait on checkpoints (bill.blocked_seconds, H100 pace)."""
    setup_s: float = 0.0
    """GPU-seconds of per-trial setup (bill.setup_seconds)."""
    eval_source: str = ""
    ckpt_running: float = 0.0
    """Largest single running trial's checkpoint bytes (times concurrent trials = the peak)."""
    dtype: str = "float32"
    mfu: float = DEFAULT_MFU
    mfu_source: str = "assumed"
    memory: dict[str, Memory] = field(default_factory=dict)
    """series -> peak memory per training GPU."""
    stats_memory: dict[str, Memory] = field(default_factory=dict)
    """series -> peak memory of its once-per-model statistics task (methods that have one)."""
    notes: list[str] = field(default_factory=list)
    trial_costs: list[bill.TrialCost] = field(default_factory=list)
    """Each trial's pieces of work, priced, for a schedule simulation (cliffsweep/simulate)."""

    def hours(self) -> dict[str, float]:
        """The whole bill in H100-hours, by part: training (at this model's MFU), evaluation, GPUs
        waiting on checkpoints, per-point setup. `plan`'s table and the dashboard add these up."""
        return {"train": gpu_hours(self.flops, GPUS[1], self.mfu),
                "eval": (self.eval_rule_s if self.adaptive else self.eval_s) / 3600,
                "ckpt wait": self.ckpt_blocked_s / 3600, "setup": self.setup_s / 3600}
    stats_s: dict[str, float] = field(default_factory=dict)
    """Seconds of each distinct statistics task on one GPU (key as TrialCost.stats_key)."""
    base_eval_s: float = 0.0

    @property
    def flops(self) -> float:
        return self.train_flops + self.stats_flops


def eval_load(tasks: list[tuple[int, int]]) -> tuple[int, int]:
    """(generations, generated tokens at most) of one evaluation over tasks (n_eval, max_tokens);
    a task that generates nothing (max_tokens 0: a loss task, prefill only) adds no generation."""
    return sum(n for n, m in tasks if m > 0), sum(n * m for n, m in tasks)


def draws(task) -> int:
    """Generations per question of `task`: the greedy one, plus n samples when it samples."""
    how = getattr(task.params, "sampling", None)
    return 1 + (how.n if how is not None else 0)


def recipe_extras(recipe) -> tuple[int | None, bool]:
    """(micro_batch_size, gradient_checkpointing) of the recipe. The fields come with the
    micro-batching change (branch h-recipe); until then: None (the whole per-worker batch in one
    pass) and False."""
    fields = recipe.model_dump()
    return fields.get("micro_batch_size"), bool(fields.get("gradient_checkpointing", False))


@dataclass(frozen=True)
class SweepFacts:
    """What every model of a sweep shares: the spec, the MFU rows, storage bandwidth, batching,
    the built tasks and one evaluation's load, the grid."""
    spec: Any
    measured: tuple[MeasuredMFU, ...]
    bandwidth: float
    grad_ckpt: bool
    batching: Batching
    tasks: list
    per_eval: tuple[int, int]
    grid: list
    gpus_per_trial: float
    rule: tuple[float, float]
    """The stopping rule as evalcost prices it: (the share of items it scores, its calls per
    checkpoint and task: the rule's own ITEMS and CALLS); the sweep's rule, or the shipped one for
    the bill's other column."""

    @classmethod
    def of(cls, spec, measured: tuple[MeasuredMFU, ...], bandwidth: float) -> SweepFacts:
        from cliffsweep.evals.tasks import build_task
        from cliffsweep.sweep.grid import expand_grid

        r, res = spec.recipe, spec.resources
        micro, grad_ckpt = recipe_extras(r)
        built = [build_task(s.name, s.params) for _, _, s in spec.tasks.evaluated]
        return cls(spec, measured, bandwidth, grad_ckpt, Batching.of(r.batch_size, res.workers_per_trial, micro),
                   built, eval_load([(t.eval_size * draws(t), t.sampling.max_tokens) for t in built]), expand_grid(spec),
                   res.workers_per_trial * max(1.0, res.gpus_per_worker), rule_schedule(spec))


def rule_schedule(spec) -> tuple[float, float]:
    """(ITEMS, CALLS) of the sweep's stopping rule (evals/stopping.Rule: what the rule says it
    costs); the shipped rule's when the sweep scores every item, for the bill's other column."""
    from cliffsweep.evals.stopping import rule_class

    adaptive = spec.eval.adaptive
    rule = rule_class(adaptive.rule if adaptive is not None else "hedged_cs")
    return rule.ITEMS, rule.CALLS


@dataclass
class ModelWork:
    """One model's inputs while its trials are priced: token lengths (retain read only when a
    method needs it), one evaluation's prompt tokens and seconds, statistics already priced."""
    path: str
    learn: Lengths
    prompts: float
    loads: list  # evalcost.TaskLoad, one per evaluated task
    base_eval_s: float
    """The base's evaluation: every item, its weights the engine's own (no reload)."""
    retain: Lengths | None = None
    stats_done: set[str] = field(default_factory=set)


def plan_spec(spec, bandwidth: float = bill.BANDWIDTH, measured: tuple[MeasuredMFU, ...] | None = None) -> list[ModelPlan]:
    """Budget of every model of a validated SweepSpec (reads configs and data; see module doc),
    checkpoints priced at `bandwidth` bytes/s to storage, training at the MFU of `measured` (default:
    `measured_rows()`)."""
    facts = SweepFacts.of(spec, measured_rows() if measured is None else measured, bandwidth)
    return [plan_model(facts, m) for m in spec.models]


def plan_model(facts: SweepFacts, m) -> ModelPlan:
    """One model's budget: each of its trials (`add_trial`), then its base evaluation."""
    from cliffsweep.planner.archs import arch_for

    r = facts.spec.recipe
    plan = ModelPlan(m.name, arch_for(m.path), dtype=m.dtype, adaptive=facts.spec.eval.adaptive is not None)
    plan.mfu, plan.mfu_source = measured_mfu(plan.arch.params, m.dtype, r.precision, r.master_weights,
                                             r.kernels, facts.measured)
    learn_t = facts.spec.tasks.learn
    learn = lengths_for(m.path, learn_t.name, learn_t.params, plan.notes)
    loads = task_loads(m.path, facts.tasks, plan.notes)
    prompts = sum(t.prompt_tokens for t in loads)
    tput = bill.eval_throughput(plan.arch.params)
    plan.eval_source = f"{tput.source}; calls and reloads {evalcost.GPU.source}"
    base_s = evalcost.checkpoint_seconds(loads, evalcost.GPU, tput, 0.0) - evalcost.GPU.load_s
    work = ModelWork(m.path, learn, prompts, loads, base_s)
    for t in (t for t in facts.grid if t.model == m.name):
        add_trial(facts, plan, work, t, tput)
    plan.generations += facts.per_eval[0]  # the base model, once
    plan.gen_tokens += facts.per_eval[1]
    plan.prompt_tokens += prompts
    plan.eval_s += base_s
    plan.eval_rule_s += base_s  # the base: every item
    plan.base_eval_s = base_s
    return plan


def add_trial(facts: SweepFacts, plan: ModelPlan, work: ModelWork, t, tput: bill.EvalThroughput) -> None:
    """Trial `t`'s training, evaluations, checkpoints, memory and statistics, added to `plan`."""
    from cliffsweep.trainables import data
    from cliffsweep.trainables.methods import build_method
    from cliffsweep.trainables.schedule import eval_steps, total_steps

    spec, r, res, ev = facts.spec, facts.spec.recipe, facts.spec.resources, facts.spec.eval
    arch, b = plan.arch, facts.batching
    method = build_method(t.method, t.method_params)
    if (costs_of(t.method).stats_data == "retain" or method.retain_fraction > 0) and work.retain is None:
        retain_t = spec.tasks.replay
        work.retain = lengths_for(work.path, retain_t.name, retain_t.params, plan.notes)
    per_epoch = data.steps_per_epoch(work.learn.n, r.batch_size, method.retain_fraction)
    steps = total_steps(per_epoch, t.epochs, t.max_steps)
    points = len(eval_steps(steps, per_epoch, ev.points_per_trial, ev.every_epoch))
    cost = trial_cost(arch, t.method, steps, points, b, work.learn, work.retain,
                      data.replay_rows(r.batch_size, method.retain_fraction), r.max_seq_len, facts.grad_ckpt)
    plan.trials += 1
    plan.tokens += cost.tokens
    plan.train_flops += cost.flops
    plan.generations += points * facts.per_eval[0]
    plan.gen_tokens += points * facts.per_eval[1]
    plan.prompt_tokens += points * work.prompts
    # the trial's wall time of training on its GPUs at the H100's pace (the bill's unit)
    train_s = gpu_hours(cost.flops, GPUS[1], plan.mfu) * 3600 / facts.gpus_per_trial
    ckb = add_checkpoints(facts, plan, t, points, train_s)
    # each checkpoint evaluated: its export read from storage, loaded, then each task's calls
    read_s = checkpoint_bytes(arch, t.method, t.method_params, t.optimizer, plan.dtype, res.strategy).export / facts.bandwidth
    full_s = evalcost.checkpoint_seconds(work.loads, evalcost.GPU, tput, read_s)
    rule_s = evalcost.checkpoint_seconds(work.loads, evalcost.GPU, tput, read_s, facts.rule)
    plan.eval_s += points * full_s
    plan.eval_rule_s += points * rule_s
    prec = precision(plan.dtype, res.gpus_per_worker > 0, r.master_weights)
    plan.memory[t.series] = train_memory(arch, t.method, t.method_params, t.optimizer, prec, res.strategy,
                                         res.workers_per_trial, b.micro_rows, r.max_seq_len, facts.grad_ckpt)
    key = add_stats(facts, plan, work, t, method, prec)
    setup_s = bill.setup_seconds(arch.params * BYTES[plan.dtype], facts.bandwidth)
    plan.setup_s += setup_s * facts.gpus_per_trial
    # a checkpoint's evaluation as the sweep runs it: under the stopping rule, its expected seconds
    per_eval_s = rule_s if plan.adaptive else full_s
    plan.trial_costs.append(bill.TrialCost(t.trial_id, plan.name, facts.gpus_per_trial, setup_s, train_s, ckb.blocked_s,
                                      points, per_eval_s, key))


def add_checkpoints(facts: SweepFacts, plan: ModelPlan, t, points: int, train_s: float) -> bill.CheckpointBill:
    """Trial `t`'s checkpoints: bytes written and kept, and the time training waits on them."""
    spec = facts.spec
    ck = checkpoint_bytes(plan.arch, t.method, t.method_params, t.optimizer, plan.dtype, spec.resources.strategy)
    ckb = bill.checkpoint_bill(points, train_s, ck.export, ck.train_state, spec.resume_every_s, facts.bandwidth,
                               spec.async_checkpoints)
    plan.ckpt_written += ckb.written
    plan.ckpt_blocked_s += ckb.blocked_s * facts.gpus_per_trial
    states = sum(bill.state_points(points, train_s, spec.resume_every_s)) if ck.train_state else 0
    plan.ckpt_kept += ck.kept(points, spec.keep_checkpoints, states)
    plan.ckpt_running = max(plan.ckpt_running, ck.running(points, states))
    return ckb


def add_stats(facts: SweepFacts, plan: ModelPlan, work: ModelWork, t, method, prec: Precision) -> str | None:
    """The method's once-per-model statistics: its memory per series, its FLOPs once per
    distinct statistics task (key as TrialCost.stats_key; None: the method has none)."""
    if method.stats_inputs() is None:
        return None
    r, b = facts.spec.recipe, facts.batching
    key = f"{t.method}:{method.stats_inputs()}"
    plan.stats_memory[t.series] = stats_memory(plan.arch, t.method, t.method_params, prec, b.micro_rows,
                                               r.max_seq_len, facts.grad_ckpt)
    if key not in work.stats_done:
        work.stats_done.add(key)
        sf = stats_flops(plan.arch, t.method, r.stats_examples, work.learn, work.retain, r.max_seq_len)
        plan.stats_flops += sf
        plan.stats_s[key] = gpu_hours(sf, GPUS[1], plan.mfu) * 3600
    return key


def task_loads(model_path: str, tasks, notes: list[str]) -> list:
    """One evaluation over `tasks` (built eval tasks), task by task (evalcost.TaskLoad): n_eval
    prompts each (times its samples: items), a prompt as long as the task's mean training example times
    (1 + its few-shot examples), and whether the stopping rule can stage it."""
    from cliffsweep.evals.stopping import stageable

    out = []
    for t in tasks:
        shots = 0 if getattr(t.params, "protocol", None) == "zeroshot" else int(getattr(t.params, "num_fewshot", 0) or 0)
        # The fields the user set, not a dump of defaults: a task's cross-field checks refuse
        # defaults its own choices make meaningless (num_fewshot under protocol zeroshot).
        said: list[str] = []
        lengths = lengths_for(model_path, t.name, t.params.model_dump(exclude_unset=True), said)
        notes += [n for n in said if n not in notes and ("proxy" in n or "estimate" in n)]  # the labels a bill must carry
        prompts = t.eval_size * (1 + shots) * lengths.mean(1 << 20)
        # (a sampled task's repeats share their prompt: its tokens are counted once, as before)
        out.append(evalcost.TaskLoad(t.eval_size * draws(t), prompts, t.sampling.max_tokens, stageable(t)))
    return out


@functools.lru_cache(maxsize=32)
def _measured(folder: str, task: str, params_json: str, stamp: int) -> Lengths:
    """tokenstats.measure, once per (tokenizer, task) in a process: a plan reads the learn task
    twice (training tokens, evaluation prompts), and encoding every example is most of its time."""
    from transformers import AutoTokenizer

    from cliffsweep.planner import tokenstats

    return tokenstats.measure(AutoTokenizer.from_pretrained(folder), task, json.loads(params_json))


@functools.lru_cache(maxsize=32)
def _stand_in(task: str, params_json: str, stamp: int) -> Lengths:
    """tokenstats.measure with the packaged stand-in tokenizer (a proxy), once per task in a process."""
    from cliffsweep.planner import tokenstats

    return tokenstats.measure_with_stand_in(task, json.loads(params_json))


def lengths_for(model_path: str, task: str, params: dict, notes: list[str]) -> Lengths:
    """Exact token lengths when the data and the model's tokenizer are local; local data with a hub
    model that is not here: measured with a stand-in tokenizer; else the packaged lengths, or a
    stated estimate where none are packaged (tokenstats.py). Every proxy is labelled in the plan's
    notes; only a local data file that does not exist is refused."""
    from cliffsweep.planner import tokenstats
    from cliffsweep.planner.archs import local_folder

    folder = local_folder(model_path)
    data_local = tokenstats.task_is_local(task, params)
    if folder is not None and data_local:
        path = params.get("path")
        stamp = os.stat(path).st_mtime_ns if isinstance(path, str) and os.path.exists(path) else 0  # edited data
        got = _measured(folder, task, json.dumps(params, sort_keys=True, default=str), stamp)
        notes.append(f"{task}: {got.n} training examples, exact lengths (the model's tokenizer, local data)")
        return got
    try:
        got = tokenstats.packaged(task, params)
    except tokenstats.UnknownLengths:
        absent = [params[k] for k in ("path", "eval_path") if isinstance(params.get(k), str)
                  and "://" not in params[k] and params[k].startswith(("/", ".", "~")) and not os.path.exists(params[k])]
        if absent:
            raise tokenstats.UnknownLengths(f"task {task!r}: {absent[0]}: no such file; point `path:` at the data "
                                            "on this machine") from None
        if data_local:  # what is missing is the model's tokenizer, not the data: a stand-in measures it
            path = params.get("path")
            stamp = os.stat(path).st_mtime_ns if isinstance(path, str) and os.path.exists(path) else 0
            got = _stand_in(task, json.dumps(params, sort_keys=True, default=str), stamp)
            notes.append(f"{task}: {got.n} training examples, lengths measured on the local data with a stand-in "
                         f"tokenizer, since {model_path!r} is not on this machine: {got.source}")
            return got
        got = tokenstats.estimated(task, params)
        notes.append(f"{task}: {got.source}")
        return got
    why = "hub model, offline" if folder is None else "data not local"
    notes.append(f"{task}: {got.n} training examples, lengths from the packaged proxy ({why}): {got.source}")
    return got
