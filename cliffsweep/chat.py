"""Chat formatting shared by training and evaluation, so both see exactly the same text.

The cliff paper's recipe (000 App. B) trains with the model's own chat template and computes
the loss on response tokens only.
"""

from __future__ import annotations


def render_prompt(tokenizer, user: str) -> str:
    """The user turn followed by the assistant header: what generation continues from."""
    return tokenizer.apply_chat_template(
        [{"role": "user", "content": user}], add_generation_prompt=True, tokenize=False
    )


def context_messages(system: str, history: tuple[tuple[str, str], ...]) -> list[dict[str, str]]:
    """Chat messages before the user turn: a system prompt, earlier (user, assistant) turns."""
    out = [{"role": "system", "content": system}] if system else []
    for user, assistant in history:
        out += [{"role": "user", "content": user}, {"role": "assistant", "content": assistant}]
    return out


def encode_pair(tokenizer, user: str, assistant: str, max_len: int, system: str = "",
                history: tuple[tuple[str, str], ...] = ()) -> tuple[list[int], list[int]]:
    """Token ids and labels of one supervised pair, after a system prompt and earlier turns if
    any; labels are -100 on everything before the response, so the loss covers the response
    (and its end-of-turn token) only. Truncated to max_len."""
    before = context_messages(system, history) + [{"role": "user", "content": user}]
    prompt = (render_prompt(tokenizer, user) if len(before) == 1 else
              tokenizer.apply_chat_template(before, add_generation_prompt=True, tokenize=False))
    full = tokenizer.apply_chat_template(before + [{"role": "assistant", "content": assistant}], tokenize=False)
    if not full.startswith(prompt):
        raise ValueError("chat template: the full conversation does not start with the rendered prompt")
    prompt_ids = tokenizer(prompt, add_special_tokens=False)["input_ids"]
    ids = prompt_ids + tokenizer(full[len(prompt):], add_special_tokens=False)["input_ids"]
    labels = [-100] * len(prompt_ids) + ids[len(prompt_ids):]
    return ids[:max_len], labels[:max_len]


def encode_example(tokenizer, example, max_len: int) -> tuple[list[int], list[int]]:
    """`encode_pair` of an Example (evals/tasks/base.py): its prompt, response, system prompt
    and earlier turns."""
    return encode_pair(tokenizer, example.prompt, example.response, max_len, example.system, example.history)
