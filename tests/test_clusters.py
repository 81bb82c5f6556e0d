"""Cluster configs are data too: each parses, opens with its command, and runs a shipped sweep."""

from __future__ import annotations

from pathlib import Path

import yaml

from cliffsweep.orchestrator.spec import load_spec

ROOT = Path(__file__).resolve().parents[1]


def test_cluster_configs_parse_and_point_at_valid_sweeps():
    files = sorted((ROOT / "clusters").glob("*.yaml"))
    assert len(files) >= 2
    for f in files:
        doc = yaml.safe_load(f.read_text())
        first = f.read_text().splitlines()[0]
        assert first.startswith("# ") and ("ray up" in first or "kubectl apply" in first), f.name
        text = f.read_text()
        for token in text.split():
            if token.startswith(("cliffsweep/configs/", "/app/cliffsweep/configs/")):
                load_spec(ROOT / token.removeprefix("/app/"))
        assert doc
    job = yaml.safe_load((ROOT / "clusters" / "kuberay-rayjob.yaml").read_text())
    assert job["kind"] == "RayJob" and job["spec"]["entrypoint"].startswith("cliffsweep run ")
    auto = yaml.safe_load((ROOT / "clusters" / "aws-autoscaler.yaml").read_text())
    assert auto["head_node_type"] in auto["available_node_types"]
