#!/usr/bin/env bash
# One lease of a GPU machine, as one command (docs/gpu.md, "A session's GPU checks"): the GPU
# check in its quick form (bench/gpu_check.sh --quick) and a toy sweep through Ray Tune + Train
# on CUDA with the hf evaluator (cliffsweep/configs/gpu_toy.yaml), each stage under its own time
# limit so that the whole fits one 10-minute call and a 15-minute lease.
#
#   bash bench/gpu_session.sh --dry-run      # here, on a CPU: every stage, tiny model, CPU sweep
#   bash bench/gpu_session.sh --out "$OUT"   # on the device, carrying .whl (below)
#
# The device has torch, transformers, peft, triton, pyarrow and pandas but no Ray, pydantic or
# Liger, and no registry. `.whl/` (ignored) carries them: the wheels named in docs/gpu.md, and
# Ray 2.60.0 for cp312 unpacked, its Java jar and dashboard web build removed, as one
# `ray-slim.tar.xz` (26 MB; the wheel's 79 MB exceed one call's 64 MiB carry).
# Issue 39's stages: GPU_SESSION_STAGES="shared vllm" runs the co-located real-model sweep
# (configs/gpu_shared.yaml) and gpu_smoke.yaml served by vLLM on CUDA (vLLM joined from its parts
# first: bench/lease_parts.sh).
# Results: DIR/log.txt (everything printed) and DIR/results.tgz (the check's JSON and markdown,
# the sweep's status and tables), rewritten after every stage so a cut-off run keeps its stages.
set -uo pipefail
cd "$(dirname "$0")/.."
out=gpu-session
dry=0
while [ $# -gt 0 ]; do
  case $1 in
    --out) out=$2; shift 2 ;;
    --dry-run) dry=1; shift ;;
    *) echo "unknown argument $1" >&2; exit 2 ;;
  esac
done
mkdir -p "$out"
out=$(cd "$out" && pwd)
work=$(mktemp -d /tmp/gpu-session.XXXX)
exec > >(tee -a "$out/log.txt") 2>&1
export PYTHONUNBUFFERED=1 TOKENIZERS_PARALLELISM=false
if [ $dry = 1 ]; then
  PY=${PYTHON:-.venv/bin/python}
else
  PY=python3
  site=/tmp/site
  if [ -z "${GPU_SESSION_INSTALLED:-}" ]; then  # else bench/lease_parts.sh installed into /tmp/site
    $PY -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target $site .whl/*.whl || exit 1
    $PY -c "import tarfile; tarfile.open('.whl/ray-slim.tar.xz').extractall('$site', filter='fully_trusted')" || exit 1
  fi
  export PYTHONPATH=$site:$PWD PATH=$site/bin:$PATH
fi
export PYTHONPATH="$PWD${PYTHONPATH:+:$PYTHONPATH}"
save() {  # the stages' text, the sweeps' own logs and the Ray workers' error logs; no checkpoints
  for d in "$work"/*/_logs; do [ -d "$d" ] && cp "$d"/*.log "$work/" 2>/dev/null; done
  tail -n 200 /tmp/ray/session_latest/logs/worker-*.err 2>/dev/null | grep -v "^$" | tail -n 400 > "$work/ray-workers.err"
  tar czf "$out/results.tgz" -C "$work" --exclude='*.safetensors' --exclude='*.pt' --exclude='*.bin' . ; }

echo "== machine"
nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv 2>/dev/null || echo "no nvidia-smi"
$PY - <<'EOF'
import platform, torch, transformers, ray
print("python", platform.python_version(), "| torch", torch.__version__, "| cuda", torch.version.cuda,
      "| transformers", transformers.__version__, "| ray", ray.__version__,
      "| gpu", torch.cuda.get_device_name(0) if torch.cuda.is_available() else "none")
EOF

check() {  # stages, limit
  local t0=$SECONDS
  if [ $dry = 1 ]; then
    PYTHON=$PY bash bench/gpu_check.sh --dry-run --stages "$1" --limit "$2" --out "$work/gpu-check"
  else
    PYTHON=$PY bash bench/gpu_check.sh --quick --stages "$1" --limit "$2" --out "$work/gpu-check"
  fi
  echo "== check [$1]: exit $?, $((SECONDS - t0)) s"
  save
}

profile() {  # limit: where a 1.5B step's time goes (docs/gpu.md, MFU below target), and the
  # 1.5B bf16_master+liger row the first lease's stage limit cut off
  local t0=$SECONDS args=(--models Qwen/Qwen2.5-1.5B-Instruct --micro 8 --seq 1024 --steps 6)
  [ $dry = 1 ] && args=(--tiny --micro 2 --seq 64 --steps 1) && export TRITON_INTERPRET=1
  mkdir -p "$work/gpu-check"
  timeout "$1" $PY bench/bench_gpu.py "${args[@]}" --profile --recipes fsdp_bf16+liger autocast bf16_master+liger \
    --timeout 120 --json "$work/gpu-check/profile.json"
  echo "== profile: exit $?, $((SECONDS - t0)) s"
  save
}

levers() {  # limit: the 1.5B default recipe beside the levers its profile pointed at (docs/gpu.md)
  local t0=$SECONDS args=(--models Qwen/Qwen2.5-1.5B-Instruct --micro 8 --seq 1024 --steps 6)
  [ $dry = 1 ] && args=(--tiny --micro 2 --seq 64 --steps 1) && export TRITON_INTERPRET=1
  mkdir -p "$work/gpu-check"
  timeout "$1" $PY bench/bench_gpu.py "${args[@]}" --profile --timeout 90 --json "$work/gpu-check/levers.json" \
    --recipes fsdp_bf16+liger fsdp_bf16+liger-fce fsdp_bf16+liger+fused_adam fsdp_bf16+liger-fce+fused_adam
  echo "== levers: exit $?, $((SECONDS - t0)) s"
  save
}

sweep() {  # limit
  local t0=$SECONDS spec=cliffsweep/configs/gpu_toy.yaml
  if [ $dry = 1 ]; then  # no GPU here: the same file without GPU requests, one lr
    spec=$work/gpu_toy_cpu.yaml
    sed -e '/gpus_per_/d' -e 's/cpus_per_worker: 2/cpus_per_worker: 1/' -e 's/^lrs: .*/lrs: [3.0e-3]/' cliffsweep/configs/gpu_toy.yaml > "$spec"
  fi
  timeout -s INT "$1" $PY -m cliffsweep.cli run "$spec" --eval-backend hf --store "$work/gpu-toy"
  echo "== sweep: exit $?, $((SECONDS - t0)) s"
  $PY -m cliffsweep.cli status "$work/gpu-toy" > "$work/status.txt" 2>&1
  cat "$work/status.txt"
  $PY - "$work/gpu-toy" > "$work/tables.txt" 2>&1 <<'EOF'
import sys
import pandas as pd
from cliffsweep.storage.store import Store
store = Store(sys.argv[1])
pd.set_option("display.width", 250)
for table in ("trials", "evals", "errors"):
    df = store.read(table)
    print(f"== {table}: {len(df)} rows")
    if len(df):
        print(df.drop(columns=[c for c in df.columns if c in ("config", "traceback")]).to_string(max_colwidth=60))
EOF
  cat "$work/tables.txt" | head -80
  save
}

table_of() {  # store: status, then errors (out-of-memory ones counted) and evaluations, once each
  $PY -m cliffsweep.cli status "$1" 2>&1 | head -40
  $PY - "$1" <<'EOF'
import sys
from cliffsweep.storage.store import Store
store = Store(sys.argv[1])
errors = store.read("errors")
oom = int(errors["message"].str.contains("out of memory", case=False).sum()) if len(errors) else 0
evals = store.read("evals")
once = not evals.duplicated(["trial_id", "step", "task", "metric"]).any()
print(f"== errors {len(errors)} (out of memory: {oom}); evaluated checkpoints "
      f"{evals.groupby(['trial_id', 'step']).ngroups}; every evaluation once: {once}")
canary = evals.dropna(subset=["canary_distance"]).groupby(["trial_id", "step"])["canary_distance"].max()
if len(canary):  # half precision's kernel noise, one value per loaded checkpoint (docs/store.md)
    q = canary.quantile([0.5, 0.9, 1.0]).tolist()
    print(f"== canary distance of {len(canary)} loads: median {q[0]:.3g}, 90th percentile {q[1]:.3g}, max {q[2]:.3g}")
EOF
}

vllm_sweep() {  # limit: gpu_smoke.yaml served by vLLM on CUDA (issue 39 part 5; vLLM from bench/lease_parts.sh)
  local t0=$SECONDS spec=cliffsweep/configs/gpu_smoke.yaml
  if [ $dry = 1 ]; then  # no GPU here: the toy model, no GPU requests, one lr, vLLM's CPU build
    spec=$work/gpu_smoke_cpu.yaml
    sed -e '/gpus_per_/d' -e 's/cpus_per_worker: 2/cpus_per_worker: 1/' -e 's/^lrs: .*/lrs: [1.0e-4]/' \
        -e 's#"smollm2:135m-instruct", dtype: bfloat16#"toy:qwen2-tiny", dtype: float32#' \
        -e 's/kv_cache_mb: 2048/kv_cache_mb: 32/' -e 's/max_model_len: 1024/max_model_len: 256/' \
        -e 's/max_seq_len: 256/max_seq_len: 128/' cliffsweep/configs/gpu_smoke.yaml > "$spec"
  elif [ -n "${GPU_SESSION_VLLM_LRS:-}" ]; then  # a short lease: fewer lrs, every method (full and LoRA reloads)
    spec=$work/gpu_smoke_lrs.yaml
    sed -e "s/^lrs: .*/lrs: [$GPU_SESSION_VLLM_LRS]/" cliffsweep/configs/gpu_smoke.yaml > "$spec"
  fi
  timeout -s INT "$1" $PY -m cliffsweep.cli run "$spec" --eval-backend vllm --store "$work/gpu-smoke-vllm"
  echo "== vllm: exit $?, $((SECONDS - t0)) s"
  table_of "$work/gpu-smoke-vllm" > "$work/vllm.txt" 2>&1
  cat "$work/vllm.txt"
  save
}

shared_sweep() {  # limit: issue 39's co-located sweep, 2 trainers x 0.3 + 2 hf evaluators x 0.2
  local t0=$SECONDS
  if [ $dry = 1 ]; then  # a real-model sweep on one GPU: here its checks only
    $PY -m cliffsweep.cli validate cliffsweep/configs/gpu_shared.yaml
    $PY -m cliffsweep.cli plan cliffsweep/configs/gpu_shared.yaml | grep -A4 "What shares"
    echo "== shared: validate and plan only on a CPU, $((SECONDS - t0)) s"
    return
  fi
  timeout -s INT "$1" $PY -m cliffsweep.cli run cliffsweep/configs/gpu_shared.yaml --eval-backend hf \
    --store "$work/gpu-shared"
  echo "== shared: exit $?, $((SECONDS - t0)) s"
  table_of "$work/gpu-shared" > "$work/shared.txt" 2>&1
  cat "$work/shared.txt"
  save
}

stages=${GPU_SESSION_STAGES:-"profile sweep"}
for s in $stages; do
  case $s in
    profile) profile 200 ;;
    levers) levers 240 ;;
    fused) check fused 90 ;;
    small) check train_small 150 ;;
    sweep) sweep "${GPU_SESSION_SWEEP_S:-180}" ;;
    rest) check "stats train_large" 50 ;;
    vllm) vllm_sweep "${GPU_SESSION_VLLM_S:-240}" ;;
    shared) shared_sweep "${GPU_SESSION_SHARED_S:-300}" ;;
  esac
done
echo "== done"
