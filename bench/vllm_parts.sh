#!/usr/bin/env bash
# vLLM for the lent GPU machines, carried in parts (docs/gpu.md "vLLM on CUDA", issue 39 part 5).
#
# The device has torch 2.11.0+cu130 and Python 3.12, no package registry, and a call carries at
# most 64 MiB. vllm 0.25.0 is the release that pins torch==2.11.0 (later ones pin 2.13) and links
# libcudart.so.13; its wheel (cp38-abi3, manylinux_2_28) is ~250 MB. So:
#
#   bash bench/vllm_parts.sh fetch            # here: the wheel and what its engine imports, for cp312
#   bash bench/vllm_parts.sh split            # here: .whl/vllm-parts/part-NN of 60 MB + SHA256SUMS
#   bash bench/vllm_parts.sh --dry-run        # here: fetch, split, join into a temporary folder and
#                                             #   check every file against its checksum (no install)
#   # then one `run` call per part, each carrying .whl/vllm-parts/part-NN, and on the device:
#   bash bench/vllm_parts.sh join /tmp/vllm-parts   # appends the parts there, checks, installs to /tmp/site
#
# Files in /tmp on the device survive between calls while the machine stays warm.
set -euo pipefail
cd "$(dirname "$0")/.."
VLLM=${VLLM_VERSION:-0.25.0}
# What vLLM's engine imports that the device lacks (docs/gpu.md): small pure-Python or cp312 wheels.
DEPS=(msgspec pyzmq blake3 cbor2 pybase64 gguf partial-json-parser compressed-tensors depyf
      lark llguidance outlines_core xgrammar diskcache interegular cloudpickle prometheus-fastapi-instrumentator
      openai-harmony setproctitle)
dir=.whl/vllm
parts=.whl/vllm-parts
PIPDL=(python3 -m pip download --no-deps --only-binary=:all: --python-version 3.12
       --platform manylinux_2_28_x86_64 --platform manylinux2014_x86_64 --platform manylinux_2_17_x86_64
       --platform any --implementation cp -d "$dir")

fetch() {
  mkdir -p "$dir"
  "${PIPDL[@]}" "vllm==$VLLM"
  for d in "${DEPS[@]}"; do "${PIPDL[@]}" "$d" || echo "warning: $d has no cp312 wheel here" >&2; done
  ls -la "$dir"
}

split_parts() {
  rm -rf "$parts" && mkdir -p "$parts"
  tar cf - -C "$dir" . | split -b 60M -d -a 2 - "$parts/part-"
  (cd "$parts" && sha256sum part-* > SHA256SUMS && (cd "../vllm" && sha256sum *) > FILES.SHA256)
  ls -la "$parts"
}

join_parts() {  # folder holding part-NN, SHA256SUMS, FILES.SHA256 (the device: /tmp/vllm-parts)
  local from into=${2:-/tmp/vllm-wheels} site=${3:-/tmp/site}
  from=$(cd "$1" && pwd)
  (cd "$from" && sha256sum -c SHA256SUMS)
  rm -rf "$into" && mkdir -p "$into"
  cat "$from"/part-* | tar xf - -C "$into"
  (cd "$into" && sha256sum -c "$from/FILES.SHA256")
  if [ "${DRY:-0}" = 1 ]; then
    echo "dry run: joined and checked in $into; not installed"
    return
  fi
  python3 -m pip install -q --no-index --no-deps --no-compile --target "$site" "$into"/*.whl
  PYTHONPATH=$site python3 -c "import vllm, torch; print('vllm', vllm.__version__, '| torch', torch.__version__)"
}

case ${1:-} in
  fetch) fetch ;;
  split) split_parts ;;
  join) join_parts "${2:?folder of the parts}" ;;
  --dry-run)
    fetch
    split_parts
    DRY=1 join_parts "$parts" "$(mktemp -d)"
    ;;
  *) echo "usage: $0 fetch | split | join DIR | --dry-run" >&2; exit 2 ;;
esac
