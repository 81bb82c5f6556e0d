"""Fault injection at named points of the real code paths, for the fault tests.

The fault tests (tests/test_faults.py) must hit a crash at an exact place, every time: a Train
worker killed right after a given checkpoint, an evaluator killed while evaluations are
queued, a trial that crashes on every attempt. Racing a killer thread against the sweep makes
such tests flaky; a named point in the code that fails on request does not (Ray's own tests
do the same with its `testing_*` settings).

    CLIFFSWEEP_FAULTS="after_checkpoint:<trial_id>:<step>=kill;train_start:<trial_id>=raise"
    CLIFFSWEEP_FAULTS_DIR=/tmp/...   # where `kill` leaves its once-marker

Actions: `kill` SIGKILLs the process once (a marker file in CLIFFSWEEP_FAULTS_DIR keeps the
restarted process alive), `raise` raises RuntimeError every time, `sleepN` waits N seconds (a
slow evaluation, so that a backlog builds behind it). Unset: nothing happens, at
the cost of one environment lookup.
"""

from __future__ import annotations

import os
import signal


class InjectedFault(RuntimeError):
    pass


def faults() -> dict[str, str]:
    spec = os.environ.get("CLIFFSWEEP_FAULTS", "")
    return dict(e.split("=", 1) for e in spec.split(";") if "=" in e)


def maybe_fail(point: str) -> None:
    """Fail here if CLIFFSWEEP_FAULTS names `point`."""
    if "CLIFFSWEEP_FAULTS" not in os.environ:
        return
    action = faults().get(point)
    if action == "raise":
        raise InjectedFault(f"fault injected at {point} (CLIFFSWEEP_FAULTS)")
    if action is not None and action.startswith("sleep"):
        import time

        time.sleep(float(action[len("sleep"):]))
    if action == "kill":
        marker = os.path.join(os.environ["CLIFFSWEEP_FAULTS_DIR"], point.replace("/", "_").replace(":", "_"))
        try:
            fd = os.open(marker, os.O_CREAT | os.O_EXCL | os.O_WRONLY)
        except FileExistsError:
            return  # killed once already
        os.close(fd)
        os.kill(os.getpid(), signal.SIGKILL)
