"""Scorers for the user's own data (evals/tasks/dataset.py): a generation against the held-out
reference answer.

- `exact`: the same text, surrounding whitespace aside;
- `normalized`: the same after SQuAD's answer normalisation (Rajpurkar et al. 2016: lower case,
  no punctuation, no articles a / an / the, single spaces), the usual short-answer match;
- `number`: the same number (the generation's number after '####', else its last one, against
  the reference's: scoring.gsm8k.numeric_answer), for numeric answers; with a relative tolerance
  `rel_tol` > 0, any number within rel_tol x |reference| of it (003's MedCalc-Bench scores a
  calculated value within a tolerance of the gold one).

Each metric is stored under its own name with `accuracy` = the chosen one; the version changes
when any of them does.
"""

from __future__ import annotations

import re
import string
from decimal import Decimal
from typing import Literal

from cliffsweep.evals.scoring.gsm8k import numeric_answer
from cliffsweep.evals.scoring.score import Score

MATCH_SCORER_VERSION = "match-v1"
Metric = Literal["exact", "normalized", "number"]
_ARTICLES = re.compile(r"\b(a|an|the)\b")
_PUNCTUATION = str.maketrans("", "", string.punctuation)


def same_number(got: Decimal | None, want: Decimal | None, rel_tol: float = 0.0) -> bool:
    """`got` equals `want` exactly (rel_tol 0), or lies within rel_tol x |want| of it."""
    if got is None or want is None:
        return False
    if rel_tol == 0:
        return got == want
    return abs(got - want) <= Decimal(str(rel_tol)) * abs(want)


def normalize_answer(text: str) -> str:
    """SQuAD's normalisation (its official evaluation script's normalize_answer)."""
    return " ".join(_ARTICLES.sub(" ", text.lower().translate(_PUNCTUATION)).split())


def match_score(generation: str, reference: str, metric: Metric, rel_tol: float = 0.0) -> Score:
    ref_number, gen_number = numeric_answer(reference), numeric_answer(generation)
    verdicts = {
        "exact": generation.strip() == reference.strip(),
        "normalized": normalize_answer(generation) == normalize_answer(reference),
        "number": same_number(gen_number, ref_number, rel_tol),
    }
    prediction = str(gen_number) if metric == "number" and gen_number is not None else generation.strip()
    return Score(verdicts[metric], prediction[:500], {k: v for k, v in verdicts.items() if k != metric})
