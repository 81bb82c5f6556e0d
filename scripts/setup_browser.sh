#!/usr/bin/env bash
# Installs headless Chromium (Debian package), needed by tests/test_analysis_e2e.py, which
# renders report.html and checks the screenshot. Idempotent: does nothing if already present.
# Usage: scripts/setup_browser.sh   (as root, or with sudo available)
set -euo pipefail
if [ -x /usr/bin/chromium ]; then
  echo "chromium already installed: $(/usr/bin/chromium --version 2>/dev/null || echo /usr/bin/chromium)"
  exit 0
fi
SUDO=""
if [ "$(id -u)" != "0" ]; then SUDO="sudo"; fi
export DEBIAN_FRONTEND=noninteractive
$SUDO apt-get update
$SUDO apt-get install -y --no-install-recommends chromium fonts-dejavu-core
/usr/bin/chromium --version
