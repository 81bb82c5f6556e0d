"""Decoder architectures, offline: parameter counts and transformers configs of the backbones a
sweep names, without downloading them.

`arch_for(path)` reads a local model's `config.json` (toy models, `smollm2:`, local folders) and
falls back to PUBLISHED, a table of the cliff paper's backbones (000 Sec. 3: Qwen2.5, Qwen3,
Llama-3.2, Llama-3.1, OLMo2, up to 8B) copied from each hub repository's `config.json`
(https://huggingface.co/<hub id>/blob/main/config.json). The parameter counts these give are
checked against the counts the model cards publish and against transformers' own models
(tests/test_plan.py). `hf_config()` turns an Arch back into a transformers config, so that
benchmarks can build random-weight models of real sizes with no hub (bench/bench_gpu.py).
"""

from __future__ import annotations

import json
import os
from dataclasses import dataclass, replace
from typing import Literal


@dataclass(frozen=True)
class Arch:
    """A Llama-style decoder (RMSNorm, RoPE, GQA attention, SwiGLU MLP), or GPT-2 (001's
    backbone: LayerNorms with biases, learned positions, a fused qkv projection, a GELU MLP of
    two matrices with biases)."""

    model_type: Literal["llama", "qwen2", "qwen3", "olmo2", "gpt2"]
    hidden: int
    layers: int
    heads: int
    kv_heads: int
    intermediate: int
    vocab: int
    tied: bool
    head_dim: int = 0
    """0 = hidden // heads (Qwen3 sets 128 explicitly)."""
    max_positions: int = 32768
    source: str = ""
    """Where the numbers come from (a config.json path or the hub repository)."""

    @property
    def hd(self) -> int:
        return self.head_dim or self.hidden // self.heads

    # --- parameter counts (elements) --------------------------------------------------------
    def layer_linears(self) -> dict[str, tuple[int, int]]:
        """(in, out) of each Linear of one decoder layer."""
        h, q, kv, i = self.hidden, self.heads * self.hd, self.kv_heads * self.hd, self.intermediate
        if self.model_type == "gpt2":  # transformers' Conv1D layers, the same matmuls
            return {"attn.c_attn": (h, 3 * h), "attn.c_proj": (h, h), "mlp.c_fc": (h, i), "mlp.c_proj": (i, h)}
        return {"q_proj": (h, q), "k_proj": (h, kv), "v_proj": (h, kv), "o_proj": (q, h),
                "gate_proj": (h, i), "up_proj": (h, i), "down_proj": (i, h)}

    def layer_params(self) -> int:
        n = sum(a * b for a, b in self.layer_linears().values())
        if self.model_type == "gpt2":  # every Linear's bias, two LayerNorms of weight and bias
            return n + sum(b for _, b in self.layer_linears().values()) + 4 * self.hidden
        n += 2 * self.hidden  # the two RMSNorms (OLMo2: post-attention and post-MLP norms)
        q, kv = self.heads * self.hd, self.kv_heads * self.hd
        if self.model_type == "qwen2":
            n += q + 2 * kv  # q/k/v biases
        elif self.model_type == "qwen3":
            n += 2 * self.hd  # per-head q_norm and k_norm
        elif self.model_type == "olmo2":
            n += q + kv  # q_norm and k_norm over the whole projection
        return n

    @property
    def embedding_params(self) -> int:
        """The input embeddings (GPT-2: tokens and learned positions)."""
        positions = self.max_positions * self.hidden if self.model_type == "gpt2" else 0
        return self.vocab * self.hidden + positions

    @property
    def final_norm_params(self) -> int:
        return 2 * self.hidden if self.model_type == "gpt2" else self.hidden  # LayerNorm: weight and bias

    @property
    def params(self) -> int:
        """Every distinct parameter (a tied head counted once)."""
        head = 0 if self.tied else self.vocab * self.hidden
        return self.embedding_params + head + self.layers * self.layer_params() + self.final_norm_params

    @property
    def matmul_params(self) -> int:
        """Parameters that multiply activations: all but the input embedding (a lookup), plus the
        LM head (tied or not). The N of FLOPs = 6 N D."""
        return self.layers * self.layer_params() + self.final_norm_params + self.vocab * self.hidden

    def lora_params(self, rank: int) -> int:
        """Adapter parameters of rank `rank` on every Linear of every layer (peft 'all-linear'
        leaves the LM head out)."""
        return self.layers * sum(rank * (a + b) for a, b in self.layer_linears().values())

    def hf_config(self, **overrides):
        """The transformers config of this architecture (random init, fp32 unless overridden)."""
        import transformers

        if self.model_type == "gpt2":
            kw = dict(n_embd=self.hidden, n_layer=self.layers, n_head=self.heads, n_inner=self.intermediate,
                      vocab_size=self.vocab, n_positions=self.max_positions, tie_word_embeddings=self.tied)
            kw.update(overrides)
            return transformers.GPT2Config(**kw)
        cls = {"llama": "LlamaConfig", "qwen2": "Qwen2Config", "qwen3": "Qwen3Config", "olmo2": "Olmo2Config"}
        kw = dict(hidden_size=self.hidden, num_hidden_layers=self.layers, num_attention_heads=self.heads,
                  num_key_value_heads=self.kv_heads, intermediate_size=self.intermediate,
                  vocab_size=self.vocab, tie_word_embeddings=self.tied, max_position_embeddings=self.max_positions,
                  hidden_act="silu", head_dim=self.hd)  # explicit: Qwen3Config defaults to 128
        kw.update(overrides)
        return getattr(transformers, cls[self.model_type])(**kw)


def from_config(cfg: dict, source: str) -> Arch:
    """An Arch from a parsed config.json (the Llama-style families above, and GPT-2)."""
    kind = cfg.get("model_type")
    if kind == "gpt2":  # GPT2Config's own names and defaults (n_inner None: 4 x n_embd)
        h = cfg.get("n_embd", 768)
        return Arch(model_type="gpt2", hidden=h, layers=cfg.get("n_layer", 12), heads=cfg.get("n_head", 12),
                    kv_heads=cfg.get("n_head", 12), intermediate=cfg.get("n_inner") or 4 * h,
                    vocab=cfg.get("vocab_size", 50257), tied=bool(cfg.get("tie_word_embeddings", True)),
                    max_positions=cfg.get("n_positions", 1024), source=source)
    if kind not in ("llama", "qwen2", "qwen3", "olmo2"):
        raise ValueError(f"{source}: model_type {kind!r} is not one of llama, qwen2, qwen3, olmo2, gpt2")
    return Arch(
        model_type=kind, hidden=cfg["hidden_size"], layers=cfg["num_hidden_layers"],
        heads=cfg["num_attention_heads"], kv_heads=cfg.get("num_key_value_heads") or cfg["num_attention_heads"],
        intermediate=cfg["intermediate_size"], vocab=cfg["vocab_size"],
        tied=bool(cfg.get("tie_word_embeddings", False)),
        head_dim=cfg.get("head_dim") or 0, max_positions=cfg.get("max_position_embeddings", 32768), source=source)


def _hub(model_type, hidden, layers, heads, kv, inter, vocab, tied, head_dim=0, max_pos=32768) -> Arch:
    return Arch(model_type, hidden, layers, heads, kv, inter, vocab, tied, head_dim, max_pos)


# Copied from each repository's config.json on the Hugging Face hub (the instruct variants the
# cliff paper uses; a base model has the same architecture). Qwen3 "instruct" = the post-trained
# Qwen/Qwen3-* checkpoints (hybrid thinking models; no separate -Instruct repo below 2507).
PUBLISHED: dict[str, Arch] = {
    hub: replace(arch, source=f"https://huggingface.co/{hub}/blob/main/config.json")
    for hub, arch in {
        "Qwen/Qwen2.5-0.5B-Instruct": _hub("qwen2", 896, 24, 14, 2, 4864, 151936, True),
        "Qwen/Qwen2.5-1.5B-Instruct": _hub("qwen2", 1536, 28, 12, 2, 8960, 151936, True),
        "Qwen/Qwen2.5-3B-Instruct": _hub("qwen2", 2048, 36, 16, 2, 11008, 151936, True),
        "Qwen/Qwen2.5-7B-Instruct": _hub("qwen2", 3584, 28, 28, 4, 18944, 152064, False),
        "Qwen/Qwen3-0.6B": _hub("qwen3", 1024, 28, 16, 8, 3072, 151936, True, 128, 40960),
        "Qwen/Qwen3-1.7B": _hub("qwen3", 2048, 28, 16, 8, 6144, 151936, True, 128, 40960),
        "Qwen/Qwen3-4B": _hub("qwen3", 2560, 36, 32, 8, 9728, 151936, True, 128, 40960),
        "Qwen/Qwen3-8B": _hub("qwen3", 4096, 36, 32, 8, 12288, 151936, False, 128, 40960),
        "meta-llama/Llama-3.2-1B-Instruct": _hub("llama", 2048, 16, 32, 8, 8192, 128256, True, 64, 131072),
        "meta-llama/Llama-3.2-3B-Instruct": _hub("llama", 3072, 28, 24, 8, 8192, 128256, True, 128, 131072),
        "meta-llama/Llama-3.1-8B-Instruct": _hub("llama", 4096, 32, 32, 8, 14336, 128256, False, 128, 131072),
        "allenai/OLMo-2-0425-1B-Instruct": _hub("olmo2", 2048, 16, 16, 16, 8192, 100352, False, 0, 4096),
        "allenai/OLMo-2-1124-7B-Instruct": _hub("olmo2", 4096, 32, 32, 32, 11008, 100352, False, 0, 4096),
    }.items()
}


FAMILIES = {"qwen2": "Qwen2.5", "qwen3": "Qwen3", "llama": "Llama-3", "olmo2": "OLMo-2", "gpt2": "GPT-2"}
"""Display name of each architecture's model family (000 Sec. 3; Llama-3.2 and 3.1 are one
family in the paper's Fig. 9, "Llama3.X")."""


def family_and_size(path: str) -> tuple[str, float] | None:
    """(family, parameters in billions) of spec path `path`, with nothing built or downloaded:
    PUBLISHED (family by architecture: FAMILIES), else the config.json of a model already on
    this machine (toy models: "toy <type>"; `smollm2:`: "SmolLM2"); None when neither knows it
    (the analysis then shows the model without a size)."""
    if path in PUBLISHED:
        arch = PUBLISHED[path]
        return FAMILIES[arch.model_type], arch.params / 1e9
    from cliffsweep import realmodels
    from cliffsweep.toy.cache import CACHE_DIR, packaged_path

    if path.startswith("toy:"):
        folders, family = [packaged_path(path[4:]), CACHE_DIR / path[4:]], "toy {}"
    elif realmodels.is_real_path(path):
        folders, family = [realmodels.cache_folder(path[len(realmodels.PREFIX):])], "SmolLM2"
    else:
        folders, family = [os.path.expanduser(path)], "{}"
    for folder in folders:
        cfg = os.path.join(folder, "config.json")
        if os.path.isfile(cfg):
            try:
                with open(cfg) as f:
                    arch = from_config(json.load(f), cfg)
            except (ValueError, KeyError, json.JSONDecodeError):
                return None
            return family.format(FAMILIES[arch.model_type]), arch.params / 1e9
    return None


def local_folder(path: str) -> str | None:
    """The folder of a model that is (or can be built) on this machine without the hub, else
    None. Toy and smollm2 models are built (and cached) on first use."""
    from cliffsweep import realmodels

    if path.startswith("toy:") or realmodels.is_real_path(path):
        from cliffsweep.models import resolve_model

        return resolve_model(path)
    folder = os.path.expanduser(path)
    return folder if os.path.isdir(folder) else None


class UnknownArch(ValueError):
    """A model `plan` cannot size; the message says what it needs."""


def arch_for(path: str) -> Arch:
    """The architecture of spec path `path`: its local config.json, else PUBLISHED."""
    folder = local_folder(path)
    if folder is not None:
        cfg_path = os.path.join(folder, "config.json")
        try:
            with open(cfg_path) as f:
                return from_config(json.load(f), cfg_path)
        except FileNotFoundError:
            raise UnknownArch(f"{path}: the folder has no config.json (a transformers model folder has one: "
                              "save_pretrained writes it)") from None
        except (ValueError, KeyError) as e:
            raise UnknownArch(f"{cfg_path}: cannot read the architecture from it ({type(e).__name__}: {e})") from None
    if path in PUBLISHED:
        return PUBLISHED[path]
    raise UnknownArch(f"{path}: cannot size this model: no local folder and not in the table of published "
                      f"configs ({', '.join(sorted(PUBLISHED)[:4])}, ...). Point path: at a local copy with its "
                      "config.json, or add an Arch entry to PUBLISHED in cliffsweep/planner/archs.py (hidden, layers, heads, "
                      "kv_heads, intermediate, vocab from the model's config.json)")
