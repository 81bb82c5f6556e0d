"""Multiple-choice scoring: the letter extractor on a table of instruct-style replies, SciKnowEval's
own verdict, the letter log-prob choice, and the runner's per-subtask metrics. No model: fast."""

from __future__ import annotations

import pytest

from cliffsweep.evals.runner import metric_means, with_logprob_metric
from cliffsweep.evals.scoring import (letter_answer, letter_score, logprob_choice, option_answer,
                                      sciknoweval_verdict)
from cliffsweep.evals.tasks.base import EvalExample, Score

OPTIONS = ("Ethanol", "CCO", "Methanol", "CCOC(C)=O")
NUMBERS = ("-1.96", "1.96", "13", "3")

REPLIES = [
    # bare letters and their wrappings
    ("C", "C"), ("C.", "C"), ("(C)", "C"), ("**C**", "C"), ("[C]", "C"), ("`C`", "C"), ("C)", "C"),
    (" A\nbecause", "A"), ("D: CCOC(C)=O", "D"), ("B because of the OH group", "B"),
    # statements
    ("The answer is C", "C"), ("The answer is C.", "C"), ("Answer: C", "C"), ("Answer: (C)", "C"),
    ("The correct answer is **C**.", "C"), ("The correct option is C: Methanol", "C"),
    ("Final answer: D", "D"), ("The answer is option B.", "B"), ("I would choose B.", "B"),
    ("I'd go with D", "D"), ("A good guess is C.", "C"), ("My best guess: B", "B"),
    ("Option A is wrong because ... so the answer is B", "B"),   # 'Option A' is no statement
    ("The answer is not A; the answer is D.", "D"),              # the last statement wins
    ("Answer: A", "A"), ("A is correct.", "A"), ("A", "A"), ("A.", "A"),
    # the article 'A' is not a choice
    ("A good guess is C.", "C"), ("A compound like this has no answer here.", None),
    # the option's text
    ("Methanol", "C"), ("methanol.", "C"), ("It is CCOC(C)=O.", "D"), ("CCO", "B"),
    ("Ethanol or methanol", None),                                # two options: no answer
    # nothing readable
    ("", None), ("E", None), ("b", None), ("I am not sure.", None), ("Acetone", None), ("C6H6", None),
]


@pytest.mark.parametrize("reply,letter", REPLIES)
def test_letter_extraction_reads_instruct_replies(reply, letter):
    assert letter_answer(reply, OPTIONS) == letter
    s = letter_score(reply, "C", OPTIONS)
    assert s.correct == (letter == "C")
    assert s.prediction == (letter or reply[:200])


def test_option_text_needs_whole_numbers_and_words():
    assert option_answer("The value is -1.96", NUMBERS) == "A"      # not '1.96' inside '-1.96'
    assert option_answer("It has 13 rotatable bonds", NUMBERS) == "C"  # not '3' inside '13'
    assert option_answer("3.5", NUMBERS) is None and option_answer("1.965", NUMBERS) is None
    assert letter_answer("It has 3 bonds.", NUMBERS) == "D"
    assert letter_answer("Methanol", ()) is None  # no options given: no text matching


@pytest.mark.parametrize("reply,answer,verdict", [
    # SciKnowEval's get_single_score_MCQ, worked by hand; where it differs from letter_answer, so noted.
    ("C", "C", True), ("B", "C", False), ("", "C", False),
    ("Methanol", "C", True),              # the correct text and no wrong one
    ("CCOC(C)=O", "B", False),            # 'CCO' is in it, but so is a wrong option; then 'C)' reads as C
    ("The answer is C.", "C", True),
    ("A good guess is C.", "C", True),    # D, C, B, A in turn: 'C.' is found before 'A '
    ("The answer is B", "B", False),      # no mark after the final B: unread (letter_answer: B)
    ("C, not D.", "C", False),            # D is tried first and 'D.' is there (letter_answer: C)
    ("Answer: A", "A", True),             # the reply opens with 'A' (of 'Answer')
])
def test_sciknoweval_verdict(reply, answer, verdict):
    assert sciknoweval_verdict(reply, OPTIONS, answer) is verdict


def test_logprob_choice_and_metric():
    assert logprob_choice([-3.0, -0.5, -2.0, -9.0]) == "B"
    assert logprob_choice([-1.0, -1.0, -2.0, -2.0]) == "A"  # ties: the first letter
    with pytest.raises(ValueError, match="4 letters"):
        logprob_choice([-1.0, -2.0])
    exs = [EvalExample("a", "q", "B"), EvalExample("b", "q", "C")]
    scores = with_logprob_metric([Score(True, "B"), Score(False, "A")], exs,
                                 [[-3.0, -0.5, -2.0, -9.0], [-3.0, -0.5, -2.0, -9.0]], ("A", "B", "C", "D"))
    assert [s.extra["logprob_accuracy"] for s in scores] == [True, False]
    assert [s.correct for s in scores] == [True, False]


def test_metric_means_per_group():
    exs = [EvalExample(str(i), "q", "A", group=g) for i, g in enumerate(["x", "x", "y", "y", "y"])]
    scores = [Score(c, "", {"m": m}) for c, m in [(True, True), (False, True), (True, False), (True, False), (False, True)]]
    means = metric_means(exs, scores)
    assert means == {"m": 3 / 5, "accuracy/x": 0.5, "m/x": 1.0, "accuracy/y": 2 / 3, "m/y": 1 / 3}
    assert metric_means(exs[:1], scores[:1]) == {"m": 1.0, "accuracy/x": 1.0, "m/x": 1.0}
    plain = [EvalExample("p", "q", "A")]
    assert metric_means(plain, scores[:1]) == {"m": 1.0}  # no group: pooled metrics only
    with pytest.raises(ValueError, match="some examples have a group"):
        metric_means(exs[:1] + plain, scores[:2])
    with pytest.raises(ValueError, match="metrics"):
        metric_means(exs[:2], [Score(True, "", {"m": True}), Score(True, "", {})])


def test_option_inside_a_longer_option_does_not_count():
    opts = ("Methanol", "Methanol solution", "Water", "Ice")
    assert option_answer("A methanol solution.", opts) == "B"
    assert option_answer("Methanol, not a methanol solution", opts) is None  # both stand alone
    assert option_answer("Ice water", opts) is None
