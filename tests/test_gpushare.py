"""Each process's GPU memory is a budget (issue 39 part 1, sweep/gpushare.py): the share of every
trainer and evaluator is derived from the spec, travels to the process, and is applied there
where CUDA is present; a process that reaches its cap fails with one sentence naming its share
and the settings that change it. No GPU here: CUDA's four calls are stood in for, recording
what the code asks of them (the GPU check runs them for real: docs/gpu.md)."""

from __future__ import annotations

from pathlib import Path
from types import SimpleNamespace

import pytest
import torch

from cliffsweep.evals.backends.share import capped_options
from cliffsweep.orchestrator.specfile import load_spec
from cliffsweep.orchestrator.jobs import trial_config
from cliffsweep.sweep.gpushare import GpuShare, evaluator_share, trainer_share
from cliffsweep.sweep.grid import expand_grid
from cliffsweep.trainables.parallel import apply_gpu_share

CONFIGS = Path(__file__).resolve().parents[1] / "cliffsweep" / "configs"
H100_GB = 79.2


@pytest.mark.parametrize("name", ["gpu_toy", "gpu_smoke", "gpu_smoke_fsdp", "gpu_shared", "paper", "paper_cl", "paper_fsdp",
                                  "paper_lora"])
def test_every_trainer_and_evaluator_gets_its_share_from_the_spec(name):
    spec = load_spec(str(CONFIGS / f"{name}.yaml"))
    r, e = spec.resources, spec.eval
    cfg = trial_config(spec, "/tmp/ck", "inbox", None, expand_grid(spec)[0], None)
    assert cfg.gpu_share == trainer_share(r)  # what crosses Ray to every Train worker
    for share, gpus in ((cfg.gpu_share, r.gpus_per_worker), (evaluator_share(e), e.gpus_per_evaluator)):
        # a fraction of a GPU is a cap of that fraction; a whole GPU of its own needs none
        assert share.fraction(H100_GB) == (gpus if 0 < gpus < 1 else None), (name, share)
    if name.startswith("gpu_"):  # the packed files share one GPU: every process is capped
        assert cfg.gpu_share.fraction(H100_GB) and evaluator_share(e).fraction(H100_GB)


def test_an_explicit_memory_budget_wins_over_the_fraction():
    share = GpuShare(0.3, 12.0, "Train worker", "resources.gpu_memory_gb")
    assert share.fraction(80.0) == pytest.approx(0.15)
    assert GpuShare(1.0, 200.0, "evaluator", "x").fraction(80.0) == 1.0  # never more than the device
    said = share.out_of_memory(80.0, "Tried to allocate 4.30 GiB")
    assert said.startswith("CUDA out of memory in a Train worker within its share of the GPU (0.15 of 80 GiB = 12.0 GiB)")
    assert "resources.gpu_memory_gb" in said and "\n" not in said


@pytest.fixture
def cuda_calls(monkeypatch):
    """A stand-in for an 80 GiB CUDA device: records each memory cap a process sets."""
    calls = []
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(torch.cuda, "current_device", lambda: 0)
    monkeypatch.setattr(torch.cuda, "get_device_properties", lambda i: SimpleNamespace(total_memory=80 * 2**30))
    monkeypatch.setattr(torch.cuda, "set_per_process_memory_fraction", lambda f, d=None: calls.append((f, d)))
    return calls


def test_the_cap_is_applied_where_cuda_is_present(cuda_calls):
    spec = load_spec(str(CONFIGS / "gpu_toy.yaml"))
    assert apply_gpu_share(trainer_share(spec.resources)) == spec.resources.gpus_per_worker
    assert cuda_calls == [(spec.resources.gpus_per_worker, 0)]
    # an hf evaluator caps its own process; a vLLM one hands the cap to the engine, which sizes
    # its KV cache from what is left after the weights
    share = evaluator_share(spec.eval)
    assert capped_options("hf", {}, share) == {} and cuda_calls[-1] == (spec.eval.gpus_per_evaluator, 0)
    opts = capped_options("vllm", {"kv_cache_mb": 64}, share)
    assert opts["gpu_memory_utilization"] == spec.eval.gpus_per_evaluator and len(cuda_calls) == 2
    # a worker with a whole GPU of its own sets no cap
    assert apply_gpu_share(GpuShare(1.0, None, "Train worker", "")) is None and len(cuda_calls) == 2


def test_no_cuda_no_cap():
    assert not torch.cuda.is_available()
    assert apply_gpu_share(GpuShare(0.3, None, "Train worker", "")) is None
    assert capped_options("vllm", {"kv_cache_mb": 64}, GpuShare(0.2, None, "evaluator", "")) == {"kv_cache_mb": 64}


def test_the_packed_gpu_files_fit_an_80_gb_gpu():
    from cliffsweep.planner.packing import needs, packing_problems, packing_text

    for name in ("gpu_toy", "gpu_smoke", "gpu_smoke_fsdp", "gpu_shared"):
        spec = load_spec(str(CONFIGS / f"{name}.yaml"))
        assert packing_problems(spec) == [], name
        # what shares the GPU, with each process's cap and peak (plan's table)
        text = "\n".join(packing_text(spec))
        assert "What shares one GPU (H100-SXM, 80 GB" in text and "Train worker" in text and "evaluator" in text
        caps = {n.role: n.cap / 1e9 for n in needs(spec, __import__("cliffsweep.planner.mfu", fromlist=["GPUS"]).GPUS[1])}
        assert caps["Train worker"] == pytest.approx(80 * spec.resources.gpus_per_worker)
        assert caps["evaluator"] == pytest.approx(80 * spec.eval.gpus_per_evaluator)


def test_validate_refuses_an_over_packed_gpu_in_one_sentence(tmp_path):
    """Four concurrent Qwen2.5-1.5B full finetunes at 0.2 GPU each (16 GB of an H100) plus
    evaluators: fp32 weights, gradients and AdamW alone are 25 GB, activations at the paper's
    micro-batch about as much again. `validate` says so once, with
    the share that would fit, and starts nothing."""
    import contextlib
    import io

    import yaml

    from cliffsweep.cli import main

    f = tmp_path / "packed.yaml"
    f.write_text(yaml.safe_dump({
        "name": "packed", "models": [{"name": "q15", "path": "Qwen/Qwen2.5-1.5B-Instruct", "dtype": "float32"}],
        "methods": [{"name": "sft"}], "lrs": [1e-5, 3e-5, 1e-4, 3e-4], "epochs": [1],
        "tasks": {"learn": {"name": "toy_facts"}, "retain": [{"name": "toy_arith"}]},
        "resources": {"workers_per_trial": 1, "gpus_per_worker": 0.2, "max_concurrent_trials": 4},
        "eval": {"gpus_per_evaluator": 0.2, "evaluators_per_model": 1}, "store": str(tmp_path / "store")}))
    err = io.StringIO()
    with contextlib.redirect_stderr(err), contextlib.redirect_stdout(io.StringIO()):
        assert main(["validate", str(f)]) == 2
    problems = [line for line in err.getvalue().splitlines() if line.startswith("  - ")]
    assert len(problems) == 1 and "Traceback" not in err.getvalue(), err.getvalue()
    said = problems[0]
    assert said.startswith("  - resources.gpus_per_worker: a Train worker of q15 / sft needs about"), said
    assert "its share of the H100-SXM (80 GB) is 16.0 GB; give it a share of at least 0." in said
    assert not (tmp_path / "store").exists()
    # the same file with a share that fits validates
    data = yaml.safe_load(f.read_text())
    data["resources"]["gpus_per_worker"] = 0.6
    f.write_text(yaml.safe_dump(data))
    with contextlib.redirect_stderr(io.StringIO()), contextlib.redirect_stdout(io.StringIO()):
        assert main(["validate", str(f)]) == 0


def _start_engine_in_turn(log: str) -> None:
    """An engine start stood in for: inside the lock, 'enter', a pause, 'exit'."""
    import os
    import time

    from cliffsweep.evals.backends.share import one_engine_start_per_gpu

    with one_engine_start_per_gpu(True):
        with open(log, "a") as f:
            f.write(f"enter {os.getpid()}\n")
        time.sleep(0.3)
        with open(log, "a") as f:
            f.write(f"exit {os.getpid()}\n")


def test_engines_sharing_a_gpu_start_one_at_a_time(tmp_path, monkeypatch):
    """vLLM sizes its KV cache from the GPU's free memory around its profiling run; an engine
    starting beside it meanwhile made one of two fail (docs/gpu.md, 2026-11-28). Three real
    processes take the per-GPU lock: their starts never overlap."""
    import multiprocessing
    import os
    import tempfile

    gpus = f"test{os.getpid()}"  # a lock file of this test's own
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", gpus)
    log = tmp_path / "starts.log"
    procs = [multiprocessing.get_context("fork").Process(target=_start_engine_in_turn, args=(str(log),))
             for _ in range(3)]
    for p in procs:
        p.start()
    for p in procs:
        p.join(60)
    assert [p.exitcode for p in procs] == [0, 0, 0]
    lines = [line.split() for line in log.read_text().splitlines()]
    assert [w for w, _ in lines] == ["enter", "exit"] * 3
    assert all(lines[i][1] == lines[i + 1][1] for i in range(0, 6, 2))  # each exit its own enter's
    Path(tempfile.gettempdir(), f"cliffsweep-engine-start-gpu-{gpus}.lock").unlink()
