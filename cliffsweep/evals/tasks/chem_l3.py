"""ChemL3: SciKnowEval chemistry level 3, 4-choice questions, the learning task of the cliff
paper (000 Sec. 3; METHODS.md). Hub id hicai-zju/SciKnowEval.

Filter: only rows with type == "mcq-4-choices" are kept. The level-3 chemistry files also hold
free-form rows (balancing_chemical_equation, type "filling", empty answerKey); they are left
out deliberately because the paper's ChemL3 is the multiple-choice subset. Every kept row must
have 4 choices labelled A-D and an answerKey among them, else DataError names file:line.

Split (our default; the files carry none): a row goes to test when
stable_unit(question, seed) < test_fraction (sha256 of the seed and the question text), else
to train. Keying on the question alone keeps rows that repeat a question on one side, and a
row never moves when other rows are added or removed. Evaluation = a seeded subset of n_eval
test rows.

Prompt = the row's own instruction (prompt.default, which asks for a single letter), the
question and the lettered choices; response = the answer letter; scored by letter extraction.
"""

from __future__ import annotations

import hashlib
from pathlib import Path
from typing import Any

from pydantic import Field

from cliffsweep.evals.scoring import LETTER_SCORER_VERSION, letter_score
from cliffsweep.evals.tasks.base import EvalExample, Example, Sampling, Score, Task, TaskParams
from cliffsweep.evals.tasks.rows import DataError, field, read_jsonl, seeded_subset, stable_unit

HUB_ID = "hicai-zju/SciKnowEval"
HUB_FILE = "data/Chemistry/sciknoweval_chemistry_test.jsonl"  # all levels; L3 rows are selected
MCQ_TYPE = "mcq-4-choices"
LETTERS = ["A", "B", "C", "D"]


class ChemL3Params(TaskParams):
    test_fraction: float = Field(0.2, gt=0.0, lt=1.0)
    """Share of questions held out for evaluation (our default 80/20)."""
    max_tokens: int = Field(16, ge=1)
    """Generation budget: the answer is one letter; a little slack for 'Answer: B'."""


class Row:
    __slots__ = ("id", "prompt", "letter", "question")

    def __init__(self, id: str, prompt: str, letter: str, question: str):
        self.id, self.prompt, self.letter, self.question = id, prompt, letter, question


class ChemL3(Task):
    name = "chem_l3"
    Params = ChemL3Params
    scorer_version = LETTER_SCORER_VERSION
    role = "learn"

    def __init__(self, params: ChemL3Params | None = None):
        super().__init__(params)
        self.sampling = Sampling(max_tokens=self.params.max_tokens, stop=())
        self._rows: list[Row] | None = None

    def rows(self) -> list[Row]:
        """Every multiple-choice row, in file order."""
        if self._rows is None:
            self._rows = _load(self.params.path)
        return self._rows

    def split(self, which: str) -> list[Row]:
        p = self.params
        test = [stable_unit(r.question, p.seed) < p.test_fraction for r in self.rows()]
        return [r for r, t in zip(self.rows(), test) if t == (which == "test")]

    def train_examples(self) -> list[Example]:
        rows = seeded_subset(self.split("train"), self.params.n_train, self.params.seed, "chem_l3 train")
        return [Example(r.id, r.prompt, r.letter) for r in rows]

    def eval_examples(self) -> list[EvalExample]:
        rows = seeded_subset(self.split("test"), self.params.n_eval, self.params.seed, "chem_l3 test")
        return [EvalExample(r.id, r.prompt, r.letter) for r in rows]

    def score(self, generation: str, reference: str) -> Score:
        return letter_score(generation, reference)


def format_prompt(instruction: str, question: str, choices: list[str]) -> str:
    lines = [instruction.strip(), "", question.strip()]
    lines += [f"{letter}. {text}" for letter, text in zip(LETTERS, choices)]
    return "\n".join(lines)


def parse_row(where: str, row: dict[str, Any]) -> Row | None:
    """The row as a Row, None for a non-MCQ row (see the module filter), DataError if broken."""
    if field(row, "type", str, where) != MCQ_TYPE:
        return None
    instruction = field(field(row, "prompt", dict, where), "default", str, where + " (prompt)")
    question = field(row, "question", str, where)
    choices = field(row, "choices", dict, where)
    texts = field(choices, "text", list, where + " (choices)")
    labels = field(choices, "label", list, where + " (choices)")
    if labels != LETTERS or len(texts) != 4 or not all(isinstance(t, str) for t in texts):
        raise DataError(f"{where}: expected 4 string choices labelled {LETTERS}, got labels {labels}")
    letter = field(row, "answerKey", str, where)
    if letter not in LETTERS:
        raise DataError(f"{where}: answerKey {letter!r} is not one of {LETTERS}")
    # Content hash: the same id whether the row came from the local copy or the hub file.
    digest = hashlib.sha256("\x00".join([question, *texts]).encode()).hexdigest()[:12]
    return Row(f"chem-{digest}", format_prompt(instruction, question, texts), letter, question)


def _load(path: str | None) -> list[Row]:
    rows: list[Row] = []
    seen: dict[str, str] = {}
    for where, raw in _raw_rows(path):
        row = parse_row(where, raw)
        if row is None:
            continue
        if row.id in seen:
            raise DataError(f"{where}: duplicate of the row at {seen[row.id]}")
        seen[row.id] = where
        rows.append(row)
    if not rows:
        raise DataError(f"{path or HUB_ID}: no {MCQ_TYPE} rows found")
    return rows


def _raw_rows(path: str | None):
    if path is not None:
        files = sorted(Path(path).glob("*.jsonl"))
        if not files:
            raise DataError(f"{path}: no *.jsonl files")
        for f in files:
            yield from read_jsonl(f)
        return
    # Not reachable from the build machines (no hub access); kept for real clusters.
    from huggingface_hub import hf_hub_download

    local = hf_hub_download(HUB_ID, HUB_FILE, repo_type="dataset")
    for where, row in read_jsonl(local):
        details = row.get("details")
        if isinstance(details, dict) and details.get("level") == "L3":
            yield where, row
