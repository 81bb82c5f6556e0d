"""A private Ray head for tests that talk to a cluster the way a laptop does (Jobs API).

`ray stop` would kill every Ray on the machine, other test runs' included, so a head started
here is stopped by its own processes only: those whose command line names its temp dir (GCS,
raylet, dashboard, agents, log monitor) and everything they started (workers, job drivers).
"""

from __future__ import annotations

import os
import socket
import subprocess
import sys
import tempfile
from dataclasses import dataclass
from pathlib import Path



def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@dataclass
class Head:
    temp_dir: str
    address: str  # 127.0.0.1:PORT, the GCS (ray.init / ray_address)
    dashboard: str  # http://127.0.0.1:PORT, the Jobs API
    env: dict[str, str]  # what the head's processes (and so its jobs) inherit


def start_head(num_cpus: int, extra_env: dict[str, str], extra_args: tuple[str, ...] = (),
               port: int | None = None) -> Head:
    # Short path: Ray's unix sockets live under the temp dir (108-byte limit).
    temp_dir = tempfile.mkdtemp(prefix="rh", dir="/tmp")
    port, dash = port or free_port(), free_port()
    venv_bin = str(Path(sys.executable).parent)
    env = {k: v for k, v in os.environ.items() if not k.startswith("RAY_") and k != "PYTHONPATH"}
    # The cluster's image has `cliffsweep` on PATH; here the venv stands in for it. No
    # PYTHONPATH: the job gets this checkout's code only through submit's upload.
    env["PATH"] = venv_bin + os.pathsep + env.get("PATH", "")
    env.update(extra_env)
    cmd = [f"{venv_bin}/ray", "start", "--head", f"--port={port}", "--dashboard-host=127.0.0.1",
           f"--dashboard-port={dash}", f"--num-cpus={num_cpus}", "--include-dashboard=true",
           f"--temp-dir={temp_dir}", f"--ray-client-server-port={free_port()}",
           f"--dashboard-agent-listen-port={free_port()}", "--disable-usage-stats", *extra_args]
    head = Head(temp_dir, f"127.0.0.1:{port}", f"http://127.0.0.1:{dash}", env)
    try:
        subprocess.run(cmd, env=env, check=True, capture_output=True, text=True, timeout=180)
    except BaseException:
        stop_head(head)
        raise
    return head


def head_processes(temp_dir: str):
    """The head's own processes and all their descendants (cliffsweep/simulate/localray.py)."""
    from cliffsweep.simulate.localray import processes_of

    return processes_of(temp_dir)


def stop_head(head: Head, timeout_s: float = 10):
    """Terminate, then kill, the head's processes; return any still alive (none expected)."""
    from cliffsweep.simulate.localray import stop_processes

    return stop_processes(head.temp_dir, timeout_s)
