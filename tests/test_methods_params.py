"""Defining properties of the parameter-space methods on tiny random decoders (no tokenizer):
SIB (000 Sec. 4), EWC / MAS (000 App. D), L2-SP, RPSFT (004), WiSE-FT (003)."""

from __future__ import annotations

import copy

import pydantic
import pytest
import torch
from transformers import LlamaConfig, LlamaForCausalLM, Qwen2Config, Qwen2ForCausalLM

from cliffsweep.trainables import penalties
from cliffsweep.trainables.methods import build_method
from cliffsweep.trainables.methods.base import Method
from cliffsweep.trainables.methods.mas import output_sq_norm
from cliffsweep.trainables.methods.rpsft import covered_weights
from cliffsweep.trainables.methods.sib import (
    balance_alpha, channel_sq_norms, grad_sq_norm, retain_gradients, scale_pairs,
)

VOCAB = 100


pytestmark = pytest.mark.usefixtures("one_thread")  # conftest.py


def tiny_qwen2(seed: int = 0) -> Qwen2ForCausalLM:
    """Qwen2: biases on q/k/v, GQA 4 query heads over 2 kv heads; q/o square (32 = 4 x 8)."""
    torch.manual_seed(seed)
    cfg = Qwen2Config(
        vocab_size=VOCAB, hidden_size=32, intermediate_size=64, num_hidden_layers=2,
        num_attention_heads=4, num_key_value_heads=2, initializer_range=0.2,
    )
    return random_biases(Qwen2ForCausalLM(cfg).float())


def random_biases(model):
    """transformers initialises biases to 0, which would hide a bias the rescaling forgets."""
    g = torch.Generator().manual_seed(11)
    with torch.no_grad():
        for n, p in model.named_parameters():
            if n.endswith(".bias"):
                p.copy_(0.2 * torch.randn(p.shape, generator=g))
    return model


def tiny_llama(seed: int = 0) -> LlamaForCausalLM:
    """Llama with GQA (4 query heads per kv head, 2 kv heads) and biases on every Linear."""
    torch.manual_seed(seed)
    cfg = LlamaConfig(
        vocab_size=VOCAB, hidden_size=32, intermediate_size=48, num_hidden_layers=2,
        num_attention_heads=8, num_key_value_heads=2, attention_bias=True, mlp_bias=True,
        initializer_range=0.2,
    )
    return random_biases(LlamaForCausalLM(cfg).float())


MODELS = {"qwen2": tiny_qwen2, "llama": tiny_llama}


def batches(n: int, seed: int, rows: int = 4, width: int = 12) -> list[dict[str, torch.Tensor]]:
    """Random token batches: first 4 tokens are prompt (masked), one padded row per batch."""
    g = torch.Generator().manual_seed(seed)
    out = []
    for _ in range(n):
        ids = torch.randint(0, VOCAB, (rows, width), generator=g)
        attn = torch.ones_like(ids)
        attn[-1, width - 3 :] = 0
        labels = ids.masked_fill(attn == 0, -100)
        labels[:, :4] = -100
        out.append({
            "input_ids": ids, "attention_mask": attn, "labels": labels,
            "example_idx": torch.arange(rows), "is_retain": torch.zeros(rows, dtype=torch.bool),
        })
    return out


def logits(model, batch) -> torch.Tensor:
    model.eval()
    with torch.no_grad():
        return model(input_ids=batch["input_ids"], attention_mask=batch["attention_mask"]).logits


# --- SIB --------------------------------------------------------------------------------------

@pytest.mark.parametrize("arch", sorted(MODELS))
def test_sib_preserves_logits(arch):
    base = MODELS[arch]()
    data = batches(2, seed=1)
    sib = build_method("sib")
    stats = sib.compute_stats(base, data, [])
    ref = logits(base, data[0])
    # The balancing alphas, and a harsher set (log-uniform in [1/10, 10]) on the same channels.
    g = torch.Generator().manual_seed(3)
    harsh = {k: torch.exp((torch.rand(v.shape, generator=g) * 2 - 1) * 2.3) for k, v in stats.items() if k.endswith(".alpha")}
    for alphas in (stats, harsh):
        model = copy.deepcopy(base)
        sib.prepare(model, alphas)
        assert (logits(model, data[0]) - ref).abs().max() <= 1e-4
        changed = [n for n, p in model.named_parameters() if not torch.equal(p, dict(base.named_parameters())[n])]
        assert any("v_proj" in n for n in changed) and any("down_proj" in n for n in changed)


def test_sib_gate_down_pair_would_break_the_function():
    """Why (W_gate, W_down) is not used: SiLU is not homogeneous."""
    model = tiny_qwen2()
    data = batches(1, seed=1)
    ref = logits(model, data[0])
    mlp = model.model.layers[0].mlp
    with torch.no_grad():
        mlp.gate_proj.weight /= 3.0
        mlp.down_proj.weight *= 3.0
    assert (logits(model, data[0]) - ref).abs().max() > 1e-3


def channel_costs(model) -> torch.Tensor:
    """Per-channel ||g_div||^2 + ||g_mul||^2 of every pair, from the current .grad fields."""
    return torch.cat([sum(channel_sq_norms(p)) for p in scale_pairs(model)])


@pytest.mark.parametrize("arch", sorted(MODELS))
def test_sib_lowers_retain_grad_norm_at_its_minimum(arch):
    base = MODELS[arch]()
    data = batches(3, seed=2)
    sib = build_method("sib")
    weights = {k: v.clone() for k, v in base.state_dict().items()}
    stats = sib.compute_stats(base, data, [])
    # compute_stats rescales to measure Fig. 2's numbers, then undoes it: each weight back to
    # within one fp32 rounding of itself
    for k, v in base.state_dict().items():
        assert torch.allclose(v, weights[k], rtol=3e-7, atol=0), k
    alphas = {k: v for k, v in stats.items() if k.endswith(".alpha")}
    flat = torch.cat(list(alphas.values()))
    assert (flat > 1 / 100).all() and (flat < 100).all(), "clamped: optimality test would not apply"
    assert (flat - 1).abs().max() > 0.2, "alphas ~1: the test would not test anything"

    retain_gradients(base, data)
    before = grad_sq_norm(base)
    assert torch.allclose(before, stats["sib:grad_sq_before"])

    costs, totals = {}, {}
    for factor in (1.0, 1.1, 1 / 1.1):
        model = copy.deepcopy(base)
        sib.prepare(model, {k: v * factor for k, v in alphas.items()})
        retain_gradients(model, data)
        costs[factor], totals[factor] = channel_costs(model), grad_sq_norm(model)

    # 000's Eq. 2 as printed is the inverse, (||g_div||^2 / ||g_mul||^2)^(1/4): it raises the norm
    # (issue 31; docs/methods.md states our reading)
    printed = copy.deepcopy(base)
    sib.prepare(printed, {k: 1.0 / v for k, v in alphas.items()})
    retain_gradients(printed, data)
    assert grad_sq_norm(printed) > before > totals[1.0], (float(grad_sq_norm(printed)), float(before))
    assert totals[1.0] < before  # strictly lower after balancing
    assert torch.allclose(totals[1.0], stats["sib:grad_sq_after_predicted"], rtol=1e-4)  # predicted = measured
    assert torch.allclose(totals[1.0], stats["sib:grad_sq_after"], rtol=1e-4)  # compute_stats measured it too
    assert stats["sib:hessian_base"].shape == stats["sib:hessian_rescaled"].shape == (5,)
    # alpha* is the per-channel minimiser: moving every alpha by 10 % either way costs more.
    live = costs[1.0] > 1e-10 * costs[1.0].max()
    for factor in (1.1, 1 / 1.1):
        assert (costs[factor][live] > costs[1.0][live]).all()
        assert totals[factor] > totals[1.0]


def test_balance_alpha_closed_form_and_clamp():
    div = torch.tensor([1.0, 16.0, 0.0, 0.0, 1.0, 1e-12])
    mul = torch.tensor([16.0, 1.0, 0.0, 5.0, 0.0, 1.0])
    a = balance_alpha(div, mul, ratio=100.0)
    assert torch.allclose(a, torch.tensor([2.0, 0.5, 1.0, 100.0, 0.01, 100.0]))
    # 000's Eq. 2 as printed, (||g_div||^2 / ||g_mul||^2)^(1/4): the reciprocal, clamped alike
    printed = balance_alpha(div, mul, ratio=100.0, rule="eq2")
    assert torch.allclose(printed, torch.tensor([0.5, 2.0, 1.0, 0.01, 100.0, 0.01]))


def test_sib_alpha_option_follows_its_formula_and_only_ours_lowers_the_gradient_norm():
    """SIB's `alpha` (issue 40): "eq2" computes 000's Eq. 2 as printed, the reciprocal of the
    default's alphas channel by channel; both preserve the function, and the predicted
    post-balance ||grad L(D_R)||^2 falls with the default and rises with the printed rule."""
    model = tiny_qwen2(3)
    retain = batches(2, seed=4)
    ours = build_method("sib", {"hessian_top_k": 0}).compute_stats(model, retain, [])
    printed = build_method("sib", {"hessian_top_k": 0, "alpha": "eq2"}).compute_stats(model, retain, [])
    keys = [k for k in ours if k.endswith(".alpha")]
    assert keys and all(torch.allclose(printed[k], 1.0 / ours[k]) for k in keys)
    before = float(ours["sib:grad_sq_before"])
    assert float(ours["sib:grad_sq_after_predicted"]) < before < float(printed["sib:grad_sq_after_predicted"])
    assert build_method("sib", {"alpha": "eq2"}).stats_inputs() != build_method("sib").stats_inputs()


# --- quadratic anchors: EWC, MAS, L2-SP, RPSFT -------------------------------------------------

def closed_form_grad(name: str, method, model) -> dict[str, torch.Tensor]:
    """d penalty / d theta from the formulas (not autograd)."""
    lam = method.params.lam
    if name in ("ewc", "mas"):  # lambda/2 sum F d^2 -> lambda F d
        return {n: lam * method.importance[n] * (p.detach() - method.anchor[n]) for n, p in model.named_parameters()}
    if name == "l2sp":  # lambda ||d||^2 -> 2 lambda d
        return {n: 2 * lam * (p.detach() - method.anchor[n]) for n, p in model.named_parameters()}
    out = {n: torch.zeros_like(p) for n, p in model.named_parameters()}
    for n, w0 in method.anchor.items():  # lambda ||U^T D V||^2 -> 2 lambda U U^T D V V^T
        u, v = method.u[n], method.v[n]
        out[n] = 2 * lam * u @ (u.T @ (dict(model.named_parameters())[n].detach() - w0) @ v) @ v.T
    return out


def prepared(name: str, params: dict | None = None, seed: int = 0):
    model = tiny_qwen2(seed)
    method = build_method(name, params)
    stats = method.compute_stats(model, batches(2, seed=5), [])
    method.prepare(model, stats)
    return model, method


def perturb(model, scale: float, seed: int = 7, names=None) -> None:
    g = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for n, p in model.named_parameters():
            step = torch.randn(p.shape, generator=g)
            if names is None or n in names:
                p.add_(scale * step)


ANCHORED = ["ewc", "mas", "l2sp", "rpsft"]


@pytest.mark.parametrize("name", ANCHORED)
def test_penalty_zero_at_start_and_quadratic_in_drift(name):
    model, method = prepared(name, {"k": 4} if name == "rpsft" else None)
    batch = batches(1, seed=9)[0]
    theta0 = copy.deepcopy(model.state_dict())
    values = []
    for scale in (0.0, 0.01, 0.02, 0.1, 1.0):
        model.load_state_dict(theta0)
        perturb(model, scale)
        values.append(method.loss(model, batch)[1]["penalty"])
    assert values[0] == 0.0
    assert all(a < b for a, b in zip(values, values[1:]))  # monotone in the perturbation size
    assert values[2] == pytest.approx(4 * values[1], rel=1e-3)  # and quadratic


@pytest.mark.parametrize("name", ANCHORED)
def test_penalty_gradient_matches_closed_form(name):
    model, method = prepared(name, {"k": 4, "lam": 0.7} if name == "rpsft" else {"lam": 0.7})
    perturb(model, 0.05)
    batch = batches(1, seed=9)[0]

    def grads(m: Method) -> dict[str, torch.Tensor]:
        model.zero_grad(set_to_none=True)
        m.loss(model, batch)[0].backward()
        return {n: p.grad.clone() for n, p in model.named_parameters()}

    with_penalty, plain = grads(method), grads(Method())
    expected = closed_form_grad(name, method, model)
    for n in with_penalty:
        assert torch.allclose(with_penalty[n] - plain[n], expected[n], atol=1e-6, rtol=1e-4), n
    assert sum(float(e.abs().sum()) for e in expected.values()) > 0


def test_ewc_fisher_is_mean_squared_batch_gradient():
    model = tiny_qwen2()
    data = batches(3, seed=4)
    fisher = build_method("ewc").compute_stats(model, data, [])
    manual = {n: torch.zeros_like(p) for n, p in model.named_parameters()}
    model.eval()
    for b in data:
        grads = torch.autograd.grad(penalties.batch_ce(model, b), list(model.parameters()))
        for (n, _), g in zip(model.named_parameters(), grads):
            manual[n] += g.square() / len(data)
    scale = sum(float(v.sum()) for v in manual.values()) / sum(v.numel() for v in manual.values())
    for n, v in manual.items():
        assert torch.allclose(fisher[n], v / scale, rtol=1e-4, atol=1e-7), n
    assert all(p.grad is None for p in model.parameters())


def test_mas_omega_is_mean_abs_output_norm_gradient():
    model = tiny_qwen2()
    data = batches(3, seed=4)
    omega = build_method("mas").compute_stats(model, data, [])
    manual = {n: torch.zeros_like(p) for n, p in model.named_parameters()}
    model.eval()
    for b in data:
        no_labels = {**b, "labels": torch.full_like(b["labels"], -100)}  # label-free
        grads = torch.autograd.grad(output_sq_norm(model, no_labels), list(model.parameters()))
        for (n, _), g in zip(model.named_parameters(), grads):
            manual[n] += g.abs() / len(data)
    total = sum(float(v.sum()) for v in omega.values())
    assert total == pytest.approx(sum(v.numel() for v in omega.values()), rel=1e-5)  # mean 1
    scale = sum(float(v.sum()) for v in manual.values()) / sum(v.numel() for v in manual.values())
    for n, v in manual.items():
        assert torch.allclose(omega[n], v / scale, rtol=1e-4, atol=1e-7), n


def test_rpsft_bases_are_top_singular_vectors():
    model = tiny_qwen2()
    stats = build_method("rpsft", {"k": 5}).compute_stats(model, [], [])
    weights = covered_weights(model)
    assert "lm_head.weight" not in weights and len(weights) == 2 * 7  # q k v o gate up down x 2
    for n, w in weights.items():
        u, v = stats[f"{n}.U"], stats[f"{n}.V"]
        assert u.shape == (w.shape[0], min(5, *w.shape)) and v.shape == (w.shape[1], u.shape[1])
        assert torch.allclose(u.T @ u, torch.eye(u.shape[1]), atol=1e-5)
        block = u.T @ w.detach() @ v  # = the leading singular values on the diagonal
        assert torch.allclose(block, torch.diag(torch.linalg.svdvals(w.detach())[: u.shape[1]]), atol=1e-4)


def test_rpsft_full_rank_is_l2sp_on_square_weights_and_ignores_complement():
    square = ["model.layers.0.self_attn.q_proj.weight", "model.layers.1.self_attn.o_proj.weight"]
    full, rp = prepared("rpsft", {"k": 10_000})
    l2model, l2 = prepared("l2sp")
    batch = batches(1, seed=9)[0]
    perturb(full, 0.05, names=square)
    perturb(l2model, 0.05, names=square)
    pen_rp, pen_l2 = rp.loss(full, batch)[1]["penalty"], l2.loss(l2model, batch)[1]["penalty"]
    assert pen_rp == pytest.approx(pen_l2, rel=1e-4) and pen_l2 > 0

    # Rectangular weight (up_proj 64 x 32): full rank only sees drift inside span(U) x span(V).
    name = "model.layers.0.mlp.up_proj.weight"
    u, v = rp.u[name], rp.v[name]
    w = dict(full.named_parameters())[name]
    g = torch.Generator().manual_seed(0)
    inside = 0.01 * u @ torch.randn(u.shape[1], v.shape[1], generator=g) @ v.T
    anywhere = 0.01 * torch.randn(w.shape, generator=g)
    seen = {}
    for key, drift in (("inside", inside), ("anywhere", anywhere)):
        with torch.no_grad():
            w.copy_(rp.anchor[name] + drift)
        seen[key] = (float(rp.penalty(full).detach()) - pen_rp, float(drift.square().sum()))
    assert seen["inside"][0] == pytest.approx(seen["inside"][1], rel=1e-3)
    assert seen["anywhere"][0] < 0.9 * seen["anywhere"][1]

    # Small k: drift outside the protected top-k block is free.
    small, rpk = prepared("rpsft", {"k": 3})
    u, v = rpk.u[name], rpk.v[name]
    w = dict(small.named_parameters())[name]
    u_perp = torch.linalg.svd(w.detach(), full_matrices=True)[0][:, 3:]
    with torch.no_grad():
        w.add_(u_perp @ torch.randn(u_perp.shape[1], w.shape[1], generator=g))
    assert float(rpk.penalty(small).detach()) < 1e-8
    with torch.no_grad():
        w.add_(u @ torch.ones(3, 3) @ v.T)
    assert float(rpk.penalty(small).detach()) == pytest.approx(9.0, rel=1e-4)


def test_rpsft_at_rank_zero_is_plain_sft():
    """004 App. D: "SFT corresponds to k = 0": nothing protected, the penalty and its gradient are zero."""
    model, rp = prepared("rpsft", {"k": 0})
    perturb(model, 0.05)
    pen = rp.penalty(model)
    pen.backward()
    assert float(pen) == 0.0
    assert all(p.grad is None or not p.grad.any() for p in model.parameters())


def test_rpsft_applies_its_penalty_every_s_steps_as_printed():
    """004 App. A's listing, `if step % s == 0`: with s = 4 the penalty is evaluated at optimizer
    steps 0, 4 and 8 of nine (counted), and a resumed trial keeps the period's phase (issue 40)."""
    from cliffsweep.trainables import microbatch

    model, rp = prepared("rpsft", {"k": 4, "s": 4})
    calls = []
    penalty = rp.penalty
    rp.penalty = lambda m: calls.append(rp.next_step) or penalty(m)
    opt = torch.optim.SGD(model.parameters(), lr=1e-3)
    for step, batch in enumerate(batches(9, seed=3)):
        microbatch.accumulate(model, rp, [batch], int(batch["attention_mask"].sum()), 1, None)
        opt.step()
        opt.zero_grad(set_to_none=True)
        rp.after_step(model, step)
    assert calls == [0, 4, 8]
    resumed = build_method("rpsft", {"k": 4, "s": 4})
    resumed.load_state_dict(rp.state_dict())
    assert resumed.next_step == 9 and resumed.penalty_term(model) is None  # step 9: not a multiple of 4
    every_model, every = prepared("rpsft", {"k": 4})
    every.after_step(every_model, 0)
    assert every.penalty_term(every_model) is not None  # s = 1 (the default): every step, as before


def test_params_forbid_unknown_keys_and_stats_must_match():
    with pytest.raises(pydantic.ValidationError):
        build_method("ewc", {"lambda": 1.0})
    with pytest.raises(KeyError, match="ewc: statistics lack"):
        build_method("ewc").prepare(tiny_qwen2(), {})


# --- WiSE-FT ----------------------------------------------------------------------------------

def test_wise_ft_interpolates_at_export_only():
    data = batches(3, seed=6)
    exports = {}
    for a in (0.0, 0.5, 1.0):
        model = tiny_qwen2()
        base = copy.deepcopy(model)
        method = build_method("wise_ft", {"alpha": a})
        method.prepare(model, {})
        opt = torch.optim.SGD(model.parameters(), lr=0.5)
        for b in data:  # real fine-tuning steps; training itself is plain SFT
            opt.zero_grad()
            method.loss(model, b)[0].backward()
            opt.step()
        tuned = copy.deepcopy(model.state_dict())
        exports[a] = method.export(model).state_dict()
        assert all(torch.equal(v, model.state_dict()[k]) for k, v in tuned.items())  # untouched
        assert all(v.data_ptr() != model.state_dict()[k].data_ptr() for k, v in exports[a].items())
        ref_base, ref_tuned = base.state_dict(), tuned
    assert all(torch.equal(exports[0.0][k], ref_base[k]) for k in ref_base)
    assert all(torch.equal(exports[1.0][k], ref_tuned[k]) for k in ref_tuned)
    assert any(not torch.equal(ref_base[k], ref_tuned[k]) for k in ref_base)
    for k in ref_base:
        assert torch.allclose(exports[0.5][k], (ref_base[k] + ref_tuned[k]) / 2, atol=1e-6)


def test_held_tensors_follow_the_model_device():
    """prepare() runs before the trainer moves the model: theta*, Omega and the RPSFT bases
    must follow it there (meta device stands in for the accelerator)."""
    ewc_model, ewc = prepared("ewc")
    rp_model, rp = prepared("rpsft", {"k": 4})
    penalties.anchor_penalty(ewc_model.to("meta"), ewc.anchor, ewc.importance)
    rp.penalty(rp_model.to("meta"))
    held = [*ewc.anchor.values(), *ewc.importance.values(), *rp.anchor.values(), *rp.u.values(), *rp.v.values()]
    assert held and all(t.device.type == "meta" for t in held)
