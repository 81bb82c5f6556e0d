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

from cliffsweep.sweep.spec import SweepSpec


def expand_params(params: dict[str, Any]) -> list[dict[str, Any]]:
    """Cross product of list-valued params; scalars are fixed. `{"r": [8, 16], "a": 1}` ->
    `[{"r": 8, "a": 1}, {"r": 16, "a": 1}]`."""
    keys = sorted(params)
    axes = [params[k] if isinstance(params[k], list) else [params[k]] for k in keys]
    return [dict(zip(keys, combo)) for combo in itertools.product(*axes)]


def _fmt(v: Any) -> str:
    return f"{v:g}" if isinstance(v, float) else str(v)


def series_label(method: str, params: dict[str, Any], optimizer: str, max_steps: int | None = None) -> str:
    """A readable name for one frontier: 'sft', 'ewc(lam=10)', 'sft[muon]', 'sft@800steps' (a
    step budget is part of the series, as epochs are of its key)."""
    label = method
    if params:
        label += "(" + ",".join(f"{k}={_fmt(params[k])}" for k in sorted(params)) + ")"
    if optimizer != "adamw":
        label += f"[{optimizer}]"
    if max_steps is not None:
        label += f"@{max_steps}steps"
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
    round: int = 0
    """0 = a point of the spec's lr grid; k >= 1 = added by refinement round k (not part of the
    trial id: a refined lr is the same experiment as a grid lr would be, and never repeats one)."""
    max_steps: int | None = None
    """The step budget (recipe.max_steps), `epochs` then 0; None = `epochs` passes over the data."""

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


def trial_id(model: str, method: str, params: dict, optimizer: str, lr: float, epochs: int, seed: int,
             max_steps: int | None = None) -> str:
    """Stable over versions: a step budget enters the key only when set, so epoch trials keep
    their ids."""
    fields = [model, method, params, optimizer, lr, epochs, seed] + ([max_steps] if max_steps is not None else [])
    h = hashlib.sha1(json.dumps(fields, sort_keys=True).encode()).hexdigest()[:8]
    length = f"t{max_steps}" if max_steps is not None else f"e{epochs}"
    return f"{model}-{method}-lr{lr:g}-{length}-s{seed}-{h}"


def expand_grid(spec: SweepSpec) -> list[Trial]:
    """The round-0 trials: every grid point of the spec."""
    trials = []
    for m in spec.models:
        for meth in spec.methods:
            for params in expand_params(meth.params):
                for opt in meth.optimizers or spec.optimizers:
                    for lr in meth.lrs or spec.lrs:
                        for ep, steps in spec.lengths_of(m):
                            for seed in spec.seeds:
                                trials.append(Trial(
                                    trial_id=trial_id(m.name, meth.name, params, opt, lr, ep, seed, steps),
                                    model=m.name, model_path=m.path, dtype=m.dtype,
                                    method=meth.name, method_params=params, optimizer=opt,
                                    series=series_label(meth.name, params, opt, steps),
                                    lr=lr, epochs=ep, seed=seed, max_steps=steps,
                                ))
    return trials


SERIES_KEY = ["model", "series", "epochs"]
"""The columns that name one learning-forgetting frontier (a series), in every table that has
them: the one definition (issue 60 part 5); `series_key` is a trial's value of it."""


def series_key(t: Trial) -> tuple[str, str, int]:
    """(model, series, epochs): one learning-forgetting frontier, the unit refinement works on
    (SERIES_KEY's value for this trial)."""
    return t.model, t.series, t.epochs


def refined_trials(spec: SweepSpec, like: Trial, lrs: list[float], round: int) -> list[Trial]:
    """Trials of refinement round ``round`` for the series of ``like`` (any trial of it): the
    same model, method, params, optimizer and epochs at each new lr, one per seed of the spec.
    Ids come from :func:`trial_id` as for grid points, so a re-run rebuilds the same ids."""
    if round < 1:
        raise ValueError(f"refinement rounds start at 1 (0 is the grid), got {round}")
    return verification_trials(like, lrs, spec.seeds, round)


def verification_trials(like: Trial, lrs: list[float], seeds: list[int], round: int) -> list[Trial]:
    """Trials of the series of ``like`` at ``lrs``, one per seed of ``seeds``, in round ``round``:
    a refinement round's (the spec's seeds), or verification runs (analysis/verify.py: seeds the
    grid lacks, the round of the lr they verify, 0 on the grid). Ids as for every trial: a
    re-run rebuilds the same ones."""
    return [Trial(trial_id=trial_id(like.model, like.method, like.method_params, like.optimizer, lr, like.epochs, seed,
                                    like.max_steps),
                  model=like.model, model_path=like.model_path, dtype=like.dtype, method=like.method,
                  method_params=like.method_params, optimizer=like.optimizer, series=like.series, lr=float(lr),
                  epochs=like.epochs, seed=seed, round=round, max_steps=like.max_steps)
            for lr in lrs for seed in seeds]


BASE = "base"
"""The `series` (and `method`) of a model's base evaluation, the lr = 0 point of all its
frontiers: spelt here only (issue 60 part 5)."""


def base_trial_id(model: str) -> str:
    """The store id of a model's base evaluation (the lr = 0 point of all its frontiers)."""
    return f"{model}-{BASE}"


def is_base(frame):
    """A table's rows of base evaluations (a boolean Series over `frame`'s `series` column)."""
    return frame["series"] == BASE
