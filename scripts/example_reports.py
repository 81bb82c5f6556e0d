"""Regenerate the example reports in docs/example-report/ from the code as it is.

    .venv/bin/python scripts/example_reports.py            # the paper-sized synthetic report (~1.5 min)
    .venv/bin/python scripts/example_reports.py --toy      # also the toy default sweep's (+ ~3 min)

The paper-sized one is analysed from the synthetic stores (analysis/synthetic.paper_sized) plus
one SIB statistics file (Fig. 2's input, as a sweep stores it); the toy one from a fresh run of
the default sweep. Each `cliffsweep analyze` runs in the stores' parent folder, so the report
names them as a user's would (`paper, paper_fsdp, paper_lora`; `results/toy`).

tests/test_analysis_e2e.py (paper) and tests/test_toy_regimes.py (toy) write the same reports
and fail when a checked-in report.md differs from what the code writes (`same_report`): the
paper-sized one word for word, the toy one with its numbers masked (a real sweep's last digits
may move with the machine; its words, sections and verdicts may not).
"""

from __future__ import annotations

import argparse
import math
import os
import re
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
DOCS = ROOT / "docs" / "example-report"
PAPER_STORES = ("paper", "paper_fsdp", "paper_lora")
N_BOOT = "100"
KEPT = ("report.md", "frontiers.csv")


def paper_stores(root: Path) -> list[str]:
    """The paper-sized synthetic stores under `root`, with one SIB statistics file; their names."""
    import torch
    from safetensors.torch import save_file

    from cliffsweep.analysis.synthetic import paper_sized, write_synthetic_store

    for name, sweep in paper_sized(n=100).items():
        write_synthetic_store(str(root / name), sweep)
    # Fig. 2's input as a sweep stores it: SIB's statistics file of one model (spectra as
    # trainables/curvature.py writes them; the measurement itself: tests/test_realmodels.py)
    os.makedirs(root / "paper/stats/qwen2.5-0.5b", exist_ok=True)
    save_file({"sib:hessian_base": torch.tensor([40.0, -20.0, 10.0]), "sib:hessian_rescaled": torch.tensor([20.0, -15.0, 9.0]),
               "sib:grad_sq_before": torch.tensor(8.0), "sib:grad_sq_after": torch.tensor(6.0)},
              str(root / "paper/stats/qwen2.5-0.5b/sib-0123456789abcdef.safetensors"))
    return list(PAPER_STORES)


def analyze(cwd: Path, stores: list[str], out: Path, n_boot: str | None = N_BOOT) -> subprocess.CompletedProcess:
    """`cliffsweep analyze STORES --out OUT [--n-boot N]`, run in `cwd` (None: the default, as a
    new user runs it on the toy store)."""
    boot = ["--n-boot", n_boot] if n_boot else []
    return subprocess.run([sys.executable, "-m", "cliffsweep.cli", "analyze", *stores, "--out", str(out), *boot],
                          cwd=cwd, capture_output=True, text=True, timeout=1800)


def masked(text: str) -> str:
    """A report's words with every number replaced by '#'."""
    return re.sub(r"[-+]?\d[\d.eE+\-]*%?", "#", text)


NUMBER = re.compile(r"[-+]?\d[\d.eE+\-]*%?")


def _same_line(a: str, b: str) -> bool:
    """Lines equal in their words, and in their numbers within float rounding (a value written
    3.08e-16 on one machine and -1.92e-15 on another is the same 0: issue 60 part 7)."""
    if a == b:
        return True
    if masked(a) != masked(b):
        return False
    for x, y in zip(NUMBER.findall(a), NUMBER.findall(b)):
        try:
            fx, fy = float(x.rstrip("%")), float(y.rstrip("%"))
        except ValueError:
            if x != y:
                return False
            continue
        if not math.isclose(fx, fy, rel_tol=1e-9, abs_tol=1e-9):
            return False
    return True


def same_report(written: str, kept: Path, numbers: bool = True) -> list[str]:
    """The lines where the report the code wrote differs from the checked-in copy (empty: same):
    word for word and number for number within float rounding, or (``numbers`` False) words only."""
    import difflib

    a, b = kept.read_text().splitlines(), written.splitlines()
    if not numbers:
        a, b = [masked(x) for x in a], [masked(x) for x in b]
    elif len(a) == len(b) and all(_same_line(x, y) for x, y in zip(a, b)):
        return []
    return [line for line in difflib.unified_diff(a, b, str(kept), "written", lineterm="", n=0)][:40]


def copy_report(out: Path, dest: Path) -> None:
    dest.mkdir(parents=True, exist_ok=True)
    for old in dest.glob("*.png"):
        old.unlink()
    for f in [*(out / k for k in KEPT), *sorted(out.glob("*.png"))]:
        shutil.copy(f, dest / f.name)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--toy", action="store_true", help="also run the toy default sweep and keep its report")
    args = p.parse_args(argv)
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp)
        r = analyze(root, paper_stores(root), root / "paper-report")
        if r.returncode:
            print(r.stderr[-3000:], file=sys.stderr)
            return 1
        copy_report(root / "paper-report", DOCS)
        print(f"wrote {DOCS}/report.md")
        if args.toy:
            run = subprocess.run([sys.executable, "-m", "cliffsweep.cli", "run", "--store", "results/toy"], cwd=root,
                                 capture_output=True, text=True, timeout=1800)
            r = analyze(root, ["results/toy"], root / "toy-report", None) if run.returncode == 0 else run
            if r.returncode:
                print(r.stdout[-2000:] + r.stderr[-3000:], file=sys.stderr)
                return 1
            copy_report(root / "toy-report", DOCS / "toy")
            print(f"wrote {DOCS}/toy/report.md")
    return 0


if __name__ == "__main__":
    sys.exit(main())
