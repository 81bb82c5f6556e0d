"""Training batches: tokenised pairs, response-only labels, replay mixing, worker sharding.

Batches are dicts of tensors (see `Method.loss`). Every worker derives the same global order
from the seed and takes its own slice of each global batch, so N workers see exactly the data
one worker would (DDP averages their gradients). A worker's slice may be cut further into
micro-batches whose gradients accumulate into one optimizer step (`epoch_steps`).
"""

from __future__ import annotations

import math
import random
from dataclasses import dataclass, replace

from cliffsweep.trainables.lazy import torch

from cliffsweep.chat import encode_example
from cliffsweep.evals.tasks.base import Example


@dataclass(frozen=True)
class Encoded:
    ids: list[int]
    labels: list[int]
    example_idx: int  # index in the learn train split; -1 for a retain example
    is_retain: bool


def encode(tokenizer, examples: list[Example], max_len: int, retain: bool = False, system: str = "") -> list[Encoded]:
    """Token ids and labels of each example; `system` (recipe.system_prompt) before those that
    have no system prompt of their own."""
    out = []
    for i, ex in enumerate(examples):
        if system and not ex.system:
            ex = replace(ex, system=system)
        ids, labels = encode_example(tokenizer, ex, max_len)
        out.append(Encoded(ids, labels, -1 if retain else i, retain))
    return out


def collate(items: list[Encoded], pad_id: int) -> dict[str, torch.Tensor]:
    width = max(len(x.ids) for x in items)
    ids = torch.full((len(items), width), pad_id, dtype=torch.long)
    labels = torch.full((len(items), width), -100, dtype=torch.long)
    attn = torch.zeros((len(items), width), dtype=torch.long)
    for r, x in enumerate(items):
        ids[r, : len(x.ids)] = torch.tensor(x.ids)
        labels[r, : len(x.labels)] = torch.tensor(x.labels)
        attn[r, : len(x.ids)] = 1
    return {
        "input_ids": ids,
        "attention_mask": attn,
        "labels": labels,
        "example_idx": torch.tensor([x.example_idx for x in items], dtype=torch.long),
        "is_retain": torch.tensor([x.is_retain for x in items], dtype=torch.bool),
    }


def steps_per_epoch(n_learn: int, batch_size: int, retain_fraction: float = 0.0) -> int:
    """Optimizer steps in one epoch over the learn split (replay adds retain rows to each
    batch instead of lengthening the epoch)."""
    n_learn_per_batch = batch_size - replay_rows(batch_size, retain_fraction)
    return math.ceil(n_learn / max(1, n_learn_per_batch))


def replay_rows(batch_size: int, retain_fraction: float) -> int:
    """Retain rows in each batch of `batch_size` for replay fraction r (at least one if r > 0)."""
    if retain_fraction <= 0:
        return 0
    return min(batch_size - 1, max(1, round(batch_size * retain_fraction)))


def global_batches(
    learn: list[Encoded], retain: list[Encoded], batch_size: int, retain_fraction: float,
    seed: int, epoch: int, world: int,
) -> list[list[Encoded]]:
    """The rows of every global batch of one epoch, in order (the same on every worker)."""
    rng = random.Random(seed * 100_003 + epoch)
    order = list(range(len(learn)))
    rng.shuffle(order)
    n_replay = replay_rows(batch_size, retain_fraction)
    per = batch_size - n_replay
    out = []
    for start in range(0, len(order), per):
        rows = [learn[i] for i in order[start : start + per]]
        if len(rows) < world:
            break  # every worker must take the same number of steps (DDP)
        if n_replay:
            rows += [retain[rng.randrange(len(retain))] for _ in range(n_replay)]
        out.append(rows)
    return out


def epoch_batches(
    learn: list[Encoded], retain: list[Encoded], batch_size: int, retain_fraction: float,
    seed: int, epoch: int, rank: int, world: int, pad_id: int,
) -> list[dict[str, torch.Tensor]]:
    """This worker's share of every global batch of one epoch."""
    return [collate(rows[rank::world], pad_id)
            for rows in global_batches(learn, retain, batch_size, retain_fraction, seed, epoch, world)]


@dataclass(frozen=True)
class Step:
    """One optimizer step on one worker: its micro-batches (one forward/backward each, their
    gradients summed) and the response-token count of the whole global batch (every worker's
    rows), by which every micro-batch's loss sum is normalised (trainables/microbatch.py)."""

    micro: list[dict[str, torch.Tensor]]
    n_tokens: int


def response_tokens(x: Encoded) -> int:
    """Tokens the loss counts in one row: targets (labels shifted by one) that are not masked,
    as `losses.token_ce` counts them."""
    return sum(1 for t in x.labels[1:] if t != -100)


def micro_count(global_rows: int, world: int, micro_batch_size: int | None) -> int:
    """Micro-batches per worker in a step of `global_rows` rows: the same on every worker (each
    forward under DDP/FSDP is a collective), enough that the largest share fits
    `micro_batch_size`, but never more than the smallest share has rows. Shares differ by at
    most one row, so the cap binds only at micro_batch_size 1 with uneven shares: there one
    micro-batch of the larger shares holds 2 rows (no fake rows, so every method stays exact)."""
    if micro_batch_size is None:
        return 1
    largest, smallest = math.ceil(global_rows / world), global_rows // world
    return max(1, min(math.ceil(largest / micro_batch_size), smallest))


def split_even(rows: list, n: int) -> list[list]:
    """`rows` in `n` contiguous parts whose sizes differ by at most one (larger parts first)."""
    size, extra = divmod(len(rows), n)
    out, start = [], 0
    for k in range(n):
        end = start + size + (k < extra)
        out.append(rows[start:end])
        start = end
    return out


def epoch_steps(
    learn: list[Encoded], retain: list[Encoded], batch_size: int, retain_fraction: float,
    seed: int, epoch: int, rank: int, world: int, pad_id: int, micro_batch_size: int | None,
) -> list[Step]:
    """This worker's share of every global batch of one epoch, cut into micro-batches of at most
    `micro_batch_size` rows (see `micro_count`), each padded only to its own longest row. The
    rows, and so the replay fraction of each global batch, are those of `epoch_batches`."""
    steps = []
    for rows in global_batches(learn, retain, batch_size, retain_fraction, seed, epoch, world):
        n = micro_count(len(rows), world, micro_batch_size)
        micro = [collate(part, pad_id) for part in split_even(rows[rank::world], n)]
        steps.append(Step(micro, sum(response_tokens(x) for x in rows)))
    return steps
