"""Loss-side and gradient-side methods: each test checks the property that defines the method,
on a tiny randomly initialised Qwen2 (hidden 32, 2 layers, vocab 101) and random token batches."""

from __future__ import annotations

import statistics


import pytest
import torch
import torch.distributed as dist
import torch.multiprocessing as mp
import torch.nn.functional as F
from torch.nn.parallel import DistributedDataParallel as DDP

from cliffsweep.trainables.data import Encoded, epoch_batches
from cliffsweep.trainables.losses import token_kl
from cliffsweep.trainables.methods import build_method
from cliffsweep.trainables.methods.flow import flow_weights
from cliffsweep.trainables.methods.iw import iw_weights
from cliffsweep.trainables.methods.migu import MIGU
from cliffsweep.trainables.methods.talr import talr_weights
from tinylm import TinyLM

VOCAB = 101


def tiny_model(seed: int = 0):
    # imported here: the DDP test's spawned workers import this module and need only torch
    from transformers import Qwen2Config, Qwen2ForCausalLM

    torch.manual_seed(seed)
    cfg = Qwen2Config(vocab_size=VOCAB, hidden_size=32, intermediate_size=64, num_hidden_layers=2,
                      num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=64,
                      tie_word_embeddings=False)
    return Qwen2ForCausalLM(cfg)


def make_batch(n: int = 6, width: int = 20, seed: int = 1, example_idx=None) -> dict[str, torch.Tensor]:
    """Random rows of varying length: a prompt (labels -100), a response, right padding."""
    g = torch.Generator().manual_seed(seed)
    ids = torch.randint(1, VOCAB, (n, width), generator=g)
    labels = torch.full((n, width), -100)
    attn = torch.zeros((n, width), dtype=torch.long)
    for r in range(n):
        length = int(torch.randint(width // 2, width + 1, (1,), generator=g))
        prompt = int(torch.randint(2, length // 2, (1,), generator=g))
        attn[r, :length] = 1
        labels[r, prompt:length] = ids[r, prompt:length]
        ids[r, length:] = 0
    idx = torch.arange(n) if example_idx is None else torch.as_tensor(example_idx)
    return {"input_ids": ids, "attention_mask": attn, "labels": labels, "example_idx": idx, "is_retain": idx < 0}


def direct_token_ce(model, batch):
    """Per-token CE and mask by an explicit log_softmax gather (independent of losses.token_ce)."""
    logits = model(input_ids=batch["input_ids"], attention_mask=batch["attention_mask"]).logits[:, :-1].float()
    tgt = batch["labels"][:, 1:]
    mask = tgt != -100
    logp = torch.log_softmax(logits, -1).gather(-1, tgt.clamp_min(0).unsqueeze(-1)).squeeze(-1)
    return -logp * mask, mask


def sgd_steps(method, model, batches, lr=0.05):
    opt = torch.optim.SGD([p for p in model.parameters() if p.requires_grad], lr=lr)
    for step, b in enumerate(batches):
        loss, _ = method.loss(model, b)
        loss.backward()
        method.before_step(model, step)
        opt.step()
        method.after_step(model, step)
        opt.zero_grad()


# --- KL ---------------------------------------------------------------------------------------
def test_token_kl_matches_direct_kl_divergence():
    torch.manual_seed(0)
    a, b = torch.randn(2, 5, VOCAB), torch.randn(2, 5, VOCAB)
    labels = torch.tensor([[-100, -100, 3, 4, 5], [-100, 7, 8, -100, -100]])
    got = token_kl(a, b, labels)
    # F.kl_div(input=log q, target=log p, log_target) = sum p (log p - log q) = KL(p || q)
    ref = F.kl_div(torch.log_softmax(b, -1), torch.log_softmax(a, -1), log_target=True, reduction="none").sum(-1)
    mask = labels[:, 1:] != -100
    assert torch.allclose(got, ref[:, :-1] * mask, atol=1e-5)
    assert (got[~mask] == 0).all()


def test_kl_zero_at_start_frozen_base_positive_after_drift():
    model = tiny_model()
    method = build_method("kl", {"beta": 0.1})
    model = method.prepare(model, {})
    base_before = {n: p.clone() for n, p in method.base.named_parameters()}
    batch = make_batch()
    _, logs = method.loss(model, batch)
    assert abs(logs["kl"]) < 1e-6
    assert all(not p.requires_grad for p in method.base.parameters())
    assert not method.base.training
    assert {id(p) for p in method.base.parameters()}.isdisjoint({id(p) for p in model.parameters()})

    sgd_steps(method, model, [make_batch(seed=s) for s in range(3)], lr=0.5)
    assert all(p.grad is None for p in method.base.parameters())
    for n, p in method.base.named_parameters():
        assert torch.equal(p, base_before[n]), n
    loss, logs = method.loss(model, batch)
    assert logs["kl"] > 1e-3
    assert loss.item() == pytest.approx(logs["ce"] + 0.1 * logs["kl"], rel=1e-5)


# --- replay -----------------------------------------------------------------------------------
@pytest.mark.parametrize("r, batch_size, world", [(0.15, 20, 1), (0.2, 10, 2), (0.25, 8, 1)])
def test_replay_fraction_of_retain_rows_per_batch(r, batch_size, world):
    method = build_method("replay", {"retain_fraction": r})
    assert method.retain_fraction == r
    per_batch = batch_size - round(r * batch_size)  # learn rows per global batch
    learn = [Encoded([1, 2, 3], [-100, 2, 3], i, False) for i in range(15 * per_batch)]
    retain = [Encoded([4, 5], [-100, 5], -1, True) for _ in range(30)]
    per_rank = [epoch_batches(learn, retain, batch_size, method.retain_fraction, seed=0, epoch=0,
                              rank=k, world=world, pad_id=0) for k in range(world)]
    n_steps = len(per_rank[0])
    assert n_steps == 15
    for step in range(n_steps):
        rows = torch.cat([per_rank[k][step]["is_retain"] for k in range(world)])
        assert rows.float().mean().item() == pytest.approx(r)
        idx = torch.cat([per_rank[k][step]["example_idx"] for k in range(world)])
        assert (idx[rows] == -1).all() and (idx[~rows] >= 0).all()


def test_replay_default_and_validation():
    assert build_method("replay").retain_fraction == 0.15
    with pytest.raises(ValueError):
        build_method("replay", {"retain_fraction": 1.0})
    with pytest.raises(ValueError):
        build_method("replay", {"fraction": 0.1})


# --- MIGU -------------------------------------------------------------------------------------
def direct_channel_means(model, batch) -> dict[str, torch.Tensor]:
    """Mean |output| per channel over non-padding tokens, by hooks independent of MIGU's."""
    out, handles = {}, []
    for name, mod in model.named_modules():
        if isinstance(mod, torch.nn.Linear) and mod is not model.lm_head:
            def hook(m, i, y, name=name):
                mask = batch["attention_mask"].bool()
                out[name] = y.detach().abs()[mask].mean(0)
            handles.append(mod.register_forward_hook(hook))
    with torch.no_grad():
        model(input_ids=batch["input_ids"], attention_mask=batch["attention_mask"])
    for h in handles:
        h.remove()
    return out


def test_migu_masks_low_activation_rows_and_only_they_stay_fixed():
    model = tiny_model()
    method: MIGU = build_method("migu")
    model = method.prepare(model, {})
    batch = make_batch(n=8)
    expected = direct_channel_means(model, batch)  # no-grad forward: must not feed MIGU's stats
    assert not method._sum
    assert set(expected) == set(method.layers) and "lm_head" not in method.layers

    loss, _ = method.loss(model, batch)
    loss.backward()
    grads = {n: (m.weight.grad.clone(), None if m.bias is None else m.bias.grad.clone()) for n, m in method.layers.items()}
    before = {n: p.detach().clone() for n, p in model.named_parameters()}
    method.before_step(model, 0)
    assert method.last_masked_fraction == pytest.approx(0.5, abs=0.05)
    opt = torch.optim.AdamW(model.parameters(), lr=1e-2, weight_decay=0.0)
    opt.step()
    for name, layer in method.layers.items():
        low = expected[name] < torch.quantile(expected[name], 0.5)
        assert 0 < low.sum() < low.numel()
        g_w, g_b = grads[name]
        assert (layer.weight.grad[low] == 0).all()
        assert torch.equal(layer.weight.grad[~low], g_w[~low])
        if g_b is not None:
            assert (layer.bias.grad[low] == 0).all() and torch.equal(layer.bias.grad[~low], g_b[~low])
        changed = (layer.weight.detach() != before[name + ".weight"]).any(1)
        assert not changed[low].any(), name  # masked rows did not move
        assert changed[~low].float().mean() > 0.9, name  # kept rows did
    assert not method._sum  # statistics are per step


# --- NanoAdam ---------------------------------------------------------------------------------
def test_nanoadam_only_smallest_weights_change_under_adamw():
    model = tiny_model()
    method = build_method("nanoadam", {"fraction": 0.1, "refresh_every": 2})
    model = method.prepare(model, {})
    named = [(n, p) for n, p in model.named_parameters() if p.requires_grad]
    # Large decay and momentum: AdamW would move every entry without NanoAdam's restore.
    opt = torch.optim.AdamW(model.parameters(), lr=1e-2, weight_decay=0.5)
    masks_seen = []
    for step in range(4):
        before = [p.detach().clone() for _, p in named]
        loss, _ = method.loss(model, make_batch(seed=step))
        loss.backward()
        method.before_step(model, step)  # builds the masks at step 0, on the weights' device
        masks = [m.clone() for m in method.masks]
        masks_seen.append(masks)
        for (n, p), m, b in zip(named, masks, before):
            k = max(1, -(-p.numel() // 10))
            assert m.sum() == k and m.device == p.device, n
            # at a refresh, the selected entries are the k smallest |W|
            if step % 2 == 0 and k < p.numel():
                assert b.abs()[m].max() <= b.abs()[~m].min(), n
        opt.step()
        method.after_step(model, step)
        opt.zero_grad()
        moved = 0
        for (n, p), m, b in zip(named, masks, before):
            changed = p.detach() != b
            assert not changed[~m].any(), (step, n)
            moved += int(changed[m].sum())
        assert moved > 0.5 * sum(int(m.sum()) for m in masks)
    assert any(not torch.equal(a, b) for a, b in zip(masks_seen[1], masks_seen[2]))  # refreshed after step 1
    assert all(torch.equal(a, b) for a, b in zip(masks_seen[0], masks_seen[1]))


# --- TALR -------------------------------------------------------------------------------------
def test_talr_weights_tau_is_batch_median_and_hard_tokens_weigh_less():
    torch.manual_seed(0)
    ce = torch.rand(5, 9) * 6
    mask = torch.rand(5, 9) > 0.3
    mask[:, 0] = True
    w, tau = talr_weights(ce, mask, 0.01)
    seq_means = [float(ce[r][mask[r]].mean()) for r in range(5)]
    assert float(tau) == pytest.approx(statistics.median(seq_means), rel=1e-6)
    assert ((w > 0) & (w <= 1)).all() and (w >= 0.01).all()
    assert torch.allclose(w, torch.exp(-ce / tau).clamp_min(0.01))
    flat_ce, flat_w = ce[mask], w[mask]
    order = flat_ce.argsort()
    assert (flat_w[order].diff() <= 0).all()  # harder tokens never weigh more
    assert flat_w.min() < 0.2 < flat_w.max()


def test_talr_loss_matches_direct_computation_and_weights_carry_no_grad():
    model = tiny_model()
    method = build_method("talr")
    batch = make_batch(n=7)
    loss, logs = method.loss(model, batch)
    ce, mask = direct_token_ce(model, batch)
    seq = [(ce[r][mask[r]]).mean().item() for r in range(ce.shape[0])]
    tau = statistics.median(seq)
    p = torch.exp(-ce.detach())
    w = (p ** (1 / tau)).clamp_min(0.01)
    assert logs["tau"] == pytest.approx(tau, rel=1e-5)
    assert loss.item() == pytest.approx(((w * ce)[mask].sum() / mask.sum()).item(), rel=1e-5)
    # gradient = sum w_i grad l_i / n with w held constant
    loss.backward()
    g = {n: q.grad.clone() for n, q in model.named_parameters()}
    model.zero_grad()
    ((w * ce)[mask].sum() / mask.sum()).backward()
    for n, q in model.named_parameters():
        assert torch.allclose(g[n], q.grad, atol=1e-6, rtol=1e-4), n


# --- DFT / IW / FLOW --------------------------------------------------------------------------
def test_dft_is_ce_times_stopgrad_probability():
    model = tiny_model()
    batch = make_batch()
    loss, _ = build_method("dft").loss(model, batch)
    ce, mask = direct_token_ce(model, batch)
    ref = (ce * torch.exp(-ce.detach()))[mask].sum() / mask.sum()
    assert loss.item() == pytest.approx(ref.item(), rel=1e-5)
    loss.backward()
    g = {n: q.grad.clone() for n, q in model.named_parameters()}
    model.zero_grad()
    ce, mask = direct_token_ce(model, batch)
    ref = (ce * torch.exp(-ce.detach()))[mask].sum() / mask.sum()
    ref.backward()
    for n, q in model.named_parameters():
        assert torch.allclose(g[n], q.grad, atol=1e-6, rtol=1e-4), n
    # and not the gradient of sum p_t * CE_t with p_t differentiated
    model.zero_grad()
    ce, mask = direct_token_ce(model, batch)
    ((ce * torch.exp(-ce))[mask].sum() / mask.sum()).backward()
    assert not torch.allclose(g["lm_head.weight"], model.lm_head.weight.grad, atol=1e-6)


def test_iw_weights_formula_and_clip():
    mask = torch.tensor([[True, True, False], [True, True, True], [True, False, False]])
    base_ce = torch.tensor([[2.0, 2.0, 9.0], [1.0, 1.0, 1.0], [30.0, 0.0, 0.0]])
    ce = torch.tensor([[1.0, 2.0, 0.0], [1.5, 1.0, 1.0], [0.0, 0.0, 0.0]])
    w = iw_weights(ce, base_ce, mask, clip=16.0).squeeze(1)
    assert w[0].item() == pytest.approx(torch.exp(torch.tensor(0.5)).item(), rel=1e-6)
    assert w[1].item() == pytest.approx(torch.exp(torch.tensor(-0.5 / 3)).item(), rel=1e-6)
    assert w[2].item() == 16.0  # exp(30) clipped


def test_iw_loss_matches_direct_computation():
    model = tiny_model()
    method = build_method("iw")
    model = method.prepare(model, {})
    batch = make_batch(n=6)
    _, logs = method.loss(model, batch)
    assert logs["mean_w"] == pytest.approx(1.0, abs=1e-6)  # policy == base at the start
    sgd_steps(method, model, [make_batch(seed=s) for s in range(3)], lr=0.5)
    loss, _ = method.loss(model, batch)
    ce, mask = direct_token_ce(model, batch)
    base_ce, _ = direct_token_ce(method.base, batch)
    lr_seq = torch.stack([(base_ce[r] - ce[r]).detach()[mask[r]].mean() for r in range(6)])
    w = lr_seq.exp().clamp_max(16.0)
    assert not torch.allclose(w, torch.ones_like(w), atol=1e-3)  # the policy has drifted
    ref = (w.unsqueeze(1) * ce)[mask].sum() / mask.sum()
    assert loss.item() == pytest.approx(ref.item(), rel=1e-5)


def test_flow_weights_formula_favour_easy_samples():
    losses = torch.tensor([0.5, 1.0, 2.0, 4.0, 3.0])
    w = flow_weights(losses)
    tau = 2.0  # median
    ref = torch.exp(-losses / tau)
    ref = ref * len(ref) / ref.sum()
    assert torch.allclose(w, ref)
    assert w.mean().item() == pytest.approx(1.0)
    assert (w[losses.argsort()].diff() < 0).all()


def test_flow_stats_on_learn_split_and_loss_weights():
    model = tiny_model()
    method = build_method("flow")
    assert method.stats_inputs() is not None
    n = 10
    full = make_batch(n=n, seed=3)
    learn_batches = [{k: v[i : i + 4] for k, v in full.items()} for i in range(0, n, 4)]
    stats = method.compute_stats(model, [], learn_batches)
    ce, mask = direct_token_ce(model, full)
    direct = (ce.sum(1) / mask.sum(1)).detach()
    assert torch.allclose(stats["flow_seq_loss"], direct, atol=1e-5)
    w = stats["flow_weights"]
    assert w[direct.argmin()] == w.max() and w[direct.argmax()] == w.min()

    model = method.prepare(model, stats)
    batch = make_batch(n=4, seed=9, example_idx=[7, -1, 2, -1])
    loss, _ = method.loss(model, batch)
    ce, mask = direct_token_ce(model, batch)
    sw = torch.tensor([w[7], 1.0, w[2], 1.0]).unsqueeze(1)
    assert loss.item() == pytest.approx(((sw * ce)[mask].sum() / mask.sum()).item(), rel=1e-5)

    with pytest.raises(ValueError, match="example_idx"):
        method.compute_stats(model, [], learn_batches[1:])


# --- under DDP --------------------------------------------------------------------------------
WORLD = 2
DDP_CASES = {"migu": {}, "kl": {"beta": 0.5}, "iw": {}, "talr": {}}


def ddp_setup(name: str):
    """Seeded model, prepare(), then a drift so the base-relative terms (kl, iw) are live."""
    torch.manual_seed(0)
    model = TinyLM(VOCAB, mlp_mult=4)
    method = build_method(name, DDP_CASES[name])
    model = method.prepare(model, {})
    g = torch.Generator().manual_seed(1)
    with torch.no_grad():
        for p in model.parameters():
            p.add_(0.2 * torch.randn(p.shape, generator=g))
    return model, method


def ddp_batch(rank: int) -> dict[str, torch.Tensor]:
    g = torch.Generator().manual_seed(50 + rank)
    ids = torch.randint(0, VOCAB, (3, 10), generator=g)
    labels = ids.clone()
    labels[:, :4] = -100  # equal token counts per rank: DDP's mean of means = the global mean
    return {"input_ids": ids, "attention_mask": torch.ones_like(ids), "labels": labels,
            "example_idx": torch.arange(3), "is_retain": torch.zeros(3, dtype=torch.bool)}


def _ddp_worker(rank: int, rendezvous: str, out_dir: str) -> None:
    torch.set_num_threads(1)
    dist.init_process_group("gloo", init_method=f"file://{rendezvous}", rank=rank, world_size=WORLD)
    out = {}
    for name in DDP_CASES:
        model, method = ddp_setup(name)
        ddp = DDP(model)  # kept alive through backward: its reducer does the all-reduce
        method.begin_step(ddp, [ddp_batch(rank)])  # as the loop does (TALR: the global batch's tau)
        loss, _ = method.loss(ddp, ddp_batch(rank))  # each rank its half of the global batch
        loss.backward()
        method.before_step(model, 0)
        out[name] = {n: p.grad.clone() for n, p in model.named_parameters()}
    torch.save(out, f"{out_dir}/rank{rank}.pt")
    dist.destroy_process_group()


def test_migu_kl_iw_under_ddp_match_single_process(tmp_path):
    mp.spawn(_ddp_worker, args=(str(tmp_path / "rendezvous"), str(tmp_path)), nprocs=WORLD, join=True)
    ranks = [torch.load(tmp_path / f"rank{r}.pt") for r in range(WORLD)]
    for name in DDP_CASES:
        model, method = ddp_setup(name)
        # one process, both halves as two micro-batches: TALR's tau is then the global batch's;
        # MIGU's hooks accumulate over both forwards (the global mean)
        method.begin_step(model, [ddp_batch(r) for r in range(WORLD)])
        loss = sum(method.loss(model, ddp_batch(r))[0] for r in range(WORLD)) / WORLD
        loss.backward()
        method.before_step(model, 0)
        for n, p in model.named_parameters():
            for r in ranks:
                assert torch.allclose(r[name][n], p.grad, atol=1e-6, rtol=1e-5), (name, n)
        if name == "migu":
            assert 0.4 < method.last_masked_fraction < 0.6
            assert (model.up.weight.grad.abs().sum(1) == 0).sum() >= 16  # half the 64 rows masked


def test_nanoadam_selects_the_smallest_weights_at_each_iteration_by_default():
    """000 App. D selects NanoAdam's weights "at each iteration" (issue 40): with the default
    period every step's mask is the k smallest |W| of that step's weights."""
    model = tiny_model()
    method = build_method("nanoadam", {"fraction": 0.1})
    model = method.prepare(model, {})
    tensors = [p for p in model.parameters() if p.requires_grad]
    opt = torch.optim.AdamW(model.parameters(), lr=1e-2)
    for step in range(3):
        now = [p.detach().abs().clone() for p in tensors]
        loss, _ = method.loss(model, make_batch(seed=step))
        loss.backward()
        method.before_step(model, step)
        for p, m, a in zip(tensors, method.masks, now):
            if m.sum() < p.numel():
                assert a[m].max() <= a[~m].min(), step
        opt.step()
        method.after_step(model, step)
        opt.zero_grad()
