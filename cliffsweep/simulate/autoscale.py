"""The rehearsal on an autoscaling cluster (issue 22 part 5): nodes come up as work is queued and
go away when it ends, and what that costs in node-hours beside the hours the nodes were busy.

`rehearse_autoscaling` starts Ray's fake autoscaling cluster (the real autoscaler, launching and
terminating real raylets on this machine through the fake multi-node provider, as Ray's own
autoscaler tests and `ray.cluster_utils.AutoscalingCluster` do) with a head that holds
nothing and no worker node, at most `max_nodes` fake GPU nodes of `cluster`'s shape, and runs the
rehearsal of simulate/rehearsal.py on it: the real driver, Tune, Train jobs and evaluator pool,
every piece of work a timed wait. While it runs, `NodeUse` samples every node once a second:
how long each was up, how long any of its GPUs was held (by a Train worker or an evaluator), and
how many GPU-seconds were held of those it offered. After the sweep it waits for the autoscaler
to remove the idle nodes (`idle_s`) and counts that tail too: a real cluster pays for it.
"""

from __future__ import annotations

import os
import sys
import threading
import time
from dataclasses import dataclass, field

from cliffsweep.orchestrator.policies import ROLE_RESOURCES
from cliffsweep.simulate.engine import Cluster, Result
from cliffsweep.simulate.rehearsal import Overheads, last_evaluation, rehearsal_of, scaled_plans

SAMPLE_S = 1.0


@dataclass
class NodeUse:
    """Per worker node (id): seconds up, seconds with any GPU held, GPU-seconds held and offered."""

    up: dict[str, float] = field(default_factory=dict)
    busy: dict[str, float] = field(default_factory=dict)
    gpu_held: dict[str, float] = field(default_factory=dict)
    gpu_offered: dict[str, float] = field(default_factory=dict)
    first_up: float | None = None
    """Seconds from the sweep's start to the first worker node up."""

    def sample(self, t: float, dt: float) -> int:
        """One look at the cluster: adds `dt` seconds to every worker node up; returns how many."""
        import ray
        from ray._private.state import available_resources_per_node

        free = available_resources_per_node()
        n = 0
        for node in ray.nodes():
            total = node["Resources"].get("GPU", 0.0)
            if not node["Alive"] or total <= 0:  # the head offers no GPU
                continue
            nid, n = node["NodeID"], n + 1
            # a resource with none left is absent from the node's entry; a node without an entry
            # yet counts as idle
            held = max(0.0, total - free[nid].get("GPU", 0.0)) if nid in free else 0.0
            self.up[nid] = self.up.get(nid, 0.0) + dt
            self.busy[nid] = self.busy.get(nid, 0.0) + (dt if held > 0 else 0.0)
            self.gpu_held[nid] = self.gpu_held.get(nid, 0.0) + held * dt
            self.gpu_offered[nid] = self.gpu_offered.get(nid, 0.0) + total * dt
            if self.first_up is None:
                self.first_up = t
        return n

    def summary(self) -> dict[str, float]:
        up, busy = sum(self.up.values()), sum(self.busy.values())
        return {"nodes launched": len(self.up), "node-seconds up": up, "node-seconds busy": busy,
                "busy / up": busy / up if up else 0.0,
                "GPU-seconds held / offered": sum(self.gpu_held.values()) / max(1e-9, sum(self.gpu_offered.values())),
                "first node up at s": self.first_up if self.first_up is not None else -1.0}


@dataclass
class Autoscaled:
    makespan: float
    """Seconds from the sweep's start to its last evaluation recorded."""
    predicted: Result
    """The simulator on `max_nodes` nodes up from the start (no node start, no scale-down)."""
    use: NodeUse
    scaled_down_s: float | None
    """Seconds after the sweep's end until no worker node was up (None: not within the wait)."""
    store: object


def fake_autoscaler_config(node_types: dict[str, dict], max_workers: int, idle_s: float, gcs_address: str) -> dict:
    """A cluster-launcher config for Ray's fake multi-node provider (ray/autoscaler/_private/
    fake_multi_node, the config Ray's AutoscalingCluster writes, whose template the wheel lacks):
    a head of no node type's resources (its own come from `ray start`) and `node_types` (name ->
    {"resources", "max_workers"}), none up at the start. tests/test_multinode.py uses it too."""
    return {
        "cluster_name": "cliffsweep-fake", "max_workers": max_workers, "upscaling_speed": float(max_workers),
        "idle_timeout_minutes": idle_s / 60.0,
        "provider": {"type": "fake_multinode", "gcs_address": gcs_address, "use_node_id_as_ip": True,
                     "disable_node_updaters": True, "disable_launch_config_check": True},
        "auth": {"ssh_user": "ubuntu"},
        "available_node_types": {
            "ray.head.default": {"resources": {}, "node_config": {}, "max_workers": 0},
            **{name: {"resources": t["resources"], "node_config": {}, "min_workers": 0, "max_workers": t["max_workers"]}
               for name, t in node_types.items()}},
        "head_node_type": "ray.head.default",
        "docker": {}, "file_mounts": {}, "cluster_synced_files": [], "file_mounts_sync_continuously": False,
        "rsync_exclude": [], "rsync_filter": [], "initialization_commands": [], "setup_commands": [],
        "head_setup_commands": [], "worker_setup_commands": [], "head_start_ray_commands": [],
        "worker_start_ray_commands": [],
    }


def gpu_nodes(cluster: Cluster, max_nodes: int) -> dict[str, dict]:
    """The rehearsal's one node type: up to `max_nodes` GPU nodes of `cluster`'s shape, each GPU a
    trainer's and an evaluator's slot (the roles of clusters/*.yaml, docs/cluster.md; there on
    separate node types), so a pending job or evaluator names the node type the autoscaler adds."""
    g = cluster.gpus_per_node
    return {"gpu": {"max_workers": max_nodes, "resources": {
        "CPU": cluster.cpus_per_node, "GPU": g, ROLE_RESOURCES["trainer"]: g, ROLE_RESOURCES["evaluator"]: g}}}


def start_autoscaling_head(cluster: Cluster, max_nodes: int, idle_s: float, driver_slots: int) -> tuple[str, str]:
    """`ray start --head` (this interpreter's) with the fake autoscaler, under a temp dir of its
    own (simulate/localray.py stops it), offering `driver_slots` trial drivers (cluster roles:
    a sweep's concurrency on a cluster that starts without its GPUs) and one CPU (Tune's trial
    actors ask a hundredth each beside their slot); returns (GCS address, temp dir)."""
    import json
    import socket
    import subprocess
    import tempfile

    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    temp_dir = tempfile.mkdtemp(prefix="rs", dir="/tmp")  # short: Ray's unix sockets live there
    address = f"127.0.0.1:{port}"
    config = os.path.join(temp_dir, "autoscaler.json")
    with open(config, "w") as f:
        json.dump(fake_autoscaler_config(gpu_nodes(cluster, max_nodes), max_nodes, idle_s, address), f)
    venv_bin = os.path.dirname(sys.executable)
    env = dict(os.environ, PATH=venv_bin + os.pathsep + os.environ.get("PATH", ""), RAY_FAKE_CLUSTER="1",
               AUTOSCALER_UPDATE_INTERVAL_S="1")
    subprocess.run([os.path.join(venv_bin, "ray"), "start", "--head", f"--port={port}", "--num-cpus=1",
                    "--num-gpus=0", f"--autoscaling-config={config}", f"--temp-dir={temp_dir}",
                    "--resources=" + json.dumps({ROLE_RESOURCES["driver"]: driver_slots}),
                    "--include-dashboard=false", "--disable-usage-stats"],
                   env=env, check=True, capture_output=True, text=True, timeout=180)
    return address, temp_dir


def rehearse_autoscaling(spec, cluster: Cluster, scale: float, max_nodes: int = 2, idle_s: float = 30.0,
                         plans=None, overheads: Overheads = Overheads(), stream=None) -> Autoscaled:
    """Run `spec` (a fresh store) as a rehearsal on an autoscaling fake cluster of at most
    `max_nodes` nodes shaped as `cluster`; the node use sampled throughout, then the wait for the
    idle nodes to go (at most `idle_s` + 120 s)."""
    import ray

    from cliffsweep.orchestrator.driver import LOCAL_RAY_ENV, RAY_ENV, run_sweep
    from cliffsweep.planner.plan import plan_spec
    from cliffsweep.simulate.localray import stop_processes

    # As on the shipped autoscaling configs: cluster roles, one driver slot per job the full
    # cluster's GPUs hold (without them the sweep would size itself by the empty cluster it
    # starts on: one job at a time)
    r = spec.resources
    slots = max(1, int(max_nodes * cluster.gpus_per_node // max(1e-9, r.gpus_per_worker * r.workers_per_trial)))
    plans = scaled_plans(plans if plans is not None else plan_spec(spec), scale)
    full = Cluster(max_nodes, cluster.gpus_per_node, cluster.cpus_per_node)
    predicted = overheads.predict(spec, plans, full, scale)
    # A private cluster on loopback, as the static rehearsal's: without token authentication
    # (Ray turns it on by itself for `ray start` once ~/.ray/auth_token exists, and this driver
    # would then be refused); a mode already set is kept
    os.environ.setdefault("RAY_AUTH_MODE", "disabled")
    address, temp_dir = start_autoscaling_head(cluster, max_nodes, idle_s, slots)
    use, stop, ended, t0 = NodeUse(), threading.Event(), threading.Event(), time.time()
    gone: list[float] = []  # when no worker node was up any more, after the sweep ended

    def sample() -> None:
        last = time.time()
        while not stop.wait(SAMPLE_S):
            now = time.time()
            if use.sample(now - t0, now - last) == 0 and ended.is_set() and not gone:
                gone.append(now)
            last = now

    try:
        ray.init(address=address, runtime_env={"env_vars": {**RAY_ENV, **LOCAL_RAY_ENV}}, log_to_driver=False)
        spec = spec.model_copy(update={"ray_address": address, "resources": r.model_copy(update={"cluster_roles": True})})
        sampler = threading.Thread(target=sample, name="node-use", daemon=True)
        t0 = time.time()
        sampler.start()
        store = run_sweep(spec, rehearsal=rehearsal_of(plans, scale), stream=stream)
        end = time.time()
        ended.set()
        deadline = end + idle_s + 120
        while not gone and time.time() < deadline:
            time.sleep(SAMPLE_S)
        stop.set()
        sampler.join(timeout=30)
        makespan = last_evaluation(store) - t0
    finally:
        stop.set()
        ray.shutdown()
        stop_processes(temp_dir)
    return Autoscaled(makespan, predicted, use, (gone[0] - end) if gone else None, store)
