"""A private local Ray head, stopped by its own processes only (the rehearsals and the tests'
clusters). `ray stop` would kill every Ray on the machine, other runs' included, so a head
started under its own temp dir is stopped by the processes whose command line names that dir
(GCS, raylet, dashboard, agents, the autoscaler and the fake nodes it launched) and everything
they started (workers). Needs psutil (a dev dependency: rehearsals and tests only)."""

from __future__ import annotations

import shutil
import time


def processes_of(temp_dir: str) -> list:
    """The processes whose command line names `temp_dir`, and all their descendants."""
    import psutil

    roots = []
    for p in psutil.process_iter(["cmdline"]):
        try:
            if any(temp_dir in part for part in p.info["cmdline"] or []):
                roots.append(p)
        except (psutil.NoSuchProcess, psutil.AccessDenied):
            continue
    found = {p.pid: p for p in roots}
    for p in roots:
        try:
            found.update({c.pid: c for c in p.children(recursive=True)})
        except psutil.NoSuchProcess:
            continue
    return list(found.values())


def stop_processes(temp_dir: str, timeout_s: float = 10) -> list:
    """Terminate, then kill, the processes of the Ray under `temp_dir`; returns any still alive
    (none expected) and removes the dir when none is. Repeated because a raylet may start a
    worker while the first pass runs, and on a loaded machine a killed process can take seconds
    to go (CI once saw a head's dashboard processes outlive three passes)."""
    import psutil

    for _ in range(5):
        procs = processes_of(temp_dir)
        if not procs:
            break
        for p in procs:
            try:
                p.terminate()
            except psutil.NoSuchProcess:
                pass
        _, alive = psutil.wait_procs(procs, timeout=timeout_s)
        for p in alive:
            try:
                p.kill()
            except psutil.NoSuchProcess:
                pass
        psutil.wait_procs(alive, timeout=10)
        time.sleep(0.5)
    left = [p for p in processes_of(temp_dir) if p.is_running()]
    if not left:
        shutil.rmtree(temp_dir, ignore_errors=True)
    return left
