"""An evaluator's GPU memory cap applied to its engine (sweep/gpushare.py, issue 39 part 1).

hf: the model lives in the evaluator's own process, so the process caps its caching allocator
(torch.cuda.set_per_process_memory_fraction) and empties its cache after each evaluation, so
that what one checkpoint's peak took goes back to the processes beside it. vLLM: the engine may
run in processes of its own, and it sizes its KV cache from `gpu_memory_utilization` (what the
cap leaves after the weights), so the cap goes there, in place of a fixed KV-cache size; and
vLLM engines sharing a GPU start one at a time (`one_engine_start_per_gpu`), since each reads
the GPU's free memory to size its KV cache.
"""

from __future__ import annotations

import os
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from cliffsweep.sweep.gpushare import GpuShare


def device_total_gb() -> float:
    """This process's CUDA device's memory in GiB (0.0 without CUDA)."""
    import torch

    if not torch.cuda.is_available():
        return 0.0
    return torch.cuda.get_device_properties(torch.cuda.current_device()).total_memory / 2**30


def device_fraction(share: GpuShare) -> float | None:
    """The share of this process's CUDA device it may use; None: no CUDA, or no cap."""
    total = device_total_gb()
    return share.fraction(total) if total > 0 else None


def capped_options(backend: str, options: dict[str, Any], share: GpuShare) -> dict[str, Any]:
    """`options` of `backend` with the evaluator's cap applied (hf: to this process now)."""
    frac = device_fraction(share)
    if frac is None:
        return options
    if backend == "vllm":
        return dict(options, gpu_memory_utilization=frac)
    import torch

    torch.cuda.set_per_process_memory_fraction(frac, torch.cuda.current_device())
    return options


def release_cached() -> None:
    """What the last evaluation's peak left in the caching allocator goes back to the GPU."""
    import torch

    if torch.cuda.is_available():
        torch.cuda.empty_cache()


@contextmanager
def one_engine_start_per_gpu(needed: bool) -> Iterator[None]:
    """While the block runs, no other process of this machine inside the same block for the same
    GPUs (CUDA_VISIBLE_DEVICES, which Ray sets to the physical ones) runs it: an exclusive
    `flock` on a file per GPU set in the temporary folder, released when the block ends or the
    process dies. `needed` False: no lock."""
    if not needed:
        yield
        return
    import fcntl

    gpus = os.environ.get("CUDA_VISIBLE_DEVICES", "all").replace(",", "-") or "none"
    with open(Path(tempfile.gettempdir()) / f"cliffsweep-engine-start-gpu-{gpus}.lock", "a") as f:
        fcntl.flock(f, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(f, fcntl.LOCK_UN)
