"""What NanoAdam's mask refresh costs, side by side in one run (docs/methods.md, issue 40).

    .venv/bin/python bench/bench_nanoadam.py [--model smollm2:135m-instruct] [--steps 6] [--rows 4] [--seq 128]

000 App. D selects NanoAdam's weights "at each iteration" (`refresh_every: 1`, the default since
issue 40): each step then runs a top-k over every trainable weight and copies them into the
anchor. For one model, prints the mean seconds of a training step (forward, backward, AdamW,
NanoAdam's masking) with a refresh every step and every 100 steps, alternating the two so that
the machine's load falls on both alike, the refresh alone, and the ratio.
"""

from __future__ import annotations

import argparse
import statistics
import time


def main() -> None:
    import torch

    from cliffsweep.models import load_model, resolve_model
    from cliffsweep.trainables.methods import build_method

    ap = argparse.ArgumentParser()
    ap.add_argument("--model", default="smollm2:135m-instruct")
    ap.add_argument("--steps", type=int, default=6)
    ap.add_argument("--rows", type=int, default=4)
    ap.add_argument("--seq", type=int, default=128)
    args = ap.parse_args()
    torch.manual_seed(0)
    folder = resolve_model(args.model)
    runs = {}
    for m in (1, 100):
        model, _ = load_model(folder)
        method = build_method("nanoadam", {"refresh_every": m})
        model = method.prepare(model, {})
        runs[m] = (model, method, torch.optim.AdamW(model.parameters(), lr=1e-5))
    ids = torch.randint(0, 1000, (args.rows, args.seq))
    batch = {"input_ids": ids, "attention_mask": torch.ones_like(ids), "labels": ids}
    times: dict[int, list[float]] = {1: [], 100: []}
    for step in range(args.steps + 1):  # step 0 builds the masks: a warm-up, not timed
        for m, (model, method, opt) in runs.items():
            t0 = time.perf_counter()
            loss, _ = method.loss(model, batch)
            loss.backward()
            method.before_step(model, step)
            opt.step()
            opt.zero_grad(set_to_none=True)
            method.after_step(model, step)
            if step:
                times[m].append(time.perf_counter() - t0)
    t0 = time.perf_counter()
    runs[100][1].refresh()
    refresh = time.perf_counter() - t0
    every, rarely = statistics.mean(times[1]), statistics.mean(times[100])
    n = sum(p.numel() for p in runs[1][0].parameters() if p.requires_grad)
    print(f"{args.model}: {n / 1e6:.0f}M trainable weights, {args.rows} x {args.seq} tokens per step, "
          f"{args.steps} timed steps each, {torch.get_num_threads()} threads")
    print(f"  step with a refresh every step : {every:.3f} s")
    print(f"  step with a refresh every 100  : {rarely:.3f} s")
    print(f"  one refresh alone              : {refresh:.3f} s")
    print(f"  ratio (every step / every 100) : {every / rarely:.2f}")


if __name__ == "__main__":
    main()
