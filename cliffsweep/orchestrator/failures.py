"""A failure said once, at its root (issue 29): what the OS said when a write failed (no space,
permission, read-only filesystem) and where, instead of a wall of Ray tracebacks per trial.

The store keeps every trial's whole traceback (`trials.error`, the `errors` table); the terminal
gets one line per distinct root cause, however many trials it stopped. `root_cause` is pure.
"""

from __future__ import annotations

import re
import sys

_OS_WORDS = re.compile(r"No space left on device|Permission denied|Read-only file system|Disk quota exceeded"
                       r"|File too large|Too many open files")
"""What the OS says when a write fails for a reason the user must fix (C library strerror texts;
Python's OSError and Rust's io::Error, e.g. safetensors, both carry them)."""
_EXCEPTION_LINE = re.compile(r"^(?:[\w.]+\.)?(\w*(?:Error|Exception|Exit|Interrupt)): (.+)$")


def root_cause(text: str) -> tuple[str, str]:
    """(key, sentence) at the root of a failure's text (a Python or Ray traceback). The key is
    the same for every trial a cause stopped: the OS's words where a write failed, else the last
    exception line. The sentence is the last exception line that says it (where, what)."""
    lines = [line.strip() for line in text.strip().splitlines() if line.strip()]
    os_words = _OS_WORDS.findall(text)
    if os_words:
        said = [line for line in lines if os_words[-1] in line]
        return os_words[-1], said[-1][:400]
    for line in reversed(lines):
        m = _EXCEPTION_LINE.match(line)
        if m:
            sentence = f"{m.group(1)}: {m.group(2)}"[:400]
            return sentence, sentence
    last = lines[-1][:400] if lines else "no error text"
    return last, last


class FailureLog:
    """Prints each distinct root cause once, with the first trial it stopped; counts the rest."""

    def __init__(self, stream=None):
        self.stream = stream or sys.stderr
        self.seen: dict[str, list[str]] = {}

    def note(self, trial_id: str, text: str, what: str) -> None:
        key, sentence = root_cause(text)
        trials = self.seen.setdefault(key, [])
        trials.append(trial_id)
        if len(trials) == 1:
            print(f"{what}: {trial_id}: {sentence}\n  (a later trial stopped by the same cause is not repeated "
                  "here; every traceback: `cliffsweep status STORE`, the store's errors table)",
                  file=self.stream, flush=True)
