"""Fig. 2's spectrum routine (trainables/curvature.py) against the exact Hessian of a tiny causal
LM: the retain loss's Hessian built column by column from double backward of the same loss
(torch.func), its eigenvalues by a dense solver, then Lanczos on the routine's Hessian-vector
products. Small enough for the default suite (a few hundred parameters); the SmolLM2 run of
Fig. 2 is bench/bench_fig2.py."""

from __future__ import annotations

import torch
from transformers import LlamaConfig, LlamaForCausalLM

from cliffsweep.trainables import penalties
from cliffsweep.trainables.curvature import hvp_fn, lanczos_top, top_eigenvalues


def tiny_model() -> LlamaForCausalLM:
    torch.manual_seed(0)
    cfg = LlamaConfig(vocab_size=11, hidden_size=8, intermediate_size=12, num_hidden_layers=1,
                      num_attention_heads=2, num_key_value_heads=1, max_position_embeddings=16,
                      tie_word_embeddings=True, attn_implementation="eager")
    return LlamaForCausalLM(cfg).double()


def batches() -> list[dict]:
    gen = torch.Generator().manual_seed(1)
    out = []
    for _ in range(2):
        ids = torch.randint(0, 11, (2, 6), generator=gen)
        labels = ids.clone()
        labels[:, :2] = -100  # prompt positions: no loss
        out.append({"input_ids": ids, "attention_mask": torch.ones_like(ids), "labels": labels})
    return out


def exact_hessian(model, data) -> torch.Tensor:
    """d^2 L / d theta^2 of the same retain loss (mean over batches of response-token CE)."""
    params = [p for p in model.parameters() if p.requires_grad]
    sizes = [p.numel() for p in params]
    flat = torch.cat([p.detach().reshape(-1) for p in params])
    names = [n for n, p in model.named_parameters() if p.requires_grad]

    def loss(theta: torch.Tensor) -> torch.Tensor:
        weights = {n: t.view_as(p) for n, t, p in zip(names, theta.split(sizes), params)}
        total = 0.0
        for b in data:
            total = total + _ce(model, weights, b)
        return total / len(data)

    H = torch.autograd.functional.hessian(loss, flat)
    # symmetric up to the fp32 parts of the model (transformers computes RoPE's cos/sin in fp32)
    assert torch.allclose(H, H.T, atol=1e-4 * float(H.abs().max()))
    return (H + H.T) / 2


def _ce(model, weights, b) -> torch.Tensor:
    logits = torch.func.functional_call(model, weights, args=(),
                                        kwargs={"input_ids": b["input_ids"], "attention_mask": b["attention_mask"]}).logits
    shift, target = logits[:, :-1], b["labels"][:, 1:]
    return torch.nn.functional.cross_entropy(shift.reshape(-1, shift.shape[-1]), target.reshape(-1),
                                             ignore_index=-100, reduction="sum") / penalties.response_count(b)


def test_hessian_vector_products_equal_the_exact_hessian_times_v():
    model, data = tiny_model(), batches()
    H = exact_hessian(model, data)
    hvp, n = hvp_fn(model, data)
    assert n == H.shape[0]
    v = torch.randn(n, generator=torch.Generator().manual_seed(2), dtype=torch.float64)
    # hvp works in fp32 vectors (curvature.py); the model is fp64 here, so compare at fp32 precision
    want = H @ v
    assert torch.allclose(hvp(v.float()).double(), want, atol=1e-4 * float(want.abs().max()))


def test_lanczos_finds_the_exact_top_eigenvalues_by_magnitude():
    model, data = tiny_model(), batches()
    H = exact_hessian(model, data)
    exact = torch.linalg.eigvalsh(H)
    want = exact[exact.abs().argsort(descending=True)][:5].float()
    n = H.shape[0]
    # on the exact matrix: Lanczos with enough steps recovers the extreme eigenvalues
    got = lanczos_top(lambda v: (H @ v.double()).float(), n, 5, iters=80, seed=0, device="cpu")
    assert torch.allclose(got, want, rtol=1e-3, atol=1e-5), (got, want)
    # through the model's own products, weights untouched
    before = [p.detach().clone() for p in model.parameters()]
    top = top_eigenvalues(model, data, k=5, iters=80, seed=3)
    assert torch.allclose(top, want, rtol=1e-3, atol=1e-4), (top, want)
    assert all(torch.equal(a, p) for a, p in zip(before, model.parameters()))
    assert all(p.grad is None for p in model.parameters())
