"""The toy tokenizer: word-level, one token per word and per integer 0..MAX_NUMBER.

Why word-level: a tiny model learns `7 + 5 = 12` as a lookup over three tokens far more easily
than as digit carries (a character-level probe reached only ~15 % on two-step chains). Every
word and number exists with and without its leading space (' apples', 'apples'), so a
sentence is about one token per word; other whitespace characters are tokens of their own,
which makes decode(encode(text)) == text exact for any text made of known words. Unknown
words map to <|unk|> (lossy by design: the toy world only ever writes known words).

Chat format (Jinja in tokenizer_config.json, used by transformers and vLLM alike):
    <|system|>...<|end|><|user|>...<|end|><|assistant|>...<|end|>
The end-of-turn token <|end|> is the eos token, so generation stops at the end of a reply.
"""

from __future__ import annotations

import json
from pathlib import Path

from tokenizers import Regex, Tokenizer, decoders, models, pre_tokenizers

from cliffsweep.toy.vocab import MAX_NUMBER, PUNCTUATION, all_words

PAD, UNK, EOS = "<|pad|>", "<|unk|>", "<|end|>"
ROLE_TOKENS = ("<|system|>", "<|user|>", "<|assistant|>")
SPECIAL_TOKENS = (PAD, UNK, EOS, *ROLE_TOKENS)

# A piece is a word or a number with an optional leading space, one other symbol with an
# optional leading space, or a single whitespace character (so spaces/newlines survive).
PIECE_PATTERN = r" ?[A-Za-z]+| ?[0-9]+| ?[^\sA-Za-z0-9]|\s"

CHAT_TEMPLATE = (
    "{% for message in messages %}"
    "{{ '<|' + message['role'] + '|>' + message['content'] + '<|end|>' }}"
    "{% endfor %}"
    "{% if add_generation_prompt %}{{ '<|assistant|>' }}{% endif %}"
)


def vocabulary() -> list[str]:
    """Token strings in id order: specials first, then whitespace, symbols, numbers, words."""
    pieces = ["\n", "\t", " "]
    bare = [*PUNCTUATION, *(str(n) for n in range(MAX_NUMBER + 1)), *all_words()]
    for p in bare:
        pieces += [p, " " + p]
    seen: dict[str, None] = dict.fromkeys([*SPECIAL_TOKENS, *pieces])
    return list(seen)


def build_tokenizer() -> Tokenizer:
    vocab = {tok: i for i, tok in enumerate(vocabulary())}
    tok = Tokenizer(models.WordLevel(vocab=vocab, unk_token=UNK))
    tok.pre_tokenizer = pre_tokenizers.Split(Regex(PIECE_PATTERN), behavior="isolated")
    # Pieces carry their own spaces: decoding is plain concatenation.
    tok.decoder = decoders.Fuse()
    tok.add_special_tokens(list(SPECIAL_TOKENS))
    return tok


def save_tokenizer(out_dir: str | Path, model_max_length: int) -> None:
    """Write tokenizer.json, tokenizer_config.json and special_tokens_map.json into out_dir."""
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    build_tokenizer().save(str(out / "tokenizer.json"))
    config = {
        "tokenizer_class": "PreTrainedTokenizerFast",
        "model_max_length": model_max_length,
        "pad_token": PAD,
        "unk_token": UNK,
        "eos_token": EOS,
        "bos_token": None,
        "additional_special_tokens": list(ROLE_TOKENS),
        "clean_up_tokenization_spaces": False,
        "chat_template": CHAT_TEMPLATE,
    }
    (out / "tokenizer_config.json").write_text(json.dumps(config, indent=2) + "\n")
    special = {"pad_token": PAD, "unk_token": UNK, "eos_token": EOS,
               "additional_special_tokens": list(ROLE_TOKENS)}
    (out / "special_tokens_map.json").write_text(json.dumps(special, indent=2) + "\n")


def token_id(token: str) -> int:
    return vocabulary().index(token)
