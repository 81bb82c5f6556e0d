"""fp32 master weights for bf16 models (optimizers/master.py, issue 15 part 3): the property
that defines them is that an update far below bf16's resolution survives, which pure bf16
weights round away; and that nothing else changes (every optimizer, the lr schedule, resume,
methods that edit weights after a step, fp32 models)."""

from __future__ import annotations

import copy

import pytest
import torch

from cliffsweep.trainables.optimizers import OPTIMIZERS, build_optimizer
from cliffsweep.trainables.optimizers.master import keep_edits
from test_optimizers import backward, tiny_llama


def bf16_model(seed: int = 0):
    return tiny_llama(seed).to(torch.bfloat16)


def train(model, opt, steps: int) -> None:
    for s in range(steps):
        backward(model, seed=s)
        opt.step()
        opt.zero_grad(set_to_none=True)


def test_a_small_lr_update_survives_with_master_weights_and_rounds_away_without():
    lr, steps = 1e-6, 30
    pure, mixed = bf16_model(), bf16_model()
    start = {n: p.detach().clone() for n, p in pure.named_parameters()}
    train(pure, build_optimizer("adamw", pure, lr, 0.0, master_weights=False), steps)
    opt = build_optimizer("adamw", mixed, lr, 0.0)
    train(mixed, opt, steps)
    # pure bf16: AdamW moves each weight by ~lr per step, under half a bf16 step wherever
    # |w| > 1e-3 (a step there is >= 2^-17 ~ 7.6e-6): none of those moved, ever (only weights
    # within ~3e-4 of zero can take a 1e-6 step)
    def moved(model) -> int:
        return sum(int(((p != start[n]) & (start[n].abs() > 1e-3)).sum()) for n, p in model.named_parameters())

    assert moved(pure) == 0
    # master weights: the fp32 copies moved, the model holds their rounding, and many weights
    # already crossed a bf16 step
    masters = opt.master_pairs
    drift = torch.cat([(m - start_p.float()).abs().flatten() for (p, m), start_p in
                       zip(masters, (start[n] for n, _ in mixed.named_parameters()), strict=True)])
    # (random batches: gradient signs vary, so the drift is a few lr, not all 30; Adam's step
    # stays within a few lr)
    assert 2 * lr < float(drift.median()) and float(drift.max()) <= 4 * steps * lr
    assert all(torch.equal(p, m.to(torch.bfloat16)) for p, m in masters)
    assert moved(mixed) > 1000  # 30 accumulated updates crossed a bf16 step
    assert all(p.grad is None for p in mixed.parameters())  # the model's gradients are cleared


@pytest.mark.parametrize("name", sorted(OPTIMIZERS))
def test_every_optimizer_steps_fp32_copies_with_the_lr_schedule(name):
    model = bf16_model()
    opt = build_optimizer(name, model, 1e-3, 0.01)
    sched = torch.optim.lr_scheduler.LambdaLR(opt, lambda s: 0.5)
    assert opt.master_pairs and all(m.dtype == torch.float32 for _, m in opt.master_pairs)
    assert all(p.dtype == torch.float32 for g in opt.param_groups for p in g["params"])
    before = [m.clone() for _, m in opt.master_pairs]
    train(model, opt, 2)
    sched.step()
    assert opt.param_groups[0]["lr"] == pytest.approx(5e-4)
    assert any(not torch.equal(b, m) for b, (_, m) in zip(before, opt.master_pairs, strict=True))
    assert all(torch.equal(p, m.to(torch.bfloat16)) for p, m in opt.master_pairs)


def test_resume_continues_from_the_exact_fp32_copies():
    model = bf16_model()
    opt = build_optimizer("adamw", model, 1e-5, 0.01)
    train(model, opt, 3)
    state = copy.deepcopy(opt.state_dict())  # as torch.save / torch.load in resume.py
    masters = [m.clone() for _, m in opt.master_pairs]
    # a resumed trial: the model holds the rounded weights, a new optimizer loads the state
    again = bf16_model(seed=1)
    again.load_state_dict(model.state_dict())
    opt2 = build_optimizer("adamw", again, 1e-5, 0.01)
    opt2.load_state_dict(state)
    assert all(torch.equal(a, m) for a, (_, m) in zip(masters, opt2.master_pairs, strict=True))
    assert any(not torch.equal(m, p.float()) for p, m in opt2.master_pairs)  # more than the rounding
    train(model, opt, 1)
    train(again, opt2, 1)
    assert all(torch.equal(a, b) for a, b in zip(model.parameters(), again.parameters(), strict=True))


def test_edits_a_method_makes_after_the_step_reach_the_copies_and_nothing_else():
    model = bf16_model()
    opt = build_optimizer("adamw", model, 1e-5, 0.0)
    train(model, opt, 2)
    p, m = opt.master_pairs[0]
    before = m.clone()
    with torch.no_grad():  # as NanoAdam puts masked entries back to their anchors
        p.view(-1)[0] = 0.5
    keep_edits(opt)
    assert m.view(-1)[0] == 0.5
    assert torch.equal(m.view(-1)[1:], before.view(-1)[1:])  # fp32 precision kept elsewhere


def test_fp32_models_and_the_switch_off_have_no_copies():
    assert not hasattr(build_optimizer("adamw", tiny_llama(), 1e-3, 0.01), "master_pairs")
    assert not hasattr(build_optimizer("adamw", bf16_model(), 1e-3, 0.01, master_weights=False), "master_pairs")
