"""Every metric of GSM8K (both protocols) and ChemL3 for one model, through the real runner and
backend: what docs/evals.md quotes to compare the metrics with each other.

    PYTHONPATH=$PWD .venv/bin/python bench/eval_protocols.py MODEL_DIR --n-gsm8k 40 --n-chem 200
    PYTHONPATH=$PWD .venv/bin/python bench/eval_protocols.py MODEL_DIR --lengths   # prompt tokens only
    PYTHONPATH=$PWD .venv/bin/python bench/eval_protocols.py MODEL_DIR --only chem_l3 --n-chem 100

MODEL_DIR is an HF folder (e.g. the SmolLM2-135M-Instruct folder the real-model fixture builds).
Data: the real files the tests ship (tests/data, unpacked by tests/realdata.py). vLLM, engine in process, fp32 (CPU) unless --dtype says otherwise.
"""

from __future__ import annotations

import argparse
import os
import sys
import time
import warnings
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests"))
from realdata import folder as _real_data  # noqa: E402

DATA = _real_data()


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("model")
    ap.add_argument("--n-gsm8k", type=int, default=40)
    ap.add_argument("--n-chem", type=int, default=200)
    ap.add_argument("--dtype", default="float32")
    ap.add_argument("--kv-cache-mb", type=int, default=512)
    ap.add_argument("--lengths", action="store_true", help="print prompt lengths in tokens and exit")
    ap.add_argument("--only", choices=["gsm8k", "chem_l3"], help="evaluate one task only")
    args = ap.parse_args()
    if args.lengths:
        return lengths(args.model)
    os.environ.setdefault("VLLM_ENABLE_V1_MULTIPROCESSING", "0")

    from cliffsweep.evals.backends import build_backend
    from cliffsweep.evals.runner import evaluate_task
    from cliffsweep.evals.tasks import build_task

    warnings.simplefilter("ignore")
    tasks = [build_task("gsm8k", {"path": str(DATA / "gsm8k"), "n_eval": args.n_gsm8k, "protocol": p})
             for p in ("fewshot_chat", "zeroshot")]
    tasks.append(build_task("chem_l3", {"path": str(DATA / "sciknoweval-chem-l3"), "n_eval": args.n_chem}))
    tasks = [t for t in tasks if args.only in (None, t.name)]
    backend = build_backend("vllm", args.model, dtype=args.dtype, max_model_len=2048,
                            kv_cache_mb=args.kv_cache_mb, enforce_eager=True, enable_lora=False)
    for task in tasks:
        t0 = time.perf_counter()
        res = evaluate_task(backend, task)
        print(f"\n{task.name} [{task.scorer_version}] n={res.n} ({time.perf_counter() - t0:.0f} s)")
        print(f"  {'accuracy':34s} {res.accuracy:.3f}")
        for name, value in sorted(res.extra.items()):
            print(f"  {name:34s} {value:.3f}")
        if task.choice_letters:
            unread = sum(pred not in task.choice_letters for _, _, pred in res.samples)
            print(f"  {'replies with no letter read':34s} {unread / res.n:.3f}")
        for eid, ok, pred in res.samples[:3]:
            print(f"  e.g. {eid}: correct={ok} prediction={pred[:80]!r}")
    backend.close()


def lengths(model: str) -> None:
    """Prompt tokens of every GSM8K test question (both protocols) and ChemL3 test row: what
    max_model_len must hold, with the generation budget on top."""
    import statistics

    from transformers import AutoTokenizer

    from cliffsweep.evals.backends.base import prompt_ids
    from cliffsweep.evals.tasks import build_task

    warnings.simplefilter("ignore")
    tok = AutoTokenizer.from_pretrained(model)
    tasks = [build_task("gsm8k", {"path": str(DATA / "gsm8k"), "n_eval": 1319, "protocol": p})
             for p in ("fewshot_chat", "zeroshot")]
    tasks.append(build_task("chem_l3", {"path": str(DATA / "sciknoweval-chem-l3"), "n_eval": 420}))
    for task in tasks:
        n = sorted(len(prompt_ids(tok, ex.chat())) for ex in task.eval_examples())
        print(f"{task.scorer_version:24s} prompts {len(n)}: median {statistics.median(n):.0f}, "
              f"p99 {n[int(0.99 * len(n))]}, max {n[-1]} tokens; + max_tokens {task.sampling.max_tokens}")


if __name__ == "__main__":
    main()
