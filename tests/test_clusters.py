"""Cluster configs are data, and checked, not just parsed (docs/cluster.md "What is checked").

- Ray cluster-launcher YAMLs (AWS, GCP): Ray's own preparation (defaults filled, node types
  completed) and validation against Ray's JSON schema, with the network cut off to show that
  no cloud is asked.
- KubeRay RayCluster / RayJob: validated against clusters/schema/kuberay-v1.7.0-subset.schema.json.
- All of them: the image they name is the one the Dockerfile builds, the scheduling roles
  (driver / trainer / evaluator) are laid out the same way, the dashboard stays internal with
  token authentication on, no credential is written in them, and the sweeps they run validate.
Each check also meets a broken copy, so that it can fail.
"""

from __future__ import annotations

import copy
import json
import re
import socket
import tomllib
from pathlib import Path

import jsonschema
import pytest
import yaml

from cliffsweep.orchestrator.specfile import load_spec

ROOT = Path(__file__).resolve().parents[1]
CLUSTERS = ROOT / "clusters"
LAUNCHER = {"aws": CLUSTERS / "aws-autoscaler.yaml", "gcp": CLUSTERS / "gcp-autoscaler.yaml"}
KUBERAY = {"RayCluster": CLUSTERS / "kuberay-raycluster.yaml", "RayJob": CLUSTERS / "kuberay-rayjob.yaml"}
SCHEMA = CLUSTERS / "schema" / "kuberay-v1.7.0-subset.schema.json"
VERSION = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["version"]
IMAGE_TAG = f"cliffsweep:{VERSION}-gpu"
BUILD = f"docker build --build-arg VARIANT=gpu -t {IMAGE_TAG} ."

# Scheduling roles (docs/cluster.md "Scheduling"): custom resources the configs offer and the
# driver is to request; labels say the same to people and to label selectors.
DRIVER, TRAINER, EVALUATOR = "cliffsweep_driver", "cliffsweep_trainer", "cliffsweep_evaluator"


def load(path: Path) -> dict:
    return yaml.safe_load(path.read_text())


@pytest.fixture
def no_network(monkeypatch):
    """Any connection attempt fails the test: validation must not reach a cloud."""
    def refuse(*args, **kwargs):
        raise AssertionError(f"network access during validation: {args}")

    monkeypatch.setattr(socket.socket, "connect", refuse)
    monkeypatch.setattr(socket, "create_connection", refuse)


def ray_check(config: dict) -> dict:
    """What `ray up` does to a config before it talks to the cloud: fill Ray's provider
    defaults, complete node types, validate against Ray's ray-schema.json."""
    from ray.autoscaler._private.util import prepare_config, validate_config

    prepared = prepare_config(copy.deepcopy(config))
    validate_config(prepared)
    return prepared


def kuberay_check(doc: dict) -> None:
    schema = json.loads(SCHEMA.read_text())
    jsonschema.Draft202012Validator.check_schema(schema)
    jsonschema.Draft202012Validator(schema).validate(doc)
    spec = doc["spec"].get("rayClusterSpec", doc["spec"])
    for g in spec.get("workerGroupSpecs", []):  # KubeRay's webhook checks this, not its CRD
        assert g["minReplicas"] <= g["maxReplicas"], g["groupName"]


# --- every config -------------------------------------------------------------------------------

def test_each_config_opens_with_the_command_that_uses_it():
    files = sorted(CLUSTERS.glob("*.yaml"))
    assert set(files) == set(LAUNCHER.values()) | set(KUBERAY.values())
    for f in files:
        first = f.read_text().splitlines()[0]
        assert first.startswith(("# ray up -y clusters/", "# kubectl apply -f clusters/")), f.name
        assert f"clusters/{f.name}" in first, f.name


def test_launcher_configs_pass_rays_own_preparation_and_schema_offline(no_network):
    for cloud, path in LAUNCHER.items():
        config = load(path)
        assert config["provider"]["type"] == cloud
        prepared = ray_check(config)
        assert prepared["head_node_type"] == "head"
        assert prepared["head_setup_commands"] == [] and prepared["setup_commands"] == []  # all in the image
        # Ray's schema wants integer resources per node type; a typo'd key is refused, too
        for mutate in (lambda c: c["available_node_types"]["gpu_trainer"]["resources"].update(GPU=0.5),
                       lambda c: c["available_node_types"]["head"].update(min_worker=1),
                       lambda c: c["available_node_types"]["gpu_trainer"].update(min_workers=c["max_workers"] + 1)):
            broken = copy.deepcopy(config)
            mutate(broken)
            with pytest.raises((jsonschema.ValidationError, ValueError)):
                ray_check(broken)
        if cloud == "gcp":  # Ray's GCP provider tells compute from TPU nodes by machineType
            for name, t in config["available_node_types"].items():
                assert "machineType" in t["node_config"], name


def test_kuberay_manifests_match_the_shipped_kuberay_schema():
    schema = json.loads(SCHEMA.read_text())
    assert schema["x-kuberay-version"] == "v1.7.0" and "v1.7.0" in schema["description"]
    for kind, path in KUBERAY.items():
        doc = load(path)
        assert doc["kind"] == kind
        kuberay_check(doc)
    cluster = load(KUBERAY["RayCluster"])
    for mutate in (lambda d: d["spec"]["authOptions"].update(mode="tokens"),          # enum
                   lambda d: d["spec"]["workerGroupSpecs"][0].pop("minReplicas"),      # required
                   lambda d: d["spec"]["headGroupSpec"].update(rayStartParam={}),      # unknown field
                   lambda d: d["spec"]["workerGroupSpecs"][0]["template"]["spec"]["containers"][0]
                   ["resources"]["limits"].update(memory="48 GB"),                    # not a quantity
                   lambda d: d["spec"]["workerGroupSpecs"][0].update(minReplicas=20)):  # min > max
        broken = copy.deepcopy(cluster)
        mutate(broken)
        with pytest.raises((jsonschema.ValidationError, AssertionError)):
            kuberay_check(broken)


def test_rayjob_is_the_raycluster_plus_a_resuming_entrypoint():
    job, cluster = load(KUBERAY["RayJob"]), load(KUBERAY["RayCluster"])
    assert job["spec"]["rayClusterSpec"] == cluster["spec"]  # one cluster shape, no drift
    entry = job["spec"]["entrypoint"].split()
    assert entry[:2] == ["cliffsweep", "run"] and len(entry) == 3, entry
    assert job["spec"]["backoffLimit"] >= 1  # a retry = a new cluster, so it must resume:
    spec = load_spec(ROOT / entry[2].removeprefix("/app/"))  # the image has the repo at /app
    assert spec.ray_address == "auto"
    assert re.match(r"^(s3|gs)://", spec.store_uri) and re.match(r"^(s3|gs)://", spec.checkpoint_uri)


# --- the image ----------------------------------------------------------------------------------

def images() -> dict[str, str]:
    found = {}
    for path in LAUNCHER.values():
        found[path.name] = load(path)["docker"]["image"]
    for path in KUBERAY.values():
        doc = load(path)
        spec = doc["spec"].get("rayClusterSpec", doc["spec"])
        for i, g in enumerate([spec["headGroupSpec"], *spec["workerGroupSpecs"]]):
            for c in g["template"]["spec"]["containers"]:
                found[f"{path.name}[{i}].{c['name']}"] = c["image"]
    return found


def test_configs_name_the_image_the_dockerfile_and_docs_build():
    dockerfile = (ROOT / "Dockerfile").read_text()
    assert dockerfile.splitlines()[0].startswith(f"# {BUILD}")
    assert BUILD in (ROOT / "docs" / "cluster.md").read_text()
    for where, image in images().items():
        assert image.split("/")[-1] == IMAGE_TAG, (where, image)


def test_dockerfile_copies_only_what_exists_and_installs_like_ci():
    text = (ROOT / "Dockerfile").read_text()
    copies = re.findall(r"^COPY\s+(.+?)\s+\S+$", text, flags=re.M)
    assert copies
    for line in copies:
        for src in line.split():
            assert (ROOT / src.rstrip("/")).exists(), src
    assert "scripts/setup.sh" in text and "ARG VARIANT" in text
    ignored = (ROOT / ".dockerignore").read_text().split()
    for line in copies:  # nothing the image needs is excluded from the build context
        for src in line.split():
            assert src.rstrip("/") not in ignored, src


# --- scheduling roles -------------------------------------------------------------------------

def roles(path: Path) -> dict[str, dict]:
    """Per node type / group: Ray resources, labels, whether it is spot, GPUs per node,
    max nodes. One shape for launcher and KubeRay configs."""
    doc = load(path)
    out = {}
    if "available_node_types" in doc:
        for name, t in doc["available_node_types"].items():
            nc = t["node_config"]
            spot = (nc.get("InstanceMarketOptions", {}).get("MarketType") == "spot"
                    or nc.get("scheduling", {}).get("provisioningModel") == "SPOT")
            out[name] = {"resources": t["resources"], "labels": t.get("labels", {}), "spot": spot,
                         "gpus": t["resources"].get("GPU", 0), "max": t.get("max_workers", 0 if name == "head" else None)}
    else:
        spec = doc["spec"].get("rayClusterSpec", doc["spec"])
        for g in [dict(spec["headGroupSpec"], groupName="head"), *spec["workerGroupSpecs"]]:
            pod = g["template"]["spec"]
            limits = pod["containers"][0]["resources"]["limits"]
            out[g["groupName"]] = {
                "resources": {k: int(v) for k, v in g.get("resources", {}).items()}, "labels": g.get("labels", {}),
                "spot": pod.get("nodeSelector", {}).get("cloud.google.com/gke-spot") == "true",
                "gpus": int(limits.get("nvidia.com/gpu", 0)), "max": g.get("maxReplicas", 0)}
    return out


def check_roles(nodes: dict[str, dict]) -> None:
    head = nodes["head"]
    assert not head["spot"] and head["labels"]["cliffsweep.io/role"] == "driver"
    trainers = [n for n in nodes.values() if TRAINER in n["resources"]]
    evaluators = [n for n in nodes.values() if EVALUATOR in n["resources"]]
    assert trainers and evaluators
    for n in nodes.values():
        # trial drivers only where nothing is reclaimed; every role has its own node type
        assert (DRIVER in n["resources"]) <= (not n["spot"])
        assert sum(r in n["resources"] for r in (DRIVER, TRAINER, EVALUATOR)) == 1, n
        assert n["labels"]["cliffsweep.io/capacity"] == ("spot" if n["spot"] else "on-demand")
    for n in trainers:  # one trainer slot per GPU; spot, since a trial resumes from its checkpoint
        assert n["resources"][TRAINER] == n["gpus"] >= 1 and n["spot"]
        assert n["labels"]["cliffsweep.io/role"] == "trainer"
    for n in evaluators:  # evaluators on GPUs of their own, not reclaimed under a loaded engine
        assert n["resources"][EVALUATOR] == n["gpus"] >= 1 and not n["spot"]
        assert n["labels"]["cliffsweep.io/role"] == "evaluator"
    # driver slots = trainer GPUs at full scale: a trial driver never waits for a slot while
    # a trainer GPU could still be added
    assert head["resources"][DRIVER] == sum(n["max"] * n["gpus"] for n in trainers)


def test_every_config_lays_out_the_same_scheduling_roles():
    for path in [*LAUNCHER.values(), *KUBERAY.values()]:
        check_roles(roles(path))
    nodes = roles(LAUNCHER["aws"])
    nodes["gpu_trainer"]["spot"] = False  # an on-demand trainer pool would be fine, but say so
    with pytest.raises(AssertionError):
        check_roles(nodes)


# --- security basics ----------------------------------------------------------------------------

CREDENTIAL = re.compile(r"AKIA[0-9A-Z]{16}|(?i:aws_secret_access_key)\s*[:=]|BEGIN [A-Z ]*PRIVATE KEY|"
                        r"\"type\":\s*\"service_account\"|RAY_AUTH_TOKEN\s*[:=]")


def test_dashboard_stays_internal_with_token_auth_and_no_credential_is_written():
    for path in LAUNCHER.values():
        config = load(path)
        head_cmd = " ".join(config["head_start_ray_commands"])
        assert "--dashboard-host=127.0.0.1" in head_cmd
        for cmds in (config["head_start_ray_commands"], config["worker_start_ray_commands"]):
            assert "RAY_AUTH_MODE=token" in cmds[-1] and "RAY_AUTH_TOKEN_PATH=" in cmds[-1]
    for path in KUBERAY.values():
        doc = load(path)
        spec = doc["spec"].get("rayClusterSpec", doc["spec"])
        assert spec["authOptions"]["mode"] == "token"
        head = spec["headGroupSpec"]
        assert head.get("serviceType", "ClusterIP") == "ClusterIP" and not head.get("enableIngress")
        assert "dashboard-host" not in head["rayStartParams"]
        for g in [head, *spec["workerGroupSpecs"]]:
            for c in g["template"]["spec"]["containers"]:
                for e in c.get("env", []):  # secrets come from Secret objects, not literals
                    assert not re.search(r"KEY|SECRET|TOKEN|PASSWORD", e["name"]) or "valueFrom" in e, e
    for f in [*CLUSTERS.glob("*.yaml"), ROOT / "Dockerfile"]:
        assert not CREDENTIAL.search(f.read_text()), f.name
    assert CREDENTIAL.search("aws_secret_access_key = abc")  # the pattern does match one


def test_sweeps_the_configs_run_are_valid():
    for f in sorted(CLUSTERS.glob("*.yaml")):
        for rel in re.findall(r"(?:/app/)?(cliffsweep/configs/[\w.-]+\.yaml)", f.read_text()):
            load_spec(ROOT / rel)
