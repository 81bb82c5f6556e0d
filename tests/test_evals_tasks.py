"""Real-data loaders (GSM8K, ChemL3 under /work/shared/data), their splits and error messages,
and the answer extractors. No model is involved: these run in a few seconds."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from cliffsweep.evals.backends.hf_backend import cut_at_stop
from cliffsweep.evals.scoring import (flexible_answer, gsm8k_reference, gsm8k_score, letter_answer,
                                      letter_score, strict_answer)
from cliffsweep.evals.tasks import build_task
from cliffsweep.evals.tasks.rows import DataError

DATA = Path("/work/shared/data")
GSM8K_DIR = DATA / "gsm8k"
CHEM_DIR = DATA / "sciknoweval-chem-l3"


def _gsm8k(**params):
    return build_task("gsm8k", {"path": str(GSM8K_DIR), **params})


def _chem(**params):
    return build_task("chem_l3", {"path": str(CHEM_DIR), **params})


# --- GSM8K -------------------------------------------------------------------------------------

def test_gsm8k_counts_and_pairs():
    task = _gsm8k()
    train = task.train_examples()
    assert len(train) == 7473  # the full official train split
    assert all(ex.response.rstrip().split("\n")[-1].startswith("#### ") for ex in train)
    evals = task.eval_examples()
    assert len(evals) == 200 and len({e.id for e in evals}) == 200
    assert all(float(e.reference) == float(e.reference) for e in evals)  # numeric references
    assert task.sampling.max_tokens == 512 and "Question:" in task.sampling.stop
    assert _gsm8k(max_tokens=700).sampling.max_tokens == 700


def test_gsm8k_subset_is_seeded_and_train_test_disjoint():
    a, b, c = _gsm8k(n_eval=50), _gsm8k(n_eval=50), _gsm8k(n_eval=50, seed=1)
    assert [e.id for e in a.eval_examples()] == [e.id for e in b.eval_examples()]
    assert [e.id for e in a.eval_examples()] != [e.id for e in c.eval_examples()]
    train_q = {ex.prompt for ex in a.train_examples()}
    test_q = {ex.prompt for ex in _gsm8k(n_eval=1319).eval_examples()}
    assert len(test_q) > 1300 and not train_q & test_q
    capped = _gsm8k(n_train=100).train_examples()
    assert len(capped) == 100 and capped == _gsm8k(n_train=100).train_examples()


def test_gsm8k_too_many_eval_examples_is_an_error():
    with pytest.raises(DataError, match="only 1319 exist"):
        _gsm8k(n_eval=5000).eval_examples()


# --- ChemL3 ------------------------------------------------------------------------------------

def test_chem_keeps_only_mcq_rows():
    task = _chem()
    rows = task.rows()
    assert len(rows) == 2100  # 600 + 500 + 300 + 400 + 300 MCQ rows; 300 balancing rows left out
    assert not any("balance the equation" in r.prompt for r in rows)
    assert {r.letter for r in rows} == {"A", "B", "C", "D"}
    ex = task.eval_examples()[0]
    assert ex.prompt.count("\nA. ") == 1 and "\nD. " in ex.prompt and "Your answer should be" in ex.prompt
    assert ex.reference in "ABCD"
    train = task.train_examples()
    assert all(t.response in ("A", "B", "C", "D") for t in train)


def test_chem_split_is_deterministic_disjoint_and_about_80_20():
    task = _chem()
    train, test = task.split("train"), task.split("test")
    assert len(train) + len(test) == 2100
    assert 0.15 < len(test) / 2100 < 0.25
    assert not {r.question for r in train} & {r.question for r in test}  # keyed on the question
    again = _chem()
    assert [r.id for r in again.split("test")] == [r.id for r in test]
    other = _chem(seed=1)
    assert [r.id for r in other.split("test")] != [r.id for r in test]
    assert len(task.eval_examples()) == 200 and {e.id for e in task.eval_examples()} <= {r.id for r in test}
    assert len(_chem(test_fraction=0.5).split("test")) > 900


# --- malformed rows name file:line ------------------------------------------------------------

GOOD_CHEM = {"prompt": {"default": "Pick one."}, "question": "Q?", "type": "mcq-4-choices",
             "choices": {"text": ["1", "2", "3", "4"], "label": ["A", "B", "C", "D"]}, "answerKey": "B"}


def _write(path: Path, lines: list[str]) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("\n".join(lines) + "\n")
    return path


@pytest.mark.parametrize("bad,match", [
    ("{not json", "bad JSON"),
    (json.dumps({**GOOD_CHEM, "answerKey": "E"}), "answerKey 'E'"),
    (json.dumps({k: v for k, v in GOOD_CHEM.items() if k != "question"}), "missing field 'question'"),
    (json.dumps({**GOOD_CHEM, "choices": {"text": ["1", "2"], "label": ["A", "B"]}}), "4 string choices"),
])
def test_chem_malformed_row_names_file_and_line(tmp_path, bad, match):
    f = _write(tmp_path / "chem" / "x.jsonl",
               [json.dumps({**GOOD_CHEM, "question": "Q1"}), json.dumps({**GOOD_CHEM, "question": "Q2"}), bad])
    with pytest.raises(DataError, match=match) as err:
        build_task("chem_l3", {"path": str(f.parent)}).rows()
    assert f"{f}:3:" in str(err.value)


@pytest.mark.parametrize("bad,match", [
    (json.dumps({"question": "How many?", "answer": "It is 4."}), "no '#### N'"),
    (json.dumps({"question": "How many?"}), "missing field 'answer'"),
    (json.dumps({"question": 3, "answer": "#### 4"}), "field 'question'"),
    ("[1, 2]", "expected a JSON object"),
])
def test_gsm8k_malformed_row_names_file_and_line(tmp_path, bad, match):
    good = json.dumps({"question": "2 + 2?", "answer": "2 + 2 = 4\n#### 4"})
    _write(tmp_path / "test.jsonl", [good])
    f = _write(tmp_path / "train.jsonl", [good, "", good, bad])
    with pytest.raises(DataError, match=match) as err:
        build_task("gsm8k", {"path": str(tmp_path)}).train_examples()
    assert f"{f}:4:" in str(err.value)  # blank lines still count


def test_missing_data_file_is_an_error(tmp_path):
    with pytest.raises(DataError, match="not found"):
        build_task("gsm8k", {"path": str(tmp_path)}).eval_examples()
    with pytest.raises(DataError, match="no \\*.jsonl"):
        build_task("chem_l3", {"path": str(tmp_path)}).rows()


# --- scorers -----------------------------------------------------------------------------------

@pytest.mark.parametrize("generation,ref,strict,flexible", [
    ("3 + 4 = 7\n#### 7", "7", True, True),
    ("so she earns $18 every day.", "18", False, True),              # flexible only
    ("#### 1,234\nThe answer is 1234.", "1234", True, True),           # commas ignored
    ("The total is $1,000.00.", "1000", False, True),                  # $ , trailing zeros
    ("The temperature drops to -5 degrees.", "-5", False, True),       # negatives
    ("#### -3", "-3", True, True),
    ("#### 7 but really the answer is 8", "7", True, False),           # strict: first ####, flexible: last number
    ("I do not know.", "5", False, False),
    ("There are 12 apples and 3 pears, so 15.", "12", False, False),   # flexible takes the last number
])
def test_gsm8k_strict_and_flexible(generation, ref, strict, flexible):
    s = gsm8k_score(generation, ref)
    assert s.extra == {"strict_match": strict, "flexible_match": flexible}
    assert s.correct == flexible  # primary metric = flexible


def test_gsm8k_extractors_and_reference():
    assert strict_answer("#### 1,000") == "1000" and strict_answer("no marker 5") is None
    assert flexible_answer("it costs $2.50.") == "2.5" and flexible_answer("none") is None
    assert gsm8k_reference("work\n#### 1,080") == "1080"
    with pytest.raises(ValueError):
        gsm8k_reference("no final line")
    with pytest.raises(ValueError):
        gsm8k_reference("#### seven")


@pytest.mark.parametrize("generation,letter", [
    ("B", "B"), ("B.", "B"), ("(C)", "C"), ("Answer: D", "D"), (" A\nbecause", "A"),
    ("The answer is C", "C"), ("E", None), ("", None), ("b", None),
])
def test_letter_extraction(generation, letter):
    assert letter_answer(generation) == letter
    s = letter_score(generation, "C")
    assert s.correct == (letter == "C")
    assert s.prediction == (letter if letter else generation[:200])


def test_cut_at_stop_takes_the_earliest_stop():
    assert cut_at_stop("a\n\n\nQuestion: b", ("Question:", "\n\n\n")) == "a"
    assert cut_at_stop("abc", ("Question:",)) == "abc"
    assert cut_at_stop("abc", ()) == "abc"
