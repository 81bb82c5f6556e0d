"""What one evaluation costs in seconds (issue 61 part 1): a fixed cost per checkpoint (its
weights into the running engine), a fixed cost per generation call (one stage), and a cost per
prompt token and per generated token, measured on vLLM and fitted by least squares.

    .venv/bin/python bench/bench_eval_cost.py [--model qwen2-tiny] [--reps 3] [--out FILE.json]

The engine is cliffsweep's own (evals/backends/vllm_backend.VLLMBackend, in process as CPU
evaluators run it); the prompts are random token ids of a fixed length and every request
generates exactly its `max_tokens` (EOS ignored), so the token counts are known. Calls of
n = 1..256 prompts x 1..64 generated tokens x 16..128 prompt tokens, fitted two ways by least
squares on relative residuals:

    planner/evalcost's model:  call_s + max(prompt tokens / prefill_tps + generated tokens / decode_tps,
                                            max_tokens x step_s)
    a straight line:           per_call + per_prompt_token x prompt tokens + per_generated_token x generated tokens

each printed with its median and worst relative residual, beside the checkpoint's load (from
storage, with its canary check: the median of --reps). `--out` writes the model's numbers as
cliffsweep/measured/'s eval-cost files hold them (planner/evalcost.cpu_cost reads the newest:
the replay benchmarks' `--device cpu` prices; the driver sets no stage floors from it, see
evalcost.stage_floors).
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

CALLS = [(n, gen, plen) for n in (1, 8, 32, 128, 256) for gen in (1, 16, 64) for plen in (16, 128)]
"""The toy models hold 256 positions: the longest prompt and its generation fit."""


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
    """The straight line: least squares of seconds on (1, prompt tokens, generated tokens), on
    relative residuals, nonnegative by clipping."""
    import numpy as np

    x = np.array([[1.0, n * plen, n * gen] for n, gen, plen, _ in rows])
    y = np.array([s for *_, s in rows])
    coef, *_ = np.linalg.lstsq(x / y[:, None], np.ones_like(y), rcond=None)
    coef = np.clip(coef, 0.0, None)
    pred = x @ coef
    return {"per_call_s": float(coef[0]), "per_prompt_token_s": float(coef[1]),
            "per_generated_token_s": float(coef[2]),
            "worst_relative_residual": float(np.max(np.abs(pred - y) / y)),
            "median_relative_residual": float(np.median(np.abs(pred - y) / y))}


def model_seconds(p, n, gen, plen):
    """planner/evalcost.call_seconds with p = (call_s, step_s, prefill_tps, decode_tps)."""
    import numpy as np

    call_s, step_s, prefill, decode = p
    return call_s + np.maximum(n * plen / prefill + n * gen / decode, gen * step_s)


def fit_model(rows: list[tuple[int, int, int, float]]) -> dict:
    """planner/evalcost's model, fitted in log space (every parameter positive) on relative residuals."""
    import numpy as np
    from scipy.optimize import least_squares

    n, gen, plen, y = (np.array(c, dtype=float) for c in zip(*rows))
    # the floor's max() has no gradient where it is not reached: started from several step_s
    fits = [least_squares(lambda q: model_seconds(np.exp(q), n, gen, plen) / y - 1,
                          np.log([max(y.min() / 2, 1e-4), step, 1e4, 1e3])) for step in (1e-4, 1e-3, 1e-2, 1e-1)]
    p = np.exp(min(fits, key=lambda f: f.cost).x)
    rel = np.abs(model_seconds(p, n, gen, plen) / y - 1)
    return {"call_s": float(p[0]), "step_s": float(p[1]), "prefill_tps": float(p[2]), "decode_tps": float(p[3]),
            "worst_relative_residual": float(rel.max()), "median_relative_residual": float(np.median(rel))}


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
    backend = VLLMBackend(base, max_model_len=256, kv_cache_mb=256)
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
    medians = [(n, gen, plen, statistics.median(s for m, g, p, s in rows if (m, g, p) == (n, gen, plen)))
               for n, gen, plen in CALLS]
    line, model = fit(medians), fit_model(medians)
    out = {"kind": "eval_cost", "device": f"cpu: {os.cpu_count()} cores, {platform.processor() or platform.machine()}",
           "engine": f"vllm {vllm.__version__} (in process)", "model": f"toy:{args.model} (random weights)",
           "date": time.strftime("%Y-%m-%d"), "checkpoint_bytes": ckpt_bytes,
           "load_from_storage_s": statistics.median(loads), **{k: v for k, v in model.items() if "residual" not in k},
           "model_residuals": {k: v for k, v in model.items() if "residual" in k}, "straight_line": line,
           "command": "python bench/bench_eval_cost.py " + " ".join(sys.argv[1:])}
    print(f"{args.model}: checkpoint {ckpt_bytes / 1e6:.1f} MB loaded from storage in {out['load_from_storage_s']:.3f} s "
          f"(median of {args.reps}, canary included)")
    print(f"evalcost's model: call {model['call_s'] * 1e3:.1f} ms, decode step (latency floor) {model['step_s'] * 1e3:.2f} ms, "
          f"prefill {model['prefill_tps']:,.0f} tokens/s, decode {model['decode_tps']:,.0f} tokens/s "
          f"(residuals: median {model['median_relative_residual']:.0%}, worst {model['worst_relative_residual']:.0%})")
    print(f"straight line: per call {line['per_call_s'] * 1e3:.1f} ms, per prompt token {line['per_prompt_token_s'] * 1e6:.2f} us, "
          f"per generated token {line['per_generated_token_s'] * 1e6:.1f} us "
          f"(residuals: median {line['median_relative_residual']:.0%}, worst {line['worst_relative_residual']:.0%})")
    p = (model["call_s"], model["step_s"], model["prefill_tps"], model["decode_tps"])
    for n, gen, plen, s in medians:
        lin = line["per_call_s"] + line["per_prompt_token_s"] * n * plen + line["per_generated_token_s"] * n * gen
        print(f"  n {n:4d}  gen {gen:3d}  prompt {plen:4d}: {s:8.3f} s measured, {float(model_seconds(p, n, gen, plen)):8.3f} s "
              f"the model, {lin:8.3f} s the line")
    if args.out:
        args.out.write_text(json.dumps(out, indent=1) + "\n")


if __name__ == "__main__":
    main()
