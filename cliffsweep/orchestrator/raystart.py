"""Starting Ray, or saying in one sentence why it did not start (issue 37 part 5).

On a busy machine (another sweep beside it, a build) a local Ray can miss its own start-up
deadline: "The current node timed out during startup" and 36 lines of traceback. A plain re-run
a minute later works. So a start gets a time limit, one retry with three times as long, and
then a sentence: what failed, the usual cause, what to do. Ray's own traceback goes to the run's
log (terminal.py), or to the terminal under --verbose.
"""

from __future__ import annotations

import contextlib
import logging
import signal
import sys
import threading
import time
from collections.abc import Callable, Iterator

RAY_START_TIMEOUT_S = 60.0
"""How long a Ray start may take before it counts as failed (`run --ray-start-timeout`); the
one retry gets three times as long. A quiet 2-core machine starts a local cluster in ~5 s."""


class RayStartError(RuntimeError):
    """Ray did not start, twice; the message is one sentence with what to do."""


def start_ray(start: Callable[[], None], ray_address: str | None, verbose: bool,
              timeout_s: float = RAY_START_TIMEOUT_S) -> None:
    """`start()` (driver.init_ray) within `timeout_s`, else once more within 3x that (a busy machine: another sweep,
    a build), else RayStartError. A slow attempt is interrupted and Ray shut down before the next
    one begins, so two starts never overlap."""
    import ray

    reasons = []
    for limit in (timeout_s, 3 * timeout_s):
        failure = _start_within(limit, start)
        if failure is None:
            return
        reasons.append(failure)
        ray.shutdown()
    where = f"the Ray cluster at {ray_address}" if ray_address else "a local Ray cluster"
    raise RayStartError(
        f"{where} did not start ({'; then '.join(reasons)}). A busy machine is the usual cause: try again when it "
        "is quieter, give Ray fewer CPUs (--num-cpus), allow more time (--ray-start-timeout), or see `ray status`"
        + ("" if verbose else "; --verbose shows Ray's own error"))


class _TooSlow(BaseException):
    """Raised inside a start that outlived its limit. A BaseException, so that no `except
    Exception` inside Ray's start-up swallows it."""


@contextlib.contextmanager
def _limit(seconds: float) -> Iterator[None]:
    """Interrupts the block after `seconds` with _TooSlow (SIGALRM). Ray's start must run on the
    main thread: the processes it starts die with the thread that started them (PR_SET_PDEATHSIG
    follows the creating thread), so a start is timed by an alarm, not run in a thread. Off the
    main thread (no signals there) the block runs untimed."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return

    def too_slow(signum, frame) -> None:
        raise _TooSlow

    def quiet(unraisable) -> None:
        # the alarm can land where Python cannot raise (an at-fork hook of `logging` while Ray
        # forks): it printed "Exception ignored ... _TooSlow" with a traceback; the start is then
        # judged by its time (_start_within)
        if not isinstance(unraisable.exc_value, _TooSlow):
            hook(unraisable)

    previous, hook = signal.signal(signal.SIGALRM, too_slow), sys.unraisablehook
    sys.unraisablehook = quiet
    signal.setitimer(signal.ITIMER_REAL, seconds)
    try:
        yield
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, previous)
        sys.unraisablehook = hook


def _start_within(limit: float, start: Callable[[], None]) -> str | None:
    """Runs `start()`; None when it returned within `limit` seconds, else why not."""
    t0 = time.monotonic()
    try:
        with _limit(limit):
            start()
        if time.monotonic() - t0 > limit:  # the alarm came inside Ray code that swallowed it: too slow all the same
            raise _TooSlow
    except _TooSlow:
        logging.getLogger("ray").warning("Ray did not start within %g s", limit)
        return f"not within {limit:g} s"
    except Exception as e:  # noqa: BLE001 - any start failure is retried, then said in one sentence
        logging.getLogger("ray").warning("Ray start failed", exc_info=True)  # the run's log; --verbose: here
        first = str(e).strip().splitlines()[0][:300] if str(e).strip() else type(e).__name__
        return f"after {time.monotonic() - t0:.0f} s: {first}"
    return None
