"""GSM8K (Cobbe et al. 2021), the retention task of the cliff paper (000 Sec. 3; METHODS.md).

Train split = the retain set D_R: user turn = the question, assistant turn = the dataset's
reference rationale, which ends with '#### N' (kept verbatim, calculator annotations '<<..>>'
included, as lm-evaluation-harness uses it as the target: our default). Evaluation = a seeded
subset of n_eval test questions, the question alone as the user turn (zero-shot, chat template),
greedy, scored by the final number: flexible extraction (last number) is the primary accuracy,
strict '#### N' is stored beside it (cliffsweep.evals.scoring.gsm8k_score).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from pydantic import Field

from cliffsweep.evals.scoring import GSM8K_SCORER_VERSION, gsm8k_reference, gsm8k_score
from cliffsweep.evals.tasks.base import EvalExample, Example, Sampling, Score, Task, TaskParams
from cliffsweep.evals.tasks.rows import DataError, field, read_jsonl, seeded_subset

HUB_ID = "openai/gsm8k"
HUB_FILES = {"train": "main/train-00000-of-00001.parquet", "test": "main/test-00000-of-00001.parquet"}

# The next few-shot question marker, and a run of blank lines: a model that finished its
# answer and started rambling (lm-eval's gsm8k stops at "Question:" too).
STOP = ("Question:", "\n\n\n")


class GSM8KParams(TaskParams):
    max_tokens: int = Field(512, ge=1)
    """Generation budget; >= 512 leaves room for chain of thought (METHODS.md)."""


class GSM8K(Task):
    name = "gsm8k"
    Params = GSM8KParams
    scorer_version = GSM8K_SCORER_VERSION
    role = "retain"

    def __init__(self, params: GSM8KParams | None = None):
        super().__init__(params)
        self.sampling = Sampling(max_tokens=self.params.max_tokens, stop=STOP)
        self._splits: dict[str, list[tuple[str, str, str]]] = {}

    def _split(self, split: str) -> list[tuple[str, str, str]]:
        """(row id, question, answer) of every row of `split`, validated."""
        if split not in self._splits:
            self._splits[split] = [
                (f"{split}-{i}", *_parse(where, row)) for i, (where, row) in enumerate(_rows(self.params.path, split))
            ]
        return self._splits[split]

    def train_examples(self) -> list[Example]:
        rows = seeded_subset(self._split("train"), self.params.n_train, self.params.seed, "gsm8k train")
        return [Example(rid, q, a) for rid, q, a in rows]

    def eval_examples(self) -> list[EvalExample]:
        rows = seeded_subset(self._split("test"), self.params.n_eval, self.params.seed, "gsm8k test")
        return [EvalExample(rid, q, gsm8k_reference(a)) for rid, q, a in rows]

    def score(self, generation: str, reference: str) -> Score:
        return gsm8k_score(generation, reference)


def _parse(where: str, row: dict[str, Any]) -> tuple[str, str]:
    question = field(row, "question", str, where)
    answer = field(row, "answer", str, where)
    try:
        gsm8k_reference(answer)
    except ValueError as e:
        raise DataError(f"{where}: {e}") from None
    return question, answer


def _rows(path: str | None, split: str):
    """(location, row) pairs from a local folder (train.jsonl / test.jsonl) or the hub."""
    if path is not None:
        return read_jsonl(Path(path) / f"{split}.jsonl")
    return _hub_rows(split)


def _hub_rows(split: str):
    # Not reachable from the build machines (no hub access); kept for real clusters.
    import pandas as pd
    from huggingface_hub import hf_hub_download

    local = hf_hub_download(HUB_ID, HUB_FILES[split], repo_type="dataset")
    for i, row in enumerate(pd.read_parquet(local).to_dict("records")):
        yield f"{local}:row {i}", row
