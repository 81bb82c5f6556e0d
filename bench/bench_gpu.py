"""GPU checks this project could not run on its CPU machines (docs/gpu.md): training throughput,
MFU and peak memory at the paper's recipe, and vLLM generation throughput, on real-size
architectures built with random weights from their published configs (cliffsweep/archs.py
PUBLISHED: no hub, no download).

    python bench/bench_gpu.py                                  # Qwen2.5-1.5B and Llama-3.1-8B
    python bench/bench_gpu.py --models Qwen/Qwen2.5-7B-Instruct --micro 2 --grad-ckpt
    python bench/bench_gpu.py --tiny --steps 2                 # a tiny config: runs on a CPU (tests)

Per model it prints: training tokens/s (one GPU, one micro-batch of --micro rows x --seq tokens
per optimizer step, AdamW, the project's SFT loss), MFU = tokens/s x 6 N / the GPU's dense bf16
peak (N as in `cliffsweep plan`), peak memory measured vs `cliffsweep plan`'s estimate, and vLLM
generation tokens/s (random prompts, --gen-tokens each, ignore_eos). fp32 on a GPU trains with
bf16 autocast (mixed precision, as paper.yaml); --dtype bfloat16 trains in pure bf16.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
import time

from cliffsweep import plan
from cliffsweep.archs import PUBLISHED, Arch

# vLLM's CPU attention supports head sizes such as 32 (toy/models.py); everything else tiny.
TINY = Arch("qwen2", hidden=128, layers=2, heads=4, kv_heads=2, intermediate=256, vocab=512, tied=True,
            max_positions=512, source="tiny (bench/bench_gpu.py)")
DEFAULT_MODELS = ["Qwen/Qwen2.5-1.5B-Instruct", "meta-llama/Llama-3.1-8B-Instruct"]


def peak_tflops(device_name: str) -> float | None:
    for gpu in plan.GPUS:
        if gpu.name.split("-")[0] in device_name:
            return gpu.bf16_tflops
    return None


def bench_training(arch: Arch, dtype: str, micro: int, seq: int, steps: int, grad_ckpt: bool,
                   master_weights: bool = False) -> dict:
    import torch
    from transformers import AutoModelForCausalLM

    from cliffsweep.trainables.methods import build_method

    cuda = torch.cuda.is_available()
    device = torch.device("cuda" if cuda else "cpu")
    torch.manual_seed(0)
    # Built on the device: Llama-3.1-8B's random initialisation on the CPU took over 150 s (issue 15).
    with torch.device(device):
        model = AutoModelForCausalLM.from_config(arch.hf_config(), dtype=getattr(torch, dtype))
    if grad_ckpt:
        model.gradient_checkpointing_enable(gradient_checkpointing_kwargs={"use_reentrant": False})
    model.train()
    opt = torch.optim.AdamW(model.parameters(), lr=1e-5, weight_decay=0.01, fused=cuda)
    if master_weights and dtype != "float32":  # bf16 compute, fp32 copies and state (optimizers/master.py)
        from cliffsweep.trainables.optimizers.master import add_master_weights

        add_master_weights(opt)
    sft = build_method("sft")
    ids = torch.randint(0, arch.vocab, (micro, seq), device=device)
    labels = ids.clone()
    labels[:, : seq // 4] = -100  # a prompt, masked as in training
    batch = {"input_ids": ids, "attention_mask": torch.ones_like(ids), "labels": labels,
             "example_idx": torch.arange(micro, device=device), "is_retain": torch.zeros(micro, dtype=torch.bool, device=device)}
    amp = cuda and dtype == "float32"  # mixed precision, as trainables/microbatch.py

    def step():
        with torch.autocast("cuda", dtype=torch.bfloat16, enabled=amp):
            loss, _ = sft.loss(model, batch)
        loss.backward()
        opt.step()
        opt.zero_grad(set_to_none=True)

    step()  # warm-up: allocations, kernels, optimizer state
    if cuda:
        torch.cuda.synchronize()
        torch.cuda.reset_peak_memory_stats()
    t = time.perf_counter()
    for _ in range(steps):
        step()
    if cuda:
        torch.cuda.synchronize()
    seconds = time.perf_counter() - t
    tok_s = micro * seq * steps / seconds
    peak = peak_tflops(torch.cuda.get_device_name()) if cuda else None
    predicted = plan.train_memory(arch, "sft", {}, "adamw", plan.precision(dtype, cuda, master_weights), "ddp", 1, micro, seq, grad_ckpt)
    out = {"train_tokens_per_s": tok_s, "step_seconds": seconds / steps,
           "mfu": tok_s * plan.flops_per_token(arch, "sft", grad_ckpt) / (peak * 1e12) if peak else None,
           "peak_memory_gb": torch.cuda.max_memory_allocated() / 1e9 if cuda else None,
           "plan_memory_gb": predicted.total / 1e9}
    del model, opt
    if cuda:
        torch.cuda.empty_cache()
    return out


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
    p.add_argument("--dtype", choices=["float32", "bfloat16"], default="float32")
    p.add_argument("--micro", type=int, default=4, help="rows per micro-batch (paper.yaml: 8 per worker)")
    p.add_argument("--seq", type=int, default=1024, help="tokens per row (paper.yaml max_seq_len)")
    p.add_argument("--steps", type=int, default=10)
    p.add_argument("--grad-ckpt", action="store_true", help="activation checkpointing")
    p.add_argument("--master-weights", action="store_true",
                   help="with --dtype bfloat16: fp32 master weights and optimizer state (recipe.master_weights)")
    p.add_argument("--skip-vllm", action="store_true")
    p.add_argument("--prompts", type=int, default=256)
    p.add_argument("--prompt-len", type=int, default=256)
    p.add_argument("--gen-tokens", type=int, default=256)
    p.add_argument("--json", help="also write the results here")
    a = p.parse_args(argv)
    archs = {"tiny": TINY} if a.tiny else {m: PUBLISHED[m] for m in a.models}
    results = {}
    for name, arch in archs.items():
        row = {"params": arch.params, **bench_training(arch, a.dtype, a.micro, a.seq, a.steps, a.grad_ckpt,
                                                               a.master_weights)}
        if not a.skip_vllm:
            row.update(bench_vllm(arch, a.dtype, a.prompts, a.prompt_len, a.gen_tokens))
        results[name] = row
        mfu = f"{row['mfu']:.1%}" if row["mfu"] is not None else "n/a (no GPU peak known)"
        mem = f"{row['peak_memory_gb']:.2f} GB" if row["peak_memory_gb"] is not None else "n/a (CPU)"
        print(f"{name}: {arch.params / 1e9:.3g}B params; train {row['train_tokens_per_s']:,.0f} tokens/s "
              f"(micro {a.micro} x {a.seq}, {a.dtype}{', grad ckpt' if a.grad_ckpt else ''}), MFU {mfu}; "
              f"peak memory {mem} vs plan {row['plan_memory_gb']:.2f} GB", flush=True)
        if "gen_tokens_per_s" in row:
            print(f"    vLLM ({row['vllm_dtype']}): {row['gen_tokens_per_s']:,.0f} generated tokens/s "
                  f"({a.prompts} prompts x {a.gen_tokens}), engine start {row['vllm_start_s']:.0f} s", flush=True)
    if a.json:
        with open(a.json, "w") as f:
            json.dump(results, f, indent=2)
    return 0


if __name__ == "__main__":  # vLLM spawns its engine core: the guard is required
    os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
    sys.exit(main())
