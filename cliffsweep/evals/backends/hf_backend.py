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
from cliffsweep.evals.backends.seeded import SeededSampler, row_seed
from cliffsweep.evals.canary import RELATIVE, TOLERANCE, Canary, canary_ids, check_canary, model_logprobs, read_canary
from cliffsweep.evals.tasks.base import Prompt, Sampling
# The scoring pass's bounds, where the planner reads them too: tokens per forward (a 2,048-token
# prompt goes with 7 others, short ones 100 at a time), positions per LM-head pass.
from cliffsweep.sweep.gpushare import LOGIT_CHUNK, SCORE_TOKEN_BUDGET


def token_batches(lengths: list[int], budget: int) -> list[list[int]]:
    """Indices of `lengths` in batches, longest first, each with rows x its longest <= `budget`
    (a single longer sequence goes alone)."""
    order = sorted(range(len(lengths)), key=lambda i: -lengths[i])
    batches: list[list[int]] = []
    for i in order:
        if batches and (len(batches[-1]) + 1) * lengths[batches[-1][0]] <= budget:
            batches[-1].append(i)
        else:
            batches.append([i])
    return batches


def _target_logprobs(head, hidden: torch.Tensor, target: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """log p(target) and whether target is the argmax, at each row of `hidden` (positions x
    hidden size), through the LM head LOGIT_CHUNK rows at a time, in fp32."""
    logp, hit = [], []
    for i in range(0, len(target), LOGIT_CHUNK):
        logits = head(hidden[i : i + LOGIT_CHUNK]).float()
        t = target[i : i + LOGIT_CHUNK]
        logp.append(logits.gather(1, t[:, None]).squeeze(1) - torch.logsumexp(logits, dim=-1))
        hit.append(logits.argmax(-1) == t)
        del logits
    if not logp:
        return torch.zeros(0), torch.zeros(0, dtype=torch.bool)
    return torch.cat(logp), torch.cat(hit)


def cut_at_stop(text: str, stop: tuple[str, ...]) -> str:
    cuts = [text.find(s) for s in stop if s and s in text]
    return text[: min(cuts)] if cuts else text


def decoding_kwargs(sampling: Sampling | None, seeds: list[int] | None = None) -> dict:
    """transformers' generate() arguments: greedy for None, else one sample per row at
    `sampling`'s temperature and top_p over the whole vocabulary (as vLLM samples: no top_k), row
    r drawn from its own generator seeded `seeds[r]` (seeded.SeededSampler: greedy decoding of
    Gumbel-perturbed log-probs). transformers' own sampling draws from torch's global generator,
    so a row's sample depended on the rows beside it (issue 52)."""
    if sampling is None:
        return dict(do_sample=False)
    from transformers import LogitsProcessorList

    return dict(do_sample=False, logits_processor=LogitsProcessorList(
        [SeededSampler(list(seeds or []), sampling.temperature, sampling.top_p)]))


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

    def _held(self, tensors: dict):
        """The base model's architecture holding `tensors` (issue 61 part 2): loaded into the
        model served now where it is a plain one (an adapter's model is built afresh), every
        tensor by name; a name the model lacks, or one of its own left out that is not a tied
        copy of one given (the save drops those), is an error, not a silent base weight."""
        model = self.model if self.model is not None and not hasattr(self.model, "peft_config") else \
            self._from_pretrained(self.base_path)
        missing, unexpected = model.load_state_dict(tensors, strict=False)
        params = dict(model.named_parameters(remove_duplicate=False))
        untied = [k for k in missing if not any(params.get(k) is params.get(j) for j in tensors)]
        if unexpected or untied:
            raise ValueError(f"weights held in memory do not fit {self.base_path}: names it lacks "
                             f"{sorted(unexpected)[:5]}, its own left out {untied[:5]}")
        return model.eval()

    def load(self, ckpt: CheckpointRef) -> float | None:
        start = time.perf_counter()
        if ckpt.held is not None:
            self.model = self._held(ckpt.held.tensors)
        elif ckpt.path is None:
            self.model = self._from_pretrained(self.base_path)
        elif ckpt.kind == "full":
            self.model = self._from_pretrained(ckpt.path)
        elif ckpt.kind == "lora":
            from peft import PeftModel

            self.model = PeftModel.from_pretrained(self._from_pretrained(self.base_path), ckpt.path).eval()
        else:
            raise ValueError(f"unknown checkpoint kind {ckpt.kind!r}")
        previous, distance = self._canary, None
        if ckpt.held is not None:
            expected = ckpt.held.canary
            distance = check_canary(expected, model_logprobs(self.model, expected.token_ids), self.canary_tolerance,
                                    "hf backend, full checkpoint held in memory", previous, RELATIVE[self.dtype])
            self._canary = expected
        elif ckpt.path is None:
            # The base folder needs no canary file: HF loads from disk every time, so the
            # served log-probs simply become the reference.
            ids = canary_ids(self.tokenizer)
            self._canary = Canary(ids, model_logprobs(self.model, ids))
        else:
            expected = read_canary(ckpt.path)
            distance = check_canary(expected, model_logprobs(self.model, expected.token_ids), self.canary_tolerance,
                                    f"hf backend, {ckpt.kind} checkpoint {ckpt.path}", previous, RELATIVE[self.dtype])
            self._canary = expected
        self.current = ckpt
        self.last_load_seconds = time.perf_counter() - start
        return distance

    def generate(self, prompts: list[Prompt], sampling: Sampling) -> list[str]:
        return [row[0] for row in self._decode(prompts, sampling, sample=False)]

    def generate_n(self, prompts: list[Prompt], sampling: Sampling) -> list[list[str]]:
        # a prompt's j-th sample is one row of its own, seeded by (prompt, j, seed) alone: the
        # same item draws the same samples whatever else the call or the batch holds
        return self._decode(prompts, sampling, sample=True)

    @torch.no_grad()
    def _decode(self, prompts: list[Prompt], sampling: Sampling, sample: bool) -> list[list[str]]:
        texts = [render_chat(self.tokenizer, p) for p in prompts]
        n = sampling.n if sample else 1
        rows = [t for t in texts for _ in range(n)]
        seeds = [row_seed(sampling.seed or 0, j, t) for t in texts for j in range(n)]
        out: list[list[str]] = []
        for i in range(0, len(rows), self.batch_size):
            batch = self.tokenizer(rows[i : i + self.batch_size], return_tensors="pt", padding=True,
                                   add_special_tokens=False).to(self.device)
            how = decoding_kwargs(sampling if sample else None, seeds[i : i + self.batch_size])
            ids = self.model.generate(**batch, **how, max_new_tokens=sampling.max_tokens,
                                      pad_token_id=self.tokenizer.pad_token_id)
            new = ids[:, batch["input_ids"].shape[1]:]
            # A max_tokens cut can split a multi-byte character; vLLM's incremental
            # detokenizer drops the partial character, so we drop its U+FFFD too.
            decoded = [cut_at_stop(row.rstrip("\ufffd"), sampling.stop)
                       for row in self.tokenizer.batch_decode(new, skip_special_tokens=True)]
            out += decoded
        return [out[j : j + n] for j in range(0, len(out), n)]  # a prompt's n are consecutive

    def continuation_logprobs(self, prompts: list[Prompt], continuations: tuple[str, ...]) -> list[list[float]]:
        conts = [continuation_ids(self.tokenizer, c) for c in continuations]
        seqs = [(prompt_ids(self.tokenizer, p), c) for p in prompts for c in conts]
        sums = [logp for logp, _ in self.score_tokens(seqs)]
        k = len(continuations)
        return [sums[j * k : (j + 1) * k] for j in range(len(prompts))]

    # --- token-level primitives (evals/harness.py) ----------------------------------------------
    @property
    def max_length(self) -> int:
        return int(getattr(self.model.config, "max_position_embeddings", 2048))

    @torch.no_grad()
    def complete(self, contexts: list[list[int]], max_tokens: int, stop: list[str],
                 sampling: Sampling | None = None, seeds: list[int] | None = None) -> list[str]:
        out: list[str] = []
        pad = self.tokenizer.pad_token_id
        # a request's sample is seeded by its context and its own seed (lm-eval's repeats: seed + j)
        row_seeds = [row_seed(s, 0, c) for s, c in zip(seeds or [0] * len(contexts), contexts)]
        for i in range(0, len(contexts), self.batch_size):
            chunk = contexts[i : i + self.batch_size]
            how = decoding_kwargs(sampling, row_seeds[i : i + self.batch_size])
            width = max(len(c) for c in chunk)
            ids = torch.tensor([[pad] * (width - len(c)) + c for c in chunk])  # left padding
            mask = torch.tensor([[0] * (width - len(c)) + [1] * len(c) for c in chunk])
            gen = self.model.generate(input_ids=ids.to(self.device), attention_mask=mask.to(self.device),
                                      **how, max_new_tokens=max_tokens, pad_token_id=pad,
                                      stop_strings=list(stop) or None, tokenizer=self.tokenizer)
            for row in self.tokenizer.batch_decode(gen[:, width:], skip_special_tokens=True):
                out.append(cut_at_stop(row, tuple(stop)))
        return out

    @torch.no_grad()
    def score_tokens(self, pairs: list[tuple[list[int], list[int]]]) -> list[tuple[float, bool]]:
        """(sum of the continuation's log-probs, whether greedy decoding gives it) of each
        (prompt, continuation) pair. Memory is bounded by design (issue 39): sequences are
        batched by a token budget (rows x padded width <= SCORE_TOKEN_BUDGET), the decoder's
        last hidden states are kept at the continuation positions only, and the LM head and its
        log-softmax run over LOGIT_CHUNK of those positions at a time: no batch x sequence x
        vocabulary tensor (16 x 1,400 x 49,152 fp32 was 4.3 GiB, the allocation that ran a
        shared H100 out of memory)."""
        out: list[tuple[float, bool] | None] = [None] * len(pairs)
        causal = self.model.get_base_model() if hasattr(self.model, "get_base_model") else self.model
        decoder, head = causal.base_model, causal.get_output_embeddings()
        for batch in token_batches([len(p) + len(c) for p, c in pairs], SCORE_TOKEN_BUDGET):
            width = max(len(pairs[j][0]) + len(pairs[j][1]) for j in batch)
            ids = torch.full((len(batch), width), self.tokenizer.pad_token_id, dtype=torch.long)
            mask = torch.zeros((len(batch), width), dtype=torch.long)
            rows, pos, want, spans = [], [], [], {}
            for row, j in enumerate(batch):
                p, c = pairs[j]
                ids[row, : len(p) + len(c)] = torch.tensor(p + c)
                mask[row, : len(p) + len(c)] = 1
                spans[j] = (len(want), len(want) + len(c))
                rows += [row] * len(c)
                pos += range(len(p) - 1, len(p) + len(c) - 1)  # token k is predicted at k-1
                want += c
            hidden = decoder(input_ids=ids.to(self.device), attention_mask=mask.to(self.device)).last_hidden_state
            kept = hidden[torch.tensor(rows, device=hidden.device), torch.tensor(pos, device=hidden.device)]
            del hidden
            target = torch.tensor(want, device=kept.device)
            logp, hit = _target_logprobs(head, kept, target)
            for j, (a, b) in spans.items():
                out[j] = (float(logp[a:b].sum()), bool(hit[a:b].all()))
        return out  # type: ignore[return-value]

    def close(self) -> None:
        self.model = None
