"""A damaged store (issue 29): a truncated and a garbage Parquet file are both named, file by
file, by `status`, `analyze` and `run` (which starts no Ray), with no traceback and exit 2;
`compact --repair` sets them aside (nothing deleted) and every readable row stays."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import yaml

from cliffsweep.analysis.synthetic import SyntheticSweep, write_synthetic_store
from cliffsweep.storage.health import DAMAGED, check
from cliffsweep.storage.store import Store

ROOT = Path(__file__).resolve().parents[1]


def cli(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "cliffsweep.cli", *args], capture_output=True, text=True,
                          timeout=300, cwd=ROOT)


def damaged_store(tmp_path) -> tuple[Path, str, str, int]:
    """A small synthetic store, compacted, with one evals unit file truncated after compaction and
    the samples table's compacted file overwritten with garbage; (root, the two damaged paths,
    the evals rows before the damage)."""
    root = tmp_path / "store"
    store = write_synthetic_store(str(root), SyntheticSweep(models={"m": "cliff"}, series=(("sft", "sft"),),
                                                            lrs=(1e-4, 1e-3), epochs=(1,)))
    store.compact()
    evals = len(store.read("evals"))
    # a unit written after the compaction (as a later run would), then cut short
    extra = store.read("evals").head(3).assign(trial_id="m-late", step=7)
    store.write("evals", "m-late-7", extra)
    unit = root / "evals" / "m-late-7.parquet"
    unit.write_bytes(unit.read_bytes()[:40])
    samples = next((root / "samples").glob("compacted-*.parquet"))
    samples.write_bytes(b"this is not parquet" * 10)
    return root, "evals/m-late-7.parquet", f"samples/{samples.name}", evals


def test_every_damaged_file_is_named_and_repair_keeps_every_readable_row(tmp_path):
    root, bad_unit, bad_compacted, evals_before = damaged_store(tmp_path)
    store = Store(str(root))
    assert {d.path for d in check(store)} == {bad_unit, bad_compacted}
    sweep = tmp_path / "sweep.yaml"
    sweep.write_text(yaml.safe_dump({
        "name": "health", "models": [{"name": "m", "path": "toy:qwen2-tiny"}], "methods": [{"name": "sft"}],
        "lrs": [1e-3], "epochs": [1], "tasks": {"learn": {"name": "toy_facts"}, "retain": [{"name": "toy_arith"}]},
        "store": str(root)}))
    for args in (["status", str(root)], ["analyze", str(root), "--out", str(tmp_path / "report")],
                 ["run", str(sweep)]):
        r = cli(*args)
        assert r.returncode == 2, (args, r.stdout[-2000:], r.stderr[-2000:])
        assert bad_unit in r.stderr and bad_compacted in r.stderr, (args, r.stderr)
        assert "Traceback" not in r.stderr + r.stdout and "--repair" in r.stderr, (args, r.stderr)
    assert "Ray instance" not in r.stdout + r.stderr  # run refused before starting Ray

    repaired = cli("compact", str(root), "--repair")
    assert repaired.returncode == 0, repaired.stderr[-2000:]
    assert bad_unit in repaired.stdout and bad_compacted in repaired.stdout
    aside = {str(p.relative_to(next((root / DAMAGED).iterdir()))) for p in (root / DAMAGED).rglob("*") if p.is_file()}
    assert {bad_unit, bad_compacted, "samples/_compaction.json"} <= aside  # moved, not deleted
    assert check(store) == []
    assert len(store.read("evals")) == evals_before  # every readable row: all but the cut unit's
    assert len(store.read("trials")) > 0
    assert cli("status", str(root)).returncode == 0
