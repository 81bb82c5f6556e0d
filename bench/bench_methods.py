"""Training-step cost of every registered method and optimizer, relative to plain SFT + AdamW.

    .venv/bin/python bench/bench_methods.py [--model qwen2-tiny] [--steps 20] [--warmup 3] [--batch 8] [--seq 64]

Same model (a freshly initialised toy backbone, cliffsweep.toy.models.new_model), same batches,
N timed steps after warm-up, all pairs interleaved step by step (median per pair); one step = method.loss + backward + before_step + optimizer.step +
after_step + zero_grad (as in trainables/loop.py). Once-per-model statistics (compute_stats) and
prepare() are timed separately, not in the step. Replay is timed on the same batches: its real
cost is in the data (r of each batch are retain rows), not in the step. A registered method
whose module is absent is reported as missing, never skipped silently.
"""

from __future__ import annotations

import argparse
import statistics
import time

import torch


def make_batches(n: int, batch: int, seq: int, vocab: int, seed: int = 0) -> list[dict[str, torch.Tensor]]:
    g = torch.Generator().manual_seed(seed)
    out = []
    for b in range(n):
        ids = torch.randint(4, vocab, (batch, seq), generator=g)
        labels = ids.clone()
        labels[:, : seq // 2] = -100  # masked prompt
        idx = torch.arange(b * batch, (b + 1) * batch)
        out.append({"input_ids": ids, "attention_mask": torch.ones_like(ids), "labels": labels,
                    "example_idx": idx, "is_retain": torch.zeros(batch, dtype=torch.bool)})
    return out


class Run:
    """One (method, optimizer) pair on its own copy of the model, stepped one step at a time so
    that all pairs can be interleaved (a shared, loaded CPU then slows every pair alike)."""

    def __init__(self, model_name: str, method_name: str, optimizer: str, batches):
        from cliffsweep.toy.models import new_model
        from cliffsweep.trainables.methods import build_method
        from cliffsweep.trainables.optimizers import build_optimizer

        self.name, self.optimizer, self.batches = method_name, optimizer, batches
        model = new_model(model_name, seed=0)
        self.method = build_method(method_name)
        t0 = time.perf_counter()
        stats = {}
        if self.method.stats_inputs() is not None:
            stats = self.method.compute_stats(model, batches[:4], batches)
        self.stats_s = time.perf_counter() - t0
        t0 = time.perf_counter()
        self.model = self.method.prepare(model, stats)
        self.prepare_s = time.perf_counter() - t0
        self.opt = build_optimizer(optimizer, self.model, lr=1e-4, weight_decay=0.01)
        self.model.train()
        self.step_no, self.times = 0, []

    def step(self, timed: bool) -> None:
        batch = self.batches[self.step_no % len(self.batches)]
        t0 = time.perf_counter()
        loss, _ = self.method.loss(self.model, batch)
        loss.backward()
        self.method.before_step(self.model, self.step_no)
        self.opt.step()
        self.opt.zero_grad(set_to_none=True)
        self.method.after_step(self.model, self.step_no)
        if timed:
            self.times.append(time.perf_counter() - t0)
        self.step_no += 1


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--model", default="qwen2-tiny")
    ap.add_argument("--steps", type=int, default=20)
    ap.add_argument("--warmup", type=int, default=3)
    ap.add_argument("--batch", type=int, default=8)
    ap.add_argument("--seq", type=int, default=64)
    ap.add_argument("--threads", type=int, default=1, help="torch threads (1: less noise on a shared CPU)")
    args = ap.parse_args()
    torch.set_num_threads(args.threads)

    from cliffsweep.toy.models import model_config
    from cliffsweep.trainables.methods import METHODS, method_class
    from cliffsweep.trainables.optimizers import OPTIMIZERS

    vocab = model_config(args.model).vocab_size
    batches = make_batches(8, args.batch, args.seq, vocab)
    runs = [(m, "adamw") for m in METHODS] + [("sft", o) for o in OPTIMIZERS if o != "adamw"]
    rows, missing = [], []
    for method_name, opt in runs:
        try:
            method_class(method_name)
        except ImportError as e:  # a registered method whose module is not there yet
            missing.append(f"{method_name} ({e})")
            continue
        rows.append(Run(args.model, method_name, opt, batches))
    for round_no in range(args.warmup + args.steps):
        for run in rows:
            run.step(timed=round_no >= args.warmup)
    base = statistics.median(next(r for r in rows if r.name == "sft" and r.optimizer == "adamw").times)
    print(f"model {args.model}, batch {args.batch} x seq {args.seq}, {args.steps} timed steps after "
          f"{args.warmup} warm-up, torch threads {args.threads}, median step time")
    print(f"{'method':<10} {'optimizer':<9} {'step ms':>9} {'x sft':>7} {'stats s':>8} {'prepare s':>9}")
    for r in rows:
        t = statistics.median(r.times)
        print(f"{r.name:<10} {r.optimizer:<9} {1e3 * t:>9.1f} {t / base:>7.2f} {r.stats_s:>8.2f} {r.prepare_s:>9.2f}")
    for m in missing:
        print(f"MISSING {m}")


if __name__ == "__main__":
    main()
