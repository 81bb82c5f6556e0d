"""The method interface: how a continual-learning method plugs into the SFT loop.

A method is one file under `methods/` holding its params, its once-per-model statistics and
its training hooks. Every hook has a do-nothing default here, so `sft` is the empty method and
each other method overrides only what defines it. Shared maths lives in plain functions
(`cliffsweep.trainables.losses`), not in this class (style.md 1).

Order of calls, per trial (on every Train worker):

    stats = load_stats(...)                       # computed once per model by compute_stats()
    model = method.prepare(model, stats)          # before DDP wrapping (peft wrap, SIB rescale, theta*)
    for each step:                                # this worker's rows, in micro-batches (microbatch.py)
        method.begin_step(model, micro_batches)   # whole-batch statistics (TALR's tau)
        for each micro-batch:
            loss = method.data_loss(model, micro, n_tokens)   # model may be DDP-wrapped: call it, don't poke it
            (+ method.penalty_term(model), on the last micro-batch only)
            loss.backward()                       # gradients add up; synced on the last one only
        method.before_step(model, step)           # gradient masks (MIGU)
        optimizer.step()
        method.after_step(model, step)            # update masks (NanoAdam)
    save(method.export(model))                    # at each eval point (WiSE-FT interpolates here)

`loss(model, batch)` is the same objective on one whole batch (data term + penalty), for callers
that do not micro-batch (tests, benchmarks). Data terms are sums over response tokens divided by
`n_tokens`, so the micro-batches' gradients add up to the whole batch's; penalty terms depend on
the parameters only and are added once per step (docs/design.md, "Fitting real sizes").
"""

from __future__ import annotations

from typing import Any, ClassVar, Literal

from pydantic import BaseModel, ConfigDict

from cliffsweep.trainables.methods.costs import Costs
from cliffsweep.trainables.lazy import lazy_function, nn, torch

response_ce = lazy_function("cliffsweep.trainables.losses", "response_ce")
token_norm = lazy_function("cliffsweep.trainables.losses", "token_norm")


class MethodParams(BaseModel):
    """Base of every method's params: unknown keys are errors, values are frozen."""

    model_config = ConfigDict(extra="forbid", frozen=True)


class Method:
    name: ClassVar[str]
    Params: ClassVar[type[MethodParams]] = MethodParams
    checkpoint_kind: ClassVar[Literal["full", "lora"]] = "full"
    """'lora': checkpoints are peft adapter folders, served with a LoRARequest."""
    fsdp_safe: ClassVar[bool] = False
    """Runs under FSDP (`resources.strategy: fsdp`), where parameters are DTensor shards:
    declared only by methods whose hooks leave parameters alone and that pass the FSDP-vs-one-
    process check of tests/test_fsdp.py. Penalties on theta - theta*, gradient or update masks
    and weight-space exports (ewc, mas, l2sp, rpsft, migu, nanoadam, wise_ft) and peft's LoRA
    wrapping would need shard-aware code: validation refuses them under FSDP."""
    retain_fraction: float = 0.0
    """Share of every training batch drawn from the retain task's train split (replay)."""
    costs: ClassVar[Costs] = Costs()
    """What it costs beyond SFT (methods/costs.py), declared in each method's own file or on the shared
    base whose shape causes it (methods/shared.py: a frozen base copy)."""

    # --- its size, for the planner (arch: the planner's Arch; read, never imported) ----------
    @classmethod
    def trainable_params(cls, arch: Any, params: dict) -> int | None:
        """Weights the method trains on `arch` with `params`; None: every weight."""
        return None

    @classmethod
    def extra_fp32_elements(cls, arch: Any, params: dict) -> int:
        """fp32 elements it holds on the training device beyond its weight copies (RPSFT's
        bases), also during its statistics pass."""
        return 0

    def __init__(self, params: MethodParams | None = None):
        self.params = params if params is not None else self.Params()

    # --- once per model -------------------------------------------------------------------
    def stats_inputs(self) -> dict[str, Any] | None:
        """The params that change this method's retain-set statistics, or None if it needs
        none. Statistics are cached under a hash of (model, these, retain data)."""
        return None

    def compute_stats(
        self, model: nn.Module, retain_batches: list[dict], learn_batches: list[dict],
        micro_batch_size: int | None = None,
    ) -> dict[str, torch.Tensor]:
        """Statistics on the base model, once per model: usually on retain batches (Fisher,
        importances, SVD bases, SIB alphas); `flow` scores the learn batches. Batches are as
        in `loss()`; learn batches cover the whole learn train split, in order. Each batch runs
        as micro-batches of at most `micro_batch_size` rows (the recipe's), with activation
        checkpointing when the model has it on, so that statistics fit where a training step
        fits (issue 15); the statistic is the same as over whole batches."""
        return {}

    # --- per trial ------------------------------------------------------------------------
    def prepare(self, model: nn.Module, stats: dict[str, torch.Tensor]) -> nn.Module:
        """Called once before DDP/FSDP wrapping; returns the model to train."""
        return model

    def loss(self, model: nn.Module, batch: dict[str, torch.Tensor],
             n_tokens: float | None = None) -> tuple[torch.Tensor, dict[str, float]]:
        """Training loss of one whole batch (data term + penalty term) and scalars to log.

        batch: input_ids, attention_mask, labels (-100 on prompt and padding), example_idx
        (index in the learn train split; -1 for retain examples), is_retain (bool).
        n_tokens: see `data_loss`."""
        loss, logs = self.data_loss(model, batch, n_tokens)
        term = self.penalty_term(model)
        if term is None:
            return loss, logs
        penalty, raw = term
        return loss + penalty, {**logs, "penalty": raw}

    def begin_step(self, model: nn.Module, micro_batches: list[dict[str, torch.Tensor]]) -> None:
        """Once per optimizer step, before the first micro-batch's data_loss, with all of this
        worker's micro-batches of the step (on the device): a method whose loss needs a statistic
        of the whole batch computes it here (TALR's tau)."""

    def data_loss(self, model: nn.Module, batch: dict[str, torch.Tensor],
                  n_tokens: float | None = None) -> tuple[torch.Tensor, dict[str, float]]:
        """The data term of one (micro-)batch: a sum over its response tokens divided by
        `n_tokens` (None: this batch's own count; the loop passes the step's global count over
        the number of workers). Default: response-token CE (000 App. B)."""
        ce, mask = response_ce(model, batch)
        return ce.sum() / token_norm(mask, n_tokens), {"ce": float(ce.detach().sum() / mask.sum().clamp_min(1))}

    def penalty_term(self, model: nn.Module) -> tuple[torch.Tensor, float] | None:
        """A term on the parameters alone, added once per optimizer step (lambda included), and
        its raw value to log; None for methods without one."""
        return None

    def before_step(self, model: nn.Module, step: int) -> None:
        """After backward, before optimizer.step(): edit gradients here."""

    def after_step(self, model: nn.Module, step: int) -> None:
        """After optimizer.step(): edit parameters or masks here."""

    def state_dict(self) -> dict[str, Any]:
        """State the method changes during training, saved with each checkpoint so that a
        resumed trial continues exactly (trainables/resume.py). Most methods have none:
        what prepare() builds is rebuilt from the base model on resume."""
        return {}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        """Restore `state_dict()` after prepare() (and after the trained weights are loaded)."""

    def export(self, model: nn.Module) -> nn.Module:
        """The (unwrapped) model to save as a checkpoint."""
        return model
