"""Fault injection at named points of the real code paths, for the fault tests.

The fault tests (tests/test_faults.py) must hit a crash at an exact place, every time: a Train
worker killed right after a given checkpoint, an evaluator killed while evaluations are
queued, a trial that crashes on every attempt. Racing a killer thread against the sweep makes
such tests flaky; a named point in the code that fails on request does not (Ray's own tests
do the same with its `testing_*` settings).

    CLIFFSWEEP_FAULTS="after_checkpoint:<trial_id>:<step>=kill;train_start:<trial_id>=raise"
    CLIFFSWEEP_FAULTS_DIR=/tmp/...   # where `kill` and `hold` leave their markers

Actions: `kill` SIGKILLs the process once (a marker file in CLIFFSWEEP_FAULTS_DIR keeps the
restarted process alive), `raise` raises RuntimeError every time, `sleepN` waits N seconds.
`hold` stops the first process that reaches the point until the test lets it go: it says where
it stands (`reached`: its Ray node and pid) and waits for `release`. A test that kills a node, an
actor or a process while it holds there cannot miss its target, and a test that needs two events
in order releases the first once it has seen the second happen, instead of guessing a sleep
(issue 50 part 6). Like `kill`, it holds once: the retried or later pass goes on. Unset: nothing
happens, at the cost of one environment lookup.
"""

from __future__ import annotations

import json
import os
import signal
import sys
import time

HOLD_LIMIT_S = 900.0
"""How long a held point waits for its release before it raises: a test that never releases it
fails with a sentence instead of hanging until CI's limit."""


class InjectedFault(RuntimeError):
    pass


def faults() -> dict[str, str]:
    spec = os.environ.get("CLIFFSWEEP_FAULTS", "")
    return dict(e.split("=", 1) for e in spec.split(";") if "=" in e)


def marker(point: str, directory: str | None = None) -> str:
    """The once-marker of `point` in CLIFFSWEEP_FAULTS_DIR (or `directory`)."""
    return os.path.join(directory or os.environ["CLIFFSWEEP_FAULTS_DIR"], point.replace("/", "_").replace(":", "_"))


def _once(point: str) -> bool:
    """True the first time any process passes `point` (its marker created here), False after."""
    try:
        fd = os.open(marker(point), os.O_CREAT | os.O_EXCL | os.O_WRONLY)
    except FileExistsError:
        return False
    os.close(fd)
    return True


def maybe_fail(point: str) -> None:
    """Fail here if CLIFFSWEEP_FAULTS names `point`."""
    if "CLIFFSWEEP_FAULTS" not in os.environ:
        return
    action = faults().get(point)
    if action == "raise":
        raise InjectedFault(f"fault injected at {point} (CLIFFSWEEP_FAULTS)")
    if action is not None and action.startswith("sleep"):
        time.sleep(float(action[len("sleep"):]))
    if action == "kill" and _once(point):
        os.kill(os.getpid(), signal.SIGKILL)
    if action == "hold" and _once(point):
        _hold(point)


def _hold(point: str) -> None:
    ray = sys.modules.get("ray")  # the Ray node this process runs on, where it runs in Ray
    node = ray.get_runtime_context().get_node_id() if ray is not None and ray.is_initialized() else None
    tmp = marker(point) + ".reached.tmp"
    with open(tmp, "w") as f:
        json.dump({"node": node, "pid": os.getpid()}, f)
    os.replace(tmp, marker(point) + ".reached")  # whole or absent: the test reads it as it lands
    end = time.time() + HOLD_LIMIT_S
    while not os.path.exists(marker(point) + ".release"):
        if time.time() > end:
            raise InjectedFault(f"{point} was held {HOLD_LIMIT_S:.0f} s and never released (CLIFFSWEEP_FAULTS)")
        time.sleep(0.05)


# --- the test's side of `hold` ------------------------------------------------------------------
def wait_reached(point: str, directory: str, timeout_s: float, stop=None) -> dict | None:
    """Where the process held at `point` stands ({"node", "pid"}) once one holds there; None when
    `stop` (a threading.Event) is set first. Raises TimeoutError past `timeout_s`."""
    path, end = marker(point, directory) + ".reached", time.time() + timeout_s
    while not os.path.exists(path):
        if stop is not None and stop.is_set():
            return None
        if time.time() > end:
            raise TimeoutError(f"nothing reached {point} within {timeout_s:.0f} s")
        time.sleep(0.05)
    with open(path) as f:
        return json.load(f)


def release(point: str, directory: str) -> None:
    """Let the process held at `point` go on (and any that reaches it later)."""
    with open(marker(point, directory) + ".release", "w"):
        pass
