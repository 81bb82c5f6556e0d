"""What one evaluation costs in seconds (issue 61 part 1): a fixed cost per checkpoint (its
weights into the running engine), a fixed cost per generation call (one stage), and a cost per
prompt token and per generated token, measured on vLLM and fitted by least squares.

    .venv/bin/python bench/bench_eval_cost.py [--model qwen2-tiny] [--reps 3] [--out FILE.json]

The engine is cliffsweep's own (evals/backends/vllm_backend.VLLMBackend, in process as CPU
evaluators run it); the prompts are random token ids of a fixed length and every request
generates exactly its `max_tokens` (EOS ignored), so the token counts are known. Calls of
n = 1..256 prompts x 1..64 generated tokens x 32..256 prompt tokens; the fit

    seconds(call) = per_call + per_prompt_token x prompt tokens + per_generated_token x generated tokens

is printed with its worst relative residual, beside the checkpoint's load (from storage, with its
canary check: the median of --reps). `--out` writes the numbers as cliffsweep/measured/'s
eval-cost files hold them (`plan` prices evaluation from the file of the device it plans for).
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
sys.path.insert(0, str(Path(__file__).resolve().parent))

CALLS = [(n, gen, plen) for n in (1, 8, 32, 128, 256) for gen in (1, 16, 64) for plen in (32, 256)]


def timed_call(llm, n: int, gen: int, plen: int, vocab: int, seed: int) -> float:
    import numpy as np
    from vllm import SamplingParams
    from vllm.inputs import TokensPrompt

    rng = np.random.default_rng(seed)
    prompts = [TokensPrompt(prompt_token_ids=rng.integers(10, vocab - 10, plen).tolist()) for _ in range(n)]
    params = SamplingParams(temperature=0.0, max_tokens=gen, ignore_eos=True)
    t = time.perf_counter()
    outs = llm.generate(prompts, params, use_tqdm=False)
    took = time.perf_counter() - t
    assert all(len(o.outputs[0].token_ids) == gen for o in outs)
    return took


def fit(rows: list[tuple[int, int, int, float]]) -> dict:
    """Least squares of seconds on (1, prompt tokens, generated tokens), nonnegative by clipping."""
    import numpy as np

    x = np.array([[1.0, n * plen, n * gen] for n, gen, plen, _ in rows])
    y = np.array([s for *_, s in rows])
    coef, *_ = np.linalg.lstsq(x, y, rcond=None)
    coef = np.clip(coef, 0.0, None)
    pred = x @ coef
    return {"per_call_s": float(coef[0]), "per_prompt_token_s": float(coef[1]),
            "per_generated_token_s": float(coef[2]),
            "worst_relative_residual": float(np.max(np.abs(pred - y) / y)),
            "median_relative_residual": float(np.median(np.abs(pred - y) / y))}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--model", default="qwen2-tiny", help="a toy model's name (random weights of its shape)")
    ap.add_argument("--reps", type=int, default=3)
    ap.add_argument("--out", type=Path, help="write the numbers here (JSON)")
    args = ap.parse_args()
    os.environ.setdefault("VLLM_ENABLE_V1_MULTIPROCESSING", "0")  # in process, as CPU evaluators run it

    import vllm
    from bench_reload import make_checkpoint

    from cliffsweep.evals.backends.base import CheckpointRef
    from cliffsweep.evals.backends.vllm_backend import VLLMBackend
    from cliffsweep.toy.models import random_model

    tmp = Path(tempfile.mkdtemp(prefix="bench_eval_cost_"))
    base = random_model(args.model, str(tmp / "base"), seed=0)
    ckpt = make_checkpoint(base, str(tmp / "ckpt"))
    backend = VLLMBackend(base, max_model_len=512, kv_cache_mb=256)
    loads = []
    for _ in range(args.reps):
        backend.load(CheckpointRef(None))
        backend.load(CheckpointRef(ckpt))  # every timed load changes the weights
        loads.append(backend.last_load_seconds)
    ckpt_bytes = sum(f.stat().st_size for f in Path(ckpt).glob("*.safetensors"))
    vocab = backend.tokenizer.vocab_size
    timed_call(backend.llm, 8, 4, 32, vocab, seed=0)  # warm: the first call compiles
    rows = []
    for rep in range(args.reps):
        for n, gen, plen in CALLS:
            rows.append((n, gen, plen, timed_call(backend.llm, n, gen, plen, vocab, seed=rep)))
    backend.close()
    got = fit([(n, gen, plen, statistics.median(s for m, g, p, s in rows if (m, g, p) == (n, gen, plen)))
               for n, gen, plen in CALLS])
    out = {"kind": "eval_cost", "device": f"cpu: {os.cpu_count()} cores, {platform.processor() or platform.machine()}",
           "engine": f"vllm {vllm.__version__} (in process)", "model": f"toy:{args.model} (random weights)",
           "date": time.strftime("%Y-%m-%d"), "checkpoint_bytes": ckpt_bytes,
           "load_from_storage_s": statistics.median(loads), **got,
           "command": "python bench/bench_eval_cost.py " + " ".join(sys.argv[1:])}
    print(f"{args.model}: checkpoint {ckpt_bytes / 1e6:.1f} MB loaded from storage in {out['load_from_storage_s']:.3f} s "
          f"(median of {args.reps}, canary included)")
    print(f"per call {got['per_call_s'] * 1e3:.1f} ms, per prompt token {got['per_prompt_token_s'] * 1e6:.2f} us, "
          f"per generated token {got['per_generated_token_s'] * 1e6:.1f} us "
          f"(residuals: median {got['median_relative_residual']:.0%}, worst {got['worst_relative_residual']:.0%})")
    for n, gen, plen in CALLS:
        s = statistics.median(x for m, g, p, x in rows if (m, g, p) == (n, gen, plen))
        pred = got["per_call_s"] + got["per_prompt_token_s"] * n * plen + got["per_generated_token_s"] * n * gen
        print(f"  n {n:4d}  gen {gen:3d}  prompt {plen:4d}: {s:8.3f} s measured, {pred:8.3f} s fitted")
    if args.out:
        args.out.write_text(json.dumps(out, indent=1) + "\n")


if __name__ == "__main__":
    main()
