"""The optimizer axis (001): RMS-aligned Muon with AdamW on the rest, and RMS-aligned SGD (Alg. 3)."""

from __future__ import annotations

import math

import pytest
import torch
from transformers import LlamaConfig, LlamaForCausalLM

from cliffsweep.trainables.optimizers import OPTIMIZERS, build_optimizer
from cliffsweep.trainables.optimizers.muon import newton_schulz, split_params

VOCAB = 97


def tiny_llama(seed: int = 0) -> LlamaForCausalLM:
    torch.manual_seed(seed)
    cfg = LlamaConfig(vocab_size=VOCAB, hidden_size=48, intermediate_size=96, num_hidden_layers=2,
                      num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=64,
                      tie_word_embeddings=False)
    return LlamaForCausalLM(cfg)


def backward(model, seed: int) -> None:
    g = torch.Generator().manual_seed(seed)
    ids = torch.randint(0, VOCAB, (4, 16), generator=g)
    labels = ids.clone()
    labels[:, :5] = -100
    model(input_ids=ids, labels=labels).loss.backward()


def snapshot(model):
    return {n: p.detach().clone() for n, p in model.named_parameters()}


def test_newton_schulz_equalises_singular_values():
    torch.manual_seed(0)
    g = torch.randn(24, 10) @ torch.diag(torch.logspace(-1, 1, 10))  # condition number 100
    s = torch.linalg.svdvals(newton_schulz(g))
    assert s.min() > 0.6 and s.max() < 1.25


def test_muon_split_hidden_matrices_vs_adamw_params():
    model = tiny_llama()
    muon, adam = split_params(model)
    names = {id(p): n for n, p in model.named_parameters()}
    muon_names = {names[id(p)] for p in muon}
    adam_names = {names[id(p)] for p in adam}
    assert "model.embed_tokens.weight" in adam_names and "lm_head.weight" in adam_names
    assert all(p.ndim == 2 for p in muon)
    assert all(".layers." in n for n in muon_names)
    assert {n for n in adam_names if n not in ("model.embed_tokens.weight", "lm_head.weight")} == {
        n for n, p in model.named_parameters() if p.ndim == 1}
    assert len(muon_names) == 2 * 7  # q, k, v, o, gate, up, down per layer


def test_muon_update_of_hidden_weight_is_orthogonal_and_rms_aligned():
    model = tiny_llama()
    lr = 1e-3
    opt = build_optimizer("muon", model, lr=lr, weight_decay=0.0)
    backward(model, 0)
    grads = {n: p.grad.clone() for n, p in model.named_parameters()}
    before = snapshot(model)
    opt.step()
    for name in ("model.layers.0.self_attn.q_proj.weight", "model.layers.1.mlp.down_proj.weight",
                 "model.layers.0.self_attn.k_proj.weight"):
        p = dict(model.named_parameters())[name]
        delta = (before[name] - p.detach()) / (lr * 0.2 * math.sqrt(max(p.shape)))
        # within the gradient's (numerical) range every direction moves by about the same amount
        sg = torch.linalg.svdvals(grads[name])
        r = int((sg > 0.01 * sg.max()).sum())
        s = torch.linalg.svdvals(delta)
        assert r >= 10 and s[:r].min() > 0.6 and s.max() < 1.25, (name, s)
        rms = (before[name] - p.detach()).square().mean().sqrt()
        assert rms.item() == pytest.approx(lr * 0.2, rel=0.3)
        # a plain gradient step would not be: its singular values are spread out
        assert sg[0] / sg[r - 1] > 3
        # and Muon still descends: <update, gradient> < 0
        assert ((p.detach() - before[name]) * grads[name]).sum() < 0


def test_muon_embeddings_head_and_1d_params_follow_adamw():
    model, ref_model = tiny_llama(), tiny_llama()
    lr, wd = 1e-2, 0.1
    opt = build_optimizer("muon", model, lr=lr, weight_decay=wd)
    _, ref_params = split_params(ref_model)
    ref = torch.optim.AdamW(ref_params, lr=lr, weight_decay=wd, betas=(0.9, 0.95), eps=1e-8)
    for step in range(3):
        # the same gradients for both (a backward would differ once Muon has moved the hidden weights)
        g = torch.Generator().manual_seed(step)
        grads = [torch.randn(p.shape, generator=g) for p in model.parameters()]
        for m, o in ((model, opt), (ref_model, ref)):
            for p, gr in zip(m.parameters(), grads):
                p.grad = gr.clone()
            o.step()
    ref_named = dict(ref_model.named_parameters())
    _, adam = split_params(model)
    adam_ids = {id(p) for p in adam}
    for n, p in model.named_parameters():
        if id(p) in adam_ids:
            assert torch.allclose(p, ref_named[n], atol=1e-6), n


def test_sgd_first_step_rms_and_second_step_follow_algorithm_3():
    model = tiny_llama()
    lr = 1e-2
    opt = build_optimizer("sgd", model, lr=lr, weight_decay=0.0)
    backward(model, 0)
    g0 = {n: p.grad.clone() for n, p in model.named_parameters()}
    w0 = snapshot(model)
    opt.step()
    for n, p in model.named_parameters():
        delta = p.detach() - w0[n]
        assert delta.square().mean().sqrt().item() == pytest.approx(lr * 0.2, rel=1e-4), n
        m = 0.1 * g0[n]
        assert torch.allclose(delta, -lr * 0.2 * m / m.square().mean().sqrt(), atol=1e-7), n
    opt.zero_grad()
    backward(model, 1)
    g1 = {n: p.grad.clone() for n, p in model.named_parameters()}
    w1 = snapshot(model)
    opt.step()
    for n, p in model.named_parameters():
        m = 0.9 * (0.1 * g0[n]) + 0.1 * g1[n]  # M_t = beta M_{t-1} + (1 - beta) G_t
        expected = w1[n] - lr * 0.2 * m / m.square().mean().sqrt()
        assert torch.allclose(p.detach(), expected, atol=1e-7), n


def test_sgd_decoupled_weight_decay_and_lr_schedule_scaling():
    model = tiny_llama()
    lr, wd = 1e-2, 0.5
    opt = build_optimizer("sgd", model, lr=lr, weight_decay=wd)
    for g in opt.param_groups:  # what the recipe's schedule does: scale each group's lr
        g["lr"] = g["lr"] * 0.5
    backward(model, 0)
    g0 = {n: p.grad.clone() for n, p in model.named_parameters()}
    w0 = snapshot(model)
    opt.step()
    for n, p in model.named_parameters():
        eff = lr * 0.5
        expected = w0[n] * (1 - eff * wd) - eff * 0.2 * g0[n] / g0[n].square().mean().sqrt()
        assert torch.allclose(p.detach(), expected, atol=1e-7), n


@pytest.mark.parametrize("name", sorted(OPTIMIZERS))
def test_every_registered_optimizer_lowers_the_loss(name):
    model = tiny_llama()
    opt = build_optimizer(name, model, lr=3e-3, weight_decay=0.01)
    g = torch.Generator().manual_seed(0)
    ids = torch.randint(0, VOCAB, (4, 16), generator=g)
    first = None
    for _ in range(5):
        opt.zero_grad()
        loss = model(input_ids=ids, labels=ids).loss
        first = loss.item() if first is None else first
        loss.backward()
        opt.step()
    assert model(input_ids=ids, labels=ids).loss.item() < first - 0.05


def test_unknown_optimizer_names_valid_ones():
    with pytest.raises(KeyError, match="adamw"):
        build_optimizer("adam", tiny_llama(), lr=1e-3, weight_decay=0.0)


def test_recipe_optimizer_settings_reach_the_optimizer_and_bad_ones_are_listed(tmp_path, capsys):
    """Issue 31: AdamW's betas and eps (and SGD's / Muon's momentum) from recipe.optimizer_settings;
    a misspelt or out-of-range setting is named by validate with every other problem."""
    import yaml

    from cliffsweep.cli import main
    from cliffsweep.trainables.optimizers import build_optimizer

    model = torch.nn.Linear(4, 4)
    adamw = build_optimizer("adamw", model, 1e-3, 0.01, settings={"betas": [0.9, 0.95], "eps": 1e-6})
    assert adamw.defaults["betas"] == (0.9, 0.95) and adamw.defaults["eps"] == 1e-6
    assert build_optimizer("adamw", model, 1e-3, 0.01).defaults["betas"] == (0.9, 0.999)  # 000 App. B
    assert build_optimizer("sgd", model, 1e-3, 0.0, settings={"momentum": 0.5}).defaults["momentum"] == 0.5
    sweep = tmp_path / "s.yaml"
    sweep.write_text(yaml.safe_dump({
        "name": "x", "models": [{"name": "q", "path": "toy:qwen2-tiny"}], "methods": [{"name": "sft"}],
        "lrs": [1e-3], "epochs": [1], "store": str(tmp_path / "store"),
        "tasks": {"learn": {"name": "toy_facts"}, "retain": [{"name": "toy_arith"}]},
        "recipe": {"optimizer_settings": {"adamw": {"betas": [0.9, 1.5], "epsilon": 1e-8}, "adam": {}}}}))
    assert main(["validate", str(sweep)]) == 2
    err = capsys.readouterr().err
    for want in ("recipe.optimizer_settings.adamw.betas: Value error, betas must lie in [0, 1)",
                 "recipe.optimizer_settings.adamw.epsilon: not a field of this section",
                 "recipe.optimizer_settings.adam: unknown optimizer 'adam'"):
        assert want in err, err
