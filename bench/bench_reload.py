"""Evaluator weight reload (+ canary check) vs a full vLLM engine restart, for one checkpoint;
and (--held) the checkpoint handed over in memory against the same checkpoint through a folder.

    .venv/bin/python bench/bench_reload.py [--model qwen2-tiny | --path smollm2:135m-instruct]
        [--reps 5] [--enforce-eager] [--in-process] [--held]

The checkpoint is the model's weights plus noise, saved with its canary. "reload"
= VLLMBackend.load(): in-place weight reload, prefix-cache reset, canary check. "restart" =
close the engine, start a new one on the checkpoint folder, run the same canary check. Both
use the same engine settings. Results go to docs/evals.md.

--held (issue 61 part 2), side by side in one run, alternating: the trainer's side, a folder
written (save_pretrained + canary, what the trial writes for evaluation today) against the
weights copied to host memory with their canary (`held_from_model`); the evaluator's side, the
folder reloaded against the held weights loaded (`CheckpointRef(held=...)`), each with its
canary check. Results go to docs/benchmarks.md.
"""

from __future__ import annotations

import argparse
import statistics
import tempfile
import time
from pathlib import Path


def perturbed(base: str):
    """(the base model plus noise, its tokenizer): a checkpoint's weights, live."""
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    model = AutoModelForCausalLM.from_pretrained(base, dtype=torch.float32)
    gen = torch.Generator().manual_seed(1)
    with torch.no_grad():
        for p in model.parameters():
            p.add_(torch.randn(p.shape, generator=gen) * 0.1 * p.abs().mean())
    return model, AutoTokenizer.from_pretrained(base)


def make_checkpoint(base: str, out: str, live=None) -> str:
    from cliffsweep.evals.canary import write_canary

    model, tok = live or perturbed(base)
    model.save_pretrained(out)
    tok.save_pretrained(out)
    write_canary(model, tok, out)
    return out


def held_vs_folder(backend, base: str, tmp: Path, reps: int) -> None:
    """The hand-off in memory against the folder, alternating, medians of `reps`."""
    import shutil

    from cliffsweep.evals.backends.base import CheckpointRef
    from cliffsweep.evals.backends.held import held_from_model
    from cliffsweep.trainables.checkpoints import folder_bytes

    live = perturbed(base)
    times: dict[str, list[float]] = {k: [] for k in ("write folder", "hold in memory", "load folder", "load held")}
    for i in range(reps):
        out = str(tmp / f"ckpt-{i}")
        t = time.perf_counter()
        make_checkpoint(base, out, live)
        times["write folder"].append(time.perf_counter() - t)
        t = time.perf_counter()
        held = held_from_model(*live)
        times["hold in memory"].append(time.perf_counter() - t)
        for name, ref in (("load folder", CheckpointRef(out)), ("load held", CheckpointRef(None, held=held))):
            backend.load(CheckpointRef(None))  # every timed load changes the weights
            backend.load(ref)
            times[name].append(backend.last_load_seconds)
        size = folder_bytes(out)
        shutil.rmtree(out)
    print(f"checkpoint folder {size / 2**20:.1f} MiB; medians of {reps}, alternating")
    for name, xs in times.items():
        print(f"{name:<42}{statistics.median(xs):10.3f} s")
    trainer = statistics.median(times["write folder"]) / statistics.median(times["hold in memory"])
    engine = statistics.median(times["load folder"]) / statistics.median(times["load held"])
    print(f"{'ratio folder / memory, trainer side':<42}{trainer:10.1f} x")
    print(f"{'ratio folder / memory, engine side':<42}{engine:10.1f} x")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--model", default="qwen2-tiny", help="a toy model, with random weights")
    ap.add_argument("--path", help="a model path instead (smollm2:135m-instruct, a folder)")
    ap.add_argument("--held", action="store_true", help="the hand-off in memory against the folder")
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
    if args.path:
        from cliffsweep.models import resolve_model

        base = resolve_model(args.path)
    else:
        base = random_model(args.model, str(tmp / "base"), seed=0)
    opts = dict(max_model_len=256, kv_cache_mb=64, enforce_eager=args.enforce_eager)

    t = time.perf_counter()
    backend = VLLMBackend(base, **opts)
    first_start = time.perf_counter() - t
    if args.held:
        print(f"model {args.path or args.model}, enforce_eager={args.enforce_eager}, in_process={args.in_process}")
        held_vs_folder(backend, base, tmp, args.reps)
        backend.close()
        return
    ckpt = make_checkpoint(base, str(tmp / "ckpt"))

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
