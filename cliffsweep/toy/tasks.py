"""Synthetic toy tasks: `toy_arith` (retain, GSM8K-like) and `toy_facts` (learn, ChemL3-like).

toy_arith: multi-step arithmetic word problems; the reference solution writes one equation per
line and ends with '#### N', scored exactly like GSM8K (`gsm8k_score`).

toy_facts: 4-choice questions (letters A-D) about fictional entities ('Zorpim') and four
relations (hat color, food, pet, job). The *world* (which entities are pretraining entities and
which are learn entities, and the pretraining entities' values) is fixed by WORLD_SEED, because
the packaged base models were pretrained on it: the base models saw the MCQ format only on
PRETRAIN entities, so on LEARN entities they answer with a letter but at chance. The learn
entities are one newly met people who share their customs: every one of them has the same value
of a relation (LEARN_VALUES, one relation per letter, so no single letter scores above 0.25).
The learn train split asks each learn fact with phrasings 0 and 1; the eval split asks the same
facts with phrasing 2 (a question form SFT never shows for learn entities), so SFT has to learn
the custom and carry it to a new question form (docs/toy.md: why shared values).
"""

from __future__ import annotations

import random
from dataclasses import dataclass
from typing import ClassVar

from cliffsweep.evals.scoring import (
    GSM8K_SCORER_VERSION, LETTER_SCORER_VERSION, gsm8k_score, letter_score,
)
from cliffsweep.evals.tasks.base import EvalExample, Example, Sampling, Score, Task, TaskParams
from cliffsweep.toy import vocab as V

WORLD_SEED = 1234
N_LEARN_ENTITIES = 50
N_PRETRAIN_ENTITIES = 80
"""50 entities x 4 relations = 200 learn facts: one eval question per fact at n_eval=200."""
LEARN_VALUES = {"color": "green", "food": "rice", "pet": "goat", "job": "baker"}
"""The learn entities' shared value of each relation: letters C, B, D, A. Shared, not drawn per
entity: a per-entity fact is learned only at lrs that already destroy arithmetic in these
0.35 M models (docs/toy.md), so learning could never come before forgetting."""
ARITH_TRAIN_SIZE = 2000
TRAIN_PHRASINGS = (0, 1)
EVAL_PHRASING = 2


# --- toy_arith --------------------------------------------------------------------------------
def arith_problem(rng: random.Random) -> tuple[str, str, int]:
    """(question, worked solution ending in '#### N', answer). Two operations; every
    intermediate value stays small (two digits), which a tiny model can learn in minutes."""
    she = rng.random() < 0.5
    name = rng.choice(V.NAMES_SHE if she else V.NAMES_HE)
    friend = rng.choice([n for n in V.NAMES_SHE + V.NAMES_HE if n != name])
    obj = rng.choice(V.OBJECTS)
    fill = dict(name=name, friend=friend, obj=obj, Pron="She" if she else "He",
                pron_obj="her" if she else "him")
    cur = rng.randint(2, 15)
    sentences = [V.ARITH_START.format(a=cur, **fill)]
    lines = []
    for _ in range(2):
        op = rng.choice(("add", "sub", "mul") if cur >= 2 else ("add", "mul"))
        if op == "add":
            b = rng.randint(1, 9)
            sentences.append(rng.choice(V.ARITH_ADD).format(b=b, **fill))
            lines.append(f"{cur} + {b} = {cur + b}.")
            cur += b
        elif op == "sub":
            b = rng.randint(1, min(9, cur - 1))
            sentences.append(rng.choice(V.ARITH_SUB).format(b=b, **fill))
            lines.append(f"{cur} - {b} = {cur - b}.")
            cur -= b
        else:
            k, b = rng.randint(2, 3), rng.randint(2, 5)
            box = rng.choice(V.CONTAINERS)
            sentences.append(rng.choice(V.ARITH_MUL).format(k=k, b=b, box=box, **fill))
            lines.append(f"{k} * {b} = {k * b}.")
            lines.append(f"{cur} + {k * b} = {cur + k * b}.")
            cur += k * b
    sentences.append(rng.choice(V.ARITH_QUESTION).format(**fill))
    assert cur <= V.MAX_NUMBER
    return " ".join(sentences), "\n".join(lines) + f"\n#### {cur}", cur


class GeneratedTask(Task):
    """A toy task whose examples are generated in code: nothing to fetch, whatever the hub."""

    def data_is_local(self) -> bool:
        return True


class ToyArith(GeneratedTask):
    """GSM8K-like retain task (scored with the GSM8K scorer, flexible match primary)."""

    name: ClassVar[str] = "toy_arith"
    scorer_version: ClassVar[str] = GSM8K_SCORER_VERSION
    sampling: ClassVar[Sampling] = Sampling(max_tokens=64)

    def _split(self, split: str, n: int) -> list[tuple[str, str, int]]:
        rng = random.Random(f"toy_arith-{split}-{self.params.seed}")
        return [arith_problem(rng) for _ in range(n)]

    def train_examples(self) -> list[Example]:
        n = min(ARITH_TRAIN_SIZE, self.params.n_train or ARITH_TRAIN_SIZE)
        return [Example(f"toy_arith-train-{i}", q, s) for i, (q, s, _) in enumerate(self._split("train", n))]

    def eval_examples(self) -> list[EvalExample]:
        rows = self._split("eval", self.params.n_eval)
        return [EvalExample(f"toy_arith-eval-{i}", q, str(a)) for i, (q, _, a) in enumerate(rows)]

    def score(self, generation: str, example: EvalExample) -> Score:
        return gsm8k_score(generation, example.reference)


# --- toy_facts --------------------------------------------------------------------------------
@dataclass(frozen=True)
class Fact:
    entity: str
    relation: str
    value: str


def world() -> tuple[list[Fact], list[Fact]]:
    """(pretrain facts, learn facts): disjoint entities fixed by WORLD_SEED; the learn entities
    have the LEARN_VALUES. The draws are those the packaged base models were pretrained with."""
    rng = random.Random(WORLD_SEED)
    entities = list(V.ENTITIES)
    rng.shuffle(entities)
    facts = [[Fact(e, r, rng.choice(vals)) for r, vals in V.RELATIONS.items()] for e in entities]
    learn = [Fact(f.entity, f.relation, LEARN_VALUES[f.relation]) for fs in facts[:N_LEARN_ENTITIES] for f in fs]
    pretrain = [f for fs in facts[N_LEARN_ENTITIES : N_LEARN_ENTITIES + N_PRETRAIN_ENTITIES] for f in fs]
    return pretrain, learn


def old_customs() -> list[Fact]:
    """Other customs of the learn entities, each different from its LEARN_VALUES one. A base
    model built with `old_customs` (toy/build.BaseRecipe) was pretrained on them, so SFT must
    overwrite what it knows about these people rather than add to it (docs/toy.md)."""
    rng = random.Random("conflict")
    return [Fact(f.entity, f.relation, rng.choice([v for v in V.RELATIONS[f.relation] if v != f.value]))
            for f in world()[1]]


def mcq(fact: Fact, phrasing: int) -> tuple[str, str]:
    """(prompt, correct letter). The choices are the relation's four values in a fixed order:
    our choice, because the 0.25 M toy models never learned an in-context look-up of a
    shuffled choice list (letter-only answers, 'C. owl', 'owl (C)' and 'owl C' layouts with
    random distractors all stayed at chance after SFT). With a fixed order the letter *is*
    the fact, so SFT must learn the fact; the eval split still asks it with another phrasing."""
    choices = V.RELATIONS[fact.relation]
    question = V.QUESTIONS[fact.relation][phrasing].format(e=fact.entity)
    lines = [question] + [f"{L}. {c}" for L, c in zip(V.MCQ_LETTERS, choices)] + [V.MCQ_INSTRUCTION]
    return "\n".join(lines), V.MCQ_LETTERS[choices.index(fact.value)]


class ToyFacts(GeneratedTask):
    """ChemL3-like learn task: fictional facts the base models have never seen."""

    name: ClassVar[str] = "toy_facts"
    scorer_version: ClassVar[str] = LETTER_SCORER_VERSION
    sampling: ClassVar[Sampling] = Sampling(max_tokens=4)

    def train_examples(self) -> list[Example]:
        rng = random.Random(f"toy_facts-train-{self.params.seed}")
        rows = []
        for i, fact in enumerate(world()[1]):
            for p in TRAIN_PHRASINGS:
                prompt, letter = mcq(fact, p)
                rows.append(Example(f"toy_facts-train-{i}-{p}", prompt, letter))
        rng.shuffle(rows)
        return rows[: self.params.n_train] if self.params.n_train else rows

    def eval_examples(self) -> list[EvalExample]:
        rng = random.Random(f"toy_facts-eval-{self.params.seed}")
        facts = world()[1]
        order = list(range(len(facts)))
        rng.shuffle(order)
        rows = []
        for i in order[: self.params.n_eval]:
            prompt, letter = mcq(facts[i], EVAL_PHRASING)
            rows.append(EvalExample(f"toy_facts-eval-{i}", prompt, letter))
        return rows

    def score(self, generation: str, example: EvalExample) -> Score:
        return letter_score(generation, example.reference)
