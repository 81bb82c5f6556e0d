"""The eval-backend interface: one engine for one base model, serving checkpoints in turn.

An evaluator actor owns one backend for its whole life (engine start is paid once per model).
`load()` swaps in a checkpoint (full weights: in-place reload; LoRA: an adapter request) and
must verify with the checkpoint's canary that the engine really serves it (vLLM has had
stale-weight reload bugs). `generate()` is greedy, with explicit max_tokens and stop strings;
`continuation_logprobs()` scores fixed replies (multiple-choice letters) without generating.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal, Protocol

from cliffsweep.chat import apply_template, render_prompt
from cliffsweep.evals.canary import Canary
from cliffsweep.evals.tasks.base import Prompt, Sampling




@dataclass(frozen=True)
class HeldWeights:
    """A full checkpoint's weights in memory (issue 61 part 2): what the trainer would save, by
    the checkpoint's own (Hugging Face) names, tied copies dropped as the save drops them
    (`tensors`: name -> torch.Tensor), and the canary it recorded on them. An engine beside the
    trainer serves them without a file; the canary still checks it serves these weights."""

    tensors: dict
    canary: Canary


@dataclass(frozen=True)
class CheckpointRef:
    """Where a checkpoint lives. kind='full': an HF model folder, or its weights `held` in
    memory; kind='lora': a peft adapter folder for the evaluator's base model. path=None and
    nothing held means the base model itself."""

    path: str | None
    kind: Literal["full", "lora"] = "full"
    held: HeldWeights | None = None

    @property
    def is_base(self) -> bool:
        return self.path is None and self.held is None

    def __post_init__(self):
        if self.held is not None and (self.path is not None or self.kind != "full"):
            raise ValueError("weights held in memory are a full checkpoint with no folder")



class Backend(Protocol):
    name: str

    def load(self, ckpt: CheckpointRef) -> float | None:
        """Serve `ckpt` from now on; raise StaleWeightsError if the canary disagrees. Returns the
        canary's distance (evals/canary.py: mean |served - recorded| log-prob), stored with each
        evaluation of `ckpt`; None where there was nothing to check against (the hf backend's
        base model, whose served log-probs become the reference)."""

    def generate(self, prompts: list[Prompt], sampling: Sampling) -> list[str]:
        """Greedy completions of `prompts` (user messages or chat messages), each rendered
        with the model's chat template (`render_chat`)."""

    def generate_n(self, prompts: list[Prompt], sampling: Sampling) -> list[list[str]]:
        """`sampling.n` sampled completions of each prompt (temperature, top_p, seed as
        `sampling` says), rendered as `generate` renders them."""

    def continuation_logprobs(self, prompts: list[Prompt], continuations: tuple[str, ...]) -> list[list[float]]:
        """[i][j] = log p(continuations[j] | rendered prompts[i]): the summed log-probability of
        the continuation's tokens as the start of the assistant reply (`continuation_ids`)."""

    # Token-level primitives, no chat template: what an external harness (lm-evaluation-harness,
    # evals/harness.py) builds its requests from, having rendered and tokenised them itself.
    max_length: int
    """The longest sequence (context + generation) the engine serves."""

    def complete(self, contexts: list[list[int]], max_tokens: int, stop: list[str],
                 sampling: Sampling | None = None, seeds: list[int] | None = None) -> list[str]:
        """Continuations of token-id contexts, at most `max_tokens` tokens, each cut before the
        first of `stop`: greedy, or one sample each at `sampling`'s temperature and top_p, the
        i-th drawn with seed `seeds[i]` (an lm-eval task that samples: evals/harness.py)."""

    def score_tokens(self, pairs: list[tuple[list[int], list[int]]]) -> list[tuple[float, bool]]:
        """For each (context, continuation) of token ids: the continuation's summed log-probability
        and whether greedy decoding would have produced it (every token the argmax)."""

    def close(self) -> None: ...


def render_chat(tokenizer, prompt: Prompt) -> str:
    """The prompt in the model's chat template, ending with the assistant header. A plain user
    message is rendered exactly as training renders it; chat messages (few-shot turns) the way
    lm-eval's --apply_chat_template does (apply_chat_template, add_generation_prompt=True)."""
    if isinstance(prompt, str):
        return render_prompt(tokenizer, prompt)
    if not prompt or prompt[-1]["role"] != "user":
        raise ValueError("a chat prompt must end with a user message")
    return apply_template(tokenizer, list(prompt), add_generation_prompt=True)


def prompt_ids(tokenizer, prompt: Prompt) -> list[int]:
    """Token ids of the rendered prompt. No special tokens are added: the chat template already
    holds the BOS where the model wants one (a second BOS would change the output)."""
    return tokenizer(render_chat(tokenizer, prompt), add_special_tokens=False)["input_ids"]


def continuation_ids(tokenizer, continuation: str) -> list[int]:
    """Token ids of a reply's start, tokenised on its own as training tokenises the reply
    (cliffsweep.chat.encode_pair), so a letter is scored as the token SFT taught."""
    ids = tokenizer(continuation, add_special_tokens=False)["input_ids"]
    if not ids:
        raise ValueError(f"continuation {continuation!r} tokenises to nothing")
    return ids
