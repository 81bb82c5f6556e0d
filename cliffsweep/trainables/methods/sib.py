"""SIB, Scale-Invariant Balancing (000 Sec. 4, Eq. 1-2, Algorithm 1, App. C): a one-shot,
function-preserving rescaling of the base model before plain SFT.

Scale symmetries used (one alpha > 0 per channel of the shared dimension):
- V/O per head channel: row c of W_V (and entry c of the V bias, Qwen2) divided by alpha_c,
  the matching columns of W_O multiplied by alpha_c. Under GQA one kv-head channel feeds the
  same channel of every query head in its group, so those n_rep columns share alpha_c
  (query head q reads kv head q // n_rep, as transformers' repeat_kv).
- SwiGLU per neuron: row j of W_up (and its bias, if any) divided by alpha_j, column j of
  W_down multiplied by alpha_j: down(silu(gate x) * up x) is unchanged since alpha factors out
  of the product. Algorithm 1 also lists (W_gate, W_down), but SiLU is not homogeneous
  (silu(x / a) != silu(x) / a), so that pair would change the function: not used.

Choice of alpha, derived with the chain rule (000's Eq. 1-2 leave the side convention loose):
dividing a weight by alpha multiplies its gradient by alpha, multiplying by alpha divides it,
so a channel's post-balance squared gradient norm is
    f(alpha) = alpha^2 ||g_div||^2 + alpha^-2 ||g_mul||^2,
minimised at alpha* = (||g_mul||^2 / ||g_div||^2)^(1/4), clamped to [1/R, R], R = 100 (000).
g = gradient of the mean retain loss over the retain batches (D_R), at the base weights; the
channel groups are disjoint and every other gradient is unchanged (same function, same other
weights), so per-channel minimisation minimises the total ||grad L(D_R)||^2.

compute_stats returns the alphas (key '<divided module>.alpha') and Fig. 2's measurements: the
squared gradient norm of L(D_R) before and after the rescale, both measured
('sib:grad_sq_before', 'sib:grad_sq_after'; 'sib:grad_sq_after_predicted' is f(alpha*) summed),
and with ``hessian_top_k`` > 0 the top-k Hessian eigenvalues of the retain loss by magnitude on
the first ``hessian_batches`` retain batches, base and rescaled ('sib:hessian_base',
'sib:hessian_rescaled'; trainables/curvature.py). The rescale is undone afterwards (division by
the same alphas: exact up to one rounding per weight in fp32). prepare applies the alphas in place. Apply it to fp32 weights for exact preservation: in bf16
the division rounds (relative 2^-8 per weight).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

from pydantic import Field

from cliffsweep.trainables.methods.base import Method, MethodParams
from cliffsweep.trainables.methods.costs import Costs
from cliffsweep.trainables.lazy import nn, no_grad, penalties, torch


@dataclass(frozen=True)
class ScalePair:
    """Rows of `div` (out channels) divided by alpha, columns of `mul` multiplied by alpha.
    `mul`'s input columns, viewed as (blocks, rep, block), repeat each div row `rep` times."""

    key: str
    div: nn.Linear
    mul: nn.Linear
    rep: int  # query heads per kv head (GQA); 1 for the MLP
    block: int  # head_dim for V/O; the whole intermediate size for the MLP

    def mul_view(self, t: torch.Tensor) -> torch.Tensor:
        """A (out, in) tensor of `mul` as (out, blocks, rep, block)."""
        n_div = self.div.out_features
        return t.view(t.shape[0], n_div // self.block, self.rep, self.block)

    def alpha_view(self, alpha: torch.Tensor) -> torch.Tensor:
        """Per-div-row alphas shaped to broadcast against `mul_view`."""
        return alpha.view(1, -1, 1, self.block)


def scale_pairs(model: nn.Module) -> list[ScalePair]:
    """Every V/O and SwiGLU (up, down) pair of a Llama/Qwen-style decoder (modules holding
    v_proj + o_proj, and gate_proj + up_proj + down_proj)."""
    pairs = []
    for name, mod in model.named_modules():
        kids = dict(mod.named_children())
        if {"v_proj", "o_proj"} <= kids.keys():
            v, o = kids["v_proj"], kids["o_proj"]
            head_dim = mod.head_dim  # transformers attention modules all carry it
            if o.in_features % v.out_features or v.out_features % head_dim:
                raise ValueError(f"sib: {name}: o_proj in {o.in_features} vs v_proj out {v.out_features}")
            pairs.append(ScalePair(f"{name}.v_proj.alpha", v, o, o.in_features // v.out_features, head_dim))
        if {"gate_proj", "up_proj", "down_proj"} <= kids.keys():
            up, down = kids["up_proj"], kids["down_proj"]
            pairs.append(ScalePair(f"{name}.up_proj.alpha", up, down, 1, up.out_features))
    if not pairs:
        raise ValueError("sib: found no V/O or SwiGLU pairs (not a Llama/Qwen-style decoder?)")
    return pairs


def channel_sq_norms(pair: ScalePair) -> tuple[torch.Tensor, torch.Tensor]:
    """(||g_div||^2, ||g_mul||^2) per channel from the .grad fields, in fp32."""
    div = pair.div.weight.grad.float().square().sum(1)
    if pair.div.bias is not None:
        div = div + pair.div.bias.grad.float().square()
    mul = pair.mul_view(pair.mul.weight.grad.float().square()).sum((0, 2)).reshape(-1)
    return div, mul


def balance_alpha(div_sq: torch.Tensor, mul_sq: torch.Tensor, ratio: float, rule: str = "inverse") -> torch.Tensor:
    """rule "inverse" (our default): argmin_alpha alpha^2 div_sq + mul_sq / alpha^2 =
    (mul_sq / div_sq)^(1/4); rule "eq2": 000's Eq. 2 as printed, (div_sq / mul_sq)^(1/4), its
    reciprocal. Clamped to [1/R, R]; 1 where both are zero (no signal, leave the channel alone)."""
    ratio_sq = mul_sq / div_sq if rule == "inverse" else div_sq / mul_sq
    alpha = ratio_sq ** 0.25  # inf where the denominator is 0, nan where both are
    alpha = torch.where(torch.isnan(alpha), torch.ones_like(alpha), alpha)
    return alpha.clamp(1.0 / ratio, ratio)


@no_grad
def apply_alphas(pair: ScalePair, alpha: torch.Tensor) -> None:
    a = alpha.to(pair.div.weight.device, torch.float32)
    w = pair.div.weight
    w.copy_((w.float() / a[:, None]).to(w.dtype))
    if pair.div.bias is not None:
        b = pair.div.bias
        b.copy_((b.float() / a).to(b.dtype))
    m = pair.mul.weight
    m.copy_((pair.mul_view(m.float()) * pair.alpha_view(a)).reshape(m.shape).to(m.dtype))


def retain_gradients(model: nn.Module, batches: list[dict], micro_batch_size: int | None = None) -> None:
    """Leave grad L(D_R) (mean of the batch losses) in .grad, computed in eval mode, each batch
    in micro-batches of at most `micro_batch_size` rows (their gradients add up to the batch's)."""
    from cliffsweep.trainables.microbatch import stats_mode

    if not batches:
        raise ValueError("sib: no retain batches")
    device = next(model.parameters()).device
    with stats_mode(model):
        model.zero_grad(set_to_none=True)
        for b in batches:
            n_tokens = penalties.response_count(b)
            for micro in penalties.micro_batches(b, micro_batch_size):
                (penalties.batch_ce(model, penalties.to_device(micro, device), n_tokens) / len(batches)).backward()


def grad_sq_norm(model: nn.Module) -> torch.Tensor:
    return sum(p.grad.float().square().sum() for p in model.parameters() if p.grad is not None)


class SIBParams(MethodParams):
    clamp_ratio: float = Field(100.0, gt=1.0)
    """R: alpha is clamped to [1/R, R] (000 Eq. 2, R = 100)."""
    alpha: Literal["inverse", "eq2"] = "inverse"
    """Which alpha: "inverse" (default), the minimiser of the post-balance gradient norm, the
    reciprocal of Eq. 2 as 000 prints it (docs/methods.md: on a SwiGLU block the printed one
    raises sum ||g||^2 from 150k to 432k, ours lowers it to 91k); "eq2": the equation as printed,
    alpha* = (||g_div||^2 / ||g_mul||^2)^(1/4), for a run that follows the paper to the letter."""
    hessian_top_k: int = Field(5, ge=0)
    """Fig. 2(a): this many top Hessian eigenvalues of the retain loss, base and rescaled (0:
    skip). 000 shows 5."""
    hessian_iters: int = Field(20, ge=2)
    """Lanczos steps (Hessian-vector products) per spectrum; the top eigenvalues converge first
    (docs/analysis.md gives the spread measured across start vectors)."""
    hessian_batches: int = Field(1, ge=1)
    """Retain batches the spectrum is measured on (each product is about three backward passes
    over them; the gradient norms use every retain batch)."""


class SIB(Method):
    name = "sib"
    fsdp_safe = True  # rescales before the model is sharded, then trains as sft
    costs = Costs(stats_data="retain", stats_flops=6)  # the gradients the alphas come from
    Params = SIBParams

    def stats_inputs(self):
        p = self.params
        # the printed rule gets a key of its own; the default's key is unchanged (stored statistics hold)
        return {"clamp_ratio": p.clamp_ratio, "pairs": "V/O per channel + (up, down)",
                "hessian": [p.hessian_top_k, p.hessian_iters, p.hessian_batches],
                **({"alpha": p.alpha} if p.alpha != "inverse" else {})}

    def compute_stats(self, model: nn.Module, retain_batches, learn_batches,
                      micro_batch_size: int | None = None) -> dict[str, torch.Tensor]:
        retain_gradients(model, retain_batches, micro_batch_size)
        before = grad_sq_norm(model)
        after = before.clone()
        stats = {}
        for pair in scale_pairs(model):
            div_sq, mul_sq = channel_sq_norms(pair)
            alpha = balance_alpha(div_sq, mul_sq, self.params.clamp_ratio, self.params.alpha)
            after += (alpha**2 * div_sq + mul_sq / alpha**2 - div_sq - mul_sq).sum()
            stats[pair.key] = alpha.cpu()
        model.zero_grad(set_to_none=True)
        stats["sib:grad_sq_before"] = before.detach().cpu()
        stats["sib:grad_sq_after_predicted"] = after.detach().cpu()
        stats.update(self._measure_rescaled(model, stats, retain_batches, micro_batch_size))
        return stats

    def _measure_rescaled(self, model: nn.Module, stats: dict, retain_batches, micro_batch_size) -> dict:
        """Fig. 2: the gradient norm after the rescale, measured, and the Hessian spectra base
        and rescaled; the model is restored before returning."""
        from cliffsweep.trainables.curvature import top_eigenvalues

        p, out = self.params, {}
        few = retain_batches[:p.hessian_batches]
        if p.hessian_top_k:
            out["sib:hessian_base"] = top_eigenvalues(model, few, p.hessian_top_k, p.hessian_iters,
                                                         micro_batch_size=micro_batch_size)
        pairs = scale_pairs(model)
        for pair in pairs:
            apply_alphas(pair, stats[pair.key])
        try:
            retain_gradients(model, retain_batches, micro_batch_size)
            out["sib:grad_sq_after"] = grad_sq_norm(model).detach().cpu()
            model.zero_grad(set_to_none=True)
            if p.hessian_top_k:
                out["sib:hessian_rescaled"] = top_eigenvalues(model, few, p.hessian_top_k, p.hessian_iters,
                                                                 micro_batch_size=micro_batch_size)
        finally:
            for pair in pairs:
                apply_alphas(pair, 1.0 / stats[pair.key])
        return out

    def prepare(self, model: nn.Module, stats) -> nn.Module:
        pairs = scale_pairs(model)
        penalties.require(stats, [p.key for p in pairs], self.name)
        for pair in pairs:
            apply_alphas(pair, stats[pair.key])
        return model
