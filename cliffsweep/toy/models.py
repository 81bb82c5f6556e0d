"""Toy base models: architectures, untrained folders, and the packaged (pretrained) weights.

Both toy models use SwiGLU MLPs (gate/up/down) and multi-head attention with q/k/v/o
projections, exactly like the real backbones, so SIB, LoRA and every other method apply
unchanged. head_dim = 32 is one of the head sizes vLLM's CPU attention supports.

Embeddings are untied (our choice): with tied embeddings, pretraining pushed every token that
never occurs in it (the learn entities) to one shared direction (cosine 0.998), so SFT could
not tell the learn facts apart. Untied, an unseen token keeps its distinct random embedding.
"""

from __future__ import annotations

import json
from pathlib import Path

from cliffsweep.toy import TOY_MODELS
from cliffsweep.toy.tokenizer import EOS, PAD, save_tokenizer, token_id, vocab_size

MAX_SEQ_LEN = 256
"""Context length of the toy models (max_position_embeddings)."""

WEIGHTS_DIR = Path(__file__).parent / "weights"

_COMMON = dict(
    hidden_size=64, intermediate_size=256, num_hidden_layers=3, num_attention_heads=2,
    max_position_embeddings=MAX_SEQ_LEN, rms_norm_eps=1e-6, tie_word_embeddings=False,
    hidden_act="silu", initializer_range=0.02,
)
# name -> (config class name, its kwargs beyond _COMMON)
ARCHS: dict[str, tuple[str, dict]] = {
    "qwen2-tiny": ("Qwen2Config", dict(num_key_value_heads=1, rope_theta=10000.0)),  # GQA
    "llama-tiny": ("LlamaConfig", dict(num_key_value_heads=2, rope_theta=10000.0)),  # MHA
}
assert set(ARCHS) == set(TOY_MODELS), "TOY_MODELS and ARCHS disagree"


def check_name(name: str) -> None:
    if name not in ARCHS:
        raise KeyError(f"unknown toy model {name!r}; valid: {sorted(ARCHS)}")


def model_config(name: str):
    """The transformers config of toy model `name` (fp32, tied embeddings, 256 positions)."""
    import transformers

    check_name(name)
    cls_name, extra = ARCHS[name]
    cls = getattr(transformers, cls_name)
    return cls(
        vocab_size=vocab_size(), pad_token_id=token_id(PAD), eos_token_id=token_id(EOS),
        bos_token_id=None, dtype="float32", **_COMMON, **extra,
    )


def new_model(name: str, seed: int = 0):
    """A freshly initialised (untrained) model of architecture `name`."""
    import torch
    from transformers import AutoModelForCausalLM

    torch.manual_seed(seed)
    return AutoModelForCausalLM.from_config(model_config(name), dtype=torch.float32)


def save_folder(model, out_dir: str | Path) -> str:
    """Write model + tokenizer + chat template + generation config as one HF folder."""
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    model.save_pretrained(out, safe_serialization=True)
    save_tokenizer(out, MAX_SEQ_LEN)
    gen = {"eos_token_id": token_id(EOS), "pad_token_id": token_id(PAD), "do_sample": False}
    (out / "generation_config.json").write_text(json.dumps(gen, indent=2) + "\n")
    return str(out)


def random_model(name: str, out_dir: str, seed: int = 0) -> str:
    """An untrained HF folder with the architecture, tokenizer and chat template of toy model
    `name`; returns its path. For tests of backends and methods that need no trained weights."""
    return save_folder(new_model(name, seed), out_dir)
