"""Plain loss functions shared by methods. Labels use -100 for masked (prompt/pad) tokens.

Training losses never build the full-vocabulary logits of a whole batch (issue 9: at batch 8 x
512 tokens and a 49,152-token vocabulary they alone are 0.8 GB in fp32, several times over in
log-softmax and its gradient). `response_ce` takes the final hidden states from a forward that
computes no logits, keeps the positions that predict a response token, and applies the model's
own LM head (so a tied head is the embedding, as in the model) chunk by chunk, each chunk under
activation checkpointing: backward recomputes one chunk's logits at a time. Only the loss terms
are chunked; the per-token values are the same as `token_ce` on the model's logits (tested).
The logits-based functions below remain for statistics and tests.

With recipe.kernels liger (trainables/fastpath.py) `hidden_ce` computes the same per-token CE with
Liger-Kernel's fused linear cross-entropy (reduction "none": its backward recomputes each
chunk's logits gradient with the per-token upstream gradient folded in, so weighted losses such
as DFT's, IW's and TALR's get exact gradients; tested per method). Only response positions reach
it, so its ignore_index paths (Liger issues 968, 678) are never taken. KL's CE and KL come from
one chunked pass over both heads (`response_ce_kl`): one head matmul per model for both terms.
"""

from __future__ import annotations

from collections.abc import Callable

import torch
import torch.nn.functional as F
from torch.utils.checkpoint import checkpoint

IGNORE = -100

_FUSED_CE = False
"""Whether `hidden_ce` uses Liger's fused kernel in this process. A process-wide switch, set by
the training worker from its recipe (fastpath.apply_kernels): every method reaches the CE
through `response_ce`, and this keeps the choice out of the sixteen methods' signatures."""


def use_fused_ce(on: bool) -> None:
    global _FUSED_CE
    _FUSED_CE = on


def fused_ce_in_use() -> bool:
    return _FUSED_CE


CHUNK_ELEMENTS = 1 << 24
"""Logit entries per chunk: 16M, 64 MiB in fp32 (SmolLM2's 49,152 tokens: 341 positions per
chunk). Backward holds about three such buffers at once; large enough that each chunk is one
sizeable matmul, small beside any real model's activations."""


def shift(logits: torch.Tensor, labels: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """Align next-token logits with their targets: logits[:, t] predicts labels[:, t+1]."""
    return logits[:, :-1, :], labels[:, 1:]


def token_ce(logits: torch.Tensor, labels: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """Per-token cross-entropy (B, T-1) in fp32 and the mask of tokens that count."""
    lg, lb = shift(logits, labels)
    mask = lb != IGNORE
    ce = F.cross_entropy(lg.float().transpose(1, 2), lb.clamp_min(0), reduction="none")
    return ce * mask, mask


def masked_token_ce(logits: torch.Tensor, labels: torch.Tensor) -> torch.Tensor:
    """Mean CE over response tokens of the batch (the SFT objective of 000 App. B)."""
    ce, mask = token_ce(logits, labels)
    return ce.sum() / mask.sum().clamp_min(1)


def sequence_mean_ce(logits: torch.Tensor, labels: torch.Tensor) -> torch.Tensor:
    """Mean response-token CE of each sequence (B,)."""
    ce, mask = token_ce(logits, labels)
    return ce.sum(1) / mask.sum(1).clamp_min(1)


def unwrap(model: torch.nn.Module) -> torch.nn.Module:
    """The module under a DDP wrapper (FSDP2 modules are not wrapped)."""
    return model.module if isinstance(model, torch.nn.parallel.DistributedDataParallel) else model


def token_kl(logits: torch.Tensor, base_logits: torch.Tensor, labels: torch.Tensor) -> torch.Tensor:
    """KL(pi_theta || pi_base) over the full vocabulary at each response position (B, T-1),
    zero on masked positions (002's KL anchor, the forward direction of 003 App. C.4)."""
    lg, lb = shift(logits, labels)
    base = shift(base_logits, labels)[0]
    logp = F.log_softmax(lg.float(), dim=-1)
    logq = F.log_softmax(base.float(), dim=-1)
    kl = (logp.exp() * (logp - logq)).sum(-1)
    return kl * (lb != IGNORE)


def token_norm(mask: torch.Tensor, n_tokens: float | None) -> torch.Tensor | float:
    """The denominator of a per-token loss: `n_tokens` when given (the training loop passes the
    step's global response-token count over the number of workers, so that micro-batches and
    workers add up to the global batch's mean: trainables/microbatch.py), else this batch's own
    count of response tokens."""
    return mask.sum().clamp_min(1) if n_tokens is None else n_tokens


def weighted_token_mean(ce: torch.Tensor, mask: torch.Tensor, weights: torch.Tensor,
                        n_tokens: float | None = None) -> torch.Tensor:
    """sum_i w_i l_i / n_tokens: a reweighted SFT loss that equals `masked_token_ce` when all
    weights are 1 (so reweighting methods keep the lr scale of plain SFT). `weights` broadcasts
    against the (B, T-1) token losses: (B, T-1) per token or (B, 1) per sequence. `n_tokens`:
    see `token_norm`."""
    return (weights * ce * mask).sum() / token_norm(mask, n_tokens)


# --- chunked losses from hidden states ------------------------------------------------------
def final_hidden(model: torch.nn.Module, batch: dict[str, torch.Tensor]) -> torch.Tensor:
    """The LM head's input (B, T, H): the last entry of `hidden_states` (transformers ties it to
    the final-norm output), from a forward whose `logits_to_keep` names no position, so no logits
    are computed. Called through any DDP wrapper (its reducer must see the forward); no KV cache
    (a training forward would otherwise keep one for every layer)."""
    ids = batch["input_ids"]
    out = model(input_ids=ids, attention_mask=batch["attention_mask"], use_cache=False,
                output_hidden_states=True, logits_to_keep=ids.new_empty(0))
    return out.hidden_states[-1]


def lm_head(model: torch.nn.Module) -> torch.nn.Module:
    """The model's output layer, as the model applies it (tied to the embedding where it is)."""
    return unwrap(model).get_output_embeddings()


def check_head(model: torch.nn.Module, batch: dict[str, torch.Tensor], atol: float = 1e-4) -> None:
    """Fail unless the head applied to `final_hidden` gives the model's own logits (on the first
    row, a few positions): a model that scales or soft-caps its logits after the head (Gemma 2's
    soft-capping, say) would otherwise train on a different loss without a word."""
    small = {k: batch[k][:1, :8] for k in ("input_ids", "attention_mask")}
    with torch.no_grad():
        ref = model(**small, use_cache=False).logits.float()
        got = lm_head(model)(final_hidden(model, small)).float()
    if not torch.allclose(got, ref, atol=atol, rtol=1e-3):
        raise ValueError(f"{type(unwrap(model)).__name__}: the LM head on the final hidden states does "
                         f"not give the model's logits (max diff {(got - ref).abs().max():.3g}); the "
                         "chunked loss (trainables/losses.py) does not support this architecture")


def response_states(hidden: torch.Tensor, labels: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """Hidden states of the positions that predict a response token (N, H), those tokens (N,),
    and the (B, T-1) mask of such positions (the mask of `token_ce`)."""
    h, lb = hidden[:, :-1], labels[:, 1:]
    mask = lb != IGNORE
    return h[mask], lb[mask], mask


def over_chunks(fn: Callable[..., torch.Tensor], rows: int, *tensors: torch.Tensor) -> torch.Tensor:
    """fn over row chunks of `tensors`, concatenated. While gradients are recorded each chunk
    is checkpointed: only its inputs are kept, and backward recomputes its logits."""
    outs = []
    for i in range(0, tensors[0].shape[0], rows):
        args = [t[i : i + rows] for t in tensors]
        grad = torch.is_grad_enabled() and any(a.requires_grad for a in args)
        outs.append(checkpoint(fn, *args, use_reentrant=False) if grad else fn(*args))
    return torch.cat(outs)


def chunk_rows(head: torch.nn.Module, chunk_elements: int = CHUNK_ELEMENTS) -> int:
    return max(1, chunk_elements // head.weight.shape[0])


def scatter_tokens(values: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
    """Per-position values (B, T-1) from the N response positions' `values` (0 elsewhere)."""
    out = torch.zeros(mask.shape, dtype=torch.float32, device=mask.device)
    return out.masked_scatter(mask, values.float())


def no_tokens(hidden: torch.Tensor, head: torch.nn.Module, mask: torch.Tensor) -> torch.Tensor:
    """Zeros (B, T-1) for a batch without a response token, still a function of every parameter
    (through one head position): backward runs and DDP sees each gradient it waits for."""
    return torch.zeros(mask.shape, device=mask.device) + 0.0 * head(hidden[:1, :1]).float().sum()


def hidden_ce(hidden: torch.Tensor, head: torch.nn.Module, labels: torch.Tensor,
              chunk_elements: int = CHUNK_ELEMENTS) -> tuple[torch.Tensor, torch.Tensor]:
    """Per-token CE (B, T-1) in fp32 and its mask, as `token_ce` on `head(hidden)`, chunked."""
    h, targets, mask = response_states(hidden, labels)
    if not len(targets):
        return no_tokens(hidden, head, mask), mask
    if _FUSED_CE:
        return scatter_tokens(fused_ce(h, head, targets), mask), mask

    def ce(h_chunk, t_chunk):
        return F.cross_entropy(head(h_chunk).float(), t_chunk, reduction="none")

    return scatter_tokens(over_chunks(ce, chunk_rows(head, chunk_elements), h, targets), mask), mask


def fused_ce(h: torch.Tensor, head: torch.nn.Module, targets: torch.Tensor) -> torch.Tensor:
    """Per-token CE (N,) of `head(h)` against `targets` by Liger's fused linear cross-entropy,
    accumulated in fp32 (as `hidden_ce`'s `.float()`)."""
    from liger_kernel.transformers.functional import liger_fused_linear_cross_entropy

    return liger_fused_linear_cross_entropy(h, head.weight, targets, bias=head.bias, reduction="none",
                                            accum_dtype=torch.float32).float()


def response_ce(model: torch.nn.Module, batch: dict[str, torch.Tensor]) -> tuple[torch.Tensor, torch.Tensor]:
    """Per-token CE (B, T-1) of the response tokens and its mask, without full-batch logits."""
    return hidden_ce(final_hidden(model, batch), lm_head(model), batch["labels"])


def frozen_response_ce(base: torch.nn.Module, batch: dict[str, torch.Tensor]) -> tuple[torch.Tensor, torch.Tensor]:
    """`response_ce` of a frozen copy (frozen_copy), without autograd."""
    follow_device(base, batch["input_ids"].device)
    with torch.no_grad():
        return response_ce(base, batch)


def response_ce_kl(model: torch.nn.Module, base: torch.nn.Module, batch: dict[str, torch.Tensor]
                   ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """Per-token CE and KL(pi_theta || pi_base) over the full vocabulary (both (B, T-1), 0 off
    the response) and the mask: `token_ce` and `token_kl` on the two models' logits, chunked
    (both heads are applied to the same positions in one pass)."""
    follow_device(base, batch["input_ids"].device)
    hidden = final_hidden(model, batch)
    with torch.no_grad():
        base_hidden = final_hidden(base, batch)
    h, targets, mask = response_states(hidden, batch["labels"])
    hb = base_hidden[:, :-1][mask]
    head, base_head = lm_head(model), lm_head(base)
    if not len(targets):
        zero = no_tokens(hidden, head, mask)
        return zero, zero, mask

    def ce_kl(h_chunk, hb_chunk, t_chunk):
        logp = F.log_softmax(head(h_chunk).float(), dim=-1)
        logq = F.log_softmax(base_head(hb_chunk).float(), dim=-1)
        ce = -logp.gather(-1, t_chunk.unsqueeze(-1)).squeeze(-1)
        return torch.stack([ce, (logp.exp() * (logp - logq)).sum(-1)], dim=-1)

    flat = over_chunks(ce_kl, chunk_rows(head), h, hb, targets)
    return scatter_tokens(flat[:, 0], mask), scatter_tokens(flat[:, 1], mask), mask


def frozen_copy(model: torch.nn.Module) -> torch.nn.Module:
    """A frozen base-model copy (eval mode, no grads) for methods that compare to pi_base.
    Kept outside the trained module so it is neither optimised, DDP-synced nor saved."""
    import copy

    base = copy.deepcopy(unwrap(model)).eval()
    for p in base.parameters():
        p.requires_grad_(False)
    return base


def follow_device(module: torch.nn.Module, device: torch.device) -> None:
    """Move a method-held module (e.g. a frozen base) to the batch's device the first time it
    differs: methods build such copies in prepare(), before the trainer moves the model."""
    if next(module.parameters()).device != device:
        module.to(device)
