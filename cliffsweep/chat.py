"""Chat formatting shared by training and evaluation, so both see exactly the same text.

The cliff paper's recipe (000 App. B) trains with the model's own chat template and computes
the loss on response tokens only. A base model without a chat template (001's GPT-2 and Llama-2
base) gets PLAIN_TEMPLATE: the system prompt, then each user turn on its own line and the answer
after it, ended by the end-of-sequence token (what generation stops at).
"""

from __future__ import annotations

PLAIN_TEMPLATE = (
    "{%- for m in messages -%}"
    "{%- if m['role'] == 'system' -%}{{ m['content'] + '\\n\\n' }}"
    "{%- elif m['role'] == 'user' -%}{{ m['content'] + '\\n' }}"
    "{%- else -%}{{ m['content'] }}{{ eos_token }}{%- endif -%}"
    "{%- endfor -%}"
)
"""The prompt/response format of a tokenizer that has no chat template of its own."""


def apply_template(tokenizer, messages: list[dict[str, str]], add_generation_prompt: bool) -> str:
    """The messages as text in the model's chat template, or PLAIN_TEMPLATE when it has none."""
    own = getattr(tokenizer, "chat_template", None)
    return tokenizer.apply_chat_template(messages, add_generation_prompt=add_generation_prompt, tokenize=False,
                                         **({} if own else {"chat_template": PLAIN_TEMPLATE}))


def render_prompt(tokenizer, user: str) -> str:
    """The user turn followed by the assistant header: what generation continues from."""
    return apply_template(tokenizer, [{"role": "user", "content": user}], add_generation_prompt=True)


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
    prompt = apply_template(tokenizer, before, add_generation_prompt=True)
    full = apply_template(tokenizer, before + [{"role": "assistant", "content": assistant}], add_generation_prompt=False)
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
