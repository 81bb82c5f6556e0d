"""One driver per store (issue 29): a second `cliffsweep run` on a store whose lease a live
process holds is refused before anything starts, naming the holder; a lease left by a SIGKILLed
driver on this machine is taken over at once (the fault tests' re-runs), one silent past its TTL
anywhere, and a live one only with --force."""

from __future__ import annotations

import json
import signal
import socket
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from cliffsweep.storage.lease import LEASE, TTL_S, Holder, Lease, StoreBusy, holder_alive
from cliffsweep.storage.store import Store

ROOT = Path(__file__).resolve().parents[1]


def holder(host: str, pid: int, renewed_at: float) -> Holder:
    return Holder(host, pid, renewed_at - 10, renewed_at, "t")


@pytest.mark.parametrize("h, alive_pids, binds", [
    (holder("here", 1, 1000.0), {1}, True),                 # this machine, process alive
    (holder("here", 1, 1000.0), set(), False),              # this machine, process gone (SIGKILL)
    (holder("there", 1, 1000.0), set(), True),              # another machine, renewed lately
    (holder("there", 1, 1000.0 - TTL_S - 1), set(), False),  # another machine, silent past the TTL
    (holder("here", 1, 1000.0 - TTL_S - 1), {1}, False),     # alive but stuck: not renewing
])
def test_when_a_lease_binds(h, alive_pids, binds):
    assert holder_alive(h, 1000.0, "here", lambda pid: pid in alive_pids) is binds


def test_a_second_run_on_a_held_store_is_refused_and_a_killed_drivers_lease_is_taken_over(tmp_path):
    store = Store(str(tmp_path / "store"))
    sweep = tmp_path / "sweep.yaml"
    sweep.write_text(yaml.safe_dump({
        "name": "lease", "models": [{"name": "m", "path": "toy:qwen2-tiny"}], "methods": [{"name": "sft"}],
        "lrs": [1e-3], "epochs": [1], "tasks": {"learn": {"name": "toy_facts"}, "retain": [{"name": "toy_arith"}]},
        "store": str(tmp_path / "store")}))
    first = Lease(store)  # this test process is the first driver
    try:
        r = subprocess.run([sys.executable, "-m", "cliffsweep.cli", "run", str(sweep)], capture_output=True,
                           text=True, timeout=300, cwd=ROOT)
        assert r.returncode == 2, r.stdout[-2000:] + r.stderr[-2000:]
        assert f"pid {first.holder.pid} on {socket.gethostname()}" in r.stderr and "--force" in r.stderr
        assert "Traceback" not in r.stderr and "Ray instance" not in r.stdout + r.stderr
        with pytest.raises(StoreBusy):
            Lease(store)
    finally:
        first.release()
    assert not store.exists(LEASE)

    # a driver SIGKILLed while holding the lease: its lease file stays, and binds no one
    killed = subprocess.run([sys.executable, "-c", (
        "import os, signal; from cliffsweep.storage.lease import Lease; from cliffsweep.storage.store import Store;"
        f"Lease(Store({str(tmp_path / 'store')!r})); os.kill(os.getpid(), signal.SIGKILL)")], cwd=ROOT, timeout=120)
    assert killed.returncode == -signal.SIGKILL and store.exists(LEASE)
    again = Lease(store)
    assert Holder(**json.loads(store.read_bytes(LEASE))).token == again.holder.token  # ours now
    again.release()
