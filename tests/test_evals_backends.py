"""Eval backends on tiny random toy models: one real vLLM engine serves several checkpoints in
turn (in-place reload, LoRARequest) and must give exactly what transformers (+ peft) gives for
each; the canary must catch an engine that serves the wrong weights.

Random weights produce garbage text; that is fine: greedy garbage is deterministic, differs
between checkpoints, and must be identical between backends.
"""

from __future__ import annotations

import shutil

import pytest
import torch

from cliffsweep.evals.backends import CANARY_FILE, CheckpointRef, StaleWeightsError, build_backend
from cliffsweep.evals.canary import canary_distance, model_logprobs, read_canary, write_canary
from cliffsweep.evals.runner import evaluate_task
from cliffsweep.evals.scoring import logprob_choice
from cliffsweep.evals.tasks import build_task
from cliffsweep.evals.tasks.base import Sampling
from cliffsweep.toy.tasks import ToyFacts

PROMPTS = ["What is 3 + 4 ?", "Tom has 5 apples and eats 2 .", "How many legs does a cat have ?"]
SAMPLING = Sampling(max_tokens=24, stop=())


def _perturbed(base: str, out: str, seed: int | None, scale: float = 0.5) -> str:
    """A different full checkpoint: base weights + relative Gaussian noise (none if seed is
    None), saved with its canary. The special tokens' rows of the tied embedding are zeroed so
    that their logits are 0 and random greedy text runs to max_tokens instead of ending at once
    or emitting only skipped specials (every checkpoint's output would be the same '')."""
    from transformers import AutoModelForCausalLM, AutoTokenizer

    model = AutoModelForCausalLM.from_pretrained(base, dtype=torch.float32)
    tok = AutoTokenizer.from_pretrained(base)
    with torch.no_grad():
        if seed is not None:
            gen = torch.Generator().manual_seed(seed)
            for p in model.parameters():
                p.add_(torch.randn(p.shape, generator=gen) * scale * p.abs().mean())
        model.get_input_embeddings().weight[list(tok.added_tokens_decoder)] = 0.0
    model.save_pretrained(out)
    tok.save_pretrained(out)
    if seed is not None:
        write_canary(model, tok, out)
    return out


def _lora(base: str, out: str, seed: int) -> str:
    """A peft adapter with random A and B (peft's default B = 0 would be the identity)."""
    from peft import LoraConfig, get_peft_model
    from transformers import AutoModelForCausalLM, AutoTokenizer

    torch.manual_seed(seed)
    cfg = LoraConfig(r=8, lora_alpha=16, target_modules="all-linear", init_lora_weights=False)
    model = get_peft_model(AutoModelForCausalLM.from_pretrained(base, dtype=torch.float32), cfg)
    model.save_pretrained(out)
    write_canary(model, AutoTokenizer.from_pretrained(base), out)
    return out


@pytest.fixture(scope="module")
def ckpts(tmp_path_factory):
    from cliffsweep.toy.models import random_model

    root = tmp_path_factory.mktemp("ckpts")
    base = _perturbed(random_model("qwen2-tiny", str(root / "random"), seed=0), str(root / "base"), None)
    a = _perturbed(base, str(root / "a"), seed=1)
    b = _perturbed(base, str(root / "b"), seed=2)
    # Weights of `a` with the canary of `b`: what an engine serving stale weights looks like.
    mismatched = str(root / "mismatched")
    shutil.copytree(a, mismatched)
    shutil.copy(f"{b}/{CANARY_FILE}", f"{mismatched}/{CANARY_FILE}")
    return {"base": base, "a": a, "b": b, "lora": _lora(base, str(root / "lora"), seed=3),
            "mismatched": mismatched}


@pytest.fixture(scope="module")
def vllm_backend(ckpts):
    # In-process engine core and eager mode: engine start ~10 s instead of ~90 s here (no
    # spawned processes re-importing torch/vLLM, no torch.compile); same reload code paths.
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("VLLM_ENABLE_V1_MULTIPROCESSING", "0")
        backend = build_backend("vllm", ckpts["base"], max_model_len=256, kv_cache_mb=64, enforce_eager=True)
    yield backend
    backend.close()


@pytest.fixture(scope="module")
def hf_backend(ckpts):
    backend = build_backend("hf", ckpts["base"], batch_size=2)  # 2 < len(PROMPTS): padding is exercised
    yield backend
    backend.close()


@pytest.mark.vllm
def test_full_reloads_serve_each_checkpoint(vllm_backend, hf_backend, ckpts):
    outputs = {}
    for name in ["a", "b", "a", "base"]:  # back and forth, then the base weights again
        ref = CheckpointRef(ckpts[name] if name != "base" else None)
        vllm_backend.load(ref)
        hf_backend.load(ref)
        got = vllm_backend.generate(PROMPTS, SAMPLING)
        assert got == hf_backend.generate(PROMPTS, SAMPLING), name
        assert outputs.setdefault(name, got) == got, f"{name} changed between loads"
        assert 0 < vllm_backend.last_load_seconds  # measured (docs/benchmarks.md), never bounded in a test
    assert len({tuple(v) for v in outputs.values()}) == 3  # the checkpoints really differ


@pytest.mark.vllm
def test_weights_held_in_memory_serve_what_their_folder_serves(vllm_backend, hf_backend, ckpts):
    """Issue 61 part 2: a checkpoint's weights handed over in memory (no file) serve exactly
    what the same checkpoint's folder serves, on both engines: read from the folder's
    safetensors, or taken from a live model as a trainer would (`held_from_model`). An adapter
    after held weights applies to the base, not to them."""
    from transformers import AutoModelForCausalLM, AutoTokenizer

    from cliffsweep.evals.backends.held import held_from_folder, held_from_model

    live = AutoModelForCausalLM.from_pretrained(ckpts["b"], dtype=torch.float32)
    held = {"a": held_from_folder(ckpts["a"]), "b": held_from_model(live, AutoTokenizer.from_pretrained(ckpts["b"]))}
    assert set(held["b"].tensors) == set(held["a"].tensors)  # a live model's names are the file's
    for name in ["a", "b", "a"]:  # each load really changes the weights
        vllm_backend.load(CheckpointRef(ckpts[name]))
        from_folder = vllm_backend.generate(PROMPTS, SAMPLING)
        for backend in (vllm_backend, hf_backend):
            backend.load(CheckpointRef(None))
            assert backend.load(CheckpointRef(None, held=held[name])) < backend.canary_tolerance
            assert backend.generate(PROMPTS, SAMPLING) == from_folder, (backend.name, name)
    lora = CheckpointRef(ckpts["lora"], "lora")
    vllm_backend.load(lora)
    hf_backend.load(lora)
    assert vllm_backend.generate(PROMPTS, SAMPLING) == hf_backend.generate(PROMPTS, SAMPLING)


def test_a_tied_tensor_is_held_once_under_its_first_name():
    """As save_pretrained drops a tied LM head: one tensor, two names -> the first name only."""
    from cliffsweep.evals.backends.held import untied

    embed, other = torch.zeros(4, 2), torch.ones(3)
    assert list(untied({"model.embed_tokens.weight": embed, "lm_head.weight": embed, "norm.weight": other})) == [
        "model.embed_tokens.weight", "norm.weight"]
    assert len(untied({"a": embed[:2], "b": embed[2:]})) == 2  # views of one storage, not one tensor


@pytest.mark.vllm
def test_the_canary_catches_held_weights_that_are_not_the_checkpoint_s(vllm_backend, hf_backend, ckpts):
    """Weights of `a` handed over with the canary of `b`: both engines refuse them, as they
    refuse such a folder; a good hand-off still loads afterwards. Held weights are full weights
    with no folder: anything else is refused where it is built."""
    from cliffsweep.evals.backends.base import HeldWeights
    from cliffsweep.evals.backends.held import held_from_folder

    a, b = held_from_folder(ckpts["a"]), held_from_folder(ckpts["b"])
    for backend in (vllm_backend, hf_backend):
        backend.load(CheckpointRef(None, held=b))
        with pytest.raises(StaleWeightsError, match="held in memory"):
            backend.load(CheckpointRef(None, held=HeldWeights(a.tensors, b.canary)))
        backend.load(CheckpointRef(None, held=a))
    with pytest.raises(ValueError, match="no folder"):
        CheckpointRef(ckpts["a"], held=a)
    with pytest.raises(ValueError, match="do not fit"):  # a name the model lacks is not dropped silently
        hf_backend.load(CheckpointRef(None, held=HeldWeights({**a.tensors, "extra.weight": torch.zeros(1)}, a.canary)))


@pytest.mark.vllm
def test_lora_request_matches_hf_peft(vllm_backend, hf_backend, ckpts):
    vllm_backend.load(CheckpointRef(ckpts["a"]))  # a full finetune first: LoRA must apply to the base
    hf_backend.load(CheckpointRef(None))
    base_out = hf_backend.generate(PROMPTS, SAMPLING)
    ref = CheckpointRef(ckpts["lora"], "lora")
    vllm_backend.load(ref)
    hf_backend.load(ref)
    got = vllm_backend.generate(PROMPTS, SAMPLING)
    assert got == hf_backend.generate(PROMPTS, SAMPLING)
    assert got != base_out  # the adapter changes the output
    vllm_backend.load(CheckpointRef(None))
    assert vllm_backend.generate(PROMPTS, SAMPLING) == base_out


@pytest.mark.vllm
def test_an_engine_without_lora_serves_an_adapter_merged_into_the_base(vllm_backend, hf_backend, ckpts, monkeypatch):
    """What CPU evaluators do (orchestrator/pool.engine_options): W0 + (alpha / r) B A in the
    engine's own weights instead of LoRA layers at every step; the adapter's canary checks it,
    and the output is hf + peft's. The base tensors merged into stay as they were: the same
    adapter merged twice serves the same, and the base is served again after it."""
    from cliffsweep.evals.backends.held import held_tensors, merged_adapter

    hf_backend.load(CheckpointRef(None))
    base_out = hf_backend.generate(PROMPTS, SAMPLING)
    ref = CheckpointRef(ckpts["lora"], "lora")
    hf_backend.load(ref)
    with_peft = hf_backend.generate(PROMPTS, SAMPLING)
    assert with_peft != base_out
    monkeypatch.setattr(vllm_backend, "enable_lora", False)
    vllm_backend.load(CheckpointRef(ckpts["a"]))  # a full finetune first: the adapter applies to the base
    for _ in range(2):
        assert vllm_backend.load(ref) < vllm_backend.canary_tolerance
        assert vllm_backend.generate(PROMPTS, SAMPLING) == with_peft
        assert vllm_backend._lora is None  # served by the weights, no adapter request
    vllm_backend.load(CheckpointRef(None))
    assert vllm_backend.generate(PROMPTS, SAMPLING) == base_out
    base = held_tensors(ckpts["base"])
    merged = merged_adapter(base, ckpts["lora"]).tensors
    assert all(torch.equal(base[k], held_tensors(ckpts["base"])[k]) for k in base)  # left as they were
    from safetensors import safe_open

    with safe_open(f"{ckpts['lora']}/adapter_model.safetensors", "pt") as f:
        adapted = {k.removeprefix("base_model.model.").replace(".lora_A", "") for k in f.keys() if ".lora_A." in k}
    assert {k for k in base if not torch.equal(merged[k], base[k])} == adapted  # every adapted linear, no other
    assert len(adapted) == 7 * 3  # q k v o gate up down in each of qwen2-tiny's 3 layers


@pytest.mark.vllm
def test_canary_catches_mismatched_weights(vllm_backend, ckpts):
    vllm_backend.load(CheckpointRef(ckpts["b"]))
    with pytest.raises(StaleWeightsError, match="canary"):
        vllm_backend.load(CheckpointRef(ckpts["mismatched"]))
    vllm_backend.load(CheckpointRef(ckpts["a"]))  # a good checkpoint still loads afterwards


@pytest.mark.vllm
def test_canary_catches_a_skipped_reload(vllm_backend, ckpts, monkeypatch):
    vllm_backend.load(CheckpointRef(ckpts["a"]))
    monkeypatch.setattr(vllm_backend, "_reload", lambda path: None)  # the engine ignores the reload
    with pytest.raises(StaleWeightsError) as err:
        vllm_backend.load(CheckpointRef(ckpts["b"]))
    # The message shows that the engine still serves the previous checkpoint.
    assert float(str(err.value).rsplit(": ", 1)[1]) < vllm_backend.canary_tolerance


@pytest.mark.vllm
def test_canary_noise_is_far_below_tolerance(vllm_backend, ckpts):
    """The tolerance must separate engine numerics (vLLM vs the HF canary, same weights) from
    a real checkpoint change."""
    a, b = read_canary(ckpts["a"]), read_canary(ckpts["b"])
    measured = vllm_backend.load(CheckpointRef(ckpts["a"]))  # what each evaluation of it stores
    noise = canary_distance(a.logprobs, vllm_backend.served_logprobs(a.token_ids))
    assert measured == pytest.approx(noise, rel=1e-6, abs=1e-12)
    assert noise < vllm_backend.canary_tolerance / 100
    assert canary_distance(a.logprobs, b.logprobs) > 10 * vllm_backend.canary_tolerance


def test_hf_backend_canary_catches_mismatched_weights(hf_backend, ckpts):
    assert hf_backend.load(CheckpointRef(None)) is None  # the base: its log-probs become the reference
    a = read_canary(ckpts["a"])
    measured = hf_backend.load(CheckpointRef(ckpts["a"]))
    assert measured == pytest.approx(canary_distance(a.logprobs, model_logprobs(hf_backend.model, a.token_ids)))
    with pytest.raises(StaleWeightsError):
        hf_backend.load(CheckpointRef(ckpts["mismatched"]))
    with pytest.raises(FileNotFoundError, match="no canary"):
        hf_backend.load(CheckpointRef(ckpts["base"]))  # a full checkpoint must carry a canary


@pytest.mark.vllm
def test_runner_same_result_on_both_backends(vllm_backend, hf_backend, ckpts, real_data):
    # Zero-shot GSM8K questions fit the toy models' 256 positions (5-shot and ChemL3 do not).
    task = build_task("gsm8k", {"path": str(real_data / "gsm8k"), "n_eval": 4, "max_tokens": 16,
                                "protocol": "zeroshot"})
    results = []
    for backend in (vllm_backend, hf_backend):
        backend.load(CheckpointRef(ckpts["b"]))
        results.append(evaluate_task(backend, task))
    v, h = results
    assert v.samples == h.samples and v.n == 4 and v.task == "gsm8k"
    assert [sid for sid, _, _ in v.samples] == [ex.id for ex in task.eval_examples()]
    assert v.accuracy == sum(c for _, c, _ in v.samples) / 4
    assert set(v.extra) == {"strict_match", "flexible_extract", "numeric_match"}
    assert v.scorer_version == task.scorer_version == "gsm8k-v2+zeroshot" and 0 < v.seconds


CHAT = ({"role": "user", "content": "What is 3 + 4 ?"}, {"role": "assistant", "content": "7"},
        {"role": "user", "content": "What is 2 + 2 ?"})
"""A few-shot prompt as earlier chat turns (GSM8K fewshot_chat sends these)."""


def _manual_logprobs(backend, prompt, letters) -> list[float]:
    """Unbatched, unpadded reference: the canary's per-token log-probs of prompt + letter."""
    from cliffsweep.evals.backends.base import continuation_ids, prompt_ids
    from cliffsweep.evals.canary import model_logprobs

    p = prompt_ids(backend.tokenizer, prompt)
    out = []
    for letter in letters:
        c = continuation_ids(backend.tokenizer, letter)
        out.append(sum(model_logprobs(backend.model, p + c)[len(p) - 1:]))
    return out


@pytest.mark.vllm
@pytest.mark.parametrize("name,kind,letters", [
    ("b", "full", ("A", "B", "C", "D")),        # one token each: vLLM's logprob_token_ids path
    ("lora", "lora", ("A", "B", "C", "D")),
    ("b", "full", ("A", "B", " 7")),            # " 7": two tokens (character vocabulary): prompt_logprobs
])
def test_letter_logprobs_match_between_backends(vllm_backend, hf_backend, ckpts, name, kind, letters):
    prompts = [*PROMPTS, CHAT]
    ref = CheckpointRef(ckpts[name], kind)
    vllm_backend.load(ref)
    hf_backend.load(ref)
    v = vllm_backend.continuation_logprobs(prompts, letters)
    h = hf_backend.continuation_logprobs(prompts, letters)
    assert len(v) == len(h) == len(prompts) and all(len(row) == len(letters) for row in v)
    for vr, hr, prompt in zip(v, h, prompts):
        assert max(abs(a - b) for a, b in zip(vr, hr)) < 1e-4, (vr, hr)
        manual = _manual_logprobs(hf_backend, prompt, letters)
        assert max(abs(a - b) for a, b in zip(hr, manual)) < 1e-5
        assert all(x < 0 for x in vr) and len(set(vr)) == len(letters)
    base = CheckpointRef(None)
    vllm_backend.load(base)
    assert vllm_backend.continuation_logprobs(prompts, letters) != v  # the checkpoint matters


@pytest.mark.vllm
def test_a_vllm_without_logprob_token_ids_scores_letters_alike(vllm_backend, ckpts, monkeypatch):
    """vLLM 0.25 (the GPU machines' torch 2.11 pins it) has no SamplingParams.logprob_token_ids:
    the compatibility path (prompt_logprobs over prompt + letter) gives the same scores."""
    from cliffsweep.evals.backends import vllm_backend as vb

    prompts, letters = [*PROMPTS, CHAT], ("A", "B", "C", "D")
    vllm_backend.load(CheckpointRef(ckpts["b"], "full"))
    fast = vllm_backend.continuation_logprobs(prompts, letters)
    monkeypatch.setattr(vb, "has_logprob_token_ids", lambda: False)
    compat = vllm_backend.continuation_logprobs(prompts, letters)
    for f, c in zip(fast, compat):
        assert max(abs(a - b) for a, b in zip(f, c)) < 1e-4, (f, c)


@pytest.mark.vllm
def test_chat_turn_prompts_match_between_backends(vllm_backend, hf_backend, ckpts):
    from cliffsweep.evals.backends.base import render_chat

    text = render_chat(hf_backend.tokenizer, CHAT)
    assert text.index("3 + 4") < text.index("7") < text.index("2 + 2")
    for backend in (vllm_backend, hf_backend):
        backend.load(CheckpointRef(ckpts["a"]))
    got = vllm_backend.generate([CHAT, PROMPTS[0]], SAMPLING)
    assert got == hf_backend.generate([CHAT, PROMPTS[0]], SAMPLING)
    assert got[0] != got[1]
    with pytest.raises(ValueError, match="end with a user message"):
        render_chat(hf_backend.tokenizer, CHAT[:2])


class _ToyFactsByLogprob(ToyFacts):
    """toy_facts with letter log-prob scoring, as ChemL3 has it (ChemL3's prompts are longer
    than the toy models' 256 positions)."""

    choice_letters = ("A", "B", "C", "D")


@pytest.mark.vllm
def test_runner_logprob_metric_same_on_both_backends(vllm_backend, hf_backend, ckpts):
    task = _ToyFactsByLogprob(ToyFacts.Params(n_eval=12))
    results = []
    for backend in (vllm_backend, hf_backend):
        backend.load(CheckpointRef(ckpts["b"]))
        results.append(evaluate_task(backend, task))
    v, h = results
    assert set(v.extra) == {"logprob_accuracy"} and v.extra == h.extra and v.samples == h.samples
    examples = task.eval_examples()
    rows = hf_backend.continuation_logprobs([ex.chat() for ex in examples], task.choice_letters)
    expected = sum(logprob_choice(r) == ex.reference for r, ex in zip(rows, examples)) / len(examples)
    assert v.extra["logprob_accuracy"] == expected and v.n == 12


@pytest.mark.vllm
def test_lm_eval_requests_are_served_alike_by_both_backends(vllm_backend, hf_backend, ckpts):
    """The token-level primitives lm-eval's requests use (evals/harness.py: `complete`,
    `score_tokens`) give the same answers on vLLM as on transformers, on a checkpoint loaded in
    place: an lm-eval generation task item for item, and log-likelihoods with their greedy flags."""
    import math

    from cliffsweep.evals.harness import evaluate_lm_eval
    from cliffsweep.evals.tasks import build_task

    for b in (vllm_backend, hf_backend):
        b.load(CheckpointRef(ckpts["a"]))
    task = build_task("lm_eval", {"task": "toy_arith_lm", "include_path": "toy", "apply_chat_template": True,
                                  "limit": 12})
    on_vllm, on_hf = evaluate_lm_eval(vllm_backend, task), evaluate_lm_eval(hf_backend, task)
    assert on_vllm.n == on_hf.n == 12 and on_vllm.samples == on_hf.samples and on_vllm.extra == on_hf.extra
    tok = hf_backend.tokenizer
    pairs = [(tok.encode(p), tok.encode(" " + c)) for p in PROMPTS for c in ("4", "four", "the answer is 4")]
    for (lv, gv), (lh, gh) in zip(vllm_backend.score_tokens(pairs), hf_backend.score_tokens(pairs)):
        assert math.isclose(lv, lh, rel_tol=1e-3, abs_tol=1e-3) and gv == gh, (lv, lh, gv, gh)
    assert vllm_backend.max_length == 256


@pytest.mark.vllm
def test_a_loss_task_reads_alike_on_both_backends(vllm_backend, hf_backend, ckpts, tmp_path):
    """A loss task (issue 30 part 4) from prompt log-probabilities on vLLM equals transformers'
    forward pass, item for item: answers after chat prompts and a text file's documents."""
    text = tmp_path / "held.txt"
    text.write_text("".join(f"Ava had {k} pens and gave {k - 1} away.\n" for k in range(2, 12)))
    for params in ({"of": {"name": "toy_arith", "params": {"n_eval": 10}}, "split": "train", "n_eval": 10},
                   {"path": str(text), "n_eval": 10}):
        task = build_task("loss", params)
        results = []
        for backend in (vllm_backend, hf_backend):
            backend.load(CheckpointRef(ckpts["a"]))
            results.append(evaluate_task(backend, task))
        v, h = results
        assert v.metric == h.metric == "loss" and v.n == h.n == 10
        assert max(abs(a - b) for a, b in zip(v.scores, h.scores)) < 2e-3, (v.scores, h.scores)


@pytest.mark.vllm
def test_sampled_generation_on_both_backends_is_seeded_and_varied(vllm_backend, hf_backend, ckpts):
    """Issue 40 part 2: n samples per prompt at a temperature, on both engines, and they are
    samples (not n copies of the greedy reply), the same again for the same seed. Enough prompts
    for vLLM to prefill in chunks where it may, which is where a seeded request once broke its
    CPU engine (vllm_backend.cpu_unchunked), and the engine still serves the next load after
    them."""
    from cliffsweep.evals.tasks.base import SampledDecoding

    arith = build_task("toy_arith", {"n_eval": 40})
    s = arith.sampling.drawn(SampledDecoding(n=3, temperature=1.5, seed=7))  # 64 tokens each
    prompts = [e.chat() for e in arith.eval_examples()]
    for backend in (vllm_backend, hf_backend):
        backend.load(CheckpointRef(ckpts["a"]))
        one, two = backend.generate_n(prompts, s), backend.generate_n(prompts, s)
        assert len(one) == len(prompts) and all(len(r) == 3 for r in one), backend.name
        assert any(len(set(r)) > 1 for r in one), (backend.name, one)
        # lm-eval's primitive (a task that samples, with repeats): one sample per context and seed
        ids = [backend.tokenizer.encode(PROMPTS[0])] * 4
        drawn = backend.complete(ids, 16, [], s, [11, 12, 13, 14])
        assert len(set(drawn)) > 1, (backend.name, drawn)
        assert one == two and drawn == backend.complete(ids, 16, [], s, [11, 12, 13, 14]), backend.name
        backend.load(CheckpointRef(ckpts["b"]))  # the engine serves on after sampling
        assert len(backend.generate(PROMPTS, Sampling(max_tokens=4))) == len(PROMPTS)


@pytest.mark.vllm
def test_an_items_samples_do_not_depend_on_the_batch_it_is_in(vllm_backend, hf_backend, ckpts):
    """Issue 52 part 4: a sample's randomness depends only on (item, sample index, seed), on
    every backend. The same items evaluated in two batch orders, and half of them alone, draw
    the same samples item by item (hf: batch size 2, so each item meets other partners; vLLM:
    seeded requests, on a CPU without chunked prefill); another seed draws others. The same for
    lm-eval's primitive (a request's own seed)."""
    from cliffsweep.evals.tasks.base import SampledDecoding

    arith = build_task("toy_arith", {"n_eval": 12})
    s = arith.sampling.drawn(SampledDecoding(n=2, temperature=1.5, seed=7))
    prompts = [e.chat() for e in arith.eval_examples()]
    order = [5, 0, 11, 3, 8, 1, 10, 6, 2, 9, 4, 7]
    for backend in (vllm_backend, hf_backend):
        backend.load(CheckpointRef(ckpts["a"]))
        first = backend.generate_n(prompts, s)
        shuffled = dict(zip(order, backend.generate_n([prompts[i] for i in order], s)))
        alone = dict(zip(order[::2], backend.generate_n([prompts[i] for i in order[::2]], s)))
        assert [shuffled[i] for i in range(len(prompts))] == first, backend.name
        assert all(alone[i] == first[i] for i in alone), backend.name
        other = backend.generate_n(prompts, arith.sampling.drawn(SampledDecoding(n=2, temperature=1.5, seed=8)))
        assert other != first, backend.name
        ids = [backend.tokenizer.encode(p) for p in PROMPTS]
        drawn = backend.complete(ids, 12, [], s, [3, 4, 5])
        assert backend.complete(ids[::-1], 12, [], s, [5, 4, 3]) == drawn[::-1], backend.name
