"""`cliffsweep plan` on every packaged sweep file prints what it printed before the house issue's
refactor (issue 33): the planner moved into its own package and each method's costs into its own
file, and not one number changed. The copies in tests/golden/plan/ were taken before the change;
a deliberate change to the planner's numbers updates them in the same commit:

    python -c "from tests.test_plan_golden import write; write()"
"""

from __future__ import annotations

from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
GOLDEN = ROOT / "tests" / "golden" / "plan"
SPECS = sorted((ROOT / "cliffsweep" / "configs").glob("*.yaml"))


def text(spec: Path) -> str:
    from cliffsweep.plan_text import plan_text

    return plan_text([str(spec)]) + "\n"


def write() -> None:
    for spec in SPECS:
        (GOLDEN / f"{spec.stem}.txt").write_text(text(spec))


@pytest.mark.parametrize("spec", SPECS, ids=[s.stem for s in SPECS])
def test_plan_prints_the_same_numbers_as_before(spec):
    golden = GOLDEN / f"{spec.stem}.txt"
    assert golden.exists(), f"no stored plan for {spec.name}: write one with write() and review it"
    assert text(spec) == golden.read_text()
