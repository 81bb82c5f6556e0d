"""What a sweep costs beyond its training FLOPs (issue 21 part 4): evaluation, checkpoints and
per-job setup, priced per trial as pure functions that `plan` sums (and that a schedule
simulation can call per piece of work).

- **Evaluation**: prompt tokens (prefill) and generated tokens (decode) of every evaluation,
  at a vLLM throughput per model size (`EVAL_THROUGHPUT`; every row says where it comes from).
- **Checkpoints**: bytes each trial writes under its spec (exports at every evaluation point;
  the training state only where `resume_every_s` of training time has passed, `state_points`),
  and the seconds the training loop waits on them at a storage bandwidth (`blocked_seconds`:
  synchronous writes block for the whole write; asynchronous ones for the host copy, plus
  whatever the writer has not finished when the next checkpoint or the end comes).
- **Setup**: per point, its base model read from storage at that bandwidth plus the measured
  fixed part (Train job start-up is paid once per job: docs/benchmarks.md).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from cliffsweep.storage.ledger import saves_state


@dataclass(frozen=True)
class EvalThroughput:
    params: float
    prefill_tps: float
    """Prompt tokens per second per GPU (batched)."""
    decode_tps: float
    """Generated tokens per second per GPU at a large batch."""
    source: str


EVAL_THROUGHPUT: tuple[EvalThroughput, ...] = (
    # Assumed, not measured here (no GPU run of vLLM yet: docs/gpu.md): orders of magnitude from
    # vLLM's published H100 serving benchmarks, decode at batch ~256, bf16.
    EvalThroughput(0.5e9, 60_000, 20_000, "assumed (H100, vLLM, bf16): not measured"),
    EvalThroughput(1.5e9, 40_000, 12_000, "assumed (H100, vLLM, bf16): not measured"),
    EvalThroughput(3.0e9, 25_000, 8_000, "assumed (H100, vLLM, bf16): not measured"),
    EvalThroughput(8.0e9, 12_000, 4_000, "assumed (H100, vLLM, bf16): not measured"),
)


def eval_throughput(params: float) -> EvalThroughput:
    """The row nearest `params` (log scale)."""
    return min(EVAL_THROUGHPUT, key=lambda r: abs(math.log(r.params / params)))


def eval_seconds(prompt_tokens: float, gen_tokens: float, tp: EvalThroughput) -> float:
    return prompt_tokens / tp.prefill_tps + gen_tokens / tp.decode_tps


BANDWIDTH = 1e9
"""Bytes per second to checkpoint storage (object storage from one node), `--bandwidth`."""
HOST_COPY = 10e9
"""Bytes per second of the snapshot into host memory (device-to-host copy, pageable memory)."""
SETUP_FIXED_S = 5.1
"""Measured per trial (default toy sweep, 2-core CPU, 2026-11-25): Train job start-up shared by
its points, imports, data; the model's read from storage is added per point."""


def state_points(points: int, train_s: float, resume_every_s: float) -> list[bool]:
    """For each of a trial's `points` evenly spaced checkpoints (the last at the end of
    `train_s` seconds of training): whether it also saves the training state (the trainer's rule,
    storage/ledger.py saves_state)."""
    out, last = [], 0.0
    for k in range(1, points + 1):
        t = train_s * k / points
        due = saves_state(t, last, resume_every_s)
        out.append(due)
        if due:
            last = t
    return out


def blocked_seconds(train_s: float, sizes: list[float], bandwidth: float, asynchronous: bool,
                    host_copy: float = HOST_COPY) -> float:
    """Seconds the training loop waits on a trial's checkpoints: `sizes` bytes each, evenly
    spaced over `train_s` seconds of training (the last at the end). Synchronous: every write in
    full. Asynchronous (trainables/checkpoints.py): each snapshot's host copy, plus waiting
    whenever one snapshot is already queued behind the one being written, plus the writes still
    running at the end (the trial reports its end after them)."""
    if not sizes:
        return 0.0
    if not asynchronous:
        return sum(s / bandwidth for s in sizes)
    gap = train_s / len(sizes)
    clock, blocked = 0.0, 0.0
    writer_free = 0.0  # when the writer finishes what it has
    queued_done: list[float] = []  # finish time of each accepted snapshot
    for s in sizes:
        clock += gap
        copy = s / host_copy  # the snapshot, then the hand-over
        clock += copy
        blocked += copy
        # with one snapshot already waiting behind the one being written, the hand-over waits
        # until the writer takes that one (it finishes the one before)
        if len(queued_done) >= 2 and queued_done[-2] > clock:
            blocked += queued_done[-2] - clock
            clock = queued_done[-2]
        start = max(clock, writer_free)
        writer_free = start + s / bandwidth
        queued_done.append(writer_free)
    blocked += max(0.0, writer_free - clock)  # drain before the end report
    return blocked


@dataclass(frozen=True)
class CheckpointBill:
    written: float
    """Bytes written."""
    blocked_s: float
    """Seconds of training-loop time lost to them."""


def checkpoint_bill(points: int, train_s: float, export: float, train_state: float, resume_every_s: float,
                    bandwidth: float = BANDWIDTH, asynchronous: bool = True) -> CheckpointBill:
    """One trial's checkpoints: exports at every point, the training state where due."""
    sizes = [export + (train_state if due else 0.0) for due in state_points(points, train_s, resume_every_s)]
    return CheckpointBill(sum(sizes), blocked_seconds(train_s, sizes, bandwidth, asynchronous))


@dataclass(frozen=True)
class TrialCost:
    """One grid point's pieces of work, priced (plan.plan_spec), for a schedule simulation
    (cliffsweep/simulate): seconds of wall time at the H100's pace."""

    trial_id: str
    model: str
    gpus: float
    """GPUs the point's Train job holds (workers x GPUs per worker)."""
    setup_s: float
    train_s: float
    """Training on its GPUs."""
    blocked_s: float
    """Training-loop time lost to its checkpoints (`blocked_seconds`)."""
    checkpoints: int
    eval_s: float
    """One evaluation of one checkpoint (every task) on one GPU (`eval_seconds`)."""
    stats_key: str | None
    """The once-per-model statistics it needs (None: none)."""



VERIFIED_SHARE = 0.5
"""The share of series a `verify:` section trains again (cliffs and close calls; issue 52), for
`plan`'s expected bill. Our assumption, until a real grid measures it: the default toy sweep's
(2 of its 4 series are cliffs, none a close call; tests/test_toy_regimes.py)."""

ENGINE_START_S = 60.0
"""An evaluator's engine start on a GPU (vLLM: weights load, CUDA graphs). Assumed, not measured
on a GPU (on this 2-core CPU: 3 s in process for a toy model, docs/evals.md)."""


def setup_seconds(model_bytes: float, bandwidth: float = BANDWIDTH) -> float:
    """One point's setup: the fixed part measured on the toy sweep, plus its base model read."""
    return SETUP_FIXED_S + model_bytes / bandwidth
