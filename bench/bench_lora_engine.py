"""Generation on a vLLM engine started with LoRA against one started without it, serving the same
weights with no adapter active: what a CPU evaluator pays for `enable_lora` (session 10).

    .venv/bin/python bench/bench_lora_engine.py [--model llama-tiny] [--items 400] [--pairs 2]

Each side runs in a process of its own (one in-process engine each, as CPU evaluators run it:
VLLM_ENABLE_V1_MULTIPROCESSING=0, eager), the two alternating `--pairs` times: the packaged toy
model, `--items` toy_arith eval prompts in one greedy call at the task's own max_tokens, after a
warm-up call of 16. Printed: each side's wall and CPU seconds for the call (medians), the ratio,
and whether both sides generated the same text. Why it matters: orchestrator/pool.engine_options
starts CPU engines without LoRA and merges adapters into the weights instead
(evals/backends/held.merged_adapter). Results go to docs/benchmarks.md.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import statistics
import subprocess
import sys
import time


def one_side(model: str, items: int, lora: bool) -> dict:
    """In this process: start the engine, warm it up, time one call of `items` prompts."""
    os.environ["VLLM_ENABLE_V1_MULTIPROCESSING"] = "0"
    from cliffsweep.evals.backends.vllm_backend import VLLMBackend
    from cliffsweep.evals.tasks import build_task
    from cliffsweep.models import resolve_model

    backend = VLLMBackend(resolve_model(f"toy:{model}"), kv_cache_mb=32, max_model_len=256, enforce_eager=True,
                          enable_lora=lora)
    task = build_task("toy_arith", {"n_eval": items})
    prompts = [e.prompt for e in task.eval_examples()]
    backend.generate(prompts[:16], task.sampling)
    wall, cpu = time.perf_counter(), time.process_time()
    out = backend.generate(prompts, task.sampling)
    return {"wall_s": time.perf_counter() - wall, "cpu_s": time.process_time() - cpu,
            "text": hashlib.sha1("\x00".join(out).encode()).hexdigest()}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--model", default="llama-tiny")
    ap.add_argument("--items", type=int, default=400)
    ap.add_argument("--pairs", type=int, default=2)
    ap.add_argument("--side", choices=["lora", "plain"], help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.side:
        print("RESULT " + json.dumps(one_side(args.model, args.items, args.side == "lora")))
        return
    runs: dict[str, list[dict]] = {"lora": [], "plain": []}
    for _ in range(args.pairs):
        for side in runs:
            proc = subprocess.run([sys.executable, __file__, "--model", args.model, "--items", str(args.items),
                                   "--side", side], capture_output=True, text=True, check=True)
            line = next(x for x in proc.stdout.splitlines() if x.startswith("RESULT "))
            runs[side].append(json.loads(line.removeprefix("RESULT ")))
    med = {side: {k: statistics.median(r[k] for r in rs) for k in ("wall_s", "cpu_s")} for side, rs in runs.items()}
    print(f"model {args.model}, {args.items} toy_arith prompts in one call, medians of {args.pairs}, alternating")
    for side, m in med.items():
        print(f"{'engine with LoRA (no adapter active)' if side == 'lora' else 'engine without LoRA':<40}"
              f"{m['wall_s']:8.2f} s wall {m['cpu_s']:8.2f} s CPU")
    print(f"{'ratio with / without':<40}{med['lora']['wall_s'] / med['plain']['wall_s']:8.2f} x wall "
          f"{med['lora']['cpu_s'] / med['plain']['cpu_s']:8.2f} x CPU")
    same = len({r["text"] for rs in runs.values() for r in rs}) == 1
    print(f"same text on both sides: {same}")


if __name__ == "__main__":
    main()
