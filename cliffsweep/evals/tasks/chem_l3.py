"""ChemL3: SciKnowEval chemistry level 3, 4-choice questions, the learning task of the cliff
paper (000 Sec. 3; docs/methods.md). Hub id hicai-zju/SciKnowEval.

Rows: the `mcq-4-choices` rows of the five L3 chemistry tasks in SUBTASKS (the local folder's
five files). The free-form balancing_chemical_equation rows (type "filling", empty answerKey)
are left out on purpose: the paper's ChemL3 is the multiple-choice subset. Every kept row must
have 4 choices labelled A-D and an answerKey among them, else DataError names file:line.

Conflicting duplicates: a question asked more than once whose gold *option texts* differ (the
letters may differ just because the choices are shuffled) has no single right answer; all its
rows are left out and a DataWarning names them. Repeats that agree are kept.

Split (our default; the files carry none), stratified by subtask: within each subtask, the
questions are ordered by stable_unit(question, seed) (sha256 of seed and question text) and the
first ones go to test until round(test_fraction x the subtask's rows) are reached; the rest is
train. So every subtask has its share in test (SciKnowEval reports per subtask), repeated
questions stay on one side, and the split is the same on every machine. Evaluation = a seeded
subset of n_eval test rows, stratified the same way (rows.stratified_subset); per-subtask
accuracy (`accuracy/<subtask>`) is stored beside the pooled one.

Prompt = the row's own instruction (prompt.default, which asks for a single letter), the
question and the lettered choices; response = the answer letter; scored by letter extraction
(cliffsweep.evals.scoring.letters), by SciKnowEval's own verdict (`sciknoweval_match`) and by
the letter log-probabilities (`logprob_accuracy`).
"""

from __future__ import annotations

import hashlib
import warnings
from collections import defaultdict
from pathlib import Path
from typing import Any

from pydantic import Field

from cliffsweep.evals.scoring import LETTER_SCORER_VERSION, LETTERS, letter_score
from cliffsweep.evals.tasks.base import EvalExample, Example, Sampling, Score, Task, TaskParams
from cliffsweep.evals.tasks.rows import (DataError, DataWarning, data_files, field, read_jsonl, row_problems,
                                        seeded_subset, stable_unit, stratified_subset)

HUB_ID = "hicai-zju/SciKnowEval"
HUB_FILE = "data/Chemistry/sciknoweval_chemistry_test.jsonl"  # all levels; L3 rows are selected
HUB_REVISION = "f6055a77a5b6229f468b8c6c60dd3452776d055d"
"""The dataset commit that last changed HUB_FILE (2024-11-01). Pinned: later uploads change the
file, and the hub copy must give the same rows on every cluster and every rerun."""
MCQ_TYPE = "mcq-4-choices"
LEVEL = "L3"
SUBTASKS = {
    "molar_weight_calculation": "molar_weight_calculation",
    "molecular_property_prediction": "molecular_property_calculation",
    "molecule_structure_prediction": "molecule_structure_prediction",
    "reaction_prediction": "reaction_prediction",
    "retrosynthesis": "retrosynthesis",
}
"""Row `details.task` -> the name SciKnowEval reports the L3 task under (its evaluation/define.py;
the local files are named so too). The hub file also holds other L3 tasks that the local copy,
and the paper's ChemL3, do not have (e.g. chemical_calculation): they are not loaded."""


class ChemL3Params(TaskParams):
    test_fraction: float = Field(0.2, gt=0.0, lt=1.0)
    """Share of each subtask's rows held out for evaluation (our default 80/20)."""
    max_tokens: int = Field(16, ge=1)
    """Generation budget: the answer is one letter; a little slack for 'Answer: B'."""


class Row:
    __slots__ = ("id", "prompt", "letter", "question", "options", "subtask", "where")

    def __init__(self, id: str, prompt: str, letter: str, question: str, options: tuple[str, ...],
                 subtask: str, where: str):
        self.id, self.prompt, self.letter, self.question = id, prompt, letter, question
        self.options, self.subtask, self.where = options, subtask, where

    @property
    def gold(self) -> str:
        return self.options[LETTERS.index(self.letter)]


class ChemL3(Task):
    name = "chem_l3"
    Params = ChemL3Params
    scorer_version = LETTER_SCORER_VERSION
    role = "learn"
    choice_letters = LETTERS

    def __init__(self, params: ChemL3Params | None = None):
        super().__init__(params)
        self.sampling = Sampling(max_tokens=self.params.max_tokens, stop=())
        self._rows: list[Row] | None = None

    def data_problems(self) -> list[str]:
        if self.params.path is None:  # the hub's copy: read at run time
            return []
        files = _files(self.params.path)
        return row_problems(files, parse_row) if files else [f"{self.params.path}: no *.jsonl (or .jsonl.gz) files"]

    def rows(self) -> list[Row]:
        """Every kept multiple-choice row, in file order."""
        if self._rows is None:
            self._rows = _load(self.params.path)
        return self._rows

    def split(self, which: str) -> list[Row]:
        test = stratified_test_ids(self.rows(), self.params.test_fraction, self.params.seed)
        return [r for r in self.rows() if (r.id in test) == (which == "test")]

    def train_examples(self) -> list[Example]:
        rows = seeded_subset(self.split("train"), self.params.n_train, self.params.seed, "chem_l3 train")
        return [Example(r.id, r.prompt, r.letter) for r in rows]

    def eval_examples(self) -> list[EvalExample]:
        rows = stratified_subset(self.split("test"), self.params.n_eval, self.params.seed,
                                 lambda r: r.subtask, "chem_l3 test")
        return [EvalExample(r.id, r.prompt, r.letter, options=r.options, group=r.subtask) for r in rows]

    def score(self, generation: str, example: EvalExample) -> Score:
        return letter_score(generation, example.reference, example.options)


def stratified_test_ids(rows: list[Row], test_fraction: float, seed: int) -> set[str]:
    """Ids of the test rows (module docstring): per subtask, whole questions in
    stable_unit(question, seed) order until round(test_fraction x rows) rows are taken."""
    questions: dict[str, list[Row]] = defaultdict(list)
    for r in rows:
        questions[r.question].append(r)
    by_subtask: dict[str, list[list[Row]]] = defaultdict(list)
    for group in questions.values():
        by_subtask[group[0].subtask].append(group)
    test: set[str] = set()
    for groups in by_subtask.values():
        target = round(test_fraction * sum(map(len, groups)))
        taken = 0
        for group in sorted(groups, key=lambda g: stable_unit(g[0].question, seed)):
            if taken >= target:
                break
            test.update(r.id for r in group)
            taken += len(group)
    return test


def format_prompt(instruction: str, question: str, choices: list[str]) -> str:
    lines = [instruction.strip(), "", question.strip()]
    lines += [f"{letter}. {text}" for letter, text in zip(LETTERS, choices)]
    return "\n".join(lines)


def parse_row(where: str, row: dict[str, Any]) -> Row | None:
    """The row as a Row, None for a non-MCQ row (see the module filter), DataError if broken."""
    if field(row, "type", str, where) != MCQ_TYPE:
        return None
    details = field(row, "details", dict, where)
    task = field(details, "task", str, where + " (details)")
    if task not in SUBTASKS:
        raise DataError(f"{where}: L3 chemistry task {task!r} is not one of {sorted(SUBTASKS)}")
    instruction = field(field(row, "prompt", dict, where), "default", str, where + " (prompt)")
    question = field(row, "question", str, where)
    choices = field(row, "choices", dict, where)
    texts = field(choices, "text", list, where + " (choices)")
    labels = field(choices, "label", list, where + " (choices)")
    if labels != list(LETTERS) or len(texts) != 4 or not all(isinstance(t, str) for t in texts):
        raise DataError(f"{where}: expected 4 string choices labelled {list(LETTERS)}, got labels {labels}")
    letter = field(row, "answerKey", str, where)
    if letter not in LETTERS:
        raise DataError(f"{where}: answerKey {letter!r} is not one of {list(LETTERS)}")
    subtask = SUBTASKS[task]
    # Content hash: the same id whether the row came from the local copy or the hub file.
    digest = hashlib.sha256("\x00".join([question, *texts]).encode()).hexdigest()[:12]
    return Row(f"chem-{subtask}-{digest}", format_prompt(instruction, question, texts), letter, question,
               tuple(texts), subtask, where)


def drop_conflicting(rows: list[Row]) -> list[Row]:
    """The rows without the questions whose repeats disagree on the gold option text; a
    DataWarning names every row left out."""
    golds: dict[str, set[str]] = defaultdict(set)
    for r in rows:
        golds[r.question].add(r.gold)
    bad = {q for q, g in golds.items() if len(g) > 1}
    if bad:
        named = "; ".join(" vs ".join(f"{r.where} (gold {r.gold!r})" for r in rows if r.question == q)
                          for q in sorted(bad))
        warnings.warn(f"chem_l3: left out {len(bad)} question(s) whose repeats have different gold "
                      f"answers: {named}", DataWarning, stacklevel=3)
    return [r for r in rows if r.question not in bad]


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
    return drop_conflicting(rows)


def _raw_rows(path: str | None):
    if path is not None:
        files = _files(path)
        if not files:
            raise DataError(f"{path}: no *.jsonl (or .jsonl.gz) files")
        for f in files:
            yield from read_jsonl(f)
        return
    yield from hub_rows(_download())


def _files(path: str) -> list[Path]:
    """The folder's JSON-lines files, compressed or not (as SciKnowEval ships them: .jsonl.gz)."""
    return data_files(path, (".jsonl",)) if Path(path).is_dir() else []


def hub_rows(local_file: str):
    """The rows of the hub's all-levels chemistry file that make up ChemL3: level L3, one of
    SUBTASKS (the same tasks as the local files), multiple choice (parse_row drops the rest)."""
    for where, row in read_jsonl(local_file):
        details = row.get("details")
        if isinstance(details, dict) and details.get("level") == LEVEL and details.get("task") in SUBTASKS:
            yield where, row


def _download() -> str:
    # Not reachable from the build machines (no hub access); kept for real clusters.
    from huggingface_hub import hf_hub_download

    return hf_hub_download(HUB_ID, HUB_FILE, repo_type="dataset", revision=HUB_REVISION)
