"""Trade-off check of a toy model: `python bench/toy_check.py --model qwen2-tiny [--lr 3e-4 1e-3]`.

Base accuracy on toy_arith (retain) and toy_facts (learn), then plain SFT (or LoRA, `--lora`) on
the learn train split at each lr with the sweep's recipe (sweep/spec.RecipeSpec defaults: AdamW,
weight decay 0.01, response-only loss, gradient clipping at 1, warmup, cosine to 0.1x peak and
the cool-down, as trainables/schedule.py runs them) and the accuracies after it. Greedy
generation with the HF model; the numbers are recorded in docs/toy.md.
"""

from __future__ import annotations

import argparse
import time

import torch
from transformers import AutoModelForCausalLM, AutoTokenizer

from cliffsweep.toy import TOY_MODELS
from cliffsweep.toy.cache import ensure_model
from cliffsweep.toy.build import greedy_accuracy
from cliffsweep.toy.models import MAX_SEQ_LEN
from cliffsweep.toy.tasks import ToyArith, ToyFacts
from cliffsweep.sweep.spec import RecipeSpec
from cliffsweep.trainables.data import encode, epoch_batches, steps_per_epoch
from cliffsweep.trainables.methods import build_method
from cliffsweep.trainables.schedule import lr_multiplier

def sft(folder: str, lr: float, epochs: int, batch: int = 16, seed: int = 0, lora: bool = False):
    torch.manual_seed(seed)
    r = RecipeSpec()
    tok = AutoTokenizer.from_pretrained(folder)
    model = AutoModelForCausalLM.from_pretrained(folder, dtype=torch.float32)
    if lora:
        model = build_method("lora", {"rank": 16}).prepare(model, None)
    learn = encode(tok, ToyFacts().train_examples(), MAX_SEQ_LEN)
    total = epochs * steps_per_epoch(len(learn), batch)
    params = [p for p in model.parameters() if p.requires_grad]
    opt = torch.optim.AdamW(params, lr=lr, weight_decay=r.weight_decay)
    model.train()
    step = 0
    for epoch in range(epochs):
        for b in epoch_batches(learn, [], batch, 0.0, seed, epoch, 0, 1, tok.pad_token_id):
            for g in opt.param_groups:
                g["lr"] = lr * lr_multiplier(step, total, r.warmup_steps, r.cooldown_steps, r.min_lr_ratio)
            out = model(input_ids=b["input_ids"], attention_mask=b["attention_mask"], labels=b["labels"])
            opt.zero_grad(set_to_none=True)
            out.loss.backward()
            torch.nn.utils.clip_grad_norm_(params, r.grad_clip)
            opt.step()
            step += 1
    model.eval()
    return model, tok, step, out.loss.item()


def scores(model, tok, retain_n: int = 200) -> tuple[float, float]:
    return (greedy_accuracy(model, tok, ToyArith(ToyArith.Params(n_eval=retain_n))),
            greedy_accuracy(model, tok, ToyFacts()))


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--model", choices=TOY_MODELS, default="qwen2-tiny")
    ap.add_argument("--folder", help="model folder (default: the packaged toy model)")
    ap.add_argument("--lr", type=float, nargs="*", default=[3e-4, 1e-3, 3e-3, 1e-2])
    ap.add_argument("--epochs", type=int, default=3)
    ap.add_argument("--lora", action="store_true", help="LoRA rank 16 (the toy sweep's) instead of full SFT")
    ap.add_argument("--retain-n", type=int, default=200, help="toy_arith eval problems (the default sweep: 400)")
    ap.add_argument("--dense", action="store_true", help="9 lrs from 1e-4 to 1e-2, a quarter decade apart")
    args = ap.parse_args(argv)
    if args.dense:
        args.lr = [1e-4 * 10 ** (k / 4) for k in range(9)]
    torch.set_num_threads(1)
    folder = args.folder or ensure_model(args.model)
    model = AutoModelForCausalLM.from_pretrained(folder, dtype=torch.float32).eval()
    retain, learn = scores(model, AutoTokenizer.from_pretrained(folder), args.retain_n)
    print(f"{args.model} base: retain(toy_arith)={retain:.3f} learn(toy_facts)={learn:.3f}", flush=True)
    for lr in args.lr:
        t0 = time.time()
        model, tok, steps, loss = sft(folder, lr, args.epochs, lora=args.lora)
        retain, learn = scores(model, tok, args.retain_n)
        print(f"{args.model} {'lora' if args.lora else 'sft'} lr={lr:.3g} epochs={args.epochs} steps={steps} loss={loss:.3f}: "
              f"retain={retain:.3f} learn={learn:.3f} ({time.time() - t0:.0f}s)", flush=True)


if __name__ == "__main__":
    main()
