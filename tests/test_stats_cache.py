"""Once-per-model statistics: a 20-trial EWC sweep computes the Fisher once, and a resume
computes nothing."""

from __future__ import annotations

import os
import threading
import time
from contextlib import contextmanager

import psutil
import pytest
from safetensors.torch import load_file

from cliffsweep.orchestrator.statistics import ensure_stats
from cliffsweep.sweep.grid import expand_grid
from cliffsweep.orchestrator.specfile import parse_spec
from cliffsweep.storage.store import Store

pytestmark = pytest.mark.ray


@pytest.fixture(scope="module")
def ray_local():
    import ray

    ray.init(address="local", num_cpus=2, include_dashboard=False, log_to_driver=False)
    yield
    ray.shutdown()


@contextmanager
def stats_workers():
    """The pids of the processes seen running a statistics task while the block runs."""
    pids: set[int] = set()
    stop = threading.Event()

    def watch() -> None:
        while not stop.is_set():
            for proc in psutil.process_iter(["pid", "cmdline"]):
                if (proc.info["cmdline"] or [""])[0].startswith("ray::compute_stats"):
                    pids.add(proc.info["pid"])
            stop.wait(0.1)

    watcher = threading.Thread(target=watch)
    watcher.start()
    try:
        yield pids
    finally:
        stop.set()
        watcher.join()


def wait_for(cond, limit_s: float) -> bool:
    end = time.time() + limit_s
    while not cond():
        if time.time() > end:
            return False
        time.sleep(0.2)
    return True


def test_twenty_ewc_trials_share_one_fisher(ray_local, tmp_path):
    spec = parse_spec({
        "name": "stats", "models": [{"name": "q", "path": "toy:qwen2-tiny"}],
        "methods": [{"name": "ewc", "params": {"lam": [1.0, 10.0]}}, {"name": "sft"}],
        "lrs": [1e-5 * (i + 1) for i in range(10)],
        "tasks": {"learn": {"name": "toy_facts"}, "retain": [{"name": "toy_arith"}]},
        "recipe": {"stats_examples": 32, "max_seq_len": 96}, "store": str(tmp_path / "store"),
    })
    store = Store(spec.store_uri)
    grid = expand_grid(spec)
    ewc = [t for t in grid if t.method == "ewc"]
    assert len(ewc) == 20
    with stats_workers() as pids:
        uris, failed = ensure_stats(spec, store, None, grid)
    assert failed == {}
    # the worker that computed them exits (max_calls 1), its memory with it: an idle worker kept
    # 3.9 GB through the rest of the real-model sweep
    assert pids and wait_for(lambda: not any(psutil.pid_exists(p) for p in pids), 60), pids
    files = os.listdir(tmp_path / "store" / "stats" / "q")
    # lam does not change the Fisher (EWC.stats_inputs), so both lam values share one file
    assert len(files) == 1, files
    assert {uris[t.trial_id] for t in ewc} == {str(tmp_path / "store" / "stats" / "q" / files[0])}
    assert all(uris[t.trial_id] is None for t in grid if t.method == "sft")
    fisher = load_file(uris[ewc[0].trial_id])
    assert fisher and all((v >= 0).all() for v in fisher.values())
    mtime = os.path.getmtime(uris[ewc[0].trial_id])
    again, _ = ensure_stats(spec, store, None, grid)  # resume: cache hit, nothing recomputed
    assert again == uris and os.path.getmtime(uris[ewc[0].trial_id]) == mtime


def test_failed_statistics_fail_only_their_trials(ray_local, tmp_path):
    """A model whose statistics cannot be computed (here: a model folder whose config.json names
    no architecture transformers knows; an empty folder is refused by the sweep file's checks)
    costs its own trials, recorded with the error; the other model's statistics are still
    computed."""
    (tmp_path / "empty").mkdir()
    (tmp_path / "empty" / "config.json").write_text('{"model_type": "no-such-architecture"}')
    spec = parse_spec({
        "name": "stats", "models": [{"name": "q", "path": "toy:qwen2-tiny"},
                                    {"name": "broken", "path": str(tmp_path / "empty")}],
        "methods": [{"name": "ewc"}], "lrs": [1e-4, 1e-3],
        "tasks": {"learn": {"name": "toy_facts"}, "retain": [{"name": "toy_arith"}]},
        "recipe": {"stats_examples": 16, "max_seq_len": 96}, "store": str(tmp_path / "store"),
    })
    store = Store(spec.store_uri)
    grid = expand_grid(spec)
    uris, failed = ensure_stats(spec, store, None, grid)
    assert set(failed) == {t.trial_id for t in grid if t.model == "broken"}
    assert all("statistics" in msg for msg in failed.values())
    good = [t for t in grid if t.model == "q"]
    assert all(os.path.exists(uris[t.trial_id]) for t in good)
    errors = store.read("errors")
    assert list(errors["kind"]) == ["stats"] and "broken" in errors["message"][0]
