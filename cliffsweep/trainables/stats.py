"""Once-per-model method statistics (EWC Fisher, MAS importances, SIB alphas, RPSFT bases, FLOW
weights), computed once per (model, method settings, retain data) and reused by every
lr/epochs trial of the sweep and on resume. Cached in the store under a hash of their inputs.
"""

from __future__ import annotations

import hashlib
import json
from contextlib import nullcontext
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from cliffsweep.trainables.config import StatsJob

STATS_VERSION = 1  # bump when the batching of statistics changes


def stats_key(model_path: str, method: str, inputs: dict[str, Any], learn: dict, retain: dict,
              n_examples: int, max_seq_len: int, batch_size: int) -> str:
    blob = json.dumps([STATS_VERSION, model_path, method, inputs, learn, retain, n_examples,
                       max_seq_len, batch_size], sort_keys=True, default=str)
    return hashlib.sha1(blob.encode()).hexdigest()[:16]


def stats_relpath(model: str, method: str, key: str) -> str:
    return f"stats/{model}/{method}-{key}.safetensors"


def stats_task_resources(cpus_per_worker: float, gpus_per_worker: float, workers_per_trial: int) -> dict[str, float]:
    """Ray resources of one statistics task: a GPU when trials train on GPUs (a real backbone's
    Fisher or SIB gradients over the retain set are forward/backward passes, GPU work like
    training), never more than one trial asks for, so that it fits wherever a trial fits.
    (Ray hides GPUs from a task that asked for none, so compute_stats stays on the CPU then.)"""
    return {"num_cpus": min(1.0, cpus_per_worker * workers_per_trial),
            "num_gpus": min(1.0, gpus_per_worker * workers_per_trial)}


def compute_stats(job: StatsJob) -> bytes:
    """Run the method's compute_stats on the base model; returns safetensors bytes. Batches of
    the recipe's `batch_size` (the statistic's definition), each run in micro-batches of the
    recipe's `micro_batch_size` with its activation checkpointing: the statistics' peak memory
    stays within a training step's (issue 15; bench/bench_memory.py)."""
    import torch
    from safetensors.torch import save

    from cliffsweep.evals.tasks import build_task
    from cliffsweep.evals.tasks.base import system_for
    from cliffsweep.models import load_model, resolve_model
    from cliffsweep.trainables import data
    from cliffsweep.trainables.methods import build_method
    from cliffsweep.trainables.microbatch import autocast_dtype, enable_checkpointing

    r = job.recipe
    n_examples, max_seq_len, batch_size = r.stats_examples, r.max_seq_len, r.batch_size
    torch.manual_seed(0)
    model, tok = load_model(resolve_model(job.model_path), job.dtype)
    if torch.cuda.is_available():  # the task was given a GPU (stats_task_resources)
        model = model.cuda()
    if r.gradient_checkpointing:
        enable_checkpointing(model)
    method = build_method(job.method, job.method_params)
    pad = tok.pad_token_id if tok.pad_token_id is not None else tok.eos_token_id
    retain_task, learn_task = build_task(job.retain.name, job.retain.params), build_task(job.learn.name, job.learn.params)
    retain_ex = retain_task.train_examples()[:n_examples]
    learn_ex = learn_task.train_examples()
    rows = data.encode(tok, retain_ex, max_seq_len, retain=True, system=system_for(retain_task, r.system_prompt))
    learn_rows = data.encode(tok, learn_ex, max_seq_len, system=system_for(learn_task, r.system_prompt))
    chunk = lambda xs: [data.collate(xs[i:i + batch_size], pad) for i in range(0, len(xs), batch_size)]  # noqa: E731
    # in training's precision: bf16 autocast over fp32 weights on a GPU (its activations are what
    # the micro-batches bound), nothing on the CPU (microbatch.autocast_dtype)
    amp = autocast_dtype(next(model.parameters()).dtype, next(model.parameters()).device.type)
    with torch.autocast("cuda", dtype=amp) if amp is not None else nullcontext():
        stats = method.compute_stats(model, chunk(rows), chunk(learn_rows), micro_batch_size=r.micro_batch_size)
    return save({k: v.detach().contiguous().cpu() for k, v in stats.items()})


def load_stats(uri: str) -> dict:
    """Read a stats file from any pyarrow URI or local path."""
    from safetensors.torch import load

    from cliffsweep.storage.store import filesystem

    fs, path = filesystem(uri)
    with fs.open_input_stream(path) as f:
        return load(f.read())
