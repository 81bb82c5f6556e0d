"""Seeded sampling that depends only on (item, sample index, seed), never on the batch (issue 52
part 4): each row of a batch draws from its own generator, seeded from the row's prompt, its
sample index and the sampling seed. The hf backend samples by the Gumbel-max trick under greedy
decoding (argmax of log p / T + Gumbel noise is a draw from softmax(log p / T); Gumbel 1954,
as in Kool et al. 2019, "Stochastic Beams and Where to Find Them", Sec. 2): transformers' own
sampling draws from torch's global generator, so an item's samples depended on which items
shared its batch. vLLM seeds each request (vllm_backend)."""

from __future__ import annotations

import hashlib

import torch


def row_seed(seed: int, index: int, prompt: str | list[int]) -> int:
    """The seed of one sample: the sampling seed, the sample's index and the prompt (text or
    token ids), hashed to 63 bits."""
    key = f"{seed}:{index}:{prompt if isinstance(prompt, str) else ','.join(map(str, prompt))}"
    return int.from_bytes(hashlib.sha256(key.encode()).digest()[:8], "big") >> 1


class SeededSampler:
    """A transformers logits processor that turns greedy decoding into sampling at `temperature`
    and `top_p`, row r drawing from a generator seeded `seeds[r]`."""

    def __init__(self, seeds: list[int], temperature: float, top_p: float):
        self.gens = [torch.Generator().manual_seed(s) for s in seeds]
        self.temperature, self.top_p = max(float(temperature), 1e-5), float(top_p)

    def __call__(self, input_ids: torch.Tensor, scores: torch.Tensor) -> torch.Tensor:
        logp = torch.log_softmax(scores.float() / self.temperature, dim=-1)
        if self.top_p < 1.0:  # the nucleus: the most likely tokens whose mass reaches top_p
            sorted_p, order = logp.exp().sort(dim=-1, descending=True)
            outside = sorted_p.cumsum(-1) - sorted_p >= self.top_p
            logp = logp.masked_fill(outside.scatter(-1, order, outside), float("-inf"))
        u = torch.stack([torch.rand(scores.shape[-1], generator=g, dtype=torch.float64) for g in self.gens])
        gumbel = -torch.log(-torch.log(u.clamp(1e-300, 1.0)))
        return logp + gumbel.to(logp.device, logp.dtype)
