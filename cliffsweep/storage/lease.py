"""One driver per store: a lease file that a running sweep holds and renews (issue 29).

Two drivers on one store would train the same trials into the same checkpoint folders and
race on the ledger. So `run` takes `_lease.json` at the store's root before it writes anything,
renews it every RENEW_S while it runs and removes it at the end, and a second `run` refuses,
saying who holds it. A lease is free when:

- it is absent, or
- it is older than TTL_S (its driver stopped renewing: killed, or its machine lost), or
- its holder ran on this machine and that process is gone (a SIGKILLed driver: taken over at
  once, so the re-run after a crash never waits), or
- the user says `--force` (a driver on another machine known to be dead).

On object storage the check and the write are two requests, not one conditional write (pyarrow's
filesystems offer none), so two drivers starting within the same second can both win; the lease
re-reads its own file after writing to narrow that window. Pure rules (`holder_alive`) apart from
the file itself; the renewing thread is the only state.
"""

from __future__ import annotations

import json
import os
import socket
import threading
import time
import uuid
from dataclasses import asdict, dataclass

from cliffsweep.storage.store import Store

LEASE = "_lease.json"
TTL_S = 90.0
RENEW_S = 20.0


@dataclass(frozen=True)
class Holder:
    host: str
    pid: int
    started_at: float
    renewed_at: float
    token: str


class StoreBusy(Exception):
    """Another driver holds the store's lease; the message says who and what to do."""


def holder_alive(h: Holder, now: float, host: str, pid_alive) -> bool:
    """Whether the lease `h` still binds: renewed within TTL_S and, on this host, its process
    alive (`pid_alive(pid)`)."""
    if now - h.renewed_at > TTL_S:
        return False
    if h.host == host:
        return pid_alive(h.pid)
    return True


def pid_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:  # someone else's process: alive
        return True
    return True


def _read(store: Store) -> Holder | None:
    if not store.exists(LEASE):
        return None
    try:
        return Holder(**json.loads(store.read_bytes(LEASE)))
    except (ValueError, TypeError):  # unreadable: nobody can be said to hold it
        return None


class Lease:
    """The store's lease, held from construction until `release` (renewed off this thread)."""

    def __init__(self, store: Store, force: bool = False):
        self.store = store
        now = time.time()
        held = _read(store)
        if held is not None and not force and holder_alive(held, now, socket.gethostname(), pid_alive):
            raise StoreBusy(
                f"another cliffsweep run holds the store {store.uri}: pid {held.pid} on {held.host}, started "
                f"{time.strftime('%Y-%m-%d %H:%M:%S', time.localtime(held.started_at))}, last seen "
                f"{now - held.renewed_at:.0f} s ago. Nothing was started. Wait for it (`cliffsweep status "
                f"{store.uri}`), or, if that driver is dead on another machine, pass --force (its lease also "
                f"lapses {TTL_S:.0f} s after its last renewal).")
        self.holder = Holder(socket.gethostname(), os.getpid(), now, now, uuid.uuid4().hex)
        self._write()
        if (_read(store) or self.holder).token != self.holder.token:
            raise StoreBusy(f"another cliffsweep run took the store {store.uri} at the same moment; nothing was started")
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._renew, name="cliffsweep-lease", daemon=True)
        self._thread.start()

    def _write(self) -> None:
        self.store.put_bytes(LEASE, json.dumps(asdict(self.holder)).encode())

    def _renew(self) -> None:
        while not self._stop.wait(RENEW_S):
            self.holder = Holder(**{**asdict(self.holder), "renewed_at": time.time()})
            try:
                self._write()
            except OSError:  # storage away for a while: the next renewal tries again
                pass

    def release(self) -> None:
        self._stop.set()
        self._thread.join(timeout=5)
        held = _read(self.store)
        if held is not None and held.token == self.holder.token:  # never another driver's lease
            self.store.fs.delete_file(f"{self.store.root}/{LEASE}")
