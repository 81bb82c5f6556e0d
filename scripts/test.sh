#!/usr/bin/env bash
# Set up (idempotent) and run the test suite: `bash scripts/test.sh [pytest args]`.
# The default suite excludes tests marked slow; `bash scripts/test.sh -m slow` runs those.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
bash scripts/setup_browser.sh   # headless Chromium for the report screenshot test
exec .venv/bin/python -m pytest "$@"
