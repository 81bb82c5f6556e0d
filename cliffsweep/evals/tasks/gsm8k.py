"""GSM8K (Cobbe et al. 2021), the retention task of the cliff paper (000 Sec. 3; docs/methods.md).

Train split = the retain set D_R: user turn = the question, assistant turn = the dataset's
reference rationale, which ends with '#### N' (kept verbatim, calculator annotations '<<..>>'
included, as lm-evaluation-harness uses it as the target). Evaluation = a seeded subset of
n_eval test questions, greedy, in one of two protocols (docs/evals.md):

- `fewshot_chat` (default): lm-evaluation-harness 0.4.13's `gsm8k` task as run on instruct
  models, `lm_eval --tasks gsm8k --num_fewshot 5 --apply_chat_template --fewshot_as_multiturn`:
  five train examples as earlier chat turns (user "Question: {q}\\nAnswer:", assistant = the
  gold rationale), drawn exactly as lm-eval draws them (its ContextSampler: random.Random(1234),
  one `sample(train, 5)` per test question in file order), then "Question: {q}\\nAnswer:";
  lm-eval's stop strings and its default 256 new tokens. The prompts equal lm-eval's own
  (tests/test_evals_lmeval.py).
- `zeroshot`: the bare question as the only user turn, 512 new tokens, no stop string (the
  chat template's end-of-turn token ends the reply): what instruct models see in use.

Scoring is the same in both (cliffsweep.evals.scoring.gsm8k): lm-eval's `strict_match` and
`flexible_extract` verdicts and our lenient `numeric_match`; accuracy = flexible_extract.
"""

from __future__ import annotations

import random
from functools import cached_property
from typing import Any, Literal

from pydantic import Field, model_validator

from cliffsweep.evals.scoring import GSM8K_SCORER_VERSION, gsm8k_reference, gsm8k_score
from cliffsweep.evals.tasks.base import EvalExample, Example, Sampling, Score, Task, TaskParams
from cliffsweep.evals.tasks.rows import DataError, data_file, field, read_jsonl, row_problems, seeded_subset

HUB_ID = "openai/gsm8k"
HUB_FILES = {"train": "main/train-00000-of-00001.parquet", "test": "main/test-00000-of-00001.parquet"}

LM_EVAL_STOP = ("Question:", "</s>", "<|im_end|>")
"""gsm8k.yaml generation_kwargs.until (lm-eval also stops at the tokenizer's EOS, as we do)."""
LM_EVAL_MAX_GEN_TOKS = 256
"""lm-eval's default max_gen_toks (gsm8k.yaml sets none)."""
LM_EVAL_FEWSHOT_SEED = 1234
"""lm-eval's default fewshot_random_seed (simple_evaluate(..., fewshot_random_seed=1234))."""
ZEROSHOT_MAX_TOKENS = 512
"""Room for a chain of thought (docs/methods.md: >= 512)."""

Protocol = Literal["fewshot_chat", "zeroshot"]


class GSM8KParams(TaskParams):
    protocol: Protocol = "fewshot_chat"
    """Prompt protocol (module docstring); our default reproduces lm-eval's chat few-shot run."""
    num_fewshot: int = Field(5, ge=1)
    """fewshot_chat only: number of example turns (lm-eval --num_fewshot)."""
    fewshot_seed: int = LM_EVAL_FEWSHOT_SEED
    """fewshot_chat only: seed of lm-eval's few-shot sampler (lm-eval --seed's third value)."""
    max_tokens: int | None = Field(None, ge=1)
    """Generation budget; None = the protocol's (fewshot_chat 256 as lm-eval, zeroshot 512)."""

    @model_validator(mode="after")
    def _fewshot_fields_need_fewshot(self):
        stray = sorted({"num_fewshot", "fewshot_seed"} & self.model_fields_set)
        if self.protocol == "zeroshot" and stray:
            raise ValueError(f"{', '.join(stray)} apply to protocol fewshot_chat only, not zeroshot")
        return self


def lm_eval_question(question: str) -> str:
    """gsm8k.yaml doc_to_text."""
    return f"Question: {question}\nAnswer:"


def lm_eval_fewshot_indices(n_train: int, n_test: int, k: int, seed: int) -> list[list[int]]:
    """Train indices of the few-shot examples of each test question, in lm-eval's order: its
    ContextSampler holds one random.Random(seed) and calls sample(train_docs, k) once per test
    document, documents in file order (the few-shot split is not the test split, so no
    document is excluded). sample() depends only on the population's length, so indices give
    the same draw as documents."""
    rnd = random.Random(seed)
    population = range(n_train)
    return [rnd.sample(population, k) for _ in range(n_test)]


class GSM8K(Task):
    name = "gsm8k"
    Params = GSM8KParams
    role = "retain"

    def __init__(self, params: GSM8KParams | None = None):
        super().__init__(params)
        p = self.params
        if p.protocol == "fewshot_chat":
            self.sampling = Sampling(max_tokens=p.max_tokens or LM_EVAL_MAX_GEN_TOKS, stop=LM_EVAL_STOP)
            protocol = f"fewshot_chat{p.num_fewshot}"
        else:
            self.sampling = Sampling(max_tokens=p.max_tokens or ZEROSHOT_MAX_TOKENS, stop=())
            protocol = "zeroshot"
        # The protocol changes the numbers as much as the scorer does: analysis must not mix them.
        self.scorer_version = f"{GSM8K_SCORER_VERSION}+{protocol}"
        self._splits: dict[str, list[tuple[str, str, str]]] = {}

    def data_problems(self) -> list[str]:
        if self.params.path is None:  # the hub's copy: read at run time
            return []
        return row_problems([data_file(self.params.path, f"{s}.jsonl") for s in ("train", "test")], _parse)

    def _split(self, split: str) -> list[tuple[str, str, str]]:
        """(row id, question, answer) of every row of `split`, validated, in file order."""
        if split not in self._splits:
            self._splits[split] = [
                (f"{split}-{i}", *_parse(where, row)) for i, (where, row) in enumerate(_rows(self.params.path, split))
            ]
        return self._splits[split]

    def train_examples(self) -> list[Example]:
        rows = seeded_subset(self._split("train"), self.params.n_train, self.params.seed, "gsm8k train")
        return [Example(rid, q, a) for rid, q, a in rows]

    @cached_property
    def _shots(self) -> list[tuple[tuple[str, str], ...]]:
        """Few-shot turns of every test question (all of them: the draw for question i depends
        on the draws before it). Always from the full train split, as lm-eval's are."""
        train, p = self._split("train"), self.params
        if p.num_fewshot > len(train):
            raise DataError(f"gsm8k: num_fewshot {p.num_fewshot} > {len(train)} train examples")
        draws = lm_eval_fewshot_indices(len(train), len(self._split("test")), p.num_fewshot, p.fewshot_seed)
        return [tuple((lm_eval_question(train[j][1]), train[j][2]) for j in idx) for idx in draws]

    def eval_examples(self) -> list[EvalExample]:
        test = self._split("test")
        positions = seeded_subset(list(range(len(test))), self.params.n_eval, self.params.seed, "gsm8k test")
        if self.params.protocol == "zeroshot":
            return [EvalExample(test[i][0], test[i][1], gsm8k_reference(test[i][2])) for i in positions]
        return [EvalExample(test[i][0], lm_eval_question(test[i][1]), gsm8k_reference(test[i][2]),
                            shots=self._shots[i]) for i in positions]

    def score(self, generation: str, example: EvalExample) -> Score:
        return gsm8k_score(generation, example.reference)


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
        return read_jsonl(data_file(path, f"{split}.jsonl"))
    return _hub_rows(split)


def _hub_rows(split: str):
    # Not reachable from the build machines (no hub access); kept for real clusters.
    import pandas as pd
    from huggingface_hub import hf_hub_download

    local = hf_hub_download(HUB_ID, HUB_FILES[split], repo_type="dataset")
    for i, row in enumerate(pd.read_parquet(local).to_dict("records")):
        yield f"{local}:row {i}", row
