"""The canary's decision (evals/canary.py): in half precision a mismatch is judged against the
step from the checkpoint served before, so kernel noise passes and a stale engine does not.

The numbers are the ones measured on an H200 (docs/gpu.md, 2026-11-28): a checkpoint served
right at 7.9e-2 from its canary, 9.2 from the checkpoint served before it."""

from __future__ import annotations

import pytest

from cliffsweep.evals.canary import RELATIVE, TOLERANCE, Canary, StaleWeightsError, check_canary

IDS = list(range(11))


def canary(logprobs: list[float]) -> Canary:
    return Canary(IDS, logprobs)


def between(a: Canary, b: Canary, share: float) -> list[float]:
    """Log-probs `share` of the way from a to b."""
    return [x + share * (y - x) for x, y in zip(a.logprobs, b.logprobs)]


PREVIOUS = canary([-9.2 - 0.1 * i for i in range(10)])
EXPECTED = canary([-0.1 * i for i in range(10)])
NOISY = [x + (0.079 if i % 2 else -0.079) for i, x in enumerate(EXPECTED.logprobs)]  # mean |d| 0.079


def test_bf16_kernel_noise_passes_when_the_checkpoint_moved_far():
    dist = check_canary(EXPECTED, NOISY, TOLERANCE["bfloat16"], "x", PREVIOUS, RELATIVE["bfloat16"])
    assert dist == pytest.approx(0.079)
    with pytest.raises(StaleWeightsError, match="0.079 > 0.05"):  # the rule before: a fixed tolerance
        check_canary(EXPECTED, NOISY, TOLERANCE["bfloat16"], "x", PREVIOUS)
    with pytest.raises(StaleWeightsError):  # nothing to judge the step by: the fixed tolerance
        check_canary(EXPECTED, NOISY, TOLERANCE["bfloat16"], "x", None, RELATIVE["bfloat16"])


@pytest.mark.parametrize("kept", [1.0, 0.5, 0.25])
def test_bf16_an_engine_that_kept_the_old_model_fails(kept):
    """Served = `kept` of the way back to the previous checkpoint: a reload that did nothing (1.0)
    or kept part of the old weights (a stale LM head)."""
    served = between(EXPECTED, PREVIOUS, kept)
    with pytest.raises(StaleWeightsError, match="previously served"):
        check_canary(EXPECTED, served, TOLERANCE["bfloat16"], "x", PREVIOUS, RELATIVE["bfloat16"])


def test_bf16_a_small_step_keeps_the_fixed_tolerance():
    near = canary([x - 0.06 for x in EXPECTED.logprobs])  # the previous checkpoint only 0.06 away
    with pytest.raises(StaleWeightsError):
        check_canary(EXPECTED, NOISY, TOLERANCE["bfloat16"], "x", near, RELATIVE["bfloat16"])


def test_fp32_has_no_relative_slack():
    assert RELATIVE["float32"] == 0
    served = between(EXPECTED, PREVIOUS, 0.01)
    with pytest.raises(StaleWeightsError):
        check_canary(EXPECTED, served, TOLERANCE["float32"], "x", PREVIOUS, RELATIVE["float32"])
