"""The finetuning data formats researchers bring (the ones TRL, LLaMA-Factory and axolotl read),
turned into one shape: a conversation, a system prompt then (user, assistant) turns.

- `messages`: {"messages": [{"role": "system"|"user"|"assistant", "content": "..."}, ...]}
  (TRL's conversational format; OpenAI's chat fine-tuning files);
- `prompt_completion`: {"prompt": "...", "completion": "..."} (TRL), either side may also be a
  list of messages (TRL's conversational prompt-completion);
- `alpaca`: {"instruction": "...", "input": "...", "output": "..."}, with LLaMA-Factory's
  optional "system" and "history" ([[user, assistant], ...]);
- `sharegpt`: {"conversations": [{"from": "system"|"human"|"gpt", "value": "..."}, ...]}.

`auto` picks the format from each row's keys. A row that fits none, or breaks its format (a
role out of order, a missing field, an empty answer), raises DataError naming its place
('file:line'), never a default. Pure: no files here (evals/tasks/dataset.py reads them).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Literal

from cliffsweep.evals.tasks.rows import DataError

Format = Literal["auto", "messages", "prompt_completion", "alpaca", "sharegpt"]
KEYS = {"messages": ("messages",), "sharegpt": ("conversations",), "prompt_completion": ("prompt", "completion"),
        "alpaca": ("instruction", "output")}
"""The keys that make a row one format (`auto`), checked in this order."""
SHAREGPT_ROLES = {"human": "user", "user": "user", "gpt": "assistant", "assistant": "assistant",
                  "system": "system"}


@dataclass(frozen=True)
class Conversation:
    system: str
    turns: tuple[tuple[str, str], ...]
    """(user, assistant) turns, at least one; training learns every assistant turn."""


def detect(row: dict[str, Any]) -> str | None:
    return next((fmt for fmt, keys in KEYS.items() if all(k in row for k in keys)), None)


def conversation(where: str, row: dict[str, Any], fmt: Format = "auto") -> Conversation:
    """The row as a Conversation, in format `fmt` (auto: from its keys)."""
    use = detect(row) if fmt == "auto" else fmt
    partial = [f for f, keys in KEYS.items() if any(k in row for k in keys)]
    if use is None and len(partial) == 1:  # a row of one format with a field missing
        use = partial[0]
    if use is None:
        raise DataError(f"{where}: no known format (keys {sorted(row)[:6]}; expected one of "
                        + "; ".join(f"{f}: {', '.join(k)}" for f, k in KEYS.items()) + ")")
    if any(k not in row for k in KEYS[use]):
        raise DataError(f"{where}: format {use} needs field(s) {[k for k in KEYS[use] if k not in row]}")
    if use == "messages":
        return _from_messages(where, row["messages"])
    if use == "sharegpt":
        return _from_messages(where, _sharegpt(where, row["conversations"]))
    if use == "alpaca":
        return _alpaca(where, row)
    return _prompt_completion(where, row)


def _text(where: str, value: Any, what: str) -> str:
    if not isinstance(value, str):
        raise DataError(f"{where}: {what} should be text, got {type(value).__name__}")
    return value


def _from_messages(where: str, messages: Any) -> Conversation:
    if not isinstance(messages, list) or not messages:
        raise DataError(f"{where}: messages should be a non-empty list")
    msgs = []
    for i, m in enumerate(messages):
        if not isinstance(m, dict) or "role" not in m or "content" not in m:
            raise DataError(f"{where}: message {i} should have 'role' and 'content'")
        msgs.append((m["role"], _text(where, m["content"], f"message {i}'s content")))
    system = msgs.pop(0)[1] if msgs[0][0] == "system" else ""
    if len(msgs) % 2 or not msgs:
        raise DataError(f"{where}: expected user / assistant turns in pairs after any system message, got roles "
                        f"{[r for r, _ in msgs]}")
    turns = []
    for k in range(0, len(msgs), 2):
        (ru, user), (ra, assistant) = msgs[k], msgs[k + 1]
        if (ru, ra) != ("user", "assistant"):
            raise DataError(f"{where}: message {k + (1 if system else 0)}: expected a user then an assistant "
                            f"message, got {ru!r} then {ra!r}")
        turns.append((user, _answer(where, assistant)))
    return Conversation(system, tuple(turns))


def _answer(where: str, text: str) -> str:
    if not text.strip():
        raise DataError(f"{where}: an empty assistant answer (nothing to learn)")
    return text


def _sharegpt(where: str, conversations: Any) -> list[dict[str, str]]:
    if not isinstance(conversations, list):
        raise DataError(f"{where}: conversations should be a list")
    out = []
    for i, m in enumerate(conversations):
        if not isinstance(m, dict) or m.get("from") not in SHAREGPT_ROLES or "value" not in m:
            raise DataError(f"{where}: conversations[{i}] should have 'from' (one of {sorted(SHAREGPT_ROLES)}) "
                            "and 'value'")
        out.append({"role": SHAREGPT_ROLES[m["from"]], "content": m["value"]})
    return out


def _alpaca(where: str, row: dict[str, Any]) -> Conversation:
    instruction = _text(where, row["instruction"], "instruction")
    extra = _text(where, row.get("input") or "", "input")
    user = f"{instruction}\n\n{extra}" if extra.strip() else instruction
    history = row.get("history") or []
    if not isinstance(history, list) or not all(isinstance(h, (list, tuple)) and len(h) == 2 for h in history):
        raise DataError(f"{where}: history should be a list of [user, assistant] pairs")
    turns = tuple((_text(where, u, "history user"), _text(where, a, "history answer")) for u, a in history)
    system = _text(where, row.get("system") or "", "system")
    return Conversation(system, turns + ((user, _answer(where, _text(where, row["output"], "output"))),))


def _prompt_completion(where: str, row: dict[str, Any]) -> Conversation:
    prompt, completion = row["prompt"], row["completion"]
    if isinstance(prompt, str) and isinstance(completion, str):
        return Conversation("", ((prompt, _answer(where, completion)),))
    if isinstance(prompt, list) and isinstance(completion, list):  # TRL's conversational form
        return _from_messages(where, prompt + completion)
    raise DataError(f"{where}: prompt and completion should both be text or both be message lists")
