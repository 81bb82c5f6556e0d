"""Answer extraction and scoring shared by real and toy tasks: GSM8K (`gsm8k`, equal to
lm-evaluation-harness) and multiple choice (`letters`). Each scorer has a version, stored with
every evals row; analysis refuses to mix versions (style.md 8)."""

from cliffsweep.evals.scoring.gsm8k import (
    GSM8K_SCORER_VERSION, INVALID, exact_match_normalize, flexible_extract, gsm8k_reference, gsm8k_score,
    numeric_answer, strict_extract,
)
from cliffsweep.evals.scoring.letters import (
    LETTER_SCORER_VERSION, LETTERS, letter_answer, letter_score, logprob_choice, option_answer,
    sciknoweval_verdict,
)

__all__ = [
    "GSM8K_SCORER_VERSION", "INVALID", "exact_match_normalize", "flexible_extract", "gsm8k_reference",
    "gsm8k_score", "numeric_answer", "strict_extract",
    "LETTER_SCORER_VERSION", "LETTERS", "letter_answer", "letter_score", "logprob_choice", "option_answer",
    "sciknoweval_verdict",
]
