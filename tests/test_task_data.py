"""Bad task data found before anything starts (issue 29 part 4): `validate` and `run` read every
local task file and list every malformed row as file:line (all of them, in every file), exit 2,
and `run` starts no Ray."""

from __future__ import annotations

import gzip
import json
import subprocess
import sys
from pathlib import Path

import yaml

ROOT = Path(__file__).resolve().parents[1]
DATA = ROOT / "tests" / "data"


def broken_gsm8k(folder: Path) -> list[str]:
    """The real GSM8K files (a few rows each) with three broken rows in two files; the
    file:line of each."""
    folder.mkdir()
    for split in ("train", "test"):
        with gzip.open(DATA / "gsm8k" / f"{split}.jsonl.gz", "rt") as f:
            rows = [next(f) for _ in range(8)]
        if split == "train":
            rows[2] = json.dumps({"question": "no answer here"}) + "\n"  # line 3: missing field
        else:
            rows[4] = '{"question": "cut short", "answer": \n'  # line 5: bad JSON
            rows[6] = json.dumps({"question": "q", "answer": "no final number"}) + "\n"  # line 7: no '#### N'
        if split == "test":  # compressed, as GSM8K ships: its rows are named by the same file:line
            with gzip.open(folder / "test.jsonl.gz", "wt") as f:
                f.write("".join(rows))
        else:
            (folder / f"{split}.jsonl").write_text("".join(rows))
    return [f"{folder}/train.jsonl:3", f"{folder}/test.jsonl.gz:5", f"{folder}/test.jsonl.gz:7"]


def test_every_malformed_row_of_every_task_file_is_listed_before_anything_starts(tmp_path):
    bad = broken_gsm8k(tmp_path / "gsm8k")
    sweep = tmp_path / "sweep.yaml"
    sweep.write_text(yaml.safe_dump({
        "name": "data", "models": [{"name": "m", "path": "toy:qwen2-tiny"}], "methods": [{"name": "sft"}],
        "lrs": [1e-3], "epochs": [1], "store": str(tmp_path / "store"),
        "tasks": {"learn": {"name": "toy_facts"},
                  "retain": [{"name": "gsm8k", "params": {"path": str(tmp_path / "gsm8k"), "n_eval": 2}}]}}))
    for command in ("validate", "run"):
        r = subprocess.run([sys.executable, "-m", "cliffsweep.cli", command, str(sweep)], capture_output=True,
                           text=True, timeout=300, cwd=ROOT)
        assert r.returncode == 2, (command, r.stdout[-2000:], r.stderr[-2000:])
        for where in bad:
            assert f"{where}:" in r.stderr, (command, where, r.stderr)
        assert "missing field 'answer'" in r.stderr and "bad JSON" in r.stderr
        assert "Traceback" not in r.stderr and "Ray instance" not in r.stdout + r.stderr
    assert not (tmp_path / "store" / "trials").exists()  # nothing started


def test_the_shipped_gzipped_files_are_read_as_they_are(tmp_path):
    """tests/data as shipped (JSONL.gz, as GSM8K and SciKnowEval are distributed) is a sweep's
    data with no unpacking: `validate` reads every row, `plan` measures their exact lengths. (A
    real sweep on these files: tests/test_realmodel_sweep.py.)"""
    sweep = tmp_path / "sweep.yaml"
    sweep.write_text(yaml.safe_dump({
        "name": "shipped", "models": [{"name": "m", "path": "toy:qwen2-tiny"}], "methods": [{"name": "sft"}],
        "lrs": [1e-3], "epochs": [1], "store": str(tmp_path / "store"),
        "tasks": {"learn": {"name": "chem_l3", "params": {"path": str(DATA / "sciknoweval-chem-l3"), "n_eval": 20}},
                  "retain": [{"name": "gsm8k", "params": {"path": str(DATA / "gsm8k"), "n_eval": 60, "max_tokens": 192,
                                                          "protocol": "zeroshot"}}]}}))
    for command in ("validate", "plan"):
        r = subprocess.run([sys.executable, "-m", "cliffsweep.cli", command, str(sweep)], capture_output=True,
                           text=True, timeout=300, cwd=ROOT)
        assert r.returncode == 0, (command, r.stdout[-2000:], r.stderr[-2000:])
    assert "chem_l3: 1676 training examples, exact lengths" in r.stdout, r.stdout
