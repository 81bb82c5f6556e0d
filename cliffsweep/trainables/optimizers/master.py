"""fp32 master weights for a model whose weights are bf16 (or fp16): the optimizer steps fp32
copies and writes them back rounded, so that updates far below the weights' last bf16 digit
accumulate instead of rounding away (issue 15 part 3).

Why: bf16 keeps 8 bits of mantissa, so a weight of magnitude 1 moves only by steps of ~4e-3. An
AdamW update is about lr per step: at the paper's lrs (1e-6 .. 1e-4) nearly every update of a
pure-bf16 model rounds to nothing, and the low-lr end of a sweep would measure rounding, not
learning. Mixed precision "with master weights" (Micikevicius et al. 2018, the recipe every
large-model trainer follows: Megatron, DeepSpeed, FSDP's MixedPrecisionPolicy) computes forward
and backward in bf16 and keeps the optimizer's copy and state in fp32.

Done with torch's own optimizer hooks on the very optimizer the registry built, so every
optimizer (AdamW, Muon, SGD) and the lr schedule work unchanged: the optimizer's param groups
hold the fp32 copies; before each step the model's bf16 gradients are copied into them; after
it the copies are written back into the model and the model's gradients cleared. The copies
travel with the optimizer's state_dict, so a resumed trial continues from the exact fp32
weights, not from their rounding.
"""

from __future__ import annotations

import torch

LOW_PRECISION = (torch.bfloat16, torch.float16)


def needs_master_weights(model: torch.nn.Module) -> bool:
    return any(p.requires_grad and p.dtype in LOW_PRECISION for p in model.parameters())


def add_master_weights(optimizer: torch.optim.Optimizer) -> torch.optim.Optimizer:
    """Make `optimizer` (freshly built, no state yet) step fp32 copies of its low-precision
    parameters; returns it."""
    pairs: list[tuple[torch.nn.Parameter, torch.Tensor]] = []
    for group in optimizer.param_groups:
        params = []
        for p in group["params"]:
            if p.dtype in LOW_PRECISION:
                master = p.detach().float().clone().requires_grad_(True)
                pairs.append((p, master))
                params.append(master)
            else:
                params.append(p)
        group["params"] = params

    def grads_in(opt, args, kwargs):
        for p, m in pairs:
            m.grad = None if p.grad is None else p.grad.detach().float()

    @torch.no_grad()
    def weights_out(opt, args, kwargs):
        for p, m in pairs:
            p.copy_(m)
            p.grad = None  # zero_grad clears the copies' gradients, not the model's

    def save(opt, state):
        state["master_weights"] = [m.detach().clone() for _, m in pairs]
        return state

    def load_pre(opt, state):
        masters = state.pop("master_weights", None)
        if masters is not None:
            with torch.no_grad():
                for (_, m), saved in zip(pairs, masters, strict=True):
                    m.copy_(saved)
        return state

    optimizer.register_step_pre_hook(grads_in)
    optimizer.register_step_post_hook(weights_out)
    optimizer.register_state_dict_post_hook(save)
    optimizer.register_load_state_dict_pre_hook(load_pre)
    optimizer.master_pairs = pairs  # for tests and the loop's gradient clipping
    return optimizer


@torch.no_grad()
def keep_edits(optimizer: torch.optim.Optimizer) -> None:
    """After a method edited the model's weights following a step (NanoAdam puts masked entries
    back to their anchors): the fp32 copies take those edits, entry by entry, and keep their
    own precision everywhere else. A no-op for an optimizer without master weights."""
    for p, m in getattr(optimizer, "master_pairs", ()):
        edited = p != m.to(p.dtype)
        if edited.any():
            m.copy_(torch.where(edited, p.float(), m))
