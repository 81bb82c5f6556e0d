"""The learning-rate schedule of the cliff paper's SFT recipe (000, App. B), as a pure function.

Linear warmup over the first `warmup` steps, cosine decay of the peak lr to `min_ratio` x peak,
then `cooldown` final steps. App. B names the 50 cool-down steps without their shape; our
reading (docs/design.md, "The recipe (000 App. B) and our readings"): linear from min_ratio x
peak towards 0.
"""

from __future__ import annotations

import math


def total_steps(per_epoch: int, epochs: int, max_steps: int | None) -> int:
    """A trial's optimizer steps: its step budget (recipe.max_steps) when it has one, else
    `epochs` passes of `per_epoch` steps."""
    return max_steps if max_steps is not None else per_epoch * epochs


def passes(total: int, per_epoch: int) -> int:
    """Passes over the data that `total` steps start (the last one cut short if it does not divide)."""
    return -(-total // max(1, per_epoch))


def warmup_of(total: int, steps: int, fraction: float | None) -> int:
    """The warmup in steps: `fraction` of the trial's `total` steps when given (recipe.warmup_fraction,
    rounded), else `steps` (recipe.warmup_steps, App. B's form)."""
    return steps if fraction is None else round(fraction * total)


def fit_phases(total: int, warmup: int, cooldown: int) -> tuple[int, int]:
    """Warmup and cool-down as run. The paper's 20 + 50 steps assume thousands of steps; for a
    short run (toy sweeps) they are scaled down together so that they take at most half of
    training (our default), keeping the schedule's shape."""
    budget = total // 2
    if warmup + cooldown <= budget:
        return warmup, cooldown
    scale = budget / (warmup + cooldown)
    return int(warmup * scale), int(cooldown * scale)


def lr_multiplier(step: int, total: int, warmup: int, cooldown: int, min_ratio: float) -> float:
    """Multiplier of the peak lr for 0-based optimizer step `step` of `total`."""
    warmup, cooldown = fit_phases(total, warmup, cooldown)
    if step < warmup:
        return (step + 1) / warmup
    decay_end = total - cooldown
    if step < decay_end:
        progress = (step - warmup) / max(1, decay_end - warmup)
        return min_ratio + (1 - min_ratio) * 0.5 * (1 + math.cos(math.pi * progress))
    if cooldown == 0:  # a run too short for one (step == total: the scheduler looks one past the end)
        return min_ratio
    k = step - decay_end
    return min_ratio * (cooldown - k) / cooldown


def eval_steps(total: int, steps_per_epoch: int, points: int, every_epoch: bool) -> list[int]:
    """Steps (1-based counts of optimizer steps taken) after which a checkpoint is evaluated:
    `points` evenly spaced ones ending at `total`, plus each epoch end if asked."""
    steps = {max(1, round(total * k / points)) for k in range(1, points + 1)}
    if every_epoch:
        steps |= {steps_per_epoch * e for e in range(1, total // max(1, steps_per_epoch) + 1)}
    return sorted(s for s in steps if 1 <= s <= total)
