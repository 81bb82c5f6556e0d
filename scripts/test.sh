#!/usr/bin/env bash
# Set up (idempotent) and run the test suite: `bash scripts/test.sh [pytest args]`.
# The default suite excludes tests marked slow; `bash scripts/test.sh -m slow` runs those.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
bash scripts/setup_browser.sh   # headless Chromium for the report screenshot test
# Two pytest processes (pytest-xdist), each taking whole test modules (a module's fixtures, such
# as one shared sweep, stay in one process), the slowest modules first (tests/conftest.py
# HEAVY_FIRST); CLIFFSWEEP_TEST_PROCS=1 runs them in this process, one at a time. Not three: the
# two cores are 99.8 % busy through the run (2026-12-07, docs/testing.md), so a third process
# only shares them.
procs=${CLIFFSWEEP_TEST_PROCS:-2}
if [ "$procs" -gt 1 ]; then
  exec .venv/bin/python -m pytest -n "$procs" --dist loadfile --no-loadscope-reorder "$@"
fi
exec .venv/bin/python -m pytest -p no:xdist "$@"
