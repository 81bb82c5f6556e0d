"""A pure-torch causal LM with Linear layers, for tests that spawn DDP processes: the spawned
workers import only torch (each would spend ~20 s importing transformers on a loaded machine).
Its forward takes the transformers arguments the training loss uses (losses.final_hidden)."""

from __future__ import annotations

from dataclasses import dataclass

import torch
from torch import nn


@dataclass
class Out:
    logits: torch.Tensor
    hidden_states: tuple[torch.Tensor, ...] | None = None


class TinyLM(nn.Module):
    def __init__(self, vocab: int, dim: int = 16, mlp_mult: int = 2):
        super().__init__()
        self.embed = nn.Embedding(vocab, dim)
        self.mix = nn.Linear(dim, dim)
        self.up = nn.Linear(dim, mlp_mult * dim)
        self.down = nn.Linear(mlp_mult * dim, dim)
        self.head = nn.Linear(dim, vocab, bias=False)

    def get_output_embeddings(self) -> nn.Module:
        return self.head

    def forward(self, input_ids, attention_mask, use_cache=None, output_hidden_states=False, logits_to_keep=0):
        h = self.embed(input_ids)
        h = h + torch.tanh(self.mix(h)).cumsum(1) / torch.arange(1, h.shape[1] + 1)[:, None]  # causal mixing
        h = h + self.down(torch.relu(self.up(h)))
        keep = slice(-logits_to_keep, None) if isinstance(logits_to_keep, int) else logits_to_keep
        return Out(self.head(h[:, keep]), (h,) if output_hidden_states else None)
