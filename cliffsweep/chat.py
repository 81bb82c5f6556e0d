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


def encode_pair(tokenizer, user: str, assistant: str, max_len: int) -> tuple[list[int], list[int]]:
    """Token ids and labels of one supervised pair; labels are -100 on the prompt so the loss
    covers the response (and its end-of-turn token) only. Truncated to max_len."""
    prompt = render_prompt(tokenizer, user)
    full = tokenizer.apply_chat_template(
        [{"role": "user", "content": user}, {"role": "assistant", "content": assistant}],
        tokenize=False,
    )
    if not full.startswith(prompt):
        raise ValueError("chat template: the full conversation does not start with the rendered prompt")
    prompt_ids = tokenizer(prompt, add_special_tokens=False)["input_ids"]
    ids = prompt_ids + tokenizer(full[len(prompt):], add_special_tokens=False)["input_ids"]
    labels = [-100] * len(prompt_ids) + ids[len(prompt_ids):]
    return ids[:max_len], labels[:max_len]
