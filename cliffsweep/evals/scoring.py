"""Answer extraction and scoring shared by real and toy tasks.

GSM8K follows lm-evaluation-harness (gsm8k task): a *strict* match on '#### N' and a
*flexible* match on the last number in the generation; ',' and '$' are ignored and a trailing
'.' is stripped. Multiple choice (ChemL3) extracts a single letter A-D.
"""

from __future__ import annotations

import re

from cliffsweep.evals.tasks.base import Score

GSM8K_SCORER_VERSION = "gsm8k-v1"
LETTER_SCORER_VERSION = "letter-v1"

_STRICT = re.compile(r"#### (\-?[0-9\.\,]+)")
_FLEXIBLE = re.compile(r"(-?[$0-9.,]{2,})|(-?[0-9]+)")
_LETTER = re.compile(r"\b([A-D])\b")


def normalize_number(text: str) -> str:
    """'1,234.00' -> '1234', '$5.' -> '5', '-3.50' -> '-3.5'."""
    s = text.replace(",", "").replace("$", "").strip().rstrip(".")
    try:
        value = float(s)
    except ValueError:
        return s
    return str(int(value)) if value == int(value) else repr(value)


def strict_answer(generation: str) -> str | None:
    m = _STRICT.search(generation)
    return normalize_number(m.group(1)) if m else None


def flexible_answer(generation: str) -> str | None:
    matches = _FLEXIBLE.findall(generation)
    if not matches:
        return None
    last = matches[-1]
    text = last[0] or last[1]
    return normalize_number(text)


def gsm8k_reference(answer: str) -> str:
    """The reference number of a GSM8K answer: what follows the last '####' (normalised)."""
    if "####" not in answer:
        raise ValueError("answer has no '#### N' final line")
    ref = normalize_number(answer.rsplit("####", 1)[1])
    try:
        float(ref)
    except ValueError:
        raise ValueError(f"answer's final '#### {ref}' is not a number") from None
    return ref


def gsm8k_score(generation: str, reference: str) -> Score:
    """Primary metric = flexible match (robust for small models); strict reported beside it."""
    ref = normalize_number(reference)
    strict = strict_answer(generation)
    flexible = flexible_answer(generation)
    return Score(
        correct=flexible == ref,
        prediction=flexible if flexible is not None else generation[:200],
        extra={"strict_match": strict == ref, "flexible_match": flexible == ref},
    )


def letter_answer(generation: str) -> str | None:
    """The first standalone letter A-D of the generation ('B', 'B.', '(B)', 'Answer: B')."""
    m = _LETTER.search(generation.strip())
    return m.group(1) if m else None


def letter_score(generation: str, reference: str) -> Score:
    pred = letter_answer(generation)
    return Score(correct=pred == reference.strip().upper(), prediction=pred if pred else generation[:200])
