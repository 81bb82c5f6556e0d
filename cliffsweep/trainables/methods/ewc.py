"""EWC (Kirkpatrick et al. 2017) as used by the cliff paper (000 App. D, Eq. 3):

    L(theta) = L_SFT(theta) + lambda/2 * sum_p F_p (theta_p - theta*_p)^2,
    F_p = E_{B ~ D_R}[(grad_p L(B))^2]   (diagonal empirical Fisher on the retain set).

Estimator: per *batch* squared gradients of the retain loss, averaged over the retain batches,
exactly the expectation over B written in 000 App. D (per-example gradients would cost one
backward per example). Our default: F is rescaled to mean 1 over all parameters
(`penalties.normalize_mean`) so lambda is on the L2-SP scale; lambda = 1 is our default too
(000 gives no value: sweep it). Covers every trainable parameter.
"""

from __future__ import annotations

from cliffsweep.trainables.methods.costs import Costs
from cliffsweep.trainables.methods.shared import Anchored, Importance
from cliffsweep.trainables.lazy import lazy_function

batch_ce = lazy_function("cliffsweep.trainables.penalties", "batch_ce")
square = lazy_function("torch", "square")


class EWC(Anchored):  # Eq. 3's penalty, its lambda (params.lam) and the statistics pass: methods/shared.py
    name = "ewc"
    costs = Costs(weight_copies=2, stats_data="retain", stats_flops=6, stats_accumulator=True)  # theta*, the Fisher
    # F_p: the squared gradient of each retain batch's cross-entropy
    importance = Importance(batch_ce, square, "per-batch empirical Fisher, mean-1 normalised")
