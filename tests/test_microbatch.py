"""A recipe that fits real sizes (trainables/microbatch.py, losses.py, data.epoch_steps): gradients
accumulated over micro-batches equal the whole batch's for every method, with and without
activation checkpointing; the chunked loss equals the loss on the model's own logits, tied head
included; micro-batches keep the global batch's rows and replay fraction. One process, a tiny
randomly initialised Qwen2 with tied embeddings (as SmolLM2); DDP and FSDP2: test_microbatch_dist.py."""

from __future__ import annotations

import pytest
import torch

from cliffsweep.trainables import data
from cliffsweep.trainables.losses import (
    check_head, hidden_ce, final_hidden, lm_head, response_ce, response_ce_kl, token_ce, token_kl,
)
from cliffsweep.trainables.methods import METHODS, build_method
from cliffsweep.trainables.microbatch import accumulate, autocast_dtype, enable_checkpointing
from cliffsweep.orchestrator.policies import torch_threads

VOCAB, PAD = 97, 0
# Params that keep each method's own term live on a tiny model (penalties need drift: see prepared()).
PARAMS = {"lora": {"rank": 4}, "rpsft": {"k": 4}, "nanoadam": {"fraction": 0.3, "refresh_every": 1},
          "replay": {"retain_fraction": 0.25}, "kl": {"beta": 0.5}}


def tiny_model(seed: int = 0):
    from transformers import Qwen2Config, Qwen2ForCausalLM

    torch.manual_seed(seed)
    cfg = Qwen2Config(vocab_size=VOCAB, hidden_size=32, intermediate_size=64, num_hidden_layers=2,
                      num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=64,
                      tie_word_embeddings=True)
    return Qwen2ForCausalLM(cfg).train()


def rows(n: int, seed: int, retain: bool = False) -> list[data.Encoded]:
    """Random rows of 6-24 tokens: a masked prompt, then the response."""
    g = torch.Generator().manual_seed(seed)
    out = []
    for i in range(n):
        length = int(torch.randint(6, 25, (1,), generator=g))
        prompt = int(torch.randint(2, length // 2 + 1, (1,), generator=g))
        ids = torch.randint(1, VOCAB, (length,), generator=g).tolist()
        out.append(data.Encoded(ids, [-100] * prompt + ids[prompt:], -1 if retain else i, retain))
    return out


LEARN, RETAIN = rows(16, seed=1), rows(12, seed=2, retain=True)


def prepared(name: str, checkpointing: bool = False):
    """The model and method as a trial has them before training, plus a drift of the weights so
    that penalties and base-relative terms (kl, iw) are not zero."""
    model = tiny_model()
    method = build_method(name, PARAMS.get(name, {}))
    stats = {}
    if method.stats_inputs() is not None:
        stats = method.compute_stats(model, [data.collate(RETAIN[:6], PAD), data.collate(RETAIN[6:], PAD)],
                                     [data.collate(LEARN, PAD)])
    model = method.prepare(model, stats)
    g = torch.Generator().manual_seed(3)
    with torch.no_grad():
        for p in model.parameters():
            if p.requires_grad:
                p.add_(0.02 * torch.randn(p.shape, generator=g))
    if checkpointing:
        enable_checkpointing(model)
    return model.train(), method


def steps(method, micro_batch_size, batch_size: int = 8):
    return data.epoch_steps(LEARN, RETAIN, batch_size, method.retain_fraction, seed=0, epoch=0, rank=0,
                            world=1, pad_id=PAD, micro_batch_size=micro_batch_size)


def grads(model) -> dict[str, torch.Tensor]:
    return {n: p.grad.clone() for n, p in model.named_parameters() if p.requires_grad}


def whole_batch_grads(name: str) -> dict[str, torch.Tensor]:
    """The reference: `loss` on the whole batch in one pass, one backward."""
    model, method = prepared(name)
    (step,) = steps(method, None)[:1]
    assert len(step.micro) == 1
    loss, _ = method.loss(model, step.micro[0])
    loss.backward()
    method.before_step(model, 0)
    return grads(model)


def accumulated_grads(name: str, micro_batch_size: int, checkpointing: bool = False, amp=None):
    model, method = prepared(name, checkpointing)
    step = steps(method, micro_batch_size)[0]
    loss = accumulate(model, method, step.micro, step.n_tokens, world=1, amp=amp)
    method.before_step(model, 0)
    return grads(model), loss, step


def assert_grads_equal(got, ref, what):
    assert got.keys() == ref.keys()
    for n in ref:
        torch.testing.assert_close(got[n], ref[n], rtol=1e-4, atol=2e-6, msg=lambda m: f"{what} {n}: {m}")


# --- accumulation equals the whole batch ---------------------------------------------------------
@pytest.mark.parametrize("name", sorted(METHODS))
def test_accumulated_gradient_equals_the_whole_batch(name):
    ref = whole_batch_grads(name)
    got, _, step = accumulated_grads(name, micro_batch_size=3)
    assert len(step.micro) == 3  # 8 rows as 3 + 3 + 2
    assert any(float(g.abs().max()) > 0 for g in ref.values())
    assert_grads_equal(got, ref, name)


@pytest.mark.parametrize("name", ["sft", "ewc", "kl", "talr", "migu", "lora"])
def test_accumulation_with_checkpointing_and_single_rows(name):
    ref = whole_batch_grads(name)
    got, _, step = accumulated_grads(name, micro_batch_size=1, checkpointing=True)
    assert len(step.micro) == 8
    assert_grads_equal(got, ref, name)


def test_the_equality_check_can_fail():
    """Normalising each micro-batch by its own token count (the classic accumulation bug), or
    adding a penalty once per micro-batch, gives another gradient: the check above sees it."""
    ref = whole_batch_grads("sft")
    model, method = prepared("sft")
    for b in steps(method, 3)[0].micro:
        (method.loss(model, b)[0] / 3).backward()  # each micro-batch its own mean
    with pytest.raises(AssertionError):
        assert_grads_equal(grads(model), ref, "sft, per-micro-batch mean")

    ref = whole_batch_grads("l2sp")
    model, method = prepared("l2sp")
    step = steps(method, 3)[0]
    for b in step.micro:
        method.loss(model, b, step.n_tokens)[0].backward()  # the penalty three times
    with pytest.raises(AssertionError):
        assert_grads_equal(grads(model), ref, "l2sp, penalty per micro-batch")


def test_step_loss_is_the_whole_batch_loss():
    model, method = prepared("ewc")
    whole, _ = method.loss(model, steps(method, None)[0].micro[0])
    _, loss, _ = accumulated_grads("ewc", micro_batch_size=3)
    assert float(loss) == pytest.approx(float(whole.detach()), rel=1e-5)


def test_talr_tau_is_the_whole_batch_median():
    from cliffsweep.trainables.methods.talr import median_tau, sequence_means

    model, method = prepared("talr")
    whole = steps(method, None)[0].micro[0]
    with torch.no_grad():
        expected = median_tau(sequence_means(*response_ce(model, whole)))
    micro = steps(method, 2)[0].micro
    method.begin_step(model, micro)
    assert float(method.step_tau) == pytest.approx(float(expected), rel=1e-5)
    with torch.no_grad():  # a single micro-batch's own median differs: begin_step is needed
        own = median_tau(sequence_means(*response_ce(model, micro[0])))
    assert abs(float(own) - float(expected)) > 1e-3
    method.begin_step(model, [whole])
    assert method.step_tau is None  # one micro-batch: its own median, no extra forward


@pytest.mark.parametrize("checkpointing", [False, True])
def test_checkpointing_recomputes_each_layer_in_backward(checkpointing):
    calls = []
    model, method = prepared("sft", checkpointing=checkpointing)
    mlp = model.model.layers[0].mlp
    forward = mlp.forward
    mlp.forward = lambda *a, **kw: calls.append(1) or forward(*a, **kw)  # forward hooks do not see a recompute
    step = steps(method, 4)[0]
    accumulate(model, method, step.micro, step.n_tokens, world=1)
    assert len(calls) == (2 if checkpointing else 1) * len(step.micro)  # + recompute, per micro-batch


def test_bf16_autocast_is_only_for_fp32_models_on_gpus_and_trains_close_to_fp32():
    assert autocast_dtype(torch.float32, "cuda") == torch.bfloat16
    assert autocast_dtype(torch.bfloat16, "cuda") is None
    assert autocast_dtype(torch.float32, "cpu") is None
    # The same code path on the CPU's autocast: fp32 weights and gradients, bf16 matmuls.
    ref = whole_batch_grads("sft")
    got, loss, _ = accumulated_grads("sft", micro_batch_size=3, amp=torch.bfloat16)
    assert loss.dtype == torch.float32 and all(g.dtype == torch.float32 for g in got.values())
    num = sum(float((got[n] - ref[n]).square().sum()) for n in ref)
    den = sum(float(ref[n].square().sum()) for n in ref)
    assert 0 < num / den < 1e-3  # bf16 rounding, not another gradient


# --- the chunked loss --------------------------------------------------------------------------
def test_chunked_ce_equals_the_model_logits_with_a_tied_head():
    model, _ = prepared("sft")
    assert lm_head(model).weight is model.model.embed_tokens.weight  # tied, as in SmolLM2
    batch = steps(build_method("sft"), None)[0].micro[0]
    logits = model(input_ids=batch["input_ids"], attention_mask=batch["attention_mask"]).logits
    ref, ref_mask = token_ce(logits, batch["labels"])
    ref.sum().backward()
    ref_grads = grads(model)
    model.zero_grad()
    # 5 positions per chunk: many chunks, each checkpointed
    ce, mask = hidden_ce(final_hidden(model, batch), lm_head(model), batch["labels"], chunk_elements=5 * VOCAB)
    assert torch.equal(mask, ref_mask) and ce.dtype == torch.float32
    torch.testing.assert_close(ce, ref, rtol=1e-5, atol=1e-6)
    ce.sum().backward()
    assert_grads_equal(grads(model), ref_grads, "chunked ce")


def test_chunked_kl_equals_token_kl_on_logits():
    model, method = prepared("kl")
    batch = steps(method, None)[0].micro[0]
    ce, kl, mask = response_ce_kl(model, method.base, batch)
    kw = dict(input_ids=batch["input_ids"], attention_mask=batch["attention_mask"])
    logits = model(**kw).logits
    torch.testing.assert_close(ce, token_ce(logits, batch["labels"])[0], rtol=1e-5, atol=1e-6)
    ref_kl = token_kl(logits, method.base(**kw).logits, batch["labels"])
    assert float(ref_kl.detach().sum()) > 1e-3
    torch.testing.assert_close(kl, ref_kl, rtol=1e-4, atol=1e-6)


def test_a_batch_without_response_tokens_gives_zero_and_still_backpropagates():
    model, method = prepared("sft")
    batch = data.collate([data.Encoded([5, 6, 7], [-100, -100, -100], 0, False)], PAD)
    loss = accumulate(model, method, [batch], n_tokens=0, world=1)
    assert float(loss) == 0.0
    assert all(p.grad is not None and float(p.grad.abs().max()) == 0 for p in model.parameters())


def test_check_head_refuses_logits_the_head_does_not_give():
    model, _ = prepared("sft")
    batch = steps(build_method("sft"), None)[0].micro[0]
    check_head(model, batch)
    forward = model.forward  # emulate a model that scales its logits after the head


    def scaled(*a, **kw):
        out = forward(*a, **kw)
        out.logits = out.logits * 0.5
        return out

    model.forward = scaled
    with pytest.raises(ValueError, match="does not give the model's logits"):
        check_head(model, batch)


# --- the data --------------------------------------------------------------------------------
@pytest.mark.parametrize("global_rows, world, m, expected", [
    (8, 1, None, 1), (8, 1, 3, 3), (8, 1, 8, 1), (8, 1, 1, 8),
    (9, 2, 4, 2),   # shares 5 and 4: two micro-batches each (3+2, 2+2)
    (9, 2, 1, 4),   # shares 5 and 4 at size 1: capped at 4 (one micro-batch of the 5 holds 2 rows)
    (2, 2, 1, 1),
])
def test_micro_count_is_the_same_on_every_worker(global_rows, world, m, expected):
    assert data.micro_count(global_rows, world, m) == expected


@pytest.mark.parametrize("batch_size, world, m, r", [(8, 1, 3, 0.0), (10, 2, 2, 0.2), (9, 2, 1, 0.0), (7, 3, 2, 0.3)])
def test_micro_batches_hold_the_global_batch_rows_and_replay_fraction(batch_size, world, m, r):
    def key(batch):  # rows as (example_idx, first token): retain rows are -1
        return sorted(zip(batch["example_idx"].tolist(), batch["input_ids"][:, 0].tolist()))

    whole = [data.epoch_batches(LEARN, RETAIN, batch_size, r, 0, 0, k, world, PAD) for k in range(world)]
    per_rank = [data.epoch_steps(LEARN, RETAIN, batch_size, r, 0, 0, k, world, PAD, m) for k in range(world)]
    assert all(len(s) == len(whole[0]) for s in per_rank)
    for i in range(len(whole[0])):
        global_rows = sum(len(whole[k][i]["input_ids"]) for k in range(world))
        counts = {len(per_rank[k][i].micro) for k in range(world)}
        assert len(counts) == 1  # every worker runs as many forwards
        glob, tokens = [], 0
        for k in range(world):
            step = per_rank[k][i]
            assert step.n_tokens == per_rank[0][i].n_tokens
            got = sorted(x for b in step.micro for x in key(b))
            assert got == key(whole[k][i])
            glob += got
            tokens += sum(int((b["labels"][:, 1:] != -100).sum()) for b in step.micro)
            sizes = [len(b["input_ids"]) for b in step.micro]
            # the one documented excess (data.micro_count): size 1 with uneven shares
            assert max(sizes) <= m or (m == 1 and max(sizes) == 2 and global_rows % world)
            for b in step.micro:  # padded only to its own longest row
                assert int(b["attention_mask"][:, -1].max()) == 1
        assert tokens == per_rank[0][i].n_tokens
        if r:
            assert sum(1 for idx, _ in glob if idx < 0) == data.replay_rows(batch_size, r)


# --- configuration ------------------------------------------------------------------------------
def test_recipe_fields_validate():
    from cliffsweep.sweep.spec import RecipeSpec, SpecError
    from cliffsweep.orchestrator.specfile import parse_spec

    r = RecipeSpec()
    assert r.micro_batch_size is None and r.gradient_checkpointing is False
    assert RecipeSpec(batch_size=64, micro_batch_size=4, gradient_checkpointing=True).micro_batch_size == 4
    sweep = {"name": "t", "models": [{"name": "m", "path": "toy:qwen2-tiny"}], "methods": [{"name": "sft"}],
             "lrs": [1e-3], "tasks": {"learn": {"name": "toy_facts"}, "retain": [{"name": "toy_arith"}]},
             "recipe": {"batch_size": 8, "micro_batch_size": 16, "gradient_checkpoint": True}}
    with pytest.raises(SpecError) as e:
        parse_spec(sweep)
    text = "\n".join(e.value.problems)
    assert "recipe.gradient_checkpoint: not a field of this section; did you mean 'gradient_checkpointing'?" in text
    sweep["recipe"].pop("gradient_checkpoint")
    with pytest.raises(SpecError, match="micro_batch_size .16, rows per worker. exceeds batch_size .8"):
        parse_spec(sweep)


@pytest.mark.parametrize("cpus, threads", [(0.25, 1), (0.5, 1), (1, 1), (1.5, 2), (1.9, 2), (2, 2), (4, 4)])
def test_torch_threads_round_the_worker_cpus(cpus, threads):
    assert torch_threads(cpus) == threads


STATS_METHODS = sorted(n for n in METHODS if build_method(n, PARAMS.get(n, {})).stats_inputs() is not None)


@pytest.mark.parametrize("checkpointing", [False, True], ids=["plain", "checkpointing"])
@pytest.mark.parametrize("name", STATS_METHODS)
def test_statistics_in_micro_batches_equal_the_whole_batches(name, checkpointing):
    """Issue 15: a method's once-per-model statistics computed in micro-batches of 2 rows (with
    and without activation checkpointing) equal those computed one whole batch at a time: each
    batch's gradient is the sum of its micro-batches' (EWC's Fisher and MAS's importances square
    or take |.| of the batch gradient, so a per-micro-batch statistic would differ)."""
    retain = [data.collate(RETAIN[:6], PAD), data.collate(RETAIN[6:], PAD)]
    learn = [data.collate(LEARN[:8], PAD), data.collate(LEARN[8:], PAD)]
    method = build_method(name, PARAMS.get(name, {}))
    whole = method.compute_stats(tiny_model(), retain, learn)
    model = tiny_model()
    if checkpointing:
        enable_checkpointing(model)
    micro = method.compute_stats(model, retain, learn, micro_batch_size=2)
    assert set(micro) == set(whole) and whole
    for k in whole:
        torch.testing.assert_close(micro[k], whole[k], rtol=1e-4, atol=1e-6, msg=f"{name} {k}")
    assert all(p.grad is None for p in model.parameters())  # no gradients left behind
    assert model.training  # the mode it was in


def test_statistics_run_with_checkpointing_in_eval_mode():
    """stats_mode: the decoder layers recompute in backward (checkpointing), nothing else is in
    training mode (no dropout anywhere)."""
    from transformers.modeling_layers import GradientCheckpointingLayer

    from cliffsweep.trainables.microbatch import stats_mode

    model = tiny_model()
    enable_checkpointing(model)
    with stats_mode(model):
        on = [m for m in model.modules() if m.training]
        assert on and all(isinstance(m, GradientCheckpointingLayer) for m in on)
    assert all(m.training for m in model.modules())
