"""Build (pretrain) the toy base models: `python -m cliffsweep.toy.build [--out DIR] [--model NAME]`.

"Instruction tuning" from scratch, in the chat format, on a mixture of
  - toy_arith problems (a fresh generator stream, not the task's train/eval splits), and
  - 4-choice questions about the PRETRAIN facts of the toy world (all three phrasings),
with the loss on response tokens only, as in the SFT recipe (000 App. B). The base model thus
solves arithmetic and answers MCQs with a letter, but has never seen a LEARN fact.

Two knobs of the recipe (BaseRecipe, per model in RECIPES) decide the regime SFT later shows
(docs/toy.md):
  - `deepen`: a second stage of more of the same mixture (fresh rows) at a lower lr, which makes
    the arithmetic skill deep (base retention ~1.0): it holds until one lr step breaks it;
  - `old_customs`: pretraining also asks about the learn entities, with customs other than the
    ones SFT teaches (tasks.old_customs), so SFT must overwrite knowledge, which takes updates as
    large as those that damage arithmetic: learning comes only with forgetting.

Deterministic from the seed on one machine: fixed torch seed, thread count and data order.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import math
import random
import time
from dataclasses import asdict, dataclass, replace
from pathlib import Path

import torch

from cliffsweep.chat import encode_pair, render_prompt
from cliffsweep.toy import TOY_MODELS
from cliffsweep.toy.models import MAX_SEQ_LEN, WEIGHTS_DIR, new_model, save_folder
from cliffsweep.toy.tasks import arith_problem, mcq, old_customs, world

# Our defaults, sized so one model builds in a few minutes on 2 CPU cores.
STEPS = 1000
BATCH = 32
PEAK_LR = 5e-3
WARMUP = 50
FACT_FRACTION = 0.3
"""Share of pretraining rows that are MCQs on pretrain facts (the rest: arithmetic)."""
THREADS = 1
"""One thread: on 2 shared cores, two threads spin against each other (4x the CPU per step)."""


@dataclass(frozen=True)
class BaseRecipe:
    """How one toy base model is pretrained (the module docstring: what each knob does)."""

    steps: int = STEPS
    deepen: int = 0
    """Steps of the deepening stage. 800 gave base retention 0.93 but collapses that cleared the
    classifier's cliff_drop by at most 0.05; 2400 give 1.0 and clear ones (docs/toy.md)."""
    old_customs: bool = False
    """Pretrain on tasks.old_customs too (MCQs about the learn entities, other values)."""


RECIPES = {"qwen2-tiny": BaseRecipe(deepen=2400), "llama-tiny": BaseRecipe(old_customs=True)}
"""Our choice: qwen2-tiny deep and new to the learn entities (cliff), llama-tiny as first
pretrained and holding other customs for them (gradual)."""
DEEP_LR = 2e-3
DEEP_WARMUP = 20
DEEP_DATA_SEED = 99
"""Offset of the deepening stage's data seed, so that its rows are fresh."""


def _lr(step: int, steps: int) -> float:
    """Linear warmup, then cosine decay to 0.1x peak over `steps`."""
    if step < WARMUP:
        return PEAK_LR * (step + 1) / WARMUP
    t = (step - WARMUP) / max(1, steps - WARMUP)
    return PEAK_LR * (0.1 + 0.9 * 0.5 * (1 + math.cos(math.pi * t)))


def pretrain_rows(tokenizer, seed: int, n: int, old: bool = False) -> list[tuple[list[int], list[int]]]:
    """`n` rows of the pretraining mixture; `old`: the facts include tasks.old_customs."""
    rng = random.Random(f"toy-pretrain-{seed}")
    facts = world()[0] + (old_customs() if old else [])
    rows = []
    for _ in range(n):
        if rng.random() < FACT_FRACTION:
            prompt, answer = mcq(rng.choice(facts), rng.randrange(3))
        else:
            prompt, answer, _ = arith_problem(rng)
        rows.append(encode_pair(tokenizer, prompt, answer, MAX_SEQ_LEN))
    return rows


def _batch(rows, pad_id: int) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    width = max(len(ids) for ids, _ in rows)
    ids = torch.full((len(rows), width), pad_id)
    labels = torch.full((len(rows), width), -100)
    attn = torch.zeros((len(rows), width), dtype=torch.long)
    for r, (i, lab) in enumerate(rows):
        ids[r, : len(i)] = torch.tensor(i)
        labels[r, : len(lab)] = torch.tensor(lab)
        attn[r, : len(i)] = 1
    return ids, labels, attn


def _train(model, tok, rows, lr_at, name: str, log_every: int) -> None:
    """AdamW steps of BATCH rows each over `rows` in order, lr `lr_at(step)`, clip 1.0."""
    steps = len(rows) // BATCH
    opt = torch.optim.AdamW(model.parameters(), lr=lr_at(0), weight_decay=0.01, betas=(0.9, 0.95))
    model.train()
    t0 = time.time()
    for step in range(steps):
        for g in opt.param_groups:
            g["lr"] = lr_at(step)
        ids, labels, attn = _batch(rows[step * BATCH : (step + 1) * BATCH], tok.pad_token_id)
        loss = model(input_ids=ids, attention_mask=attn, labels=labels).loss
        opt.zero_grad(set_to_none=True)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()
        if log_every and (step % log_every == 0 or step == steps - 1):
            print(f"[{name}] step {step} loss {loss.item():.4f} {time.time() - t0:.0f}s", flush=True)
    model.eval()


def _deep_lr(steps: int):
    """Short linear warmup, then linear decay to 0 over the deepening stage."""
    return lambda step: DEEP_LR * (1 - step / steps) * min(1.0, (step + 1) / DEEP_WARMUP)


def pretrain(name: str, seed: int = 0, recipe: BaseRecipe | None = None, log_every: int = 100):
    """The base model `name` built by `recipe` (default RECIPES[name])."""
    from transformers import AutoTokenizer

    recipe = recipe or RECIPES[name]
    torch.set_num_threads(THREADS)
    torch.manual_seed(seed)
    model = new_model(name, seed)
    tmp = Path(f"/tmp/cliffsweep-toy-tok-{name}")
    save_folder(model, tmp)  # the tokenizer as HF loads it, so encoding matches evaluation
    tok = AutoTokenizer.from_pretrained(tmp)
    rows = pretrain_rows(tok, seed, recipe.steps * BATCH, recipe.old_customs)
    _train(model, tok, rows, lambda step: _lr(step, recipe.steps), name, log_every)
    if recipe.deepen:
        rows = pretrain_rows(tok, seed + DEEP_DATA_SEED, recipe.deepen * BATCH, recipe.old_customs)
        _train(model, tok, rows, _deep_lr(recipe.deepen), f"{name} deepen", log_every)
    return model, tok


@torch.no_grad()
def greedy_accuracy(model, tokenizer, task, batch: int = 100) -> float:
    """Greedy generation with the HF model (left-padded batches), scored by the task."""
    tokenizer.padding_side = "left"
    examples = task.eval_examples()
    correct = 0
    for s in range(0, len(examples), batch):
        chunk = examples[s : s + batch]
        prompts = [render_prompt(tokenizer, e.prompt) for e in chunk]
        enc = tokenizer(prompts, return_tensors="pt", padding=True, add_special_tokens=False)
        out = model.generate(**enc, max_new_tokens=task.sampling.max_tokens, do_sample=False,
                             eos_token_id=tokenizer.eos_token_id, pad_token_id=tokenizer.pad_token_id)
        for e, seq in zip(chunk, out[:, enc["input_ids"].shape[1]:]):
            correct += task.score(tokenizer.decode(seq, skip_special_tokens=True), e).correct
    return correct / len(examples)


def fingerprint(folder: str | Path) -> str:
    """sha256 of model.safetensors: what the manifest records and the tests compare."""
    return hashlib.sha256((Path(folder) / "model.safetensors").read_bytes()).hexdigest()


def build_model(name: str, out_dir: str, seed: int = 0, recipe: BaseRecipe | None = None) -> str:
    t0 = time.time()
    model, _ = pretrain(name, seed, recipe)
    save_folder(model, out_dir)
    print(f"[{name}] built in {time.time() - t0:.0f}s -> {out_dir}", flush=True)
    return out_dir


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", default=str(WEIGHTS_DIR), help="parent folder of the model folders")
    ap.add_argument("--model", choices=TOY_MODELS, action="append", help="default: all")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--steps", type=int, help="steps of the first stage (default: the model's recipe)")
    ap.add_argument("--deepen", type=int, help="steps of the deepening stage (default: the model's recipe)")
    args = ap.parse_args(argv)
    manifest_path = Path(args.out) / "manifest.json"
    for name in args.model or TOY_MODELS:
        recipe = RECIPES[name]
        recipe = replace(recipe, steps=recipe.steps if args.steps is None else args.steps,
                         deepen=recipe.deepen if args.deepen is None else args.deepen)
        folder = build_model(name, str(Path(args.out) / name), args.seed, recipe)
        # Re-read just before writing: builds of other models may run beside this one.
        manifest = json.loads(manifest_path.read_text()) if manifest_path.exists() else {}
        manifest[name] = {"sha256": fingerprint(folder), "seed": args.seed, **asdict(recipe)}
        manifest_path.write_text(json.dumps(manifest, indent=2, sort_keys=True) + "\n")


if __name__ == "__main__":
    main()
