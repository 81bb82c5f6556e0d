"""MIGU, magnitude-based gradient updating (Du et al. 2024), as described in the cliff paper
(000 App. D, "Update-shaping methods"): data-free; at every step, the gradient rows of each
Linear layer whose output channel has a small activation magnitude are masked.

For Linear layer l with output y in R^{B x T x d_out}:
    a_j   = mean over the step's non-padding tokens of |y_{.,.,j}|    (forward hooks)
    keep_j = a_j >= quantile_q(a)                                    (per layer, q = 0.5)
    grad W[j, :] <- 0 and grad b[j] <- 0 where not keep_j            (before optimizer.step)

Our defaults: the layers are the Linear modules of the transformer (the LM head is excluded:
its outputs are logits, and with tied embeddings masking it would mask the embedding);
activations accumulate over every grad-enabled forward since the last step (so gradient
accumulation is covered); under DDP the per-channel sums are all-reduced so every rank
applies the same mask. Masking is of gradients, as in MIGU: AdamW momentum and weight decay
can still move a masked row (they cannot at the first step with weight decay 0).
"""

from __future__ import annotations

from pydantic import Field

from cliffsweep.trainables.methods.base import Method, MethodParams
from cliffsweep.trainables.methods.costs import Costs
from cliffsweep.trainables.lazy import dist, nn, no_grad, torch


class MIGUParams(MethodParams):
    quantile: float = Field(0.5, ge=0.0, lt=1.0)
    """Per-layer quantile q of channel magnitudes below which gradient rows are masked (000 App. D)."""


def low_magnitude_rows(act_mean: torch.Tensor, q: float) -> torch.Tensor:
    """Boolean (d_out,): channels whose mean |activation| lies below the layer's q-quantile."""
    return act_mean < torch.quantile(act_mean.float(), q)


class MIGU(Method):
    name = "migu"
    costs = Costs()  # gradient masks come and go within the step
    Params = MIGUParams

    def prepare(self, model: nn.Module, stats) -> nn.Module:
        head = model.get_output_embeddings() if hasattr(model, "get_output_embeddings") else None
        self.layers: dict[str, nn.Linear] = {
            n: m for n, m in model.named_modules() if isinstance(m, nn.Linear) and m is not head
        }
        self._sum: dict[str, torch.Tensor] = {}
        self._count: dict[str, torch.Tensor] = {}
        self._token_mask: torch.Tensor | None = None
        self._handles = [m.register_forward_hook(self._hook(n)) for n, m in self.layers.items()]
        return model

    def _hook(self, name: str):
        def hook(module, inputs, output):
            if not torch.is_grad_enabled():
                return  # only training forwards define the step's mask (not eval / no-grad passes)
            y = output.detach().abs().float()
            m = self._token_mask
            if m is not None and m.shape == y.shape[:-1]:
                s = (y * m.unsqueeze(-1).to(y.dtype)).flatten(0, -2).sum(0)
                c = m.sum().to(y.dtype)
            else:  # a grad-enabled forward outside loss(): every position counts
                s = y.flatten(0, -2).sum(0)
                c = torch.tensor(float(y[..., 0].numel()), device=y.device)
            self._sum[name] = self._sum.get(name, 0) + s
            self._count[name] = self._count.get(name, 0) + c

        return hook

    def data_loss(self, model, batch, n_tokens=None):
        # Kept until the next micro-batch: gradient checkpointing re-runs the forward inside
        # backward (if the hooks fire there, sums and counts both double: the means stay).
        self._token_mask = batch["attention_mask"]
        return super().data_loss(model, batch, n_tokens)

    def channel_means(self) -> dict[str, torch.Tensor]:
        """Mean |activation| per output channel of each layer since the last step (all ranks)."""
        names = [n for n in self.layers if n in self._sum]
        if dist.is_available() and dist.is_initialized() and names:
            flat = torch.cat([self._sum[n] for n in names] + [torch.stack([self._count[n] for n in names])])
            dist.all_reduce(flat)
            sizes = [self._sum[n].numel() for n in names] + [len(names)]
            *sums, counts = flat.split(sizes)
            return {n: s / counts[i].clamp_min(1) for i, (n, s) in enumerate(zip(names, sums))}
        return {n: self._sum[n] / self._count[n].clamp_min(1) for n in names}

    @no_grad
    def before_step(self, model: nn.Module, step: int) -> None:
        means = self.channel_means()
        masked = total = 0
        for name, act in means.items():
            layer = self.layers[name]
            low = low_magnitude_rows(act, self.params.quantile)
            for p in (layer.weight, layer.bias):
                if p is not None and p.grad is not None:
                    p.grad[low.to(p.grad.device)] = 0
            masked += int(low.sum())
            total += low.numel()
        self.last_masked_fraction = masked / max(1, total)
        self._sum.clear()
        self._count.clear()
        self._token_mask = None
