"""How a trial's model computes on its device: precision, fused kernels, compilation (issue 23,
"the GPU fast path"; recipe.precision, recipe.kernels, recipe.compile).

Why: on an H100 the default fp32 weights under bf16 autocast reached 12-20 % MFU (issue 15).
What costs is autocast's cast of every weight at every op, not the fp32 master copy:
llm-foundry trains with fp32 masters under FSDP mixed precision at 40-46 % MFU. So:

- `fsdp_bf16`: FSDP2's `MixedPrecisionPolicy(param_dtype=bf16, reduce_dtype=fp32)` casts each
  decoder layer's weights once per forward (in its all-gather), computes in bf16, reduces
  gradients in fp32 and steps AdamW on the fp32 parameter, so optimizer state, exports and
  checkpoints stay what they were. FSDP2 applies to a one-rank mesh as well: a one-worker
  trial is "sharded" over itself. The other candidate, bf16 weights with fp32 master copies
  (`models[].dtype: bfloat16` + `recipe.master_weights`), exists already; the GPU check
  (bench/gpu_check.sh) measures both, and this default holds until it says otherwise.
- `liger`: Liger-Kernel's fused linear cross-entropy computes every method's per-token response
  CE (losses.py) without full-vocabulary logits; its RMSNorm, SwiGLU and RoPE replace the
  model's on CUDA (their Triton kernels need a GPU; the loss kernel also runs under Triton's
  interpreter on a CPU, which is how the per-method tests check it).
- `compile`: each decoder layer compiled on its own; the head and the loss stay eager.

`resolve` is pure (what runs, given the recipe, the device and the method); `apply_kernels`,
`compile_layers` and `parallel.prepare` do it.
"""

from __future__ import annotations

import os
import sys
import warnings
from contextlib import contextmanager
from dataclasses import dataclass
from types import ModuleType
from typing import Any, Iterator

from cliffsweep.trainables.lazy import LazyModule, torch

losses = LazyModule("cliffsweep.trainables.losses")


@dataclass(frozen=True)
class FastPath:
    precision: str
    """"fp32" (fp32 weights, fp32 compute), "autocast" (fp32 weights, bf16 autocast),
    "fsdp_bf16" (fp32 weights, FSDP2 bf16 compute), "weights" (a bf16/fp16 model in its dtype)."""
    kernels: str
    """"liger" or "none"."""
    compile: bool

    @property
    def amp(self) -> torch.dtype | None:
        """The autocast dtype of the training forward (microbatch.accumulate), or None. Under
        fsdp_bf16 too: the sharded model already computes in bf16 (autocast casts nothing there),
        but a method's frozen fp32 base copy (KL, IW), outside FSDP, would otherwise run in fp32."""
        return torch.bfloat16 if self.precision in ("autocast", "fsdp_bf16") else None

    @property
    def label(self) -> str:
        """What the trials table's `compute` column says, e.g. "fsdp_bf16 liger compiled"."""
        return " ".join([self.precision, self.kernels] + (["compiled"] if self.compile else []))

    @property
    def mixed_fsdp(self) -> bool:
        return self.precision == "fsdp_bf16"


def resolve(precision: str, kernels: str, compile: bool, device_type: str, weight_dtype: torch.dtype | str,
            shard_safe: bool) -> FastPath:
    """What a worker runs for recipe `precision` / `kernels` / `compile` on `device_type`, for
    weights of `weight_dtype` (a torch dtype, or its name: the planner imports no torch) and a
    method + optimizer that are (not) `shard_safe` (Method.fsdp_safe and parallel.FSDP_OPTIMIZERS).
    `auto` is the fast path on CUDA and today's numbers on a CPU."""
    cuda = device_type == "cuda"
    if str(weight_dtype).removeprefix("torch.") != "float32":
        prec = "weights"
    elif precision == "auto":
        prec = ("fsdp_bf16" if shard_safe else "autocast") if cuda else "fp32"
    elif precision == "autocast":
        prec = "autocast" if cuda else "fp32"  # CPU autocast was never on (microbatch.autocast_dtype)
    else:
        prec = precision
    if prec == "fsdp_bf16" and not shard_safe:
        raise ValueError("recipe.precision fsdp_bf16 needs a shard-safe method and optimizer "
                         "(Method.fsdp_safe, parallel.FSDP_OPTIMIZERS); use auto or autocast")
    kern = ("liger" if cuda else "none") if kernels == "auto" else kernels
    return FastPath(prec, kern, compile)


def apply_kernels(model: torch.nn.Module, kernels: str, device_type: str, requested: str = "liger") -> list[str]:
    """Switch this process's response CE to `kernels` (losses.use_fused_ce) and, for liger on
    CUDA, patch the model's RMSNorm, SwiGLU and RoPE with Liger's. Returns the kernels in use.
    `requested`: recipe.kernels as written; under `auto` an architecture Liger has no layers for
    (GPT-2) keeps its own layers, with a note, where an explicit `liger` is refused."""
    if kernels == "none":
        losses.use_fused_ce(False)
        return []
    if kernels != "liger":
        raise ValueError(f"unknown kernels {kernels!r}; valid: ['auto', 'liger', 'none']")
    try:
        import liger_kernel  # noqa: F401
    except ImportError as e:
        raise ValueError("recipe.kernels liger (what auto means on a GPU) needs liger-kernel: install "
                         "cliffsweep's gpu extra (CLIFFSWEEP_BACKEND=gpu bash scripts/setup.sh), or set "
                         "recipe.kernels: none") from e
    if device_type != "cuda" and os.environ.get("TRITON_INTERPRET") != "1":
        raise ValueError("recipe.kernels liger needs a CUDA device (Triton kernels); on a CPU use auto "
                         "or none (the tests run the loss kernel with TRITON_INTERPRET=1)")
    losses.use_fused_ce(True)
    used = ["fused_linear_cross_entropy"]
    if device_type == "cuda":
        used += patch_model(model, strict=requested == "liger")
    return used


def patch_model(model: torch.nn.Module, strict: bool = True) -> list[str]:
    """Liger's RMSNorm, SwiGLU and RoPE in `model` (its loss stays ours: cross_entropy and the
    fused head off). Liger patches RoPE module-wide: every model of this type in the process
    (a method's frozen base copy too) then uses it, which is what we want on a GPU. A model type
    Liger has no layers for is refused when `strict` (recipe.kernels: liger), else left as it is
    with a note (auto: issue 40, 001's GPT-2 would have raised in every trial)."""
    from liger_kernel.transformers.monkey_patch import MODEL_TYPE_TO_APPLY_LIGER_FN

    model_type = model.config.model_type
    if model_type not in MODEL_TYPE_TO_APPLY_LIGER_FN:  # Liger would only log it
        if not strict:
            warnings.warn(f"Liger has no layers for model type {model_type!r}: they run as transformers "
                          "defines them (recipe.kernels: auto); the fused cross-entropy head stays", stacklevel=2)
            return []
        raise ValueError(f"Liger has no kernels for model type {model_type!r}; set recipe.kernels: auto or none "
                         f"(supported: {sorted(MODEL_TYPE_TO_APPLY_LIGER_FN)[:12]} ...)")
    modeling = modeling_module(model)
    before = dict(vars(modeling))
    MODEL_TYPE_TO_APPLY_LIGER_FN[model_type](model=model, rope=True, rms_norm=True, swiglu=True,
                                             cross_entropy=False, fused_linear_cross_entropy=False)
    originals = _REPLACED.setdefault(modeling, {})
    for name, value in before.items():  # the first patch's originals: a later one sees Liger's
        if vars(modeling).get(name) is not value and name not in originals:
            originals[name] = value
    return ["rms_norm", "swiglu", "rope"]


_REPLACED: dict[ModuleType, dict[str, Any]] = {}
"""Per transformers modeling module, what Liger replaced module-wide (RMSNorm and MLP classes,
the RoPE function) as transformers defined it."""


def modeling_module(model: torch.nn.Module) -> ModuleType:
    """The transformers module that defines `model`'s class (through peft and FSDP wrappers)."""
    base = model.get_base_model() if hasattr(model, "get_base_model") else model
    for cls in type(base).__mro__:
        if cls.__module__.startswith("transformers.models."):
            return sys.modules[cls.__module__]
    raise ValueError(f"{type(base).__name__} is not a transformers model")


@contextmanager
def host_modules() -> Iterator[None]:
    """transformers' own layers in place of Liger's module-wide ones while the block runs.

    Liger replaces RMSNorm, the MLP and RoPE in the modeling module, so every model of that type
    built or run in the process afterwards uses Triton kernels, which fail on CPU tensors. A
    checkpoint builds and runs such CPU models: a sharded model's plain copy (parallel.plain_model),
    WiSE-FT's interpolation, and the canary's forward pass over either (the first GPU sweep,
    docs/gpu.md, failed there). Models patched per instance (the live one) keep Liger's layers;
    RoPE is the same function either way. No-op where nothing was patched."""
    patched = {m: {name: vars(m)[name] for name in names} for m, names in _REPLACED.items()}
    try:
        for m, names in _REPLACED.items():
            for name, value in names.items():
                setattr(m, name, value)
        yield
    finally:
        for m, names in patched.items():
            for name, value in names.items():
                setattr(m, name, value)


def decoder_layers(model: torch.nn.Module) -> list[torch.nn.Module]:
    """The model's decoder layers: the classes transformers names in `_no_split_modules`."""
    names = set(model._no_split_modules or ())
    layers = [m for m in model.modules() if type(m).__name__ in names]
    if not layers:
        raise ValueError(f"{type(model).__name__} names no decoder layer class (_no_split_modules)")
    return layers


def compile_layers(model: torch.nn.Module) -> int:
    """torch.compile every decoder layer in place (Module.compile keeps parameter names, so
    checkpoints, resume and FSDP see the same model). The head and the loss are left eager:
    under compile Liger's fused CE fails or returns a wrong loss when targets hold ignore_index
    (Liger issue 174, PR 1338); torchtitan and torchtune compile per layer for the same reason."""
    layers = decoder_layers(model)
    for layer in layers:
        layer.compile()
    return len(layers)
