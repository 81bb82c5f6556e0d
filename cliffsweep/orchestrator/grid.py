"""The grid: model x method (x its params) x optimizer x lr x epochs x seed -> trials.

Pure functions: the same spec always gives the same trials with the same ids, which is what
makes resume and idempotent store writes work.
"""

from __future__ import annotations

import hashlib
import itertools
import json
from dataclasses import asdict, dataclass
from typing import Any

from cliffsweep.orchestrator.spec import SweepSpec


def expand_params(params: dict[str, Any]) -> list[dict[str, Any]]:
    """Cross product of list-valued params; scalars are fixed. `{"r": [8, 16], "a": 1}` ->
    `[{"r": 8, "a": 1}, {"r": 16, "a": 1}]`."""
    keys = sorted(params)
    axes = [params[k] if isinstance(params[k], list) else [params[k]] for k in keys]
    return [dict(zip(keys, combo)) for combo in itertools.product(*axes)]


def _fmt(v: Any) -> str:
    return f"{v:g}" if isinstance(v, float) else str(v)


def series_label(method: str, params: dict[str, Any], optimizer: str) -> str:
    """A readable name for one frontier: 'sft', 'ewc(lam=10)', 'sft[muon]'."""
    label = method
    if params:
        label += "(" + ",".join(f"{k}={_fmt(params[k])}" for k in sorted(params)) + ")"
    if optimizer != "adamw":
        label += f"[{optimizer}]"
    return label


@dataclass(frozen=True)
class Trial:
    """One grid point: everything a trial needs to run, and its identity in the store."""

    trial_id: str
    model: str
    model_path: str
    dtype: str
    method: str
    method_params: dict[str, Any]
    optimizer: str
    series: str
    lr: float
    epochs: int
    seed: int

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


def trial_id(model: str, method: str, params: dict, optimizer: str, lr: float, epochs: int, seed: int) -> str:
    key = json.dumps([model, method, params, optimizer, lr, epochs, seed], sort_keys=True)
    h = hashlib.sha1(key.encode()).hexdigest()[:8]
    return f"{model}-{method}-lr{lr:g}-e{epochs}-s{seed}-{h}"


def expand_grid(spec: SweepSpec) -> list[Trial]:
    trials = []
    for m in spec.models:
        for meth in spec.methods:
            for params in expand_params(meth.params):
                for opt in meth.optimizers or spec.optimizers:
                    for lr in spec.lrs:
                        for ep in spec.epochs:
                            for seed in spec.seeds:
                                trials.append(Trial(
                                    trial_id=trial_id(m.name, meth.name, params, opt, lr, ep, seed),
                                    model=m.name, model_path=m.path, dtype=m.dtype,
                                    method=meth.name, method_params=params, optimizer=opt,
                                    series=series_label(meth.name, params, opt),
                                    lr=lr, epochs=ep, seed=seed,
                                ))
    return trials


def base_trial_id(model: str) -> str:
    """The store id of a model's base evaluation (the lr = 0 point of all its frontiers)."""
    return f"{model}-base"
