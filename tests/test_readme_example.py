"""The README's sweep-file example as a new user runs it on a machine with no model hub (issue
63): `plan` and `simulate` price it (a hub model id, the user's own JSONL as the learn task, an
lm-eval retain task), the lengths they could not measure labelled as a proxy or an estimate; and
`validate` on every packaged sweep file, with the hub not answering, prints no client's retry
line nor any third-party line. The hub "not answering" is a closed port on loopback (HF_ENDPOINT),
so no test asks an outside host."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]


def no_hub() -> dict:
    env = {k: v for k, v in os.environ.items() if k not in ("HF_HUB_OFFLINE", "HF_DATASETS_OFFLINE", "TRANSFORMERS_OFFLINE")}
    return {**env, "HF_ENDPOINT": "http://127.0.0.1:9"}


def cli(*args: str, cwd: Path) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "cliffsweep.cli", *args], capture_output=True, text=True, cwd=cwd,
                          env=no_hub(), timeout=600)


@pytest.fixture(scope="module")
def readme_sweep(tmp_path_factory) -> Path:
    """The README's example in a folder holding the user's own files it names (data/) and the
    repository's tests/data (the GSM8K copy it points at)."""
    cwd = tmp_path_factory.mktemp("user")
    readme = (ROOT / "README.md").read_text()
    block = readme.split("```yaml\n", 1)[1].split("```", 1)[0]
    assert "Qwen/Qwen2.5-1.5B-Instruct" in block and "name: dataset" in block and "name: lm_eval" in block
    (cwd / "data").mkdir()
    rows = [{"messages": [{"role": "user", "content": f"What is the molar mass of C{k}H{2 * k + 2}?"},
                          {"role": "assistant", "content": f"{12.011 * k + 1.008 * (2 * k + 2):.2f} g/mol"}]}
            for k in range(1, 80)]
    (cwd / "data" / "chem_train.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    (cwd / "data" / "web_heldout.txt").write_text("The quick brown fox jumps over the lazy dog.\n" * 50)
    (cwd / "tests").symlink_to(ROOT / "tests")
    (cwd / "sweep.yaml").write_text(block)
    return cwd


def test_plan_prices_the_readme_example_with_its_proxies_labelled(readme_sweep):
    r = cli("plan", "sweep.yaml", cwd=readme_sweep)
    assert r.returncode == 0, r.stdout[-3000:] + r.stderr[-3000:]
    out = r.stdout
    assert "dataset: 70 training examples, lengths measured on the local data with a stand-in tokenizer, since " \
           "'Qwen/Qwen2.5-1.5B-Instruct' is not on this machine" in out, out[-4000:]
    assert "(lm_eval:arc_easy) its data is not on this machine and no lengths are packaged for it: 256 tokens " \
           "an example assumed (estimate)" in out, out[-4000:]
    assert "Traceback" not in r.stderr and "Retry" not in r.stderr, r.stderr


def test_simulate_prices_the_readme_example(readme_sweep):
    r = cli("simulate", "sweep.yaml", cwd=readme_sweep)
    assert r.returncode == 0, r.stdout[-3000:] + r.stderr[-3000:]
    assert "makespan" in r.stdout and "Traceback" not in r.stderr and "Retry" not in r.stderr, r.stderr


def test_validate_with_no_hub_prints_only_its_own_lines(tmp_path):
    """Every packaged sweep file: exit 0, or 2 where it names data on the paper's cluster
    (/data/...); either way each line is the tool's (no retry, download or warning line of a
    client), and a hub model id not cached is a note, not a wait."""
    own = ("error: ", "  - ", "  note: ", "  ", "warning: tracking.")
    for path in sorted((ROOT / "cliffsweep" / "configs").glob("*.yaml")):
        r = cli("validate", str(path), cwd=tmp_path)
        assert r.returncode in (0, 2), (path.name, r.stdout + r.stderr)
        lines = [x for x in (r.stdout + r.stderr).splitlines() if x.strip()]
        assert all(x.startswith(own) or x.startswith(f"{path}:") for x in lines), (path.name, lines)
        assert r.returncode == 0 or "/data/" in r.stderr, (path.name, r.stderr)


def _contiguous(part: list[str], out: list[str], start: int) -> int:
    """Where `part` appears in `out` as consecutive lines, at or after `start`; -1 if nowhere."""
    for i in range(start, len(out) - len(part) + 1):
        if out[i:i + len(part)] == part:
            return i + len(part)
    return -1


def test_the_readmes_plan_excerpts_are_what_plan_prints(monkeypatch):
    """Issue 63 part 6: the README's `plan` excerpts went stale (24.2 H100-hours where the tool
    printed 23.0). Each excerpt, its `...` aside, is what `cliffsweep plan` prints now, in order."""
    from cliffsweep.orchestrator.specfile import load_spec
    from cliffsweep.planner.text import plan_text

    monkeypatch.chdir(ROOT)
    readme = (ROOT / "README.md").read_text()
    blocks = [b.split("```", 1)[0] for b in readme.split("```\n$ cliffsweep plan ")[1:]]
    assert len(blocks) >= 2
    for block in blocks:
        command, *lines = block.rstrip("\n").split("\n")
        files = sorted(str(p.relative_to(ROOT)) for p in ROOT.glob(command)) if "*" in command else [command]
        out = plan_text([(f, load_spec(f)) for f in files]).splitlines()
        at, parts, part = 0, [], []
        for line in lines + ["..."]:
            if line == "...":
                parts, part = parts + [part] if part else parts, []
            else:
                part.append(line)
        for part in parts:
            at = _contiguous(part, out, at)
            assert at >= 0, f"README's excerpt of `cliffsweep plan {command}` is stale from:\n" + "\n".join(part[:3])
