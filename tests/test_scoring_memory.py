"""The hf evaluator's scoring memory is bounded by design (issue 39 part 2): a long prompt's
continuation is scored from the decoder's hidden states at the continuation positions only,
never from a batch x sequence x vocabulary fp32 tensor (16 x 1,400 x 49,152 x 4 B = 4.3 GiB
was the allocation that failed on a shared H100), with the same log-probabilities as a plain
full-vocabulary log-softmax."""

from __future__ import annotations

import torch
from torch.profiler import ProfilerActivity, profile
from transformers import LlamaConfig, LlamaForCausalLM

from cliffsweep.evals.backends.hf_backend import HFBackend, token_batches

VOCAB, PROMPT, CONT = 50_000, 1_500, 24


class _Tok:
    pad_token_id = 0


def backend_for(model) -> HFBackend:
    """An HFBackend around `model` (no folder, no tokenizer files: scoring needs token ids only)."""
    b = object.__new__(HFBackend)
    b.model, b.tokenizer, b.device, b.batch_size = model.eval(), _Tok(), "cpu", 16
    return b


def reference(model, pairs) -> list[tuple[float, bool]]:
    """Today's code before issue 39: the whole forward's logits, log-softmax over the vocabulary."""
    out = []
    for p, c in pairs:
        logp = torch.log_softmax(model(input_ids=torch.tensor([p + c])).logits.float(), dim=-1)[0]
        rows = logp[torch.arange(len(p) - 1, len(p) + len(c) - 1)]
        out.append((float(rows[torch.arange(len(c)), torch.tensor(c)].sum()), bool((rows.argmax(-1) == torch.tensor(c)).all())))
    return out


@torch.no_grad()
def test_a_long_prompt_is_scored_without_a_full_vocabulary_tensor():
    torch.manual_seed(0)
    model = LlamaForCausalLM(LlamaConfig(vocab_size=VOCAB, hidden_size=32, intermediate_size=64, num_hidden_layers=1,
                                         num_attention_heads=2, num_key_value_heads=1, max_position_embeddings=2048))
    g = torch.Generator().manual_seed(1)
    pairs = [(torch.randint(1, VOCAB, (n,), generator=g).tolist(), torch.randint(1, VOCAB, (k,), generator=g).tolist())
             for n, k in ((PROMPT, CONT), (300, 5), (40, 1))]
    want = reference(model, pairs)
    b = backend_for(model)
    with profile(activities=[ProfilerActivity.CPU], profile_memory=True) as prof:
        got = b.score_tokens(pairs)
    for (lp, hit), (lp0, hit0) in zip(got, want):
        assert abs(lp - lp0) <= 1e-4 * max(1.0, abs(lp0)) and hit == hit0, (got, want)
    peak = max(e.cpu_memory_usage for e in prof.events())
    full = (PROMPT + CONT) * VOCAB * 4  # what one full-vocabulary fp32 tensor over the prompt takes
    bound = 64 * 2**20
    assert full > 4 * bound and peak <= bound, (peak, full)


def test_batches_follow_a_token_budget_not_a_row_count():
    lengths = [2000, 10, 10, 10, 500, 500, 3000]
    batches = token_batches(lengths, 1024)
    assert sorted(i for b in batches for i in b) == list(range(len(lengths)))  # each once
    for b in batches:
        assert len(b) == 1 or len(b) * max(lengths[i] for i in b) <= 1024, b
    assert [6] in batches and [0] in batches  # a sequence over the budget goes alone
