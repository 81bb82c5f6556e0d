"""The task interface: what every learn/retain task (toy, GSM8K, ChemL3) provides.

A task is data plus a scorer. Training sees `train_examples()` (prompt/response pairs that the
trainable wraps in the model's chat template); evaluation sees `eval_examples()` and scores a
generation with `score()`. Toy tasks go through exactly these code paths, so the toy world
tests the same machinery as the real benchmarks.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import ClassVar, Literal

from pydantic import BaseModel, ConfigDict, Field, model_validator

from cliffsweep.evals.scoring.score import Score  # noqa: F401 - part of the task interface

Role = Literal["learn", "retain"]


Turn = tuple[str, str]
"""One earlier exchange of a chat prompt: (user message, assistant message)."""


@dataclass(frozen=True)
class Example:
    """One supervised pair. `prompt` is the user turn, `response` the assistant turn (the only
    tokens trained on); a conversation's earlier turns and system prompt come before them."""

    id: str
    prompt: str
    response: str
    system: str = ""
    history: tuple[Turn, ...] = ()
Prompt = str | tuple[dict[str, str], ...]
"""What a backend renders with the model's chat template: a user message (exactly as training
renders it, cliffsweep.chat.render_prompt) or whole chat messages ending with a user turn."""


@dataclass(frozen=True)
class EvalExample:
    """One evaluation item. `reference` is what the scorer compares against (a number, a letter)."""

    id: str
    prompt: str
    """The user turn that the model answers."""
    reference: str
    options: tuple[str, ...] = ()
    """Multiple choice: the option texts in letter order (the scorer also reads an answer
    given as an option's text)."""
    group: str = ""
    """Subtask: the runner stores `<metric>/<group>` beside each pooled metric when set."""
    shots: tuple[Turn, ...] = ()
    """Few-shot examples as earlier chat turns (lm-eval's --fewshot_as_multiturn), or the
    conversation's earlier turns."""
    system: str = ""
    """A system prompt before everything (the user's own data: evals/tasks/dataset.py)."""

    def chat(self) -> Prompt:
        """What the backend renders: the user turn alone, or the system prompt and the shots'
        turns before it (as training renders them: cliffsweep.chat.context_messages)."""
        if not self.shots and not self.system:
            return self.prompt
        from cliffsweep.chat import context_messages

        return (*context_messages(self.system, self.shots), {"role": "user", "content": self.prompt})


@dataclass(frozen=True)
class Sampling:
    """Decoding settings for a task: greedy (temperature 0, one completion per prompt) unless a
    task's `sampling` params ask for n samples (`drawn`). Always explicit: no engine defaults."""

    max_tokens: int
    stop: tuple[str, ...] = ()
    n: int = 1
    temperature: float = 0.0
    top_p: float = 1.0
    seed: int | None = None

    def drawn(self, how: "SampledDecoding") -> "Sampling":
        """These settings with `how`'s samples: n completions per prompt at its temperature."""
        return replace(self, n=how.n, temperature=how.temperature, top_p=how.top_p, seed=how.seed)


class SampledDecoding(BaseModel):
    """A task's sampled evaluation (issue 40 part 2: 004 reports avg@k and pass@k): `n` samples
    per question beside the greedy one, scored as it is; avg@n and pass@k for each of `k` are
    stored beside greedy accuracy, every sample kept (evals/scoring/passk.py)."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    n: int = Field(ge=1, le=1024)
    temperature: float = Field(1.0, gt=0, le=10)
    top_p: float = Field(1.0, gt=0, le=1)
    seed: int = 0
    """The engine's sampling seed, so a re-evaluation draws the same samples on the same engine."""
    k: list[int] = []
    """The k of each pass@k; [] = [1, n]. Each at most n."""

    @model_validator(mode="after")
    def _k_within_n(self) -> "SampledDecoding":
        bad = [k for k in self.k if not 1 <= k <= self.n]
        if bad:
            raise ValueError(f"sampling.k must be from 1 to n ({self.n}), got {bad}")
        return self

    @property
    def ks(self) -> list[int]:
        return sorted(set(self.k or [1, self.n]))


class TaskParams(BaseModel):
    """Options every task accepts in a sweep file. Tasks subclass this to add their own."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    path: str | None = None
    """Local folder or file with the data; None = the task's default (hub id or generator)."""
    n_train: int | None = Field(None, ge=1)
    """Cap on training examples (None = all)."""
    n_eval: int = Field(200, ge=1)
    """Number of evaluation examples (a fixed, seeded subset of the test split)."""
    seed: int = 0
    """Seed of the split/subset, so every trial and the base model see the same items."""
    system_prompt: str | None = None
    """This task's system prompt, in training and evaluation alike; None: recipe.system_prompt.
    003 gives its task prompt to the learn task only, not to IFEval, GSM8K or HumanEval: set it
    here ("" for none) rather than in the recipe (issue 40)."""
    sampling: SampledDecoding | None = None
    """Also draw n samples per question (avg@n, pass@k: SampledDecoding); None: greedy only.
    Tasks whose harness is not cliffsweep's runner refuse it (a loss task generates nothing;
    an lm-eval task samples as its YAML says)."""


def system_for(task: "Task", recipe_system: str) -> str:
    """The system prompt `task`'s examples get where they have none of their own: the task's
    `system_prompt` when its params set one, else the recipe's."""
    own = getattr(task.params, "system_prompt", None)
    return recipe_system if own is None else own


class Task:
    """Base of all tasks. Subclasses set `name`, `Params`, `scorer_version` and implement the
    three data/scoring methods. Loading is lazy and cached per instance."""

    name: ClassVar[str]
    Params: ClassVar[type[TaskParams]] = TaskParams
    scorer_version: ClassVar[str]
    """Bump when scoring changes: analysis refuses to mix versions (style.md 8)."""
    sampling: ClassVar[Sampling]
    harness: ClassVar[str] = ""
    """"" = cliffsweep's runner (eval_examples, one batched generation, score); "lm_eval" = the
    task is lm-evaluation-harness's, which builds its own requests and metrics (evals/harness.py)."""
    metric: ClassVar[str] = "accuracy"
    """The primary metric's name in the store: "accuracy" (higher is better), or "loss" (lower is
    better: evals/tasks/loss.py; storage/store.PRIMARY_METRICS)."""
    choice_letters: ClassVar[tuple[str, ...]] = ()
    """Multiple-choice tasks set the letters; the runner then also scores the letter with the
    highest log-probability as the first token(s) of the reply (`logprob_accuracy`)."""
    class_balanced: bool = False
    """Classification tasks whose classes are unevenly represented (003's ESCI): the runner also
    stores `balanced_accuracy`, the mean over reference answers (classes) of their accuracy."""

    def __init__(self, params: TaskParams | None = None):
        self.params = params if params is not None else self.Params()

    @property
    def label(self) -> str:
        """The task's name in the store (`evals.task`): its registry name, unless one name can
        stand for several tasks (lm_eval: `lm_eval:<task>`)."""
        return self.name

    def data_problems(self) -> list[str]:
        """Every malformed row of this task's local data files ('file:line: problem'), read
        before anything starts; [] for data made in code or fetched at run time."""
        return []

    # --- what `plan` prices (planner/plan.py, planner/tokenstats.py) ------------------------
    def data_is_local(self) -> bool:
        """Whether the task's data is on this machine (then `plan` measures its token lengths)."""
        import os

        path = getattr(self.params, "path", None)
        return path is not None and os.path.exists(os.path.expanduser(path))

    @property
    def eval_size(self) -> int:
        """Items one evaluation scores."""
        return self.params.n_eval

    def plan_examples(self) -> list[Example]:
        """Examples whose token lengths stand for the task's training and prompts in `plan`."""
        return self.train_examples()

    def train_examples(self) -> list[Example]:
        raise NotImplementedError(f"task {self.name} has no training split")

    def eval_examples(self) -> list[EvalExample]:
        raise NotImplementedError

    def score(self, generation: str, example: EvalExample) -> Score:
        raise NotImplementedError
