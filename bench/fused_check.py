"""Every method on the fused path (issue 23 part 2): one training step's loss and gradients with
recipe.kernels liger (Liger's fused linear cross-entropy, trainables/losses.py) against the
chunked torch loss, per registered method, on the toy model, through the training step itself
(microbatch.accumulate: the method's begin_step, data loss and penalty).

    TRITON_INTERPRET=1 python bench/fused_check.py --device cpu    # CPU, Triton's interpreter, fp32
    python bench/fused_check.py --device cuda                      # GPU, bf16 autocast on both paths

Prints one line per method and, with --json, writes {method: {...}}. A method passes when the
losses and every gradient agree within the tolerance (fp32: 5e-5 of the largest gradient; CUDA
bf16: 3e-2), and the fused kernel really ran (calls counted), except for methods whose CE
comes from a chunked pass shared with another term (kl: CE and KL over both heads at once),
which are listed as such. TRITON_INTERPRET must be set before triton is first imported, hence
a process of its own (tests/test_fastpath.py runs this script).
"""

from __future__ import annotations

import argparse
import json
import os
import sys

import torch

BATCH, MAX_LEN = 4, 96
CHUNKED_ONLY = {"kl": "CE and KL from one chunked pass over both heads (losses.response_ce_kl)"}
"""Methods whose CE does not go through the fused kernel, and why."""


def setup(name: str, device: torch.device, stats: dict | None = None):
    """Toy model with the method prepared as a trial prepares it (statistics as trainables/stats.py
    computes them, or `stats` from an earlier setup: they depend on the base model only), its
    trainable weights moved off the base, and one step's micro-batches; and the statistics."""
    from cliffsweep.evals.tasks import build_task
    from cliffsweep.models import load_model, resolve_model
    from cliffsweep.trainables import data
    from cliffsweep.trainables.methods import build_method

    torch.manual_seed(0)
    model, tok = load_model(resolve_model("toy:qwen2-tiny"), "float32")
    pad = tok.pad_token_id if tok.pad_token_id is not None else tok.eos_token_id
    learn = data.encode(tok, build_task("toy_facts", {"n_train": 16}).train_examples(), MAX_LEN)
    retain = data.encode(tok, build_task("toy_arith", {}).train_examples()[:16], MAX_LEN, retain=True)
    method = build_method(name, {})
    if stats is None:
        stats = {}
    if not stats and method.stats_inputs() is not None:
        chunk = lambda xs: [data.collate(xs[i:i + BATCH], pad) for i in range(0, len(xs), BATCH)]  # noqa: E731
        stats = method.compute_stats(model, chunk(retain), chunk(learn))
    model = method.prepare(model, stats).to(device)
    # As if trained a while: the model then differs from the base its method compares to (IW's
    # weights, KL's term, EWC's penalty are no longer trivial at the first step).
    g = torch.Generator().manual_seed(1)
    with torch.no_grad():
        for p in model.parameters():
            if p.requires_grad:
                p.add_(torch.randn(p.shape, generator=g).to(device) * 0.02)
    step = data.epoch_steps(learn, retain if method.retain_fraction > 0 else [], BATCH, method.retain_fraction,
                            0, 0, 0, 1, pad, 2)[0]
    micro = [{k: v.to(device) for k, v in b.items()} for b in step.micro]
    return (model, method, micro, step.n_tokens), stats


def one_step(prepared, fused: bool) -> tuple[float, dict[str, torch.Tensor], int]:
    """(loss, gradients, fused-kernel calls) of one step of `prepared` (setup's) with the fused CE on or off."""
    from cliffsweep.trainables import losses, microbatch

    model, method, micro, n_tokens = prepared
    device = next(model.parameters()).device
    calls = [0]
    real = losses.fused_ce

    def counted(*a, **k):
        calls[0] += 1
        return real(*a, **k)

    losses.fused_ce = counted
    losses.use_fused_ce(fused)
    try:
        amp = torch.bfloat16 if device.type == "cuda" else None
        loss = microbatch.accumulate(model, method, micro, n_tokens, 1, amp)
    finally:
        losses.use_fused_ce(False)
        losses.fused_ce = real
    grads = {n: p.grad.detach().float().cpu() for n, p in model.named_parameters() if p.grad is not None}
    return float(loss), grads, calls[0]


def check(name: str, device: torch.device, tol: float) -> dict:
    # Each side gets a model and method of its own (a method may hold hooks on its model); the
    # statistics, a function of the base model, are computed once.
    prepared, stats = setup(name, device)
    ref_loss, ref, _ = one_step(prepared, False)
    loss, got, calls = one_step(setup(name, device, stats)[0], True)
    scale = max(float(g.abs().max()) for g in ref.values())
    grad_diff = max(float((got[n] - ref[n]).abs().max()) for n in ref) / scale
    loss_diff = abs(loss - ref_loss) / max(abs(ref_loss), 1e-12)
    fused_expected = name not in CHUNKED_ONLY
    ok = (set(got) == set(ref) and loss_diff <= tol and grad_diff <= tol and (calls > 0) == fused_expected)
    return {"loss": ref_loss, "fused_loss": loss, "loss_rel_diff": loss_diff, "grad_rel_diff": grad_diff,
            "fused_calls": calls, "trained_tensors": len(ref), "tolerance": tol, "pass": ok,
            "note": CHUNKED_ONLY.get(name, "")}


def main(argv: list[str] | None = None) -> int:
    from cliffsweep.trainables.methods import METHODS

    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--device", choices=["cpu", "cuda"], default="cuda" if torch.cuda.is_available() else "cpu")
    p.add_argument("--methods", nargs="*", default=sorted(METHODS))
    p.add_argument("--json", help="write the results here")
    a = p.parse_args(argv)
    if a.device == "cpu" and os.environ.get("TRITON_INTERPRET") != "1":
        p.error("on a CPU the fused kernel runs only under Triton's interpreter: set TRITON_INTERPRET=1")
    torch.set_num_threads(min(2, torch.get_num_threads()))
    tol = 3e-2 if a.device == "cuda" else 5e-5
    results = {}
    for name in a.methods:
        results[name] = r = check(name, torch.device(a.device), tol)
        print(f"{name:10s} {'ok  ' if r['pass'] else 'FAIL'} loss {r['loss']:.6f} vs fused {r['fused_loss']:.6f} "
              f"(rel {r['loss_rel_diff']:.1e}); gradients rel {r['grad_rel_diff']:.1e} over {r['trained_tensors']} "
              f"tensors; fused calls {r['fused_calls']}{'; ' + r['note'] if r['note'] else ''}", flush=True)
    if a.json:
        with open(a.json, "w") as f:
            json.dump(results, f, indent=2)
    return 0 if all(r["pass"] for r in results.values()) else 1


if __name__ == "__main__":
    sys.exit(main())
