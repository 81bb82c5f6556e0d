"""The entry point's own description (issue 63 part 6): `cliffsweep --help` lists every
subcommand the parser has, and `cliffsweep --version` says the installed version."""

from __future__ import annotations

import argparse
import subprocess
import sys
from importlib.metadata import version

from cliffsweep.cli import build_parser


def _cli(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "cliffsweep.cli", *args], capture_output=True, text=True, timeout=120)


def test_help_lists_every_subcommand_with_a_line_of_its_own():
    (sub,) = [a for a in build_parser()._actions if isinstance(a, argparse._SubParsersAction)]
    out = _cli("--help")
    assert out.returncode == 0, out.stderr
    listed = {line.split()[1] for line in out.stdout.splitlines() if line.strip().startswith("cliffsweep ")}
    assert set(sub.choices) <= listed, f"--help leaves out {sorted(set(sub.choices) - listed)}"


def test_version_is_the_installed_packages():
    out = _cli("--version")
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == f"cliffsweep {version('cliffsweep')}"
