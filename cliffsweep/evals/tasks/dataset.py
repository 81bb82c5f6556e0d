"""The user's own finetuning data as the learn task (issue 30 part 1): `{name: dataset, params:
{path: ...}}`.

Data: a local file or folder (JSONL, JSON, Parquet, CSV; a folder's files of those kinds in name
order) or a hub dataset id (read with the `datasets` library, which honours its offline cache),
in one of the formats of evals/tasks/formats.py (`auto` by default). Each conversation trains on
every assistant turn: one example per turn, the turns before it (and the system prompt) as masked
context, so every answer's tokens are learned once.

Evaluation: the held-out conversations' last assistant turn, answered greedily after the turns
before it and scored by `metric` (scoring/match.py). Held out: `eval_path` (a second file or
folder), else the hub dataset's `eval_split`, else a seeded share `eval_fraction` of the rows,
chosen by content (rows.stable_unit), so the split is the same on every machine and does not
move when rows are added. At most `n_eval` items (a seeded subset; fewer if fewer are held out).

A malformed row raises DataError naming its file and line; `data_problems` lists every one of
them before anything starts (orchestrator/preflight.py).
"""

from __future__ import annotations

import csv
import hashlib
import json
from collections.abc import Iterator
from functools import cached_property
from pathlib import Path
from typing import Any

from pydantic import Field, model_validator

from cliffsweep.evals.scoring.match import MATCH_SCORER_VERSION, Metric, match_score
from cliffsweep.evals.tasks.base import EvalExample, Example, Sampling, Score, Task, TaskParams
from cliffsweep.evals.tasks.formats import Conversation, Format, conversation
from cliffsweep.evals.tasks.rows import (COMPRESSIONS, DataError, data_files, open_text, plain_suffix, read_jsonl,
                                         seeded_subset, stable_unit)

SUFFIXES = (".jsonl", ".json", ".parquet", ".csv")


class DatasetParams(TaskParams):
    path: str = Field(min_length=1)
    """A local file or folder (JSONL / JSON / Parquet / CSV), or a hub dataset id."""
    format: Format = "auto"
    eval_path: str | None = None
    """A second file or folder of held-out rows (then nothing is held out of `path`)."""
    split: str = "train"
    """A hub dataset's training split."""
    eval_split: str | None = None
    """A hub dataset's held-out split (e.g. test)."""
    eval_fraction: float = Field(0.1, gt=0, lt=1)
    """Share of `path`'s conversations held out, when neither of the two above is given."""
    metric: Metric = "normalized"
    balanced_accuracy: bool = False
    """Also store `balanced_accuracy` (the mean of each reference class's accuracy), for
    classification data whose classes are uneven (003's ESCI reports it)."""
    rel_tol: float = Field(0.0, ge=0.0, lt=1.0)
    """`number` only: a relative tolerance (0.05: within 5 % of the reference, as MedCalc-Bench
    scores); 0 = the same number."""
    max_tokens: int = Field(256, ge=1)
    """Generation budget of an evaluated answer."""

    @model_validator(mode="after")
    def _tolerance_needs_numbers(self):
        if self.rel_tol and self.metric != "number":
            raise ValueError(f"rel_tol applies to metric number only (metric is {self.metric!r})")
        return self


class Dataset(Task):
    name = "dataset"
    Params = DatasetParams
    scorer_version = MATCH_SCORER_VERSION
    role = "learn"

    def __init__(self, params: DatasetParams):
        super().__init__(params)
        self.sampling = Sampling(max_tokens=params.max_tokens, stop=())
        self.class_balanced = params.balanced_accuracy
        tol = f"@rel{params.rel_tol:g}" if params.rel_tol else ""  # a tolerance scores differently
        self.scorer_version = f"{MATCH_SCORER_VERSION}+{params.metric}{tol}"

    # --- data -------------------------------------------------------------------------------
    def _conversations(self, source: str, split: str | None) -> list[tuple[str, Conversation]]:
        return [(where, conversation(where, row, self.params.format)) for where, row in read_rows(source, split)]

    @cached_property
    def _splits(self) -> tuple[list[tuple[str, Conversation]], list[tuple[str, Conversation]]]:
        p = self.params
        rows = self._conversations(p.path, p.split if is_hub(p.path) else None)
        if not rows:
            raise DataError(f"{p.path}: no rows")
        if p.eval_path is not None:
            return rows, self._conversations(p.eval_path, None)
        if p.eval_split is not None:
            return rows, self._conversations(p.path, p.eval_split)
        held = [stable_unit(_content_key(c), p.seed) < p.eval_fraction for _, c in rows]
        return [r for r, h in zip(rows, held) if not h], [r for r, h in zip(rows, held) if h]

    def data_problems(self) -> list[str]:
        p = self.params
        sources = [s for s in (p.path, p.eval_path) if s is not None and not is_hub(s)]
        problems = []
        for source in sources:
            try:
                rows = read_rows(source, None, collect=problems)
                for where, row in rows:
                    try:
                        conversation(where, row, p.format)
                    except DataError as e:
                        problems.append(str(e))
            except DataError as e:
                problems.append(str(e))
        return problems

    def data_is_local(self) -> bool:
        return not is_hub(self.params.path)

    def train_examples(self) -> list[Example]:
        train, _ = self._splits
        out = [Example(f"{_content_key(c)[:12]}-{k}", user, answer, c.system, c.turns[:k])
               for _, c in train for k, (user, answer) in enumerate(c.turns)]
        return seeded_subset(out, min(self.params.n_train, len(out)) if self.params.n_train else None,
                             self.params.seed, f"{self.params.path} train")

    def eval_examples(self) -> list[EvalExample]:
        _, held = self._splits
        if not held:
            raise DataError(f"{self.params.path}: nothing held out for evaluation (give eval_path, eval_split, or "
                            "more rows)")
        items = [EvalExample(_content_key(c)[:12], c.turns[-1][0], c.turns[-1][1], shots=c.turns[:-1],
                             system=c.system) for _, c in held]
        return seeded_subset(items, min(self.params.n_eval, len(items)), self.params.seed,
                             f"{self.params.path} evaluation")

    def score(self, generation: str, example: EvalExample) -> Score:
        return match_score(generation, example.reference, self.params.metric, self.params.rel_tol)


def _content_key(c: Conversation) -> str:
    return hashlib.sha256(json.dumps([c.system, c.turns]).encode()).hexdigest()


# `toy:<file>`: a toy data file (cliffsweep/toy/files.py), which the toy world registers as the
# data source `toy` (entry points of `cliffsweep.data_sources`, pyproject.toml), as it registers its
# tasks: evals never names the toy world it is the interface of.
DATA_SOURCES = "cliffsweep.data_sources"


def local_source(source: str) -> str:
    """A data source with `toy:<file>` replaced by the toy file's path (written on first use)."""
    if not source.startswith("toy:"):
        return source
    from cliffsweep.registry import lookup

    try:
        return lookup({}, "toy", "data source", DATA_SOURCES)(source[4:])
    except ValueError as e:  # an unknown toy file: a data problem, listed with the others
        raise DataError(f"{source}: {e}") from None


def is_hub(source: str) -> bool:
    """A hub dataset id ('org/name'): not a path on this machine (nor a toy file, `toy:<file>`),
    nor a name ending as a data file does (`data/train.jsonl` missing here is a missing file)."""
    if source.startswith("toy:") or source.lower().endswith(tuple(s + c for s in SUFFIXES for c in ("", *COMPRESSIONS))):
        return False
    return not Path(source).expanduser().exists() and source.count("/") == 1 and not source.startswith((".", "/", "~"))


def missing_sources(source: str) -> str | None:
    """Why local data `source` is not on this machine (no such file or folder, the relative path
    resolved), or None (present, a hub dataset id, or a toy file). Reads no row."""
    if is_hub(source) or source.startswith("toy:"):
        return None
    path = Path(source).expanduser()
    if path.exists():
        return None
    resolved = "" if path.is_absolute() else f" (a relative path, read as {path.resolve()})"
    return f"{source}: no such file or folder{resolved}"


def read_rows(source: str, split: str | None, collect: list[str] | None = None) -> Iterator[tuple[str, dict]]:
    """(place, row) of every row of `source`: a file, a folder's data files, or a hub dataset's
    `split`. `collect`: JSON-lines lines that are not JSON go there instead of raising."""
    if is_hub(source):
        yield from _hub_rows(source, split or "train")
        return
    path = Path(local_source(source)).expanduser()
    files = data_files(path, SUFFIXES) if path.is_dir() else [path]
    if not path.exists() or not files:
        resolved = "" if Path(source).expanduser().is_absolute() else f" (a relative path, read as {path.resolve()})"
        raise DataError(f"{source}: no such file, or no {'/'.join(SUFFIXES)} files in the folder "
                        f"(each also as {'/'.join(COMPRESSIONS)}){resolved}")
    for f in files:
        yield from _file_rows(f, collect)


def _file_rows(f: Path, collect: list[str] | None) -> Iterator[tuple[str, dict]]:
    kind = plain_suffix(f)
    if kind == ".jsonl":
        if collect is None:
            yield from read_jsonl(f)
            return
        from cliffsweep.evals.tasks.rows import _json_row, _lines

        for where, line in _lines(f):
            try:
                yield where, _json_row(where, line)
            except DataError as e:
                collect.append(str(e))
    elif kind == ".json":
        try:
            with open_text(f) as h:
                data = json.loads(h.read())
        except (json.JSONDecodeError, UnicodeDecodeError) as e:
            raise DataError(f"{f}: not JSON ({e})") from None
        if not isinstance(data, list):
            raise DataError(f"{f}: expected a JSON list of rows, got {type(data).__name__}")
        yield from ((f"{f}:item {i}", _object(f"{f}:item {i}", r)) for i, r in enumerate(data))
    elif kind == ".csv":
        with open_text(f, newline="") as h:
            reader = csv.DictReader(h)
            for row in reader:
                yield f"{f}:{reader.line_num}", {k: v for k, v in row.items() if k is not None}
    elif kind == ".parquet" and f.suffix == ".parquet":  # Parquet compresses inside the file
        import pandas as pd

        for i, row in enumerate(pd.read_parquet(f).to_dict("records")):
            yield f"{f}:row {i}", _plain(row)
    else:
        raise DataError(f"{f}: not a data file ({'/'.join(SUFFIXES)}; all but .parquet also as "
                        f"{'/'.join(COMPRESSIONS)})")


def _object(where: str, row: Any) -> dict:
    if not isinstance(row, dict):
        raise DataError(f"{where}: expected a JSON object, got {type(row).__name__}")
    return row


def _plain(value: Any) -> Any:
    """Parquet's arrays and maps as plain lists and dicts."""
    if hasattr(value, "tolist") and not isinstance(value, (str, bytes)):
        value = value.tolist()
    if isinstance(value, dict):
        return {k: _plain(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_plain(v) for v in value]
    return value


def _hub_rows(dataset_id: str, split: str) -> Iterator[tuple[str, dict]]:
    try:
        import datasets
    except ImportError:
        raise DataError(f"{dataset_id}: reading a hub dataset needs the `datasets` package (pip install datasets), "
                        "or give a local path") from None
    try:
        ds = datasets.load_dataset(dataset_id, split=split)
    except Exception as e:  # noqa: BLE001 - offline, unknown id, unknown split: all say the same to the user
        raise DataError(f"{dataset_id} (split {split}): cannot be loaded here ({type(e).__name__}: {str(e)[:200]}); "
                        "download it where the hub is reachable (datasets.load_dataset, then copy its cache, "
                        "HF_DATASETS_CACHE) or export it to a local JSONL / Parquet file and give that path") from None
    for i, row in enumerate(ds):
        yield f"{dataset_id}:{split}:row {i}", row
