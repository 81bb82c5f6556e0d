"""GSM8K scoring: lm-evaluation-harness's verdicts, plus one more lenient metric of our own.

`strict_match` and `flexible_extract` give the verdict of lm-evaluation-harness 0.4.13's
`gsm8k` task (lm_eval/tasks/gsm8k/gsm8k.yaml, metadata version 3.0) on any completion;
tests/test_evals_lmeval.py checks it against lm-eval's own filter and metric code. lm-eval
scores in two steps:

1. A filter extracts the answer (`regex`, then `take_first`). strict-match: the first match of
   `#### (\\-?[0-9\\.\\,]+)`; flexible-extract: the last match of
   `(-?[$0-9.,]{2,})|(-?[0-9]+)` (its first non-empty group). Stripped; "[invalid]" if none.
2. `exact_match` removes the regexes_to_ignore `,` `\\$` `(?s).*#### ` `\\.$` (in this order,
   each once) from the extracted answer *and* from the reference (the whole gold answer), then
   lower-cases both and compares the strings.

Strings, not numbers: "18.00", "007", "-0", "42.." and "1000.00" are all wrong against 18, 7,
0, 42 and 1000. That is lm-eval's number, so it is what these two metrics report.

`numeric_match` (ours, more lenient, its own name): the number after the first '####' (the last
number of the completion when there is no '####'), '$' and ',' dropped, compared with the
reference as an exact decimal (no float: 2**53 + 1 != 2**53), so "18.00" == 18 and "-0" == 0.
"""

from __future__ import annotations

import re
from decimal import Decimal, InvalidOperation

from cliffsweep.evals.scoring.score import Score

GSM8K_SCORER_VERSION = "gsm8k-v2"
"""v2: strict_match / flexible_extract equal to lm-eval's gsm8k (v1 compared floats and
accepted '18.00', '007', '-0'); flexible_match renamed flexible_extract; numeric_match added."""

INVALID = "[invalid]"
"""lm-eval's RegexFilter fallback when the pattern does not match."""
STRICT_PATTERN = re.compile(r"#### (\-?[0-9\.\,]+)")
FLEXIBLE_PATTERN = re.compile(r"(-?[$0-9.,]{2,})|(-?[0-9]+)")
IGNORE_PATTERNS = (",", r"\$", r"(?s).*#### ", r"\.$")
"""gsm8k.yaml metric_list[0].regexes_to_ignore, applied in order (exact_match, ignore_case)."""

_HASHES_NUMBER = re.compile(r"####\s*(-?\$?-?[0-9][0-9,]*(?:\.[0-9]+)?|-?\$?\.[0-9]+)")
_NUMBER = re.compile(r"-?\$?-?(?:[0-9][0-9,]*(?:\.[0-9]+)?|\.[0-9]+)")
_DECIMAL = re.compile(r"-?(?:[0-9]+(?:\.[0-9]*)?|\.[0-9]+)")
_REFERENCE = re.compile(r"-?[0-9]+(?:\.[0-9]+)?")
"""A reference lm-eval's normalisation leaves unchanged when applied again (so it can be stored)."""


def regex_filter(pattern: re.Pattern[str], group_select: int, text: str) -> str:
    """lm-eval's `regex` filter on one response: findall, pick a match, first non-empty group."""
    matches = pattern.findall(text)
    if not matches:
        return INVALID
    match = matches[group_select]
    if isinstance(match, tuple):
        groups = [g for g in match if g]
        match = groups[0] if groups else INVALID
    return match.strip()


def exact_match_normalize(text: str) -> str:
    """What lm-eval's `exact_match` compares (regexes_to_ignore, then ignore_case)."""
    for pattern in IGNORE_PATTERNS:
        text = re.sub(pattern, "", text)
    return text.lower()


def strict_extract(generation: str) -> str:
    return regex_filter(STRICT_PATTERN, 0, generation)


def flexible_extract(generation: str) -> str:
    return regex_filter(FLEXIBLE_PATTERN, -1, generation)


def gsm8k_reference(answer: str) -> str:
    """The reference lm-eval compares against: the gold answer after exact_match's normalisation
    (its final '#### N' number without ','). Raises ValueError unless that is a decimal number."""
    if "####" not in answer:
        raise ValueError("answer has no '#### N' final line")
    ref = exact_match_normalize(answer)
    if not _REFERENCE.fullmatch(ref):
        raise ValueError(f"answer's final '#### {ref}' is not a number")
    return ref


def _decimal(text: str) -> Decimal | None:
    cleaned = text.replace(",", "").replace("$", "")
    if not _DECIMAL.fullmatch(cleaned):
        return None
    try:
        return Decimal(cleaned)
    except InvalidOperation:  # pragma: no cover - the pattern admits only valid decimals
        return None


def numeric_answer(generation: str) -> Decimal | None:
    """The number after the first '####', else the last number of the text; exact decimal."""
    m = _HASHES_NUMBER.search(generation)
    if m:
        return _decimal(m.group(1))
    numbers = _NUMBER.findall(generation)
    return _decimal(numbers[-1]) if numbers else None


def gsm8k_score(generation: str, reference: str) -> Score:
    """lm-eval's two verdicts and numeric_match. `reference` may be the whole gold answer (as
    lm-eval passes it) or its final number (gsm8k_reference). Primary metric (`correct`, the
    stored `accuracy`) = flexible_extract: lm-eval's verdict that does not depend on the model
    writing '####' (docs/evals.md)."""
    ref = exact_match_normalize(reference)
    ref_value = _decimal(ref)
    if ref_value is None:
        raise ValueError(f"GSM8K reference {reference!r} is not a number")
    strict = strict_extract(generation)
    flexible = flexible_extract(generation)
    numeric = numeric_answer(generation)
    flexible_ok = exact_match_normalize(flexible) == ref
    return Score(
        correct=flexible_ok,
        prediction=flexible if flexible != INVALID else generation[:200],
        extra={"strict_match": exact_match_normalize(strict) == ref,
               "flexible_extract": flexible_ok,
               "numeric_match": numeric is not None and numeric == ref_value},
    )
