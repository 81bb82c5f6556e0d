"""Sharpness of the retain loss: the top-k Hessian eigenvalues by magnitude, from Hessian-vector
products only (no Hessian is ever formed), for the cliff paper's Fig. 2(a) (seed 000, Sec. 4:
"the 5 largest-by-magnitude eigenvalues of the hessian of L(D_R)", base vs SIB).

Lanczos with full reorthogonalisation (Golub & Van Loan, Matrix Computations, Sec. 10.1): m
Hessian-vector products span a Krylov space whose Ritz values converge to the extreme
eigenvalues first, far faster than power iteration with deflation (one Krylov space serves all
k). Each product is a double backward pass (Pearlmutter 1994, "Fast exact multiplication by the
Hessian") through autograd. Attention runs on the math SDPA kernel here, since the fused kernels
have no double backward.
"""

from __future__ import annotations

import torch
from torch import nn

from cliffsweep.trainables import penalties


def _params(model: nn.Module) -> list[nn.Parameter]:
    return [p for p in model.parameters() if p.requires_grad]


def _pieces(batches: list[dict], micro_batch_size: int | None, device) -> list[tuple[dict, int]]:
    """(micro-batch on the device, its batch's response tokens) for every micro-batch."""
    return [(penalties.to_device(m, device), penalties.response_count(b)) for b in batches
            for m in penalties.micro_batches(b, micro_batch_size)]


def hvp_fn(model: nn.Module, batches: list[dict], micro_batch_size: int | None = None):
    """A function v -> H v (flat fp32 vectors) for the retain loss L(D_R) = mean over
    ``batches`` of their response-token CE, at the current weights, and the length of those
    vectors. Each product runs every micro-batch's forward, backward and double backward in
    turn (memory of one micro-batch, as training's), summing their products."""
    from torch.nn.attention import SDPBackend, sdpa_kernel

    params = _params(model)
    sizes = [p.numel() for p in params]
    pieces = _pieces(batches, micro_batch_size, next(model.parameters()).device)
    if not pieces or any(n_tok == 0 for _, n_tok in pieces):
        raise ValueError("curvature: a retain batch has no response tokens (max_seq_len cuts every answer?); "
                         "the retain loss is undefined there")
    scale = 1.0 / len(batches)

    def hvp(v: torch.Tensor) -> torch.Tensor:
        out = torch.zeros_like(v)
        with sdpa_kernel(SDPBackend.MATH):
            for micro, n_tok in pieces:
                loss = penalties.batch_ce(model, micro, n_tok) * scale
                grads = torch.autograd.grad(loss, params, create_graph=True)
                dot = sum((g.float() * u.view_as(g)).sum() for g, u in zip(grads, v.split(sizes)))
                hv = torch.autograd.grad(dot, params)
                out += torch.cat([h.reshape(-1).float() for h in hv])
        return out

    return hvp, sum(sizes)


def lanczos_top(hvp, n: int, k: int, iters: int, seed: int, device) -> torch.Tensor:
    """The ``k`` Ritz values of largest magnitude after ``iters`` Lanczos steps from a random
    start (``seed``), sorted by decreasing magnitude (signed values)."""
    gen = torch.Generator(device="cpu").manual_seed(seed)
    q = torch.randn(n, generator=gen).to(device)
    q /= q.norm()
    Q, alphas, betas = [q], [], []
    for j in range(min(iters, n)):
        w = hvp(Q[-1])
        a = torch.dot(w, Q[-1])
        alphas.append(a)
        # full reorthogonalisation against every basis vector (twice is enough: Kahan / Parlett)
        for _ in range(2):
            for qq in Q:
                w -= torch.dot(w, qq) * qq
        b = w.norm()
        if j == iters - 1 or b < 1e-10:
            break
        betas.append(b)
        Q.append(w / b)
    T = torch.diag(torch.stack(alphas).double())
    if not torch.isfinite(T).all() or not all(torch.isfinite(b) for b in betas):
        raise FloatingPointError("curvature: a Hessian-vector product is not finite (overflow in low precision?)")
    for i, b in enumerate(betas[:len(alphas) - 1]):
        T[i, i + 1] = T[i + 1, i] = b.double()
    ritz = torch.linalg.eigvalsh(T)
    return ritz[ritz.abs().argsort(descending=True)][:k].float().cpu()


@torch.enable_grad()
def top_eigenvalues(model: nn.Module, batches: list[dict], k: int = 5, iters: int = 30, seed: int = 0,
                    micro_batch_size: int | None = None) -> torch.Tensor:
    """The top-k Hessian eigenvalues of the retain loss by magnitude, in eval mode (no dropout; transformers' activation checkpointing, which has no double
    backward, is off in eval mode), the weights untouched."""
    was_training = model.training
    model.eval()
    try:
        hvp, n = hvp_fn(model, batches, micro_batch_size)
        eig = lanczos_top(hvp, n, k, iters, seed, next(model.parameters()).device)
    finally:
        model.train(was_training)
        model.zero_grad(set_to_none=True)
    return eig
