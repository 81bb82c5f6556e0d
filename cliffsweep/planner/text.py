"""`cliffsweep plan`'s text: the tables of a sweep's budget and whole bill (plan.py computes them,
bill.py prices what is beyond training), its memory per GPU, and the assumptions behind them."""

from __future__ import annotations

from typing import Any

from cliffsweep.planner import bill
from cliffsweep.planner.costs import Batching, precision
from cliffsweep.planner.mfu import GB, GPUS, gpu_hours, measured_rows
from cliffsweep.planner.packing import packing_text
from cliffsweep.planner.plan import ModelPlan, plan_spec, recipe_extras
from cliffsweep.sweep.sources import lines as source_lines


def _si(x: float, unit: str = "") -> str:
    for div, suffix in ((1e18, "E"), (1e15, "P"), (1e12, "T"), (1e9, "G"), (1e6, "M"), (1e3, "k")):
        if abs(x) >= div:
            return f"{x / div:.3g}{suffix}{unit}"
    return f"{x:.3g}{unit}"


def _row(cells: list[str], widths: list[int]) -> str:
    return "  ".join(c.ljust(w) if i == 0 else c.rjust(w) for i, (c, w) in enumerate(zip(cells, widths)))


def _table(header: list[str], rows: list[list[str]]) -> list[str]:
    widths = [max(len(r[i]) for r in [header, *rows]) for i in range(len(header))]
    return [_row(header, widths), *(_row(r, widths) for r in rows)]


def budget_rows(plans: list[ModelPlan]) -> tuple[list[str], list[list[str]]]:
    header = ["model", "params", "trials", "train tokens", "FLOPs", "MFU", *(f"{g.name} h" for g in GPUS),
              "generations", "gen tokens <=", "ckpt written", "ckpt kept"]

    def cells(name: str, params: str, ps: list[ModelPlan]) -> list[str]:
        flops = sum(p.flops for p in ps)
        mfu = f"{ps[0].mfu:.0%}" if len(ps) == 1 else ""
        return [name, params, f"{sum(p.trials for p in ps):,}", _si(sum(p.tokens for p in ps)), _si(flops), mfu,
                *(f"{sum(gpu_hours(p.flops, g, p.mfu) for p in ps):,.1f}" for g in GPUS),
                f"{sum(p.generations for p in ps):,}",
                _si(sum(p.gen_tokens for p in ps)), _si(sum(p.ckpt_written for p in ps), "B"),
                _si(sum(p.ckpt_kept for p in ps), "B")]

    rows = [cells(p.name, _si(p.arch.params), [p]) for p in plans]
    rows.append(cells("total", "", plans))
    return header, rows


def bill_rows(plans: list[ModelPlan]) -> tuple[list[str], list[list[str]]]:
    """The whole bill in H100-hours: training (as priced above), evaluation, GPUs waiting on
    checkpoints, per-point setup; and training's share of it."""
    adaptive = any(p.adaptive for p in plans)
    # beside what the sweep runs, what the other choice of eval.adaptive would cost (issue 51)
    header = ["model", "train h", "eval h", "eval h, every item" if adaptive else "eval h, adaptive", "ckpt wait h",
              "setup h", "total h", "train share", "ckpt written", "prompt tokens"]

    def cells(name: str, ps: list[ModelPlan]) -> list[str]:
        train, ev, ck, su = (sum(p.hours()[part] for p in ps) for part in ("train", "eval", "ckpt wait", "setup"))
        other = sum(p.eval_s if p.adaptive else p.eval_rule_s for p in ps) / 3600
        total = train + ev + ck + su
        return [name, f"{train:,.2f}", f"{ev:,.2f}", f"{other:,.2f}", f"{ck:,.2f}", f"{su:,.2f}", f"{total:,.2f}",
                f"{train / total:.0%}" if total else "-", _si(sum(p.ckpt_written for p in ps), "B"),
                _si(sum(p.prompt_tokens for p in ps))]

    return header, [*(cells(p.name, [p]) for p in plans), cells("total", plans)]


def memory_rows(plans: list[ModelPlan]) -> tuple[list[str], list[list[str]]]:
    series = list(dict.fromkeys(s for p in plans for s in p.memory))
    header = ["model", *series]
    rows = [[p.name, *(f"{p.memory[s].total / GB:.1f}" if s in p.memory else "-" for s in series)] for p in plans]
    return header, rows


def stats_memory_rows(plans: list[ModelPlan]) -> tuple[list[str], list[list[str]]]:
    series = list(dict.fromkeys(s for p in plans for s in p.stats_memory))
    header = ["model", *series]
    rows = [[p.name, *(f"{p.stats_memory[s].total / GB:.1f} / {p.memory[s].total / GB:.1f}"
                       if s in p.stats_memory else "-" for s in series)] for p in plans]
    return header, rows


def headline(plans: list[ModelPlan], what: str) -> str:
    """The bill in one sentence, first (issue 63 part 7): H100-hours in all, and the stopping
    rule's saving said in words, not left to two columns."""
    hours = {part: sum(p.hours()[part] for p in plans) for part in ("train", "eval", "ckpt wait", "setup")}
    total = sum(hours.values())
    adaptive = any(p.adaptive for p in plans)
    other = sum(p.eval_s if p.adaptive else p.eval_rule_s for p in plans) / 3600
    saved = other - hours["eval"]
    verb = f"saves {saved:,.1f}" if saved >= 0 else f"costs {-saved:,.1f} more: its stages' calls outweigh the items"
    rule = (f"evaluation {hours['eval']:,.1f} under the stopping rule (every item scored: {other:,.1f}, so the rule "
            f"{verb})" if adaptive else
            f"evaluation {hours['eval']:,.1f} with every item scored (the stopping rule, eval.adaptive, would make it "
            f"{other:,.1f})")
    return (f"{what}: {sum(p.trials for p in plans):,} trials, {total:,.1f} H100-hours in all: training "
            f"{hours['train']:,.1f}, {rule}, checkpoint waits {hours['ckpt wait']:,.1f}, setup {hours['setup']:,.1f}.")


def _same_peak_note() -> list[str]:
    """Why two GPU columns read the same (issue 63: H100-SXM and H200 with no word why)."""
    peaks: dict[float, list[str]] = {}
    for g in GPUS:
        peaks.setdefault(g.bf16_tflops, []).append(g.name)
    return [f"({' and '.join(names)} read the same: the same dense bf16 peak, {peak:g} TFLOP/s; this FLOPs-bound "
            "estimate does not see memory size or bandwidth)" for peak, names in peaks.items() if len(names) > 1]


def render(plans: list[ModelPlan], spec, source: str, bandwidth: float = bill.BANDWIDTH) -> str:
    r, res = spec.recipe, spec.resources
    micro, grad_ckpt = recipe_extras(r)
    b = Batching.of(r.batch_size, res.workers_per_trial, micro)
    gpu = f"{res.gpus_per_worker:g} GPU" if res.gpus_per_worker else f"{res.cpus_per_worker:g} CPU"
    out = [headline(plans, source), "",
           f"== {source} (sweep {spec.name!r}): {sum(p.trials for p in plans):,} trials, "
           f"{len(plans)} model(s); {res.workers_per_trial} worker(s) x {gpu} per trial, strategy {res.strategy}",
           f"   batch {r.batch_size} = {b.workers} worker(s) x {b.micro_per_worker} micro-batch(es) of "
           f"{b.micro_rows} row(s), max_seq_len {r.max_seq_len}, gradient checkpointing "
           f"{'on' if grad_ckpt else 'off'}; eval: {spec.eval.points_per_trial} point(s) per trial + base"]
    out += ["", *_table(*budget_rows(plans))]
    out += ["MFU per model: " + "; ".join(f"{p.name} {p.mfu:.1%} ({p.mfu_source})" for p in plans), *_same_peak_note()]
    out += ["", f"The whole bill, H100-hours (checkpoints at {bandwidth / 1e9:g} GB/s to storage, "
                f"resume_every_s {spec.resume_every_s:g}, "
                f"{'asynchronous' if spec.async_checkpoints else 'synchronous'} writes; evaluation at "
                f"{'; '.join(dict.fromkeys(p.eval_source for p in plans))}):", *_table(*bill_rows(plans))]
    dtypes = sorted({m.dtype for m in spec.models})
    precs = "; ".join(f"{d}: {precision(d, res.gpus_per_worker > 0, spec.recipe.master_weights).label}" for d in dtypes)
    out += ["", f"Peak memory per training GPU, GB ({precs}; micro-batch {b.micro_rows} x {r.max_seq_len} tokens):",
            *_table(*memory_rows(plans))]
    if any(p.stats_memory for p in plans):
        out += ["", "Peak memory of the once-per-model statistics (one GPU, the recipe's micro-batches), GB, "
                    "beside training's (stats / train):", *_table(*stats_memory_rows(plans))]
    running = max((p.ckpt_running for p in plans), default=0.0)
    out += ["", f"Checkpoints: keep_checkpoints {spec.keep_checkpoints}; the largest running trial holds "
                f"{_si(running, 'B')} until it is done (times the trials running at once)"]
    over = [(p.name, s, m.total / GB) for p in plans for s, m in p.memory.items() if m.total > 80 * GB]
    if over:
        out.append("   over 80 GB (A100/H100): " + ", ".join(f"{n} {s} {gb:.0f}" for n, s, gb in over))
    out += verification_lines(plans, spec)
    notes = list(dict.fromkeys(n for p in plans for n in p.notes))
    out += ["", "Token lengths:", *(f"   {n}" for n in notes)]
    out += ["Architectures:", *(f"   {p.name}: {p.arch.source}" for p in plans)]
    out += ["", *source_lines(spec)]  # the settings, after the costs they set (issue 63 part 7)
    return "\n".join(out)


def verification_lines(plans: list[ModelPlan], spec) -> list[str]:
    """What `verify:` adds (issue 52): verify.seeds runs at the two lrs of each verified series,
    priced at each model's mean trial; at most (every series verified) and expected (at
    bill.VERIFIED_SHARE of series)."""
    if spec.verify is None:
        return []
    from collections import Counter

    from cliffsweep.sweep.grid import expand_grid, series_key

    series = Counter(key[0] for key in {series_key(t) for t in expand_grid(spec)})
    per = 2 * spec.verify.seeds
    most = per * sum(series.values())
    hours = sum(series[p.name] * per * sum(p.hours().values()) / max(p.trials, 1) for p in plans)
    share = bill.VERIFIED_SHARE
    return ["", f"Verification (verify: {spec.verify.seeds} new seed(s) at the 2 lrs of each cliff or close call): "
                f"expected {most * share:.0f} more trials, {hours * share:.1f} H100-hours (bill.VERIFIED_SHARE = "
                f"{share:.0%} of series); at most {most} trials, {hours:.1f} H100-hours, if every series is verified "
                "(each at its model's mean trial)"]


ASSUMPTIONS = """Assumptions (cliffsweep/planner/costs.py):
   FLOPs = 6 N D: N = matmul parameters (all but the input embedding), D = token positions incl.
   padding; +2 N D for kl/iw (frozen base forward) and for activation checkpointing, -2 N D for
   lora (no weight gradients of frozen weights); attention scores and eval FLOPs not counted.
   GPU-hours = FLOPs / (MFU x dense bf16 peak: A100 312, H100/H200 989 TFLOP/s); MFU per model:
   the measurement nearest its size on its precision path (mfu.MEASURED_MFU, GPU checks filed in
   cliffsweep/measured/ or given with --measured; a path not measured yet borrows
   mfu.FALLBACK_PATH's rows, a lower bound), or --mfu.
   Generated tokens: an upper bound (n_eval x max_tokens; generation stops earlier at a stop).
   Checkpoints: exported weights at every eval point (+ train_state.pt: weights, optimizer and
   method state, only where resume_every_s of training has passed, the two latest kept; none
   under fsdp); waits priced by bill.blocked_seconds at --bandwidth. Evaluation: prompt tokens
   (n_eval x (1 + shots) x the task's mean example length) and generated tokens at the vLLM
   throughput of bill.EVAL_THROUGHPUT (assumed until measured on a GPU), priced in seconds
   (planner/evalcost.py, issue 61): each checkpoint's export read at --bandwidth and loaded into
   the running engine, each generation call's fixed part, and no call faster than its decode
   steps (max_tokens x a step's latency: a small batch leaves the GPU idle); under eval.adaptive
   (the stopping rule, issue 51) a task scored in stages costs the rule's own ITEMS share of its
   items in its CALLS calls (both replayed on paper-sized stores, top-ups included; the base in
   full), the other column of the bill shows the other choice. Setup: per point, the
   measured fixed part (bill.SETUP_FIXED_S) + the base model read at --bandwidth. "ckpt kept" = after each trial is done,
   under keep_checkpoints (final: the final export only); a running trial holds more ("largest
   running trial" below, times the trials that run at once). Memory: no CUDA context/fragmentation."""


def plan_text(specs: list[tuple[str, Any]], mfu: float | None = None, bandwidth: float = bill.BANDWIDTH,
              measured: tuple[str, ...] = (), gpu: str | None = None) -> str:
    """The plan of one or more validated sweep files, (path, spec) each (several: the parts of one
    study, e.g. the paper grid split by resources), with a grand total when there are several.
    `measured`: GPU checks' JSON files (bench/gpu_check.sh) whose MFU rows join the built-in and
    filed ones. `gpu`: the GPU type the packing table prices (None: resources.gpu)."""
    rows = measured_rows(tuple(measured))
    parts, everything = [], []
    for path, spec in specs:
        plans = plan_spec(spec, bandwidth, rows)
        if mfu is not None:  # the user's figure for every model
            for p in plans:
                p.mfu, p.mfu_source = mfu, "--mfu"
        everything += plans
        parts.append("\n".join([render(plans, spec, path, bandwidth), *packing_text(spec, gpu)]))
    if len(specs) > 1:
        header, rows = budget_rows(everything)
        bill_header, bill_total = bill_rows(everything)
        parts.insert(0, headline(everything, f"All {len(specs)} files"))
        parts.append("== all files\n" + "\n".join(_table(header, rows[-1:])) + "\n\n"
                     + "\n".join(_table(bill_header, bill_total[-1:])))
    return "\n\n".join(parts) + "\n\n" + ASSUMPTIONS
