"""The regime vocabulary: every regime's name, in one place (issue 60 part 5). Package code
compares with these names, never with a string of its own; the dashboard reads them from its API.

Our reading (analysis/classify.py rules 1-7) and the paper's (classify.paper_regime, which splits
a rule-4 cliff by the paper's own conditions); what each means: docs/analysis.md "Definitions".
"""

from __future__ import annotations

CLIFF = "cliff"
"""A collapse of cliff_drop of R0 within cliff_lr_ratio of lr, with no learning across it (000 Fig. 4)."""
GRADUAL = "gradual"
"""A trade-off: retention falls as learning rises beyond noise (000 Fig. 3)."""
FORGETTING = "forgetting"
"""Retention falls with no learning beyond noise to show for it (issue 59)."""
NO_FORGETTING = "no_forgetting"
"""Every lr keeps more than 1 - forget_min of R0."""
INCONCLUSIVE = "inconclusive"
"""The data cannot tell (its reason says why)."""
COLLAPSE_WITHOUT_LEARNING = "collapse_without_learning"
"""The paper's reading of a cliff whose safe side learned nothing beyond noise."""
FORGOT_BEFORE_CLIFF = "forgot_before_cliff"
"""The paper's reading of a cliff whose small lrs had already lost forget_min of R0."""
UNMEASURED_BEFORE_CLIFF = "unmeasured_before_cliff"
"""The paper's reading of a cliff with no lr a transition width below it."""
LEARNED_AFTER_CLIFF = "learned_after_cliff"
"""The paper's reading of a cliff past which higher lrs still learned beyond noise."""

REGIMES = (CLIFF, GRADUAL, FORGETTING, NO_FORGETTING, INCONCLUSIVE)
"""Our reading's regimes."""
PAPER_REGIMES = (CLIFF, COLLAPSE_WITHOUT_LEARNING, FORGOT_BEFORE_CLIFF, UNMEASURED_BEFORE_CLIFF, LEARNED_AFTER_CLIFF,
                 GRADUAL, FORGETTING, NO_FORGETTING, INCONCLUSIVE)
"""The paper's reading's, in the order figures and tables list them."""
