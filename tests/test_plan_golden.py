"""`cliffsweep plan` on every packaged sweep file prints what it printed before the house issue's
refactor (issue 33): the planner moved into its own package and each method's costs into its own
file, and not one number changed. The copies in tests/golden/plan/ were taken before the change;
a deliberate change to the planner's numbers updates them in the same commit:

    cd tests && python -c "import test_plan_golden as t; t.write()"
"""

from __future__ import annotations

from pathlib import Path

import pytest


def loaded(path: str) -> list:
    """[(path, spec)] as `cliffsweep plan PATH` reads it."""
    from cliffsweep.orchestrator.specfile import load_spec

    return [(path, load_spec(path))]

ROOT = Path(__file__).resolve().parents[1]
GOLDEN = ROOT / "tests" / "golden" / "plan"
# The other seeds' example files point at the user's own data and at a model `plan` cannot size
# here (docs/models.md "Other seeds"): `plan` names what it needs instead (the test below).
NEED_DATA = {"seed001_optimizers", "seed003_talr", "seed004_rpsft"}
SPECS = sorted(p for p in (ROOT / "cliffsweep" / "configs").glob("*.yaml") if p.stem not in NEED_DATA)


def text(spec: Path) -> str:
    """The plan as `cliffsweep plan cliffsweep/configs/<file>` prints it from the repository root,
    with this checkout's and this user's folders (where a local model's config.json is read) as
    `<repo>` and `~`, so the copies hold on any machine."""
    from cliffsweep.planner.text import plan_text

    out = plan_text(loaded(str(spec.relative_to(ROOT)))) + "\n"
    return out.replace(str(ROOT), "<repo>").replace(str(Path.home()), "~")


def write() -> None:
    import os

    os.chdir(ROOT)
    for spec in SPECS:
        (GOLDEN / f"{spec.stem}.txt").write_text(text(spec))


@pytest.mark.parametrize("spec", SPECS, ids=[s.stem for s in SPECS])
def test_plan_prints_the_same_numbers_as_before(spec, monkeypatch):
    monkeypatch.chdir(ROOT)
    golden = GOLDEN / f"{spec.stem}.txt"
    assert golden.exists(), f"no stored plan for {spec.name}: write one with write() and review it"
    assert text(spec) == golden.read_text()


@pytest.mark.parametrize("stem", sorted(NEED_DATA))
def test_plan_on_a_seed_example_names_what_it_needs_in_one_line(stem, capsys, monkeypatch):
    """The seeds' example files (issue 31 part 6): `plan` stops with one line naming the data or
    the model it needs, exit code 2, never a traceback."""
    from cliffsweep.cli import main

    import datasets.config
    import huggingface_hub.constants

    monkeypatch.chdir(ROOT)
    # offline, as on an air-gapped machine: a hub dataset fails at once instead of after retries
    monkeypatch.setattr(huggingface_hub.constants, "HF_HUB_OFFLINE", True)
    monkeypatch.setattr(datasets.config, "HF_HUB_OFFLINE", True)
    assert main(["plan", f"cliffsweep/configs/{stem}.yaml"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert err[-1].startswith("error: ") and any(
        need in err[-1] for need in ("give the task a local `path:`", "cannot size", "no such file")), err
    assert not any("Traceback" in line for line in err)


NO_TORCH = """
import sys
from importlib.machinery import PathFinder

class WithoutTorch(PathFinder):
    @classmethod
    def find_spec(cls, name, path=None, target=None):
        return None if name.split(".")[0] == "torch" else PathFinder.find_spec(name, path, target)

sys.meta_path[sys.meta_path.index(PathFinder)] = WithoutTorch
sys.path.insert(0, sys.argv[1])
import test_plan_golden as t
sys.stdout.write(t.text(t.ROOT / "cliffsweep/configs/paper.yaml"))
assert "torch" not in sys.modules, sorted(m for m in sys.modules if m.startswith("torch"))
"""


def test_plan_of_the_paper_grid_imports_no_torch(monkeypatch):
    """Issue 38 part 4: `plan` prices a sweep from the methods' and optimizers' declared facts,
    so it runs where torch is not installed (a laptop against a cluster's sweep file): the same
    bill as the golden copy, with torch made unimportable."""
    import subprocess
    import sys

    monkeypatch.chdir(ROOT)
    run = subprocess.run([sys.executable, "-c", NO_TORCH, str(ROOT / "tests")], capture_output=True, text=True,
                         timeout=300)
    assert run.returncode == 0, run.stderr[-3000:]
    assert run.stdout == (GOLDEN / "paper.txt").read_text()
