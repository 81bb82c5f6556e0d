"""Transformers eval backend: the fallback when vLLM is unavailable (`--eval-backend hf`), and
the reference the vLLM backend is tested against.

Greedy `generate` in batches with left padding; stop strings are applied by cutting each
completion at the first stop string, which gives the same text as vLLM (it also stops at, and
drops, the first stop string). LoRA checkpoints are served with peft's PeftModel on a fresh
copy of the base weights. Continuation log-probs come from one forward pass per batch of
prompt + continuation sequences, right-padded (so every sequence keeps positions 0..n-1).
"""

from __future__ import annotations

import time

import torch

from cliffsweep.evals.backends.base import CheckpointRef, continuation_ids, prompt_ids, render_chat
from cliffsweep.evals.canary import TOLERANCE, Canary, canary_ids, check_canary, model_logprobs, read_canary
from cliffsweep.evals.tasks.base import Prompt, Sampling


def cut_at_stop(text: str, stop: tuple[str, ...]) -> str:
    cuts = [text.find(s) for s in stop if s and s in text]
    return text[: min(cuts)] if cuts else text


class HFBackend:
    name = "hf"

    def __init__(self, base_path: str, *, dtype: str = "float32", batch_size: int = 16,
                 device: str | None = None, canary_tolerance: float | None = None):
        from transformers import AutoTokenizer

        if dtype not in TOLERANCE:
            raise ValueError(f"dtype {dtype!r}; valid: {sorted(TOLERANCE)}")
        self.base_path = base_path
        self.dtype = dtype
        self.canary_tolerance = TOLERANCE[dtype] if canary_tolerance is None else canary_tolerance
        self.batch_size = batch_size
        self.device = device or ("cuda" if torch.cuda.is_available() else "cpu")
        self.tokenizer = AutoTokenizer.from_pretrained(base_path)
        self.tokenizer.padding_side = "left"
        if self.tokenizer.pad_token_id is None:
            # Padding is masked out, so which id fills it does not matter.
            self.tokenizer.pad_token = self.tokenizer.eos_token
        self.model = None
        self.current: CheckpointRef | None = None
        self.last_load_seconds = 0.0
        self._canary: Canary | None = None
        self.load(CheckpointRef(None))

    def _from_pretrained(self, path: str):
        from transformers import AutoModelForCausalLM

        model = AutoModelForCausalLM.from_pretrained(path, dtype=getattr(torch, self.dtype))
        return model.to(self.device).eval()

    def load(self, ckpt: CheckpointRef) -> None:
        start = time.perf_counter()
        if ckpt.path is None:
            self.model = self._from_pretrained(self.base_path)
        elif ckpt.kind == "full":
            self.model = self._from_pretrained(ckpt.path)
        elif ckpt.kind == "lora":
            from peft import PeftModel

            self.model = PeftModel.from_pretrained(self._from_pretrained(self.base_path), ckpt.path).eval()
        else:
            raise ValueError(f"unknown checkpoint kind {ckpt.kind!r}")
        previous = self._canary
        if ckpt.path is None:
            # The base folder needs no canary file: HF loads from disk every time, so the
            # served log-probs simply become the reference.
            ids = canary_ids(self.tokenizer)
            self._canary = Canary(ids, model_logprobs(self.model, ids))
        else:
            expected = read_canary(ckpt.path)
            check_canary(expected, model_logprobs(self.model, expected.token_ids), self.canary_tolerance,
                         f"hf backend, {ckpt.kind} checkpoint {ckpt.path}", previous)
            self._canary = expected
        self.current = ckpt
        self.last_load_seconds = time.perf_counter() - start

    @torch.no_grad()
    def generate(self, prompts: list[Prompt], sampling: Sampling) -> list[str]:
        texts = [render_chat(self.tokenizer, p) for p in prompts]
        out: list[str] = []
        for i in range(0, len(texts), self.batch_size):
            batch = self.tokenizer(texts[i : i + self.batch_size], return_tensors="pt", padding=True,
                                   add_special_tokens=False).to(self.device)
            ids = self.model.generate(**batch, do_sample=False, max_new_tokens=sampling.max_tokens,
                                      pad_token_id=self.tokenizer.pad_token_id)
            new = ids[:, batch["input_ids"].shape[1]:]
            for row in self.tokenizer.batch_decode(new, skip_special_tokens=True):
                # A max_tokens cut can split a multi-byte character; vLLM's incremental
                # detokenizer drops the partial character, so we drop its U+FFFD too.
                out.append(cut_at_stop(row.rstrip("\ufffd"), sampling.stop))
        return out

    def continuation_logprobs(self, prompts: list[Prompt], continuations: tuple[str, ...]) -> list[list[float]]:
        conts = [continuation_ids(self.tokenizer, c) for c in continuations]
        seqs = [(prompt_ids(self.tokenizer, p), c) for p in prompts for c in conts]
        sums = [logp for logp, _ in self.score_tokens(seqs)]
        k = len(continuations)
        return [sums[j * k : (j + 1) * k] for j in range(len(prompts))]

    # --- token-level primitives (evals/lmeval.py) ----------------------------------------------
    @property
    def max_length(self) -> int:
        return int(getattr(self.model.config, "max_position_embeddings", 2048))

    @torch.no_grad()
    def complete(self, contexts: list[list[int]], max_tokens: int, stop: list[str]) -> list[str]:
        out: list[str] = []
        pad = self.tokenizer.pad_token_id
        for i in range(0, len(contexts), self.batch_size):
            chunk = contexts[i : i + self.batch_size]
            width = max(len(c) for c in chunk)
            ids = torch.tensor([[pad] * (width - len(c)) + c for c in chunk])  # left padding
            mask = torch.tensor([[0] * (width - len(c)) + [1] * len(c) for c in chunk])
            gen = self.model.generate(input_ids=ids.to(self.device), attention_mask=mask.to(self.device),
                                      do_sample=False, max_new_tokens=max_tokens, pad_token_id=pad,
                                      stop_strings=list(stop) or None, tokenizer=self.tokenizer)
            for row in self.tokenizer.batch_decode(gen[:, width:], skip_special_tokens=True):
                out.append(cut_at_stop(row, tuple(stop)))
        return out

    @torch.no_grad()
    def score_tokens(self, pairs: list[tuple[list[int], list[int]]]) -> list[tuple[float, bool]]:
        out: list[tuple[float, bool]] = []
        for i in range(0, len(pairs), self.batch_size):
            chunk = pairs[i : i + self.batch_size]
            width = max(len(p) + len(c) for p, c in chunk)
            ids = torch.full((len(chunk), width), self.tokenizer.pad_token_id, dtype=torch.long)
            mask = torch.zeros((len(chunk), width), dtype=torch.long)
            for row, (p, c) in enumerate(chunk):
                ids[row, : len(p) + len(c)] = torch.tensor(p + c)
                mask[row, : len(p) + len(c)] = 1
            logp = torch.log_softmax(
                self.model(input_ids=ids.to(self.device), attention_mask=mask.to(self.device)).logits.float(), dim=-1)
            for row, (p, c) in enumerate(chunk):
                pos = torch.arange(len(p) - 1, len(p) + len(c) - 1, device=logp.device)  # token k at k-1
                want = torch.tensor(c, device=logp.device)
                rows = logp[row, pos]
                out.append((float(rows[torch.arange(len(c)), want].sum()), bool((rows.argmax(-1) == want).all())))
        return out

    def close(self) -> None:
        self.model = None
