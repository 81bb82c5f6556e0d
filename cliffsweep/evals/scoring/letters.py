"""Multiple-choice scoring (ChemL3, toy_facts): which of the letters A-D a reply chose.

Instruct models seldom answer with a bare letter, even when the prompt asks for one. The
extractor reads, in this order (the first rule that finds an answer wins):

1. an explicit statement, the last one in the reply: "The answer is C", "Answer: (C)",
   "the correct option is **C**", "A good guess is C.", "I'd go with B";
2. a letter opening the reply: "C", "C.", "(C)", "**C**", "C: methanol", "B because ...";
   an opening "A" followed by a lower-case word is the article ("A good guess ..."), not a choice;
3. the text of exactly one option ("Methanol", "It is CCO."), when the task gives the options
   (not inside a longer word or number, nor inside the occurrence of a longer option);
4. the first standalone capital A-D that is not the article "A".

Upper-case letters only ("a" is an English word). tests/test_evals_letters.py holds the table
of replies this must read right.

Also here: `sciknoweval_verdict`, SciKnowEval's own MCQ verdict re-implemented from its
evaluation/metrics.py (get_single_score_MCQ, HICAI-ZJU/SciKnowEval) so that our numbers can be
compared with theirs, and `logprob_choice`, the letter a model puts most probability on.
"""

from __future__ import annotations

import re
from collections.abc import Sequence

from cliffsweep.evals.scoring.score import Score

LETTER_SCORER_VERSION = "letter-v2"
"""v2: instruct-style extraction (statements, article 'A', option text), sciknoweval_match and
logprob_accuracy; v1 took the first standalone A-D (read "A good guess is C." as A)."""

LETTERS = ("A", "B", "C", "D")

_OPEN = r"[\*_\(\[\"'`]*"  # markdown and brackets that may wrap a letter
_CLOSE = r"(?![A-Za-z0-9])"  # the letter is not the start of a word or formula ("Acetone", "C6H6")
_VERBS_AFTER_A = ("is", "was", "seems", "would", "should", "because", "since")
"""Words after an opening 'A' that make it the letter, not the article ('A is correct')."""

_STATEMENT = re.compile(
    r"(?:\b(?i:answer|option|choice|guess|bet)\b[^\S\n]*(?i:is|was|would be|should be|will be|:|=)"
    r"|\b(?i:choose|chose|pick|select|go with|going with)\b)"
    r"[^\S\n]*(?i:(?:option|choice|letter)[^\S\n]*)?" + _OPEN + r"([A-D])" + _CLOSE)
_OPENING = re.compile(r"\s*" + _OPEN + r"([A-D])" + _CLOSE)
_STANDALONE = re.compile(r"(?<![A-Za-z0-9])([A-D])" + _CLOSE)
_ARTICLE = re.compile(r"A[ \t]+([a-z]+)")


def _is_article(text: str, pos: int) -> bool:
    """True if the 'A' at text[pos] reads as the English article ('A good guess ...')."""
    m = _ARTICLE.match(text, pos)
    return bool(m) and m.group(1) not in _VERBS_AFTER_A


def option_answer(generation: str, options: Sequence[str]) -> str | None:
    """The letter of the only option whose text the reply contains (case- and space-
    insensitive, not inside a longer word or number); None if none or several. An occurrence
    inside an occurrence of a longer option ("methanol" in "methanol solution") does not count."""
    text = " ".join(generation.split()).casefold()
    spans: dict[str, list[tuple[int, int]]] = {}
    for letter, option in zip(LETTERS, options):
        needle = " ".join(option.split()).casefold()
        if needle:
            pattern = r"(?<![A-Za-z0-9.+\-])" + re.escape(needle) + r"(?![A-Za-z0-9]|\.[0-9])"
            spans[letter] = [m.span() for m in re.finditer(pattern, text)]
    found = [L for L, occ in spans.items()
             if any(not any(a <= s and e <= b and (a, b) != (s, e) for M, other in spans.items() if M != L
                            for a, b in other)
                    for s, e in occ)]
    return found[0] if len(found) == 1 else None


def letter_answer(generation: str, options: Sequence[str] = ()) -> str | None:
    """The letter A-D the reply chose (rules in the module docstring), None if it chose none."""
    statements = _STATEMENT.findall(generation)
    if statements:
        return statements[-1]
    m = _OPENING.match(generation)
    if m and not (m.group(1) == "A" and _is_article(generation, m.start(1))):
        return m.group(1)
    if options:
        letter = option_answer(generation, options)
        if letter is not None:
            return letter
    for m in _STANDALONE.finditer(generation):
        if not (m.group(1) == "A" and _is_article(generation, m.start(1))):
            return m.group(1)
    return None


def sciknoweval_verdict(generation: str, options: Sequence[str], answer: str) -> bool:
    """SciKnowEval's own MCQ verdict (get_single_score_MCQ): a one-character reply must be the
    letter; a reply containing the correct option's text and no wrong option's text is right;
    otherwise the first of D, C, B, A that appears as 'X.', 'X\\n', 'X)', 'X ', '"X', 'X"' (or
    opens the reply) is taken as the answer."""
    pred = generation.strip()
    if not pred:
        return False
    if len(pred) == 1:
        return pred == answer
    correct = options[LETTERS.index(answer)]
    wrong = [o for L, o in zip(LETTERS, options) if L != answer]
    if correct in pred and not any(o in pred for o in wrong):
        return True
    for key in reversed(LETTERS):
        marks = (f"{key}.", f"{key}\n", f"{key})", f"{key} ", f'"{key}', f'{key}"')
        if any(m in pred for m in marks) or pred[0] == key:
            return key == answer
    return False


def logprob_choice(logprobs: Sequence[float], letters: Sequence[str] = LETTERS) -> str:
    """The letter with the highest log-probability (the first one on a tie)."""
    if len(logprobs) != len(letters):
        raise ValueError(f"{len(logprobs)} log-probs for {len(letters)} letters")
    return letters[max(range(len(letters)), key=lambda i: (logprobs[i], -i))]


def letter_score(generation: str, reference: str, options: Sequence[str] = ()) -> Score:
    """Primary metric: the extracted letter equals the reference. With the options (ChemL3),
    `sciknoweval_match` (SciKnowEval's verdict) is stored beside it."""
    ref = reference.strip().upper()
    pred = letter_answer(generation, options)
    extra = {"sciknoweval_match": sciknoweval_verdict(generation, options, ref)} if options else {}
    return Score(correct=pred == ref, prediction=pred if pred else generation[:200], extra=extra)
