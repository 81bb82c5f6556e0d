"""RPSFT, rotation-preserving SFT (004, Eq. 3 and Algorithm 1):

    L(theta) = L_SFT(theta) + lambda * sum_{W in M} || U_k^T (W - W0) V_k ||_F^2,

U_k, V_k = top-k left/right singular vectors of each pretrained weight W0, computed once per
model (the stats). Defaults from 004: k = 768 (clipped to min(m, n) of each matrix), lambda = 1.
The update period s (Algorithm 1's inputs; App. A's listing: `if step % s == 0`, the optimizer
step counted from 0; Sec. 4 prices it as O(mnk / s) per step): the penalty and its gradient
enter only every s-th step, at the same lambda, as printed. s = 1 (our default): every step.
With k = min(m, n) the penalty equals lambda * ||W - W0||_F^2 on *square* weights (004 App. C.2,
Eq. 11: L2-init). On a rectangular m x n weight (m > n, say) the n left singular vectors do not
span R^m, so full-rank RPSFT only sees the drift inside span(U) x span(V): 004's Eq. 11 assumes
orthogonal completions of the bases, which the top-k singular vectors are not. We keep 004's
definition (top-k singular vectors, k clipped to min(m, n)).

Covered weights M (our default, after 004 Fig. 6: q/k/v/o/gate/up/down): every nn.Linear of the
model except the output head (`get_output_embeddings()`), i.e. peft's 'all-linear' set; the
embeddings are not covered.

Why (W - W0) against a snapshot of W0 rather than 004's listing `U^T W V - S_ref`: in bf16 the
projected block U^T W V is as large as the singular values, so its rounding error swamps the
small fine-tuning drift; W - W0 is (nearly) exact in any dtype and is projected afterwards.
"""

from __future__ import annotations

from typing import Any

from pydantic import Field

from cliffsweep.trainables.methods.base import Method, MethodParams
from cliffsweep.trainables.methods.costs import Costs
from cliffsweep.trainables.lazy import lazy_function, nn, penalties, torch

unwrap = lazy_function("cliffsweep.trainables.losses", "unwrap")


def covered_weights(model: nn.Module) -> dict[str, nn.Parameter]:
    """Weights of every nn.Linear but the output head, by parameter name."""
    m = unwrap(model)
    head = m.get_output_embeddings()
    out = {}
    for name, mod in m.named_modules():
        if isinstance(mod, nn.Linear) and mod is not head and mod.weight.requires_grad:
            out[f"{name}.weight"] = mod.weight
    if not out:
        raise ValueError("rpsft: the model has no nn.Linear weights besides the output head")
    return out


def top_k_bases(w: torch.Tensor, k: int) -> tuple[torch.Tensor, torch.Tensor]:
    """U_k (m x k), V_k (n x k) of w (SVD in fp32, returned in w's dtype); k clipped to min(m, n)."""
    u, _, vh = torch.linalg.svd(w.detach().float(), full_matrices=False)
    k = min(k, u.shape[1])
    return u[:, :k].to(w.dtype).contiguous(), vh[:k].T.to(w.dtype).contiguous()


def projected_drift(w: torch.Tensor, w0: torch.Tensor, u: torch.Tensor, v: torch.Tensor) -> torch.Tensor:
    """||U^T (W - W0) V||_F^2 in fp32."""
    return (u.T @ (w - w0) @ v).float().square().sum()


def sharded_like(w: torch.Tensor, anchor: torch.Tensor, u: torch.Tensor, v: torch.Tensor):
    """(W0, U, V) laid out for a weight FSDP2 shards by rows (Shard(0)): W0 and U by the same rows,
    V whole on every worker. Then U^T (W - W0) V is a sum of the workers' row blocks, which DTensor
    adds up before squaring, so the penalty and its gradient equal the unsharded ones (the
    reason RPSFT is shard-safe). Each worker cuts its rows from its own whole copy: no messages."""
    from torch.distributed.tensor import Replicate, Shard, distribute_tensor

    if tuple(w.placements) != (Shard(0),):
        raise ValueError(f"rpsft under FSDP expects weights sharded by rows, got {w.placements}")
    mesh = w.device_mesh
    return (distribute_tensor(anchor, mesh, [Shard(0)], src_data_rank=None),
            distribute_tensor(u, mesh, [Shard(0)], src_data_rank=None),
            distribute_tensor(v, mesh, [Replicate()], src_data_rank=None))


class RPSFTParams(MethodParams):
    k: int = Field(768, ge=0)
    """Protected rank per matrix (004 default 768; clipped to each matrix). k = 0 protects
    nothing: plain SFT, the row 004's rank sweeps (App. D, Tables 6-7) start from."""
    lam: float = Field(1.0, ge=0.0)
    """lambda of Eq. (3) (004 default 1)."""
    s: int = Field(1, ge=1)
    """Update period: the penalty at optimizer steps 0, s, 2s, ... only (004 App. A's listing).
    Not rescaled: at s = 4 and the same lambda, the drift is held a quarter as often."""


class RPSFT(Method):
    name = "rpsft"
    fsdp_safe = True  # the projected drift of row shards sums to the whole one (sharded_like)
    costs = Costs(weight_copies=1, stats_data="weights")  # theta*; the U_k / V_k bases: extra_fp32_elements

    @classmethod
    def extra_fp32_elements(cls, arch: Any, params: dict) -> int:
        """The U_k / V_k bases of every linear layer, in fp32."""
        k = cls.Params(**params).k
        return arch.layers * sum(min(k, a, b) * (a + b) for a, b in arch.layer_linears().values())
    Params = RPSFTParams

    def stats_inputs(self):
        return {"k": self.params.k, "weights": "all nn.Linear but the output head"}

    def compute_stats(self, model: nn.Module, retain_batches, learn_batches,
                      micro_batch_size: int | None = None) -> dict[str, torch.Tensor]:
        stats = {}
        for name, w in covered_weights(model).items():
            stats[f"{name}.U"], stats[f"{name}.V"] = top_k_bases(w, self.params.k)
        return stats

    def prepare(self, model: nn.Module, stats) -> nn.Module:
        weights = covered_weights(model)
        penalties.require(stats, [f"{n}.{s}" for n in weights for s in ("U", "V")], self.name)
        self.anchor = penalties.snapshot(weights)
        self.u = {n: stats[f"{n}.U"].to(w.device, w.dtype) for n, w in weights.items()}
        self.v = {n: stats[f"{n}.V"].to(w.device, w.dtype) for n, w in weights.items()}
        return model

    def penalty(self, model: nn.Module) -> torch.Tensor:
        weights = covered_weights(model)
        for held in (self.anchor, self.u, self.v):
            penalties.follow(held, weights)
        terms = []
        for n in list(self.anchor):
            w = weights[n]
            if hasattr(w, "placements") and not hasattr(self.anchor[n], "placements"):  # sharded after prepare()
                self.anchor[n], self.u[n], self.v[n] = sharded_like(w, self.anchor[n], self.u[n], self.v[n])
            term = projected_drift(w, self.anchor[n], self.u[n], self.v[n])
            terms.append(term.full_tensor() if hasattr(term, "full_tensor") else term)
        return torch.stack(terms).sum()

    def __init__(self, params: RPSFTParams | None = None):
        super().__init__(params)
        self.next_step = 0  # the optimizer step the next penalty_term belongs to

    def penalty_term(self, model):
        if self.next_step % self.params.s:  # 004 App. A: `if step % s == 0`
            return None
        pen = self.penalty(model)
        return self.params.lam * pen, float(pen.detach())

    def after_step(self, model: nn.Module, step: int) -> None:
        self.next_step = step + 1

    def state_dict(self) -> dict[str, Any]:
        return {"next_step": self.next_step}  # a resumed trial keeps the period's phase

    def load_state_dict(self, state: dict[str, Any]) -> None:
        self.next_step = int(state.get("next_step", 0))
