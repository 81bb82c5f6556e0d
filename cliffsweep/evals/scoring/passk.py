"""Sampled evaluation's metrics (issue 40 part 2; 004 reports both, Table 2).

With n samples drawn per question and c of them correct:

- avg@n = mean over questions of c / n: the expected accuracy of one sample.
- pass@k = mean over questions of 1 - C(n - c, k) / C(n, k): the probability that at least one
  of k samples drawn without replacement from the n is correct. This is the unbiased estimator
  of Chen et al. (2021, "Evaluating Large Language Models Trained on Code", Eq. 1 and its
  numerically stable product form, Fig. 3), which 004 follows; k <= n.

Pure functions over counts: the store keeps every sample, so these can be recomputed by hand.
"""

from __future__ import annotations

import numpy as np


def pass_at_k(n: int, c: int, k: int) -> float:
    """1 - C(n - c, k) / C(n, k) for one question, as the product prod_{i=n-c+1}^{n} (1 - k / i)."""
    if not 0 <= c <= n or not 1 <= k <= n:
        raise ValueError(f"pass@k needs 0 <= c <= n and 1 <= k <= n, got n={n}, c={c}, k={k}")
    if n - c < k:
        return 1.0
    return float(1.0 - np.prod(1.0 - k / np.arange(n - c + 1, n + 1)))


def sampled_metrics(correct: list[list[bool]], ks: list[int]) -> dict[str, float]:
    """{"avg@n": ..., "pass@k": ... for each k} over questions, each a list of its n samples'
    correctness (every question the same n)."""
    ns = {len(c) for c in correct}
    if len(ns) != 1 or not correct:
        raise ValueError(f"every question needs the same number of samples, got {sorted(ns)}")
    (n,) = ns
    counts = [sum(c) for c in correct]
    out = {f"avg@{n}": float(np.mean([c / n for c in counts]))}
    for k in ks:
        out[f"pass@{k}"] = float(np.mean([pass_at_k(n, c, k) for c in counts]))
    return out
