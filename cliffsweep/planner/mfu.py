"""Model FLOPs utilisation: the GPUs `plan` prices, and the MFU measured per model size and
precision path (built-in rows, every GPU check filed in cliffsweep/measured/, `--measured` files),
from which the training GPU-hours follow. Pure apart from reading those files."""

from __future__ import annotations

import json
import math
from dataclasses import dataclass
from pathlib import Path

GB = 1e9


@dataclass(frozen=True)
class GPU:
    name: str
    bf16_tflops: float
    """Dense bf16 tensor-core peak (no sparsity), NVIDIA datasheets."""
    memory_gb: float


GPUS: tuple[GPU, ...] = (GPU("A100-80GB", 312.0, 80.0), GPU("H100-SXM", 989.0, 80.0), GPU("H200", 989.0, 141.0))
DEFAULT_MFU = 0.35
"""The MFU assumed where nothing is measured for a model's training path (no GPU, --mfu)."""


@dataclass(frozen=True)
class MeasuredMFU:
    params: float
    path: str
    """The precision path (`compute_path`): "autocast" (fp32 weights + bf16 autocast), "fsdp_bf16"
    (fp32 weights, FSDP2 bf16 compute), "bf16_master" (bf16 weights, fp32 masters), "bf16"."""
    mfu: float
    source: str
    kernels: str = "none"
    compile: bool = False


MEASURED_MFU: tuple[MeasuredMFU, ...] = (
    # H100 80 GB, one GPU, seq 1024, the project's SFT loss, 6N FLOPs per token: issue 15 (2026-11-24)
    MeasuredMFU(0.49e9, "autocast", 0.124, "Qwen2.5-0.5B, H100, micro 16"),
    MeasuredMFU(1.54e9, "autocast", 0.204, "Qwen2.5-1.5B, H100, micro 8"),
    MeasuredMFU(8.03e9, "bf16", 0.422, "Llama-3.1-8B pure bf16 + checkpointing, H100, micro 4"),
)
"""Measured MFU per model size and precision path, built in (issue 15's bench/bench_gpu.py runs).
`plan` adds the rows of every GPU check (bench/gpu_check.sh's gpu_check.json) in
cliffsweep/measured/ and those given with --measured, and takes the measurement of the nearest
size (log scale) on the model's path, preferring the recipe's kernels."""

FALLBACK_PATH = {"fsdp_bf16": "autocast", "bf16_master": "bf16"}
"""Where nothing is measured on a path yet, the path whose rows stand in (and the plan says so):
fsdp_bf16 does the work of autocast with fewer casts, bf16 masters that of pure bf16 plus an fp32
optimizer step, so the stand-ins are lower bounds of their MFU."""
MEASURED_DIR = Path(__file__).resolve().parents[1] / "measured"


def compute_path(dtype: str, precision: str = "auto", master_weights: bool = True) -> str:
    """The precision path a model of `dtype` trains on a GPU under recipe.precision: what
    trainables/fastpath.resolve decides for a shard-safe method (the common case), a bf16/fp16
    model's path named by its master weights."""
    from cliffsweep.trainables.fastpath import resolve

    path = resolve(precision, "none", False, "cuda", dtype, True).precision
    if path == "weights":
        return "bf16_master" if master_weights else "bf16"
    return path


def gpu_check_rows(path: str | Path) -> list[MeasuredMFU]:
    """The training rows of a GPU check's JSON (bench/gpu_check.sh: gpu_check.json, or one stage's
    file) that measured an MFU."""
    data = json.loads(Path(path).read_text())
    stages = [data] if "rows" in data else [v for v in data.values() if isinstance(v, dict) and "rows" in v]
    out = []
    for row in (r for s in stages for r in s["rows"]):
        if row.get("mfu") is None or "recipe" not in row:
            continue
        name = row["model"].split("/")[-1].removesuffix("-Instruct")
        out.append(MeasuredMFU(row["params"], row["path"], row["mfu"],
                               f"{name} {row['recipe']}, {row['gpu']}, {row['date']}, micro {row['micro']}",
                               row["kernels"], row["compile"]))
    return out


def measured_rows(files: tuple[str, ...] = ()) -> tuple[MeasuredMFU, ...]:
    """The built-in rows, those of every GPU check filed in cliffsweep/measured/, and `files`."""
    filed = sorted(MEASURED_DIR.glob("*.json")) if MEASURED_DIR.is_dir() else []
    return MEASURED_MFU + tuple(r for f in [*filed, *files] for r in gpu_check_rows(f))


def measured_mfu(params: float, dtype: str, precision: str = "auto", master_weights: bool = True,
                 kernels: str = "liger", rows: tuple[MeasuredMFU, ...] | None = None) -> tuple[float, str]:
    """(MFU, where it comes from) for a model of `params` trained in `dtype` on a GPU under the
    recipe's `precision`, `master_weights` and `kernels` (auto = liger on a GPU)."""
    rows = measured_rows() if rows is None else rows
    path = compute_path(dtype, precision, master_weights)
    on_path, used = [m for m in rows if m.path == path], path
    if not on_path and path in FALLBACK_PATH:
        used = FALLBACK_PATH[path]
        on_path = [m for m in rows if m.path == used]
    if not on_path:
        return DEFAULT_MFU, "assumed, nothing measured"
    kern = "liger" if kernels == "auto" else kernels
    same = [m for m in on_path if m.kernels == kern and not m.compile]
    near = min(same or on_path, key=lambda m: abs(math.log(m.params / params)))
    notes = [] if abs(math.log(near.params / params)) < 0.1 else ["nearest size measured"]
    if used != path:
        notes.append(f"{used} path; {path} not measured yet")
    return near.mfu, f"measured: {near.source}" + (f" ({'; '.join(notes)})" if notes else "")


def gpu_hours(flops: float, gpu: GPU, mfu: float) -> float:
    return flops / (mfu * gpu.bf16_tflops * 1e12) / 3600
