"""Loss as a task (issue 30 part 4): the per-token negative log-likelihood of held-out text,
from prompt log-probabilities, with no generation; lower is better.

Two sources of text:

- `of`: another task's answers, each scored as the assistant reply to its prompt (rendered with
  the chat template, as training renders it). `split: eval` (default) scores the held-out
  evaluation examples' references: `{name: loss, params: {of: {name: dataset, params: {path:
  mine.jsonl}}}}` is the held-out response loss of the user's own data, and as a learn task it
  trains on `of`'s training split. `split: train` scores the training examples' full responses
  (a worked solution, not only its final number): for a retain task, which this sweep never
  trains on, the loss of what the base model was taught (seed 001's validation loss, seed 002's
  loss canary).
- `path`: a plain text file (or `.gz` / `.zst`), one document per non-empty line (a `.jsonl` file: its rows'
  `text` field), each scored from its first token after the tokenizer's BOS (or EOS) token and
  cut to `max_doc_tokens`: seed 002's held-out pretraining-loss canary.

Stored metrics (evaluator/results.py): `loss`, the mean over items of each item's mean
per-token NLL (the primary, lower is better), each item's NLL in samples' `score` column for
the bootstrap, `perplexity` = exp(loss) and `tokens`. How analysis reads a loss as retention
is in analysis/points.py (`LOWER_IS_BETTER`, docs/analysis.md).
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from functools import cached_property
from pathlib import Path
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field, model_validator

from cliffsweep.evals.tasks.base import EvalExample, Example, Sampling, Task, TaskParams
from cliffsweep.evals.tasks.rows import DataError, open_text, plain_suffix, seeded_subset

LOSS_SCORER_VERSION = "loss-v1"


class TaskRef(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)
    name: str
    params: dict = Field(default_factory=dict)


class LossParams(TaskParams):
    of: TaskRef | None = None
    """A task whose answers are scored (and whose training split a learn task trains on)."""
    split: Literal["eval", "train"] = "eval"
    """`of`'s evaluation references, or its training responses."""
    max_doc_tokens: int = Field(256, ge=2)
    """A document of `path` is cut to this many tokens."""

    @model_validator(mode="after")
    def _one_source(self):
        if (self.of is None) == (self.path is None):
            raise ValueError("name exactly one source: `of` (a task's held-out answers) or `path` (a text file)")
        if self.of is None and self.split != "eval":
            raise ValueError("`split` chooses among `of`'s examples; a text file has none")
        if self.sampling is not None:
            raise ValueError("a loss task scores given text and generates nothing: `sampling` does not apply")
        return self


@dataclass(frozen=True)
class LossItem:
    """One scored text: an evaluation example's reference scored as the reply to its prompt, or
    a document (example None)."""

    id: str
    text: str
    example: EvalExample | None = None


class Loss(Task):
    name = "loss"
    Params = LossParams
    scorer_version = LOSS_SCORER_VERSION
    harness = "loss"
    metric = "loss"
    sampling = Sampling(max_tokens=0)  # nothing is generated: prefill only (what `plan` prices)

    @cached_property
    def inner(self) -> Task | None:
        from cliffsweep.evals.tasks import build_task

        if self.params.of is None:
            return None
        if self.params.of.name == "loss":
            raise ValueError("loss of a loss task: name the task whose answers are scored")
        return build_task(self.params.of.name, self.params.of.params)

    @property
    def label(self) -> str:
        if self.inner is not None:
            return f"loss:{self.inner.label}" + ("" if self.params.split == "eval" else ":train")
        return f"loss:{Path(self.params.path).stem}"

    # --- data -------------------------------------------------------------------------------
    def train_examples(self) -> list[Example]:
        if self.inner is None:
            raise NotImplementedError("a text file's loss has no training split (name `of` to learn from a task)")
        return self.inner.train_examples()

    def plan_examples(self) -> list[Example]:
        if self.inner is not None:
            return self.inner.plan_examples()
        return [Example(i.id, "", i.text) for i in self.items()]

    def items(self) -> list[LossItem]:
        """The scored texts, a seeded subset of `n_eval` (all when fewer)."""
        if self.inner is not None and self.params.split == "train":
            rows = [LossItem(e.id, e.response, EvalExample(e.id, e.prompt, e.response, shots=e.history, system=e.system))
                    for e in self.inner.train_examples()]
        elif self.inner is not None:
            rows = [LossItem(e.id, e.reference, e) for e in self.inner.eval_examples()]
        else:
            rows = _documents(self.params.path)
        if not rows:
            raise DataError(f"{self.label}: no text to score")
        return seeded_subset(rows, min(self.params.n_eval, len(rows)), self.params.seed, self.label)

    def data_problems(self) -> list[str]:
        if self.inner is not None:
            return self.inner.data_problems()
        try:
            if not _documents(self.params.path):
                return [f"{self.params.path}: no text to score"]
        except (DataError, OSError) as e:
            return [str(e)]
        return []

    def data_is_local(self) -> bool:
        return self.inner.data_is_local() if self.inner is not None else super().data_is_local()

    @property
    def eval_size(self) -> int:
        return self.params.n_eval


def _documents(path: str) -> list[LossItem]:
    """Non-empty lines of a text file, or `text` fields of a JSONL file, in file order."""
    p = Path(path).expanduser()
    if not p.is_file():
        raise DataError(f"{path}: no such text file")
    out = []
    with open_text(p) as f:
        for n, line in enumerate(f, 1):
            if not line.strip():
                continue
            if plain_suffix(p) == ".jsonl":
                try:
                    row = json.loads(line)
                except json.JSONDecodeError as e:
                    raise DataError(f"{path}:{n}: not JSON ({e.msg})") from None
                if not isinstance(row, dict) or not isinstance(row.get("text"), str) or not row["text"].strip():
                    raise DataError(f"{path}:{n}: a row needs a non-empty string field 'text'")
                line = row["text"]
            out.append(LossItem(f"{p.name}:{n}", line.rstrip("\n")))
    return out
