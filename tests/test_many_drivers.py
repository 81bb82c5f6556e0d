"""Several drivers fill one store (issue 53 part 4), on the S3 test server (a local folder's: the
Slurm job array of tests/test_slurm.py, whose drivers share a folder and lose one to `scancel`;
the claims' local and S3 races themselves: tests/test_claims.py):
two `cliffsweep run --join`, the first SIGKILLed the moment its first trial's first checkpoint
reaches it (mid-training, its evaluation not yet sent). The second adopts what the first held once
its claims lapse (a dead process on this machine: at once): the killed trial resumes from the
first driver's latest checkpoint, the base evaluation the first claimed is done, and every grid point
ends `done` once, every checkpoint evaluated once (tests/invariant.py: no (trial, step, task)
twice in `evals`, no (trial, step, task, item) twice in `samples`). Meanwhile a plain `run` (no
`--join`) is refused and starts nothing; afterwards `run --join` on the finished store, with no
live driver, behaves as a plain run."""

from __future__ import annotations

import os
import subprocess
import sys
import time

import pytest
import yaml

from cliffsweep.orchestrator.specfile import parse_spec
from cliffsweep.storage.claims import live_drivers, read_claims
from cliffsweep.storage.store import Store
from invariant import assert_invariant
from test_faults import ids, sweep

pytestmark = [pytest.mark.ray, pytest.mark.cluster]


def run(path, *flags: str, env: dict | None = None) -> subprocess.Popen:
    return subprocess.Popen([sys.executable, "-m", "cliffsweep.cli", "run", str(path), "--num-cpus", "2", *flags],
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                            env={k: v for k, v in {**os.environ, **(env or {})}.items() if v is not None})


def wait_for(what, cond, proc: subprocess.Popen, limit: float = 600) -> None:
    end = time.time() + limit
    while not cond():
        if time.time() > end or proc.poll() is not None:
            proc.kill()
            pytest.fail(f"{what} within {limit:.0f} s: {(proc.stdout.read() or '')[-3000:]}")
        time.sleep(0.3)


@pytest.fixture
def store_uri(tmp_path):
    from objectstore import s3_server

    with s3_server(tmp_path, relay=False):
        yield "s3://sweeps/many-drivers"


def test_two_joined_drivers_one_killed_mid_training_fill_the_grid_once(store_uri, tmp_path):
    data = sweep(store_uri, lrs=(1e-3, 3e-3, 1e-2, 3e-2), resume_every_s=0,
                 resources={"max_concurrent_trials": 1, "max_retries": 1, "trials_per_job": 1})
    path = tmp_path / "sweep.yaml"
    path.write_text(yaml.safe_dump(data))
    grid = ids(data)
    store = Store(store_uri)
    kill_first_report = ";".join(f"driver_report:{tid}:2=kill" for tid in grid)
    first = run(path, "--join", env={"CLIFFSWEEP_FAULTS": kill_first_report, "CLIFFSWEEP_FAULTS_DIR": str(tmp_path)})
    wait_for("the first driver claims a trial", lambda: any(k.startswith("trial__") for k in read_claims(store)), first)
    second = run(path, "--join", env={"CLIFFSWEEP_FAULTS": None})
    wait_for("the second driver registers", lambda: any(d["pid"] == second.pid for d in live_drivers(store)), second)
    # a plain run beside a live joined driver is refused, and starts nothing
    plain = subprocess.run([sys.executable, "-m", "cliffsweep.cli", "run", str(path)], capture_output=True,
                           text=True, timeout=300)
    assert plain.returncode == 2 and "--join" in plain.stderr and "Nothing was started" in plain.stderr, (
        plain.stdout[-2000:] + plain.stderr[-2000:])
    assert second.poll() is None  # it was refused while the second driver worked
    out_first, _ = first.communicate(timeout=900)
    assert first.returncode == -9, out_first[-3000:]  # SIGKILLed at its first checkpoint report
    out_second, _ = second.communicate(timeout=1200)
    assert second.returncode == 0, out_second[-3000:]

    spec = parse_spec(data)
    assert_invariant(store, spec)
    trials = store.read("trials").set_index("trial_id")
    assert trials["driver"].notna().all() and trials["driver"].nunique() == 1, trials["driver"]
    # the trial the first driver was training went on from its checkpoint (step 2, or 4 where the
    # killed driver's Train workers wrote it before Ray stopped them), in the second driver
    adopted = trials[trials["resumed_from_step"] > 0]
    assert len(adopted) == 1, trials[["status", "resumed_from_step", "attempt"]]
    assert read_claims(store) == {}  # every claim given back

    again = run(path, "--join")
    out, _ = again.communicate(timeout=600)
    assert again.returncode == 0 and "trials 4/4" in out, out[-3000:]
    assert_invariant(store, spec)
