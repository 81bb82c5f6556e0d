"""Trade-off check of a toy model: `python bench/toy_check.py --model qwen2-tiny [--lr 3e-4 1e-3]`.

Base accuracy on toy_arith (retain) and toy_facts (learn), then plain SFT on the learn train
split at each lr (AdamW, weight decay 0.01, response-only loss, batch 16, linear warmup then
cosine to 0.1x peak: the 000 App. B recipe without the cool-down) and the accuracies after it.
Greedy generation with the HF model; the numbers are recorded in docs/toy.md.
"""

from __future__ import annotations

import argparse
import math
import time

import torch
from transformers import AutoModelForCausalLM, AutoTokenizer

from cliffsweep.toy import TOY_MODELS
from cliffsweep.toy.cache import ensure_model
from cliffsweep.toy.build import greedy_accuracy
from cliffsweep.toy.models import MAX_SEQ_LEN
from cliffsweep.toy.tasks import ToyArith, ToyFacts
from cliffsweep.trainables.data import encode, epoch_batches, steps_per_epoch

WARMUP = 10


def sft(folder: str, lr: float, epochs: int, batch: int = 16, seed: int = 0):
    torch.manual_seed(seed)
    tok = AutoTokenizer.from_pretrained(folder)
    model = AutoModelForCausalLM.from_pretrained(folder, dtype=torch.float32)
    learn = encode(tok, ToyFacts().train_examples(), MAX_SEQ_LEN)
    total = epochs * steps_per_epoch(len(learn), batch)
    opt = torch.optim.AdamW(model.parameters(), lr=lr, weight_decay=0.01)
    model.train()
    step = 0
    for epoch in range(epochs):
        for b in epoch_batches(learn, [], batch, 0.0, seed, epoch, 0, 1, tok.pad_token_id):
            t = max(0.0, (step - WARMUP) / max(1, total - WARMUP))
            scale = (step + 1) / WARMUP if step < WARMUP else 0.1 + 0.45 * (1 + math.cos(math.pi * t))
            for g in opt.param_groups:
                g["lr"] = lr * scale
            out = model(input_ids=b["input_ids"], attention_mask=b["attention_mask"], labels=b["labels"])
            opt.zero_grad(set_to_none=True)
            out.loss.backward()
            opt.step()
            step += 1
    model.eval()
    return model, tok, step, out.loss.item()


def scores(model, tok) -> tuple[float, float]:
    return greedy_accuracy(model, tok, ToyArith()), greedy_accuracy(model, tok, ToyFacts())


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--model", choices=TOY_MODELS, default="qwen2-tiny")
    ap.add_argument("--folder", help="model folder (default: the packaged toy model)")
    ap.add_argument("--lr", type=float, nargs="*", default=[3e-4, 1e-3, 3e-3, 1e-2])
    ap.add_argument("--epochs", type=int, default=4)
    args = ap.parse_args(argv)
    torch.set_num_threads(1)
    folder = args.folder or ensure_model(args.model)
    model = AutoModelForCausalLM.from_pretrained(folder, dtype=torch.float32).eval()
    retain, learn = scores(model, AutoTokenizer.from_pretrained(folder))
    print(f"{args.model} base: retain(toy_arith)={retain:.3f} learn(toy_facts)={learn:.3f}", flush=True)
    for lr in args.lr:
        t0 = time.time()
        model, tok, steps, loss = sft(folder, lr, args.epochs)
        retain, learn = scores(model, tok)
        print(f"{args.model} sft lr={lr:g} epochs={args.epochs} steps={steps} loss={loss:.3f}: "
              f"retain={retain:.3f} learn={learn:.3f} ({time.time() - t0:.0f}s)", flush=True)


if __name__ == "__main__":
    main()
