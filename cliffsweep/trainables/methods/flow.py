"""FLOW, "Upweighting easy samples in fine-tuning mitigates forgetting" (Sanyal et al. 2025),
the sample-reweighting baseline of TALR (003 Sec. 4.2, App. D.2). The formula is not in 003;
the form chosen here (our reading of Sanyal et al.; documented as our default):

    l_i = mean response-token CE of learn example i under the base model (computed once)
    tau = median_i l_i                        (temperature: the median base loss)
    w_i = N * exp(-l_i / tau) / sum_j exp(-l_j / tau)   (mean weight 1 over the learn split)
    L   = sum_{i,t} w_i CE_{i,t} / n_tokens

Easy samples (low base loss) get larger, static weights; normalising to mean 1 keeps the lr
scale comparable with plain SFT. Replay rows (example_idx -1) weight 1.
"""

from __future__ import annotations


from cliffsweep.trainables.methods.base import Method
from cliffsweep.trainables.methods.costs import Costs
from cliffsweep.trainables.lazy import lazy_function, nn, no_grad, torch

response_ce = lazy_function("cliffsweep.trainables.losses", "response_ce")
weighted_token_mean = lazy_function("cliffsweep.trainables.losses", "weighted_token_mean")


def flow_weights(seq_losses: torch.Tensor) -> torch.Tensor:
    """Static per-sample weights from base-model sequence losses (N,) -> (N,), mean 1."""
    tau = torch.quantile(seq_losses.float(), 0.5).clamp_min(1e-8)
    w = torch.softmax(-seq_losses.float() / tau, dim=0)
    return w * len(seq_losses)


class Flow(Method):
    name = "flow"
    fsdp_safe = True  # sequence weights change the loss only
    costs = Costs(stats_data="learn", stats_flops=2)  # per-sequence CE on the learn data, no autograd

    def stats_inputs(self):
        # No params; the stats depend on the model and the learn split (see compute_stats).
        return {"form": "exp(-l/median(l)), mean 1", "on": "learn"}

    @no_grad
    def compute_stats(self, model: nn.Module, retain_batches: list[dict], learn_batches: list[dict],
                      micro_batch_size: int | None = None):
        from cliffsweep.trainables import penalties

        was_training = model.training
        model.eval()
        device = next(model.parameters()).device
        losses: dict[int, float] = {}
        for b in learn_batches:
            for micro in penalties.micro_batches(b, micro_batch_size):
                # per-sequence mean CE through the head in chunks (no full-vocabulary logits)
                ce, mask = response_ce(model, penalties.to_device(micro, device))
                seq = (ce.sum(1) / mask.sum(1).clamp_min(1)).cpu()
                for idx, l in zip(micro["example_idx"].tolist(), seq.tolist()):
                    losses[idx] = l
        model.train(was_training)
        n = len(losses)
        if sorted(losses) != list(range(n)):
            raise ValueError(f"flow: learn_batches must cover example_idx 0..{n - 1} exactly once each")
        seq_losses = torch.tensor([losses[i] for i in range(n)])
        return {"flow_seq_loss": seq_losses, "flow_weights": flow_weights(seq_losses)}

    def prepare(self, model: nn.Module, stats) -> nn.Module:
        self.weights = stats["flow_weights"].float()
        return model

    def sequence_weights(self, example_idx: torch.Tensor) -> torch.Tensor:
        """(B, 1) weights for a batch: the static FLOW weight, 1 for retain rows."""
        if int(example_idx.max()) >= len(self.weights):
            raise IndexError(f"flow: example_idx {int(example_idx.max())} outside the {len(self.weights)} scored examples")
        w = self.weights[example_idx.clamp_min(0).cpu()]
        w = torch.where(example_idx.cpu() < 0, torch.ones_like(w), w)
        return w.unsqueeze(1)

    def data_loss(self, model, batch, n_tokens=None):
        ce, mask = response_ce(model, batch)
        w = self.sequence_weights(batch["example_idx"]).to(ce.device)
        loss = weighted_token_mean(ce, mask, w, n_tokens)
        n = mask.sum().clamp_min(1)
        return loss, {"ce": float(ce.detach().sum() / n), "mean_w": float(w.mean())}
