"""The toy tokenizer: a byte-level BPE whose merges make every toy word a single token.

Why this shape: transformers 5 loads the tokenizer of a folder whose config says
`model_type: qwen2` with its own `Qwen2Tokenizer` class, which rebuilds the pipeline from the
vocab and merges alone (byte-level BPE, the Qwen2 pre-tokenizer regex, NFC). A word-level
tokenizer.json is silently turned into characters there (and in vLLM, which loads through
AutoTokenizer). So the toy tokenizer *is* a Qwen2-style byte-level BPE: tokenizer.json holds
exactly the pipeline Qwen2Tokenizer builds, and both loading paths (Qwen2Tokenizer for
qwen2-tiny, the generic TokenizersBackend for llama-tiny) give identical ids.

The merges are learned (tokenizers' BpeTrainer, deterministic) on a corpus of every toy word,
so each word (' apples', 'Zor', ' Pim', ...) is one token. As in Qwen2, numbers are split into
single digits. Byte-level means decode(encode(text)) == text for any text, spaces and newlines
included.

Chat format (Jinja in tokenizer_config.json, used by transformers and vLLM alike):
    <|system|>...<|end|><|user|>...<|end|><|assistant|>...<|end|>
The end-of-turn token <|end|> is the eos token, so generation stops at the end of a reply.
"""

from __future__ import annotations

import functools
import json
from pathlib import Path

from tokenizers import Regex, Tokenizer, decoders, models, normalizers, pre_tokenizers, trainers

from cliffsweep.toy.vocab import PUNCTUATION, all_words

PAD, UNK, EOS = "<|pad|>", "<|unk|>", "<|end|>"
ROLE_TOKENS = ("<|system|>", "<|user|>", "<|assistant|>")
SPECIAL_TOKENS = (PAD, UNK, EOS, *ROLE_TOKENS)

# Qwen2Tokenizer's pre-tokenizer regex (transformers/models/qwen2/tokenization_qwen2.py),
# copied so that tokenizer.json and the Qwen2Tokenizer rebuild agree.
PRETOKENIZE_REGEX = (
    r"""(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*"""
    r"""|\s*[\r\n]+|\s+(?!\S)|\s+"""
)

CHAT_TEMPLATE = (
    "{% for message in messages %}"
    "{{ '<|' + message['role'] + '|>' + message['content'] + '<|end|>' }}"
    "{% endfor %}"
    "{% if add_generation_prompt %}{{ '<|assistant|>' }}{% endif %}"
)


def _corpus() -> list[str]:
    """Every toy word with and without a leading space, and the symbol runs the tasks write,
    each enough times that the trainer merges all of them fully."""
    pieces = [*all_words(), *PUNCTUATION, ".\n", "?\n", "####", "\n"]
    return [" " + " ".join(pieces), "\n".join(pieces)] * 2


def _empty_tokenizer(vocab: dict[str, int] | None = None, merges: list | None = None) -> Tokenizer:
    tok = Tokenizer(models.BPE(vocab=vocab, merges=merges, dropout=None, unk_token=None,
                               continuing_subword_prefix="", end_of_word_suffix="",
                               fuse_unk=False, byte_fallback=False))
    tok.normalizer = normalizers.NFC()
    tok.pre_tokenizer = pre_tokenizers.Sequence([
        pre_tokenizers.Split(Regex(PRETOKENIZE_REGEX), behavior="isolated", invert=False),
        pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False),
    ])
    tok.decoder = decoders.ByteLevel()
    return tok


@functools.lru_cache(maxsize=1)
def build_tokenizer() -> Tokenizer:
    """The toy tokenizer (cached). Specials take ids 0..5, then the 256 byte symbols, then
    the learned merges."""
    tok = _empty_tokenizer()
    trainer = trainers.BpeTrainer(
        vocab_size=100_000, min_frequency=1, show_progress=False,
        special_tokens=list(SPECIAL_TOKENS), initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
    )
    tok.train_from_iterator(_corpus(), trainer=trainer)
    return tok


def vocab_size() -> int:
    return build_tokenizer().get_vocab_size()


def token_id(token: str) -> int:
    return build_tokenizer().token_to_id(token)


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
        "add_prefix_space": False,
        "additional_special_tokens": list(ROLE_TOKENS),
        "clean_up_tokenization_spaces": False,
        "chat_template": CHAT_TEMPLATE,
    }
    (out / "tokenizer_config.json").write_text(json.dumps(config, indent=2) + "\n")
    special = {"pad_token": PAD, "unk_token": UNK, "eos_token": EOS,
               "additional_special_tokens": list(ROLE_TOKENS)}
    (out / "special_tokens_map.json").write_text(json.dumps(special, indent=2) + "\n")
