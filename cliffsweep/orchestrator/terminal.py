"""What a run says on the terminal: cliffsweep's own lines; Tune's and Ray's go to the run's log.

Tune prints its banner ("Configuration for experiment run-...", "View detailed results here",
a TensorBoard hint) with plain `print`, names trials by its own ids ("Trial trial_9054d363
errored ... Error file: ..."), and Ray's logger adds start-up and authentication notices. The
progress line (progress.py) and the one-line-per-root-cause failures (failures.py) already say
the same in the sweep's words and with the trial ids the store uses. So, unless `--verbose`,
for the length of a run:

- `sys.stdout` and `sys.stderr` write to the log file: whatever a library prints lands there;
- the `ray` logger (every `ray.*` logger propagates to it) writes to the log file only;
- cliffsweep's own lines go to the streams captured before the swap (`Terminal`).

The log is a local file: `<store>/_logs/run-<time>.log` for a local store, else under
`~/.cache/cliffsweep/logs/` (an object store cannot be appended to line by line).
"""

from __future__ import annotations

import contextlib
import logging
import os
import sys
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import TextIO


@dataclass(frozen=True)
class Terminal:
    """The streams cliffsweep's own lines go to, and where everything else went (None: the
    terminal, under --verbose)."""

    out: TextIO
    err: TextIO
    log: Path | None


def log_path(store_uri: str, name: str, now: float | None = None) -> Path:
    """Where a run's third-party output goes: beside a local store, else in the user's cache."""
    stamp = time.strftime("%Y%m%d-%H%M%S", time.localtime(now if now is not None else time.time()))
    if "://" not in store_uri or store_uri.startswith("file://"):
        root = Path(os.path.expanduser(store_uri.removeprefix("file://"))).resolve()
        return root / "_logs" / f"run-{stamp}.log"
    return Path.home() / ".cache" / "cliffsweep" / "logs" / f"{name}-{stamp}.log"


@contextlib.contextmanager
def third_party_to_log(path: Path | None) -> Iterator[Terminal]:
    """For the block: stdout, stderr and Ray's logger to `path`; yields the terminal's own
    streams. `path` None (--verbose): nothing moves."""
    out, err = sys.stdout, sys.stderr
    if path is None:
        yield Terminal(out, err, None)
        return
    path.parent.mkdir(parents=True, exist_ok=True)
    ray_logger = logging.getLogger("ray")
    saved = list(ray_logger.handlers)
    with open(path, "a", encoding="utf-8", buffering=1) as log:
        handler = logging.StreamHandler(log)
        handler.setFormatter(logging.Formatter("%(asctime)s %(levelname)s %(name)s -- %(message)s"))
        for h in saved:
            ray_logger.removeHandler(h)
        ray_logger.addHandler(handler)
        sys.stdout = sys.stderr = log
        try:
            yield Terminal(out, err, path)
        finally:
            sys.stdout, sys.stderr = out, err
            ray_logger.removeHandler(handler)
            for h in saved:
                ray_logger.addHandler(h)
