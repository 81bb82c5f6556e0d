"""Live driver objects that Tune's callback and searcher reach by key.

Tune pickles its callbacks and search algorithm with the experiment state; the objects they
act on (the run, with its store, Ray handles and terminal; the queue of jobs) must not be
pickled with them. Each registers here and the Tune-side object carries only its key; unpickled
in this process, the key finds the same object again.
"""

from __future__ import annotations

from typing import Any

_LIVE: dict[int, Any] = {}


def register(obj: Any) -> int:
    key = id(obj)
    _LIVE[key] = obj
    return key


def lookup(key: int) -> Any:
    return _LIVE[key]
