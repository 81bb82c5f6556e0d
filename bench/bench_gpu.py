"""GPU checks this project could not run on its CPU machines (docs/gpu.md): training throughput,
MFU and peak memory per training recipe (issue 23: the fast path and its alternatives), the
once-per-model statistics' peak memory beside training's, and vLLM generation throughput, on
real-size architectures built with random weights on the device from their published configs
(cliffsweep/planner/archs.py PUBLISHED: no hub, no download).

    python bench/bench_gpu.py                                    # every recipe that fits, 4 models
    python bench/bench_gpu.py --models Qwen/Qwen2.5-1.5B-Instruct --recipes fsdp_bf16+liger
    python bench/bench_gpu.py --stats --models Qwen/Qwen2.5-0.5B-Instruct  # statistics' peak
    python bench/bench_gpu.py --tiny --steps 2                   # a tiny config: runs on a CPU (tests)

Each (model, recipe) trains in a process of its own (Liger patches RoPE module-wide, and the
allocator's peak must be that recipe's): one micro-batch of --micro rows x --seq tokens per
optimizer step, the registry's AdamW, the project's SFT loss through the training step itself
(microbatch.accumulate), timed between CUDA synchronisations after a warm-up step. MFU = tokens/s
x the FLOPs per token `cliffsweep plan` counts / the GPU's dense bf16 peak. A recipe whose memory
`plan` puts above the GPU's is recorded as skipped, with the figure. `bench/gpu_check.sh` runs it
all in stages and writes the JSON and markdown that `cliffsweep plan --measured` reads.
"""

from __future__ import annotations

import argparse
import datetime
import json
import os
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass

from cliffsweep.planner import costs, mfu
from cliffsweep.planner.archs import PUBLISHED, Arch

# vLLM's CPU attention supports head sizes such as 32 (toy/models.py); everything else tiny.
TINY = Arch("qwen2", hidden=128, layers=2, heads=4, kv_heads=2, intermediate=256, vocab=512, tied=True,
            max_positions=512, source="tiny (bench/bench_gpu.py)")
DEFAULT_MODELS = ["Qwen/Qwen2.5-0.5B-Instruct", "Qwen/Qwen2.5-1.5B-Instruct", "meta-llama/Llama-3.2-3B-Instruct",
                  "meta-llama/Llama-3.1-8B-Instruct"]


@dataclass(frozen=True)
class Recipe:
    dtype: str
    """The weights' dtype (models[].dtype)."""
    precision: str
    """recipe.precision (autocast, fsdp_bf16), or "weights" for a bf16 model."""
    kernels: str
    compile: bool = False
    master: bool = True
    """recipe.master_weights, for bf16 weights."""
    path: str = ""
    """The precision path `plan` files the measurement under (mfu.MeasuredMFU.path)."""
    fused_ce: bool = True
    """With liger: the response loss through Liger's fused linear cross-entropy (off: Liger's norm,
    SwiGLU and RoPE kernels, the loss as plain logits + cross_entropy). A lever, not a recipe."""
    fused_adam: bool = False
    """AdamW with torch's fused CUDA kernel instead of its default foreach path. A lever, not a recipe."""


RECIPES: dict[str, Recipe] = {
    "autocast": Recipe("float32", "autocast", "none", path="autocast"),  # the default before issue 23
    "fsdp_bf16": Recipe("float32", "fsdp_bf16", "none", path="fsdp_bf16"),
    "fsdp_bf16+liger": Recipe("float32", "fsdp_bf16", "liger", path="fsdp_bf16"),  # the default now (auto)
    "fsdp_bf16+liger+compile": Recipe("float32", "fsdp_bf16", "liger", True, path="fsdp_bf16"),
    "bf16_master": Recipe("bfloat16", "weights", "none", path="bf16_master"),
    "bf16_master+liger": Recipe("bfloat16", "weights", "liger", path="bf16_master"),  # the other candidate
    "bf16+liger": Recipe("bfloat16", "weights", "liger", master=False, path="bf16"),  # pure bf16: what fits 8B
    # Levers the 1.5B profile pointed at (docs/gpu.md, "Where a step's time goes"):
    "fsdp_bf16+liger-fce": Recipe("float32", "fsdp_bf16", "liger", path="fsdp_bf16", fused_ce=False),
    "fsdp_bf16+liger+fused_adam": Recipe("float32", "fsdp_bf16", "liger", path="fsdp_bf16", fused_adam=True),
    "fsdp_bf16+liger-fce+fused_adam": Recipe("float32", "fsdp_bf16", "liger", path="fsdp_bf16", fused_ce=False,
                                             fused_adam=True),
}
DEFAULT_RECIPE = "fsdp_bf16+liger"


def peak_tflops(device_name: str) -> float | None:
    for gpu in mfu.GPUS:
        if gpu.name.split("-")[0] in device_name:
            return gpu.bf16_tflops
    return None


def plan_memory_gb(arch: Arch, recipe: Recipe, micro: int, seq: int, grad_ckpt: bool, method: str = "sft") -> float:
    prec = costs.precision(recipe.dtype, True, recipe.master)
    return costs.train_memory(arch, method, {}, "adamw", prec, "ddp", 1, micro, seq, grad_ckpt).total / 1e9


def one_rank_group(device_type: str) -> None:
    """A process group of one (FSDP2 needs one, even to shard over a single rank)."""
    import torch.distributed as dist

    if not dist.is_initialized():
        path = tempfile.mktemp(prefix="bench-gpu-pg-")
        dist.init_process_group("nccl" if device_type == "cuda" else "gloo", init_method=f"file://{path}",
                                rank=0, world_size=1)


def random_batch(arch: Arch, micro: int, seq: int, device):
    import torch

    ids = torch.randint(0, arch.vocab, (micro, seq), device=device)
    labels = ids.clone()
    labels[:, : seq // 4] = -100  # a prompt, masked as in training
    return {"input_ids": ids, "attention_mask": torch.ones_like(ids), "labels": labels,
            "example_idx": torch.arange(micro, device=device), "is_retain": torch.zeros(micro, dtype=torch.bool, device=device)}


def build(arch: Arch, recipe: Recipe, grad_ckpt: bool, device):
    """The model as a training worker sets it up for `recipe` (trainables/trial.py order):
    kernels, checkpointing, compilation, FSDP2 wrap, then the optimizer before any forward."""
    import torch
    from transformers import AutoModelForCausalLM

    from cliffsweep.trainables import fastpath, microbatch, parallel
    from cliffsweep.trainables.optimizers import build_optimizer

    torch.manual_seed(0)
    # Built on the device: Llama-3.1-8B's random initialisation on the CPU took over 150 s (issue 15).
    with torch.device(device):
        model = AutoModelForCausalLM.from_config(arch.hf_config(), dtype=getattr(torch, recipe.dtype))
    fast = fastpath.resolve(recipe.precision if recipe.precision != "weights" else "auto", recipe.kernels,
                            recipe.compile, device.type, next(model.parameters()).dtype, True)
    kernels = fastpath.apply_kernels(model, fast.kernels, device.type)
    if not recipe.fused_ce:
        from cliffsweep.trainables import losses

        losses.use_fused_ce(False)
        kernels = [k for k in kernels if k != "fused_linear_cross_entropy"]
    if grad_ckpt:
        microbatch.enable_checkpointing(model)
    if fast.compile:
        fastpath.compile_layers(model)
    if fast.mixed_fsdp:
        one_rank_group(device.type)
        parallel.shard(model, mixed=True)
    model.train()
    if recipe.fused_adam:
        opt = torch.optim.AdamW([p for p in model.parameters() if p.requires_grad], lr=1e-5, weight_decay=0.01,
                                fused=device.type == "cuda")
    else:
        opt = build_optimizer("adamw", model, 1e-5, 0.01, recipe.master)
    return model, opt, fast, kernels


KERNEL_KINDS = (("gemm", ("gemm", "aten::mm", "aten::addmm", "aten::bmm", "nvjet", "cutlass", "sm90_xmma", "sm80_xmma", "cublas", "matmul")),
                ("attention", ("flash", "fmha", "sdpa", "attention", "efficient_attention")),
                ("optimizer", ("multi_tensor", "foreach", "adam")),
                ("fsdp/copies", ("nccl", "copy", "memcpy", "memset", "cat", "split", "chunk")),
                ("elementwise/reduce", ("elementwise", "reduce", "vectorized", "unrolled", "softmax", "at::native")),
                ("liger/triton", ("liger", "triton", "_kernel")))
"""First match wins: torch's own kernels are named `..._kernel` too, so the Triton catch-all goes last."""


def kernel_kind(name: str) -> str:
    low = name.lower()
    return next((kind for kind, marks in KERNEL_KINDS if any(m in low for m in marks)), "other")


def profile_steps(step, steps: int, cuda: bool) -> dict:
    """Where one step's time goes (docs/gpu.md: MFU below target, cause unknown): `steps` steps under
    torch.profiler; GPU busy time (the sum of kernel times) against wall time says whether the GPU
    waits on the host, and kernel time by kind says which kernels the rest goes to. On a CPU (the
    dry run) the ops' own CPU times stand in for kernels."""
    import torch
    from torch.profiler import ProfilerActivity, profile

    sync = torch.cuda.synchronize if cuda else (lambda: None)
    sync()
    t = time.perf_counter()
    with profile(activities=[ProfilerActivity.CPU] + ([ProfilerActivity.CUDA] if cuda else [])) as prof:
        for _ in range(steps):
            step()
        sync()
    wall_ms = (time.perf_counter() - t) * 1e3 / steps
    if cuda:
        # A record_function annotation (`Optimizer.step#AdamW.step`) shows on the GPU timeline as a
        # span over kernels already counted: leave it out of the sums.
        kernels = [(e.name, e.device_time_total) for e in prof.events()
                   if e.device_type == torch.autograd.DeviceType.CUDA and not getattr(e, "is_user_annotation", False)
                   and "#" not in e.name]
    else:
        kernels = [(e.key, e.self_cpu_time_total) for e in prof.key_averages() if e.key.startswith("aten::")]
    by_kind: dict[str, float] = {}
    by_name: dict[str, float] = {}
    for name, us in kernels:
        ms = us / 1e3 / steps
        by_kind[kernel_kind(name)] = by_kind.get(kernel_kind(name), 0.0) + ms
        by_name[name] = by_name.get(name, 0.0) + ms
    top = sorted(by_name.items(), key=lambda kv: -kv[1])[:15]
    return {"wall_ms": wall_ms, "gpu_busy_ms": sum(by_kind.values()), "kernels_per_step": len(kernels) / steps,
            "by_kind_ms": dict(sorted(by_kind.items(), key=lambda kv: -kv[1])),
            "top_kernels_ms": [[name[:90], ms] for name, ms in top]}


def bench_training(arch: Arch, recipe: Recipe, micro: int, seq: int, steps: int, grad_ckpt: bool,
                   profile: bool = False) -> dict:
    import torch

    from cliffsweep.trainables import microbatch
    from cliffsweep.trainables.methods import build_method

    cuda = torch.cuda.is_available()
    device = torch.device("cuda" if cuda else "cpu")
    model, opt, fast, kernels = build(arch, recipe, grad_ckpt, device)
    sft = build_method("sft")
    batch = random_batch(arch, micro, seq, device)
    n_tokens = int((batch["labels"][:, 1:] != -100).sum())

    def step():
        loss = microbatch.accumulate(model, sft, [batch], n_tokens, 1, fast.amp)
        opt.step()
        opt.zero_grad(set_to_none=True)
        return loss

    first = float(step())  # warm-up: allocations, kernels, compilation, optimizer state
    if cuda:
        torch.cuda.synchronize()
        torch.cuda.reset_peak_memory_stats()
    t = time.perf_counter()
    for _ in range(steps):
        last = step()
    if cuda:
        torch.cuda.synchronize()
    seconds = time.perf_counter() - t
    tok_s = micro * seq * steps / seconds
    peak = peak_tflops(torch.cuda.get_device_name()) if cuda else None
    prof = {"profile": profile_steps(step, 2, cuda)} if profile else {}
    return {**prof, "train_tokens_per_s": tok_s, "step_seconds": seconds / steps,
            "mfu": tok_s * costs.flops_per_token(arch, "sft", grad_ckpt) / (peak * 1e12) if peak else None,
            "peak_memory_gb": torch.cuda.max_memory_allocated() / 1e9 if cuda else None,
            "compute": fast.label, "kernels_used": kernels, "first_loss": first, "last_loss": float(last)}


STATS_METHODS = ("ewc", "mas", "sib", "flow")
"""The methods with once-per-model statistics passes over data (each declares its pass in its own file: methods/costs.py; rpsft's is an SVD)."""


def bench_stats(arch: Arch, method_name: str, micro: int, seq: int, batches: int, grad_ckpt: bool) -> dict:
    """Peak memory of `method_name`'s statistics on the device, as trainables/stats.py runs them
    (fp32 weights, bf16 autocast on a GPU, micro-batches of the recipe's size), on random rows."""
    import torch
    from transformers import AutoModelForCausalLM

    from cliffsweep.trainables.methods import build_method
    from cliffsweep.trainables.microbatch import autocast_dtype, enable_checkpointing

    cuda = torch.cuda.is_available()
    device = torch.device("cuda" if cuda else "cpu")
    torch.manual_seed(0)
    with torch.device(device):
        model = AutoModelForCausalLM.from_config(arch.hf_config(), dtype=torch.float32)
    if grad_ckpt:
        enable_checkpointing(model)
    method = build_method(method_name, {"hessian_top_k": 0} if method_name == "sib" else {})
    data = [{k: v for k, v in random_batch(arch, micro * 2, seq, device).items()} for _ in range(batches)]
    amp = autocast_dtype(torch.float32, device.type)
    if cuda:
        torch.cuda.synchronize()
        torch.cuda.reset_peak_memory_stats()
    t = time.perf_counter()
    with torch.autocast("cuda", dtype=amp) if amp is not None else torch.autocast("cpu", enabled=False):
        method.compute_stats(model, data, data, micro_batch_size=micro)
    if cuda:
        torch.cuda.synchronize()
    return {"stats_seconds": time.perf_counter() - t,
            "stats_peak_memory_gb": torch.cuda.max_memory_allocated() / 1e9 if cuda else None}


def device_name() -> str:
    import torch

    return torch.cuda.get_device_name() if torch.cuda.is_available() else "cpu"


def child(a) -> int:
    """One measurement in this process: prints one `RESULT {json}` line."""
    arch = TINY if a.tiny else PUBLISHED[a.models[0]]
    if a.stats:
        row = bench_stats(arch, a.method, a.micro, a.seq, 2, a.grad_ckpt)
    else:
        row = bench_training(arch, RECIPES[a.recipes[0]], a.micro, a.seq, a.steps, a.grad_ckpt, a.profile)
    print("RESULT " + json.dumps(row), flush=True)
    return 0


def run_child(argv: list[str], timeout: float) -> dict:
    """`argv` in a fresh process (bench_gpu.py --child ...); its RESULT, or why there is none."""
    try:
        out = subprocess.run([sys.executable, os.path.abspath(__file__), "--child", *argv], capture_output=True,
                             text=True, timeout=timeout)
    except subprocess.TimeoutExpired:
        return {"error": f"timed out after {timeout:.0f} s"}
    for line in out.stdout.splitlines():
        if line.startswith("RESULT "):
            return json.loads(line[len("RESULT "):])
    tail = (out.stderr or out.stdout).strip().splitlines()[-3:]
    return {"error": f"exit {out.returncode}: " + " | ".join(tail)}


def measure(a, archs: dict[str, Arch], save=lambda rows: None) -> list[dict]:
    """Every (model, recipe) row (or, with --stats, every (model, statistics method) row); `save`
    gets the rows so far after each one (a stage cut off by its time limit keeps what it measured)."""
    rows = []
    gpu_gb = next((g.memory_gb for g in mfu.GPUS if g.name.split("-")[0] in device_name()), None)
    common = (["--micro", str(a.micro), "--seq", str(a.seq), "--steps", str(a.steps)] + (["--grad-ckpt"] if a.grad_ckpt else [])
              + (["--profile"] if a.profile else []))
    for name, arch in archs.items():
        model_args = ["--tiny"] if a.tiny else ["--models", name]
        for what in (a.stats_methods if a.stats else a.recipes):
            row = {"model": name, "params": arch.params, "gpu": device_name(), "date": datetime.date.today().isoformat(),
                   "micro": a.micro, "seq": a.seq, "grad_ckpt": a.grad_ckpt}
            if a.stats:
                row.update(method=what, train_peak_memory_gb=None)
            else:
                r = RECIPES[what]
                row.update(recipe=what, path=r.path, kernels=r.kernels, compile=r.compile, dtype=r.dtype,
                           master_weights=r.master if r.dtype != "float32" else None,
                           plan_memory_gb=plan_memory_gb(arch, r, a.micro, a.seq, a.grad_ckpt))
                if gpu_gb is not None and row["plan_memory_gb"] > 0.95 * gpu_gb:
                    row["skipped"] = f"plan: {row['plan_memory_gb']:.0f} GB > {gpu_gb:.0f} GB"
                    rows.append(row)
                    print(f"{name} {what}: skipped ({row['skipped']})", flush=True)
                    save(rows)
                    continue
            row.update(run_child(model_args + common + (["--stats", "--method", what] if a.stats else ["--recipes", what]),
                                 a.timeout))
            rows.append(row)
            print(describe(row), flush=True)
            save(rows)
    return rows


def describe(row: dict) -> str:
    if "error" in row:
        return f"{row['model']} {row.get('recipe') or row.get('method')}: ERROR {row['error']}"
    if "method" in row:
        peak = row["stats_peak_memory_gb"]
        return (f"{row['model']} statistics {row['method']}: {row['stats_seconds']:.1f} s, peak "
                f"{'n/a (CPU)' if peak is None else f'{peak:.2f} GB'}")
    mfu = f"{row['mfu']:.1%}" if row["mfu"] is not None else "n/a (no GPU peak known)"
    mem = f"{row['peak_memory_gb']:.2f} GB" if row["peak_memory_gb"] is not None else "n/a (CPU)"
    text = (f"{row['model']} {row['recipe']} ({row['compute']}): {row['train_tokens_per_s']:,.0f} tokens/s, "
            f"MFU {mfu}, peak {mem} vs plan {row['plan_memory_gb']:.2f} GB")
    if "profile" in row:
        p = row["profile"]
        text += (f"\n  profile: {p['wall_ms']:.1f} ms/step wall, GPU busy {p['gpu_busy_ms']:.1f} ms "
                 f"({p['gpu_busy_ms'] / p['wall_ms']:.0%}), {p['kernels_per_step']:.0f} kernels/step\n  by kind (ms/step): "
                 + ", ".join(f"{k} {v:.1f}" for k, v in p["by_kind_ms"].items())
                 + "".join(f"\n    {ms:7.2f} ms  {name}" for name, ms in p["top_kernels_ms"]))
    return text


def bench_vllm(arch: Arch, dtype: str, prompts: int, prompt_len: int, gen_tokens: int) -> dict:
    """Generation throughput of a random-weight folder; prompts are token ids, no tokenizer."""
    import torch
    from transformers import AutoModelForCausalLM
    from vllm import LLM, SamplingParams
    from vllm.inputs import TokensPrompt

    cuda = torch.cuda.is_available()
    with tempfile.TemporaryDirectory(prefix="bench-gpu-") as folder:
        vdtype = "bfloat16" if cuda else "float32"
        AutoModelForCausalLM.from_config(arch.hf_config(), dtype=getattr(torch, vdtype)).save_pretrained(folder)
        engine = {"gpu_memory_utilization": 0.85} if cuda else {"kv_cache_memory_bytes": 64 * 2**20, "enforce_eager": True}
        t = time.perf_counter()
        llm = LLM(model=folder, dtype=vdtype, skip_tokenizer_init=True, seed=0,
                  max_model_len=prompt_len + gen_tokens, **engine)
        start_s = time.perf_counter() - t
        g = torch.Generator().manual_seed(0)
        batch = [TokensPrompt(prompt_token_ids=torch.randint(0, arch.vocab, (prompt_len,), generator=g).tolist())
                 for _ in range(prompts)]
        params = SamplingParams(max_tokens=gen_tokens, temperature=0.0, ignore_eos=True, detokenize=False)
        t = time.perf_counter()
        outs = llm.generate(batch, params, use_tqdm=False)
        seconds = time.perf_counter() - t
        generated = sum(len(o.outputs[0].token_ids) for o in outs)
        del llm
    return {"vllm_dtype": vdtype, "vllm_start_s": start_s, "gen_tokens": generated, "gen_tokens_per_s": generated / seconds}


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--models", nargs="+", default=DEFAULT_MODELS, help=f"hub ids in archs.PUBLISHED: {sorted(PUBLISHED)}")
    p.add_argument("--tiny", action="store_true", help="a tiny config instead (CPU smoke run)")
    p.add_argument("--recipes", nargs="+", default=list(RECIPES), choices=list(RECIPES))
    p.add_argument("--micro", type=int, default=8, help="rows per micro-batch (paper.yaml: 8 per worker)")
    p.add_argument("--seq", type=int, default=1024, help="tokens per row (paper.yaml max_seq_len)")
    p.add_argument("--steps", type=int, default=10)
    p.add_argument("--grad-ckpt", action="store_true", help="activation checkpointing")
    p.add_argument("--stats", action="store_true", help="statistics' peak memory per stats method instead")
    p.add_argument("--profile", action="store_true", help="also where a step's time goes (torch.profiler over 2 steps)")
    p.add_argument("--method", choices=STATS_METHODS, help=argparse.SUPPRESS)
    p.add_argument("--stats-methods", nargs="+", default=list(STATS_METHODS), choices=STATS_METHODS,
                   help="with --stats: which methods' statistics")
    p.add_argument("--vllm", action="store_true", help="also vLLM generation throughput (needs vllm)")
    p.add_argument("--prompts", type=int, default=256)
    p.add_argument("--prompt-len", type=int, default=256)
    p.add_argument("--gen-tokens", type=int, default=256)
    p.add_argument("--timeout", type=float, default=300, help="seconds per measurement process")
    p.add_argument("--json", help="write the rows here ({'rows': [...]}, what `cliffsweep plan --measured` reads)")
    p.add_argument("--child", action="store_true", help=argparse.SUPPRESS)
    a = p.parse_args(argv)
    if a.child:
        return child(a)
    archs = {"tiny": TINY} if a.tiny else {m: PUBLISHED[m] for m in a.models}
    def save(rows: list[dict]) -> None:
        if a.json:
            with open(a.json, "w") as f:
                json.dump({"rows": rows}, f, indent=2)

    rows = measure(a, archs, save)
    if a.vllm:
        for name, arch in archs.items():
            v = bench_vllm(arch, "float32", a.prompts, a.prompt_len, a.gen_tokens)
            rows.append({"model": name, "params": arch.params, "gpu": device_name(), **v})
            print(f"{name} vLLM ({v['vllm_dtype']}): {v['gen_tokens_per_s']:,.0f} generated tokens/s "
                  f"({a.prompts} prompts x {a.gen_tokens}), engine start {v['vllm_start_s']:.0f} s", flush=True)
    save(rows)
    return 1 if any("error" in r for r in rows) else 0


if __name__ == "__main__":  # vLLM spawns its engine core: the guard is required
    os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
    sys.exit(main())
