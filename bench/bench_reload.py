"""Evaluator weight reload (+ canary check) vs a full vLLM engine restart, for one checkpoint.

    .venv/bin/python bench/bench_reload.py [--model qwen2-tiny] [--reps 5] [--enforce-eager] [--in-process]

The checkpoint is the toy model's random weights plus noise, saved with its canary. "reload"
= VLLMBackend.load(): in-place weight reload, prefix-cache reset, canary check. "restart" =
close the engine, start a new one on the checkpoint folder, run the same canary check. Both
use the same engine settings. Results go to docs/evals.md.
"""

from __future__ import annotations

import argparse
import statistics
import tempfile
import time
from pathlib import Path


def make_checkpoint(base: str, out: str) -> str:
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    from cliffsweep.evals.canary import write_canary

    model = AutoModelForCausalLM.from_pretrained(base, dtype=torch.float32)
    gen = torch.Generator().manual_seed(1)
    with torch.no_grad():
        for p in model.parameters():
            p.add_(torch.randn(p.shape, generator=gen) * 0.1 * p.abs().mean())
    tok = AutoTokenizer.from_pretrained(base)
    model.save_pretrained(out)
    tok.save_pretrained(out)
    write_canary(model, tok, out)
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--model", default="qwen2-tiny")
    ap.add_argument("--reps", type=int, default=5)
    ap.add_argument("--enforce-eager", action="store_true", help="skip torch.compile in the engine")
    ap.add_argument("--in-process", action="store_true",
                    help="engine core in this process (VLLM_ENABLE_V1_MULTIPROCESSING=0), as CPU evaluators run it")
    args = ap.parse_args()
    if args.in_process:
        import os

        os.environ["VLLM_ENABLE_V1_MULTIPROCESSING"] = "0"

    from cliffsweep.evals.backends.base import CheckpointRef
    from cliffsweep.evals.backends.vllm_backend import VLLMBackend
    from cliffsweep.evals.canary import check_canary, read_canary
    from cliffsweep.toy.models import random_model

    tmp = Path(tempfile.mkdtemp(prefix="bench_reload_"))
    base = random_model(args.model, str(tmp / "base"), seed=0)
    ckpt = make_checkpoint(base, str(tmp / "ckpt"))
    opts = dict(max_model_len=256, kv_cache_mb=64, enforce_eager=args.enforce_eager)

    t = time.perf_counter()
    backend = VLLMBackend(base, **opts)
    first_start = time.perf_counter() - t

    reloads = []
    for _ in range(args.reps):
        # Alternate so that every timed load really changes the weights.
        backend.load(CheckpointRef(None))
        backend.load(CheckpointRef(ckpt))
        reloads.append(backend.last_load_seconds)

    t = time.perf_counter()
    backend.close()
    fresh = VLLMBackend(ckpt, **opts)
    expected = read_canary(ckpt)
    check_canary(expected, fresh.served_logprobs(expected.token_ids), fresh.canary_tolerance, "restart")
    restart = time.perf_counter() - t
    fresh.close()

    reload = statistics.median(reloads)
    print(f"model {args.model}, enforce_eager={args.enforce_eager}, in_process={args.in_process}, "
          f"first engine start {first_start:.1f} s")
    print(f"{'weight reload + canary (median of ' + str(args.reps) + ')':<42}{reload:10.3f} s")
    print(f"{'full engine restart + canary':<42}{restart:10.3f} s")
    print(f"{'ratio restart / reload':<42}{restart / reload:10.0f} x")


if __name__ == "__main__":
    main()
