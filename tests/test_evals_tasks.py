"""Real-data loaders (GSM8K, ChemL3: the files shipped in tests/data, realdata.py), their splits and error messages,
and the answer extractors. No model is involved: these run in a few seconds."""

from __future__ import annotations

import collections
import json
import warnings
from pathlib import Path

import pytest
import realdata
from pydantic import ValidationError

from cliffsweep.evals.backends.hf_backend import cut_at_stop
from cliffsweep.evals.scoring import gsm8k_reference, gsm8k_score, numeric_answer
from cliffsweep.evals.tasks import build_task
from cliffsweep.evals.tasks.chem_l3 import HUB_REVISION, SUBTASKS, hub_rows, parse_row
from cliffsweep.evals.tasks.rows import DataError, DataWarning, stratified_subset

DATA = realdata.folder()
GSM8K_DIR = DATA / "gsm8k"
CHEM_DIR = DATA / "sciknoweval-chem-l3"


def _gsm8k(**params):
    return build_task("gsm8k", {"path": str(GSM8K_DIR), **params})


def _chem(**params):
    task = build_task("chem_l3", {"path": str(CHEM_DIR), **params})
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", DataWarning)  # the two conflicting questions (own test)
        task.rows()
    return task


# --- GSM8K -------------------------------------------------------------------------------------

def test_gsm8k_counts_and_pairs():
    task = _gsm8k()
    train = task.train_examples()
    assert len(train) == 7473  # the full official train split
    assert all(ex.response.rstrip().split("\n")[-1].startswith("#### ") for ex in train)
    evals = task.eval_examples()
    assert len(evals) == 200 and len({e.id for e in evals}) == 200
    assert all(float(e.reference) == float(e.reference) for e in evals)  # numeric references
    # default protocol: lm-eval's chat few-shot (5 earlier turns, "Question: ...\nAnswer:")
    assert task.params.protocol == "fewshot_chat" and all(len(e.shots) == 5 for e in evals)
    assert evals[0].prompt.startswith("Question: ") and evals[0].prompt.endswith("\nAnswer:")
    chat = evals[0].chat()
    assert [m["role"] for m in chat] == ["user", "assistant"] * 5 + ["user"]
    assert chat[1]["content"].split("\n")[-1].startswith("#### ")
    assert task.sampling.max_tokens == 256 and task.sampling.stop == ("Question:", "</s>", "<|im_end|>")
    assert task.scorer_version == "gsm8k-v2+fewshot_chat5"
    assert _gsm8k(max_tokens=700).sampling.max_tokens == 700


def test_gsm8k_zeroshot_protocol():
    task = _gsm8k(protocol="zeroshot", n_eval=5)
    few = _gsm8k(n_eval=5).eval_examples()
    for ex, f in zip(task.eval_examples(), few):
        assert ex.chat() == ex.prompt and not ex.shots and ex.id == f.id  # the bare question
        assert f.prompt == f"Question: {ex.prompt}\nAnswer:"
    # No stop string: '\n\n\n' or 'Question:' could cut a reasoning chain.
    assert task.sampling.stop == () and task.sampling.max_tokens == 512
    assert task.scorer_version == "gsm8k-v2+zeroshot"
    with pytest.raises(ValidationError, match="num_fewshot apply to protocol fewshot_chat only"):
        _gsm8k(protocol="zeroshot", num_fewshot=3)
    with pytest.raises(ValidationError, match="protocol"):
        _gsm8k(protocol="fewshot")
    three = _gsm8k(num_fewshot=3, n_eval=5)
    assert all(len(e.shots) == 3 for e in three.eval_examples())
    assert three.scorer_version == "gsm8k-v2+fewshot_chat3"


def test_gsm8k_subset_is_seeded_and_train_test_disjoint():
    a, b, c = _gsm8k(n_eval=50), _gsm8k(n_eval=50), _gsm8k(n_eval=50, seed=1)
    assert [e.id for e in a.eval_examples()] == [e.id for e in b.eval_examples()]
    assert [e.id for e in a.eval_examples()] != [e.id for e in c.eval_examples()]
    train_q = {ex.prompt for ex in a.train_examples()}
    test_q = {ex.prompt for ex in _gsm8k(n_eval=1319, protocol="zeroshot").eval_examples()}
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
    # 600 + 500 + 300 + 400 + 300 MCQ rows, less the 2 x 2 rows of two conflicting questions;
    # the 300 balancing rows are left out.
    assert len(rows) == 2096
    assert not any("balance the equation" in r.prompt for r in rows)
    assert {r.letter for r in rows} == {"A", "B", "C", "D"}
    assert collections.Counter(r.subtask for r in rows) == {
        "molar_weight_calculation": 598, "molecular_property_calculation": 498,
        "molecule_structure_prediction": 300, "reaction_prediction": 400, "retrosynthesis": 300}
    ex = task.eval_examples()[0]
    assert ex.prompt.count("\nA. ") == 1 and "\nD. " in ex.prompt and "Your answer should be" in ex.prompt
    assert ex.reference in "ABCD" and len(ex.options) == 4 and ex.group in SUBTASKS.values()
    assert ex.id.startswith(f"chem-{ex.group}-")
    assert f"\nA. {ex.options[0]}\n" in ex.prompt
    train = task.train_examples()
    assert all(t.response in ("A", "B", "C", "D") for t in train)
    assert task.choice_letters == ("A", "B", "C", "D") and task.scorer_version == "letter-v2"


def test_chem_conflicting_duplicates_are_left_out_with_a_warning():
    task = build_task("chem_l3", {"path": str(CHEM_DIR)})
    with pytest.warns(DataWarning, match="left out 2 question") as caught:
        rows = task.rows()
    msg = str(caught[0].message)
    for where in ("molecular_property_calculation.jsonl:98 (gold '-1.64')",
                  "molecular_property_calculation.jsonl:103 (gold '-1.74')",
                  "molar_weight_calculation.jsonl:520 (gold '122.170')",
                  "molar_weight_calculation.jsonl:555 (gold '118.150')"):
        assert where in msg
    # Repeats whose gold texts agree (letters may differ: the choices are shuffled) stay.
    by_q = collections.defaultdict(list)
    for r in rows:
        by_q[r.question].append(r)
    repeats = [rs for rs in by_q.values() if len(rs) > 1]
    assert len(repeats) == 3 and all(len({r.gold for r in rs}) == 1 for rs in repeats)
    assert any(len({r.letter for r in rs}) > 1 for rs in repeats)


def test_chem_split_is_stratified_deterministic_and_disjoint():
    task = _chem()
    train, test = task.split("train"), task.split("test")
    assert len(train) + len(test) == 2096
    total, held = collections.Counter(r.subtask for r in task.rows()), collections.Counter(r.subtask for r in test)
    for sub, n in total.items():
        assert abs(held[sub] - 0.2 * n) <= 1, (sub, held[sub], n)  # every subtask 20 % (+- a repeat)
    assert not {r.question for r in train} & {r.question for r in test}  # keyed on the question
    again = _chem()
    assert [r.id for r in again.split("test")] == [r.id for r in test]
    other = _chem(seed=1)
    assert [r.id for r in other.split("test")] != [r.id for r in test]
    evals = task.eval_examples()
    assert len(evals) == 200 and {e.id for e in evals} <= {r.id for r in test}
    # The evaluation subset is stratified too: each subtask within 1 of its share of 200.
    per = collections.Counter(e.group for e in evals)
    for sub, n in held.items():
        assert abs(per[sub] - 200 * n / len(test)) < 1, (sub, per[sub])
    assert abs(len(_chem(test_fraction=0.5).split("test")) - 1048) <= 5


def test_stratified_subset():
    items = [("x", i) for i in range(10)] + [("y", i) for i in range(5)] + [("z", 0)]
    sub = stratified_subset(items, 8, 0, lambda t: t[0], "t")
    assert collections.Counter(k for k, _ in sub) == {"x": 5, "y": 3}  # 5.0, 2.5, 0.5: the larger wins
    assert sub == sorted(sub, key=items.index) and sub == stratified_subset(items, 8, 0, lambda t: t[0], "t")
    assert stratified_subset(items, None, 0, lambda t: t[0], "t") == items
    assert len(stratified_subset(items, 16, 0, lambda t: t[0], "t")) == 16
    with pytest.raises(DataError, match="only 16 exist"):
        stratified_subset(items, 17, 0, lambda t: t[0], "t")


def test_chem_hub_rows_are_the_local_tasks_at_a_pinned_revision(tmp_path):
    """The hub file holds every level and more L3 tasks than the local copy: only the five
    local tasks' L3 rows are read (the download itself needs the hub: not testable here)."""
    assert len(HUB_REVISION) == 40
    local = [json.loads(line) for line in (CHEM_DIR / "retrosynthesis.jsonl").read_text().splitlines()[:3]]
    extra = [dict(local[0], details={**local[0]["details"], "task": "chemical_calculation"}),
             dict(local[1], details={**local[1]["details"], "level": "L1"}),
             dict(local[2], type="filling")]
    f = _write(tmp_path / "hub.jsonl", [json.dumps(r) for r in local + extra])
    parsed = [parse_row(where, row) for where, row in hub_rows(str(f))]
    kept = [r for r in parsed if r is not None]
    assert [r.where.rsplit(":", 1)[1] for r in kept] == ["1", "2", "3"]
    assert {r.subtask for r in kept} == {"retrosynthesis"}


# --- malformed rows name file:line ------------------------------------------------------------

GOOD_CHEM = {"prompt": {"default": "Pick one."}, "question": "Q?", "type": "mcq-4-choices",
             "details": {"level": "L3", "task": "retrosynthesis"},
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
    (json.dumps({**GOOD_CHEM, "details": {"task": "chemical_calculation"}}), "'chemical_calculation' is not one of"),
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


# --- scorers (GSM8K against lm-eval: test_evals_lmeval.py; letters: test_evals_letters.py) --------

@pytest.mark.parametrize("generation,ref,strict,flexible,numeric", [
    ("3 + 4 = 7\n#### 7", "7", True, True, True),
    ("so she earns $18 every day.", "18", False, True, True),
    ("#### 1,234\nThe answer is 1234.", "1234", True, True, True),
    ("The total is $1,000.00.", "1000", False, False, True),          # lm-eval compares strings
    ("#### 7 but really the answer is 8", "7", True, False, True),    # flexible: the last number
    ("I do not know.", "5", False, False, False),
])
def test_gsm8k_metrics(generation, ref, strict, flexible, numeric):
    s = gsm8k_score(generation, ref)
    assert s.extra == {"strict_match": strict, "flexible_extract": flexible, "numeric_match": numeric}
    assert s.correct == flexible  # primary metric = lm-eval's flexible-extract


def test_gsm8k_reference_and_numeric_answer():
    assert gsm8k_reference("work\n#### 1,080") == "1080"
    assert gsm8k_reference("a #### 1\n#### -2.5") == "-2.5"  # the last marker, as lm-eval reads it
    for bad in ("no final line", "#### seven", "#### 5.."):
        with pytest.raises(ValueError):
            gsm8k_reference(bad)
    assert str(numeric_answer("#### $1,000.50 and 7")) == "1000.50"
    assert numeric_answer("#### 12345678901234567891") - numeric_answer("12345678901234567890") == 1
    assert numeric_answer("none") is None


def test_cut_at_stop_takes_the_earliest_stop():
    assert cut_at_stop("a\n\n\nQuestion: b", ("Question:", "\n\n\n")) == "a"
    assert cut_at_stop("abc", ("Question:",)) == "abc"
    assert cut_at_stop("abc", ()) == "abc"
