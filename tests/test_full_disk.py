"""A full disk (issue 29): checkpoints written to a tiny tmpfs. The run names the OS's own words
("No space left on device") and where, once for both trials it stopped (as it happens, and in the
closing status), in `trials.error` and in `errors`, with no traceback on the terminal; exits 1
(failed trials) and says how to retry; a plain re-run says it again and trains nothing; once
there is space, `--retry-failed` finishes with nothing lost (the exactly-once invariant)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from cliffsweep.orchestrator.specfile import parse_spec
from cliffsweep.storage.store import Store
from invariant import assert_invariant

pytestmark = [pytest.mark.ray, pytest.mark.cluster]
ROOT = Path(__file__).resolve().parents[1]
FULL = "No space left on device"


@pytest.fixture
def tiny_disk(tmp_path):
    """A 256 KiB tmpfs (a toy checkpoint is ~3 MB); root can mount one, as CI runs."""
    where = tmp_path / "disk"
    where.mkdir()
    mounted = subprocess.run(["mount", "-t", "tmpfs", "-o", "size=256k", "tmpfs", str(where)],
                             capture_output=True, text=True)
    if mounted.returncode != 0:
        pytest.fail(f"this test mounts a tmpfs (as root, like CI): {mounted.stderr.strip()}")
    try:
        yield where
    finally:
        subprocess.run(["umount", "-l", str(where)], check=False)


def test_a_full_disk_is_named_once_and_retry_failed_recovers_everything(tmp_path, tiny_disk):
    data = {
        "name": "full", "models": [{"name": "q", "path": "toy:qwen2-tiny"}], "methods": [{"name": "sft"}],
        "lrs": [1e-3, 3e-3], "epochs": [2],
        "tasks": {"learn": {"name": "toy_facts", "params": {"n_eval": 20, "n_train": 32}},
                  "retain": [{"name": "toy_arith", "params": {"n_eval": 20}}]},
        "recipe": {"batch_size": 16, "max_seq_len": 128},
        "eval": {"points_per_trial": 2, "backend": "hf", "cpus_per_evaluator": 0.5},
        "resources": {"max_concurrent_trials": 1, "max_retries": 0, "trials_per_job": 2},
        "store": str(tmp_path / "store"), "checkpoints": str(tiny_disk / "ckpt"),
    }
    path = tmp_path / "sweep.yaml"
    path.write_text(yaml.safe_dump(data))
    cmd = [sys.executable, "-m", "cliffsweep.cli", "run", str(path), "--num-cpus", "3"]

    def run(*extra: str) -> subprocess.CompletedProcess:
        return subprocess.run(cmd + list(extra), capture_output=True, text=True, timeout=900, cwd=ROOT)

    full = run()
    out = full.stdout + full.stderr
    assert full.returncode == 1, out[-4000:]  # outcome.Exit.FAILED
    # said once as it happens and once in the closing status, not once per trial (two stopped)
    assert out.count(FULL) == 2, out[-4000:]
    assert "Traceback" not in out and "--retry-failed" in out, out[-4000:]
    store = Store(str(tmp_path / "store"))
    trials = store.read("trials")
    assert (trials["status"] == "failed").all() and trials["error"].str.contains(FULL).all(), trials
    assert store.read("errors").query("kind == 'trial_failed'")["message"].str.contains(FULL).any()

    plain = run()
    assert plain.returncode == 1 and "--retry-failed" in plain.stdout + plain.stderr

    subprocess.run(["mount", "-o", "remount,size=64m", str(tiny_disk)], check=True)  # space returns
    again = run("--retry-failed")
    assert again.returncode == 0, (again.stdout + again.stderr)[-4000:]
    assert_invariant(store, parse_spec(data))
