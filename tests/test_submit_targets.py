"""`cliffsweep submit`'s targets are one interface (issue 60 part 6, submit.Target): a new
scheduler is one class named in the table. This file adds a throw-away one, "pbs", and nothing
else: `submit --help` lists it with its own flags, and `submit --to pbs` reaches it."""

from __future__ import annotations

import pytest

from cliffsweep import submit
from cliffsweep.cli import main

SENT: list[tuple[str, str, int]] = []


class Pbs:
    help = "a PBS queue, with qsub (this test's throw-away target)"

    def add_arguments(self, group) -> None:
        group.add_argument("--queue", default="workq", help="PBS: the queue")
        group.add_argument("--walltime-h", type=int, default=24, help="PBS: hours")

    def submit(self, args) -> int:
        SENT.append((args.spec, args.queue, args.walltime_h))
        return 0


@pytest.fixture
def pbs(monkeypatch):
    monkeypatch.setitem(submit.TARGETS, "pbs", f"{__name__}:Pbs")
    SENT.clear()
    yield


def test_a_new_target_is_listed_with_its_flags(pbs, capsys):
    with pytest.raises(SystemExit):
        main(["submit", "--help"])
    out = capsys.readouterr().out
    assert "--to {pbs,ray,slurm}" in out and "--to pbs:" in out and "--queue QUEUE" in out
    assert "a PBS queue, with qsub" in out and "--array ARRAY" in out  # Slurm's flags stay Slurm's


def test_submit_to_the_new_target_calls_it_and_no_other(pbs):
    assert main(["submit", "--to", "pbs", "sweep.yaml", "--queue", "gpu", "--walltime-h", "4"]) == 0
    assert SENT == [("sweep.yaml", "gpu", 4)]


def test_an_unknown_target_is_refused_by_name(pbs, capsys):
    with pytest.raises(SystemExit) as exc:
        main(["submit", "--to", "lsf", "sweep.yaml"])
    assert exc.value.code == 2 and "invalid choice: 'lsf'" in capsys.readouterr().err


def test_slurm_is_still_reached_by_its_old_flag(pbs, tmp_path, capsys):
    """`--slurm` is `--to slurm` (the README's and clusters/slurm/'s commands): a toy sweep's
    dry run prints Slurm's script, not the PBS target's call."""
    from pathlib import Path

    toy = Path(__file__).resolve().parents[1] / "cliffsweep" / "configs" / "toy.yaml"
    assert main(["submit", "--slurm", str(toy), "--array", "2", "--dry-run"]) == 0
    assert "#SBATCH --array=0-1" in capsys.readouterr().out and SENT == []
