"""Gradient accumulation across workers (2 gloo processes on the CPU): each rank runs its share
of the global batch as micro-batches (trainables/microbatch.py) under DDP and under FSDP2, and the
synced gradient equals one process's on the whole global batch, for sft, the penalty methods and
the loss-reweighting ones; accumulation steps communicate nothing (DDP: no all-reduce; FSDP2: no
reduce-scatter, the sharded gradient stays empty until the last micro-batch).

A tiny pure-torch LM (tests/tinylm.py) keeps the spawned processes to a torch import. TALR's tau
is the median over the global batch, every worker's rows gathered (methods/talr.py, issue 31: it
was each worker's own), so it too equals one process on the whole batch."""

from __future__ import annotations

import torch
import torch.distributed as dist
import torch.multiprocessing as mp

from cliffsweep.trainables import data
from cliffsweep.trainables.methods import build_method
from tinylm import TinyLM

VOCAB, WORLD, PAD, BATCH = 50, 2, 0, 6
DDP_CASES = {"sft": {}, "ewc": {"lam": 0.5}, "mas": {"lam": 0.5}, "l2sp": {"lam": 0.5},
             "rpsft": {"k": 4, "lam": 0.5}, "kl": {"beta": 0.5}, "iw": {}, "dft": {}, "migu": {}, "talr": {}}
FSDP_CASES = {"sft": {}, "kl": {"beta": 0.5}, "iw": {}, "dft": {}, "talr": {}}


def rows(n: int, seed: int) -> list[data.Encoded]:
    """Rows of uneven length and response size, so that the ranks' token counts differ."""
    g = torch.Generator().manual_seed(seed)
    out = []
    for i in range(n):
        length = int(torch.randint(5, 13, (1,), generator=g))
        prompt = int(torch.randint(1, length - 2, (1,), generator=g))
        ids = torch.randint(1, VOCAB, (length,), generator=g).tolist()
        out.append(data.Encoded(ids, [-100] * prompt + ids[prompt:], i, False))
    return out


LEARN = rows(BATCH, seed=6)  # 23 and 15 response tokens on the two ranks


def prepared(name: str, params: dict):
    torch.manual_seed(0)
    model = TinyLM(VOCAB, mlp_mult=2)
    method = build_method(name, params)
    retain = [data.collate(rows(3, seed=s), PAD) for s in (100, 101)]
    stats = method.compute_stats(model, retain, [data.collate(LEARN, PAD)]) if method.stats_inputs() else {}
    model = method.prepare(model, stats)
    g = torch.Generator().manual_seed(1)
    with torch.no_grad():
        for p in model.parameters():
            p.add_(0.05 * torch.randn(p.shape, generator=g))
    return model, method


def rank_step(rank: int, micro_batch_size: int | None) -> data.Step:
    (step,) = data.epoch_steps(LEARN, [], BATCH, 0.0, 0, 0, rank, WORLD, PAD, micro_batch_size)
    return step


def _worker(rank: int, rendezvous: str, out_dir: str) -> None:
    from torch.distributed.algorithms.ddp_comm_hooks.default_hooks import allreduce_hook
    from torch.distributed.fsdp import fully_shard
    from torch.nn.parallel import DistributedDataParallel as DDP

    from cliffsweep.trainables.microbatch import accumulate
    from cliffsweep.trainables.parallel import grad_sync

    torch.set_num_threads(1)
    dist.init_process_group("gloo", init_method=f"file://{rendezvous}", rank=rank, world_size=WORLD)
    out = {"ddp": {}, "fsdp": {}, "allreduces": {}}
    for name, params in DDP_CASES.items():
        model, method = prepared(name, params)
        ddp = DDP(model)
        step = rank_step(rank, 1)
        assert len(step.micro) == 3
        accumulate(ddp, method, step.micro, step.n_tokens, WORLD)
        method.before_step(model, 0)
        out["ddp"][name] = {n: p.grad.clone() for n, p in model.named_parameters()}

    # all-reduces per step: the same with 3 micro-batches as with 1 (none on accumulation steps)
    for m in (None, 1):
        model, method = prepared("sft", {})
        ddp = DDP(model)
        calls = []
        ddp.register_comm_hook(None, lambda state, bucket: calls.append(1) or allreduce_hook(state, bucket))
        step = rank_step(rank, m)
        accumulate(ddp, method, step.micro, step.n_tokens, WORLD)
        out["allreduces"][len(step.micro)] = len(calls)

    def sharded(name, params):
        model, method = prepared(name, params)
        for layer in (model.mix, model.up, model.down):  # the decoder layers; embed and head stay in the root
            fully_shard(layer)
        return fully_shard(model), method

    step = rank_step(rank, 1)
    for name, params in FSDP_CASES.items():
        model, method = sharded(name, params)
        accumulate(model, method, step.micro, step.n_tokens, WORLD)
        out["fsdp"][name] = {n: p.grad.full_tensor() for n, p in model.named_parameters()}
    # an accumulation step leaves the sharded gradients empty (no reduce-scatter); the last fills them
    model, method = sharded("sft", {})
    for j, batch in enumerate(step.micro):
        with grad_sync(model, sync=j == len(step.micro) - 1):
            method.data_loss(model, batch, step.n_tokens / WORLD)[0].backward()
        out.setdefault("fsdp_sharded_grads", []).append(sum(p.grad is not None for p in model.parameters()))
    out["n_params"] = len(list(model.parameters()))
    torch.save(out, f"{out_dir}/rank{rank}.pt")
    dist.destroy_process_group()


def whole_batch_grads(name: str, params: dict) -> dict[str, torch.Tensor]:
    model, method = prepared(name, params)
    loss, _ = method.loss(model, data.collate(LEARN, PAD))  # one process, the global batch, one pass
    loss.backward()
    method.before_step(model, 0)
    return {n: p.grad.clone() for n, p in model.named_parameters()}


def test_accumulation_under_ddp_and_fsdp_equals_one_process_on_the_global_batch(tmp_path):
    mp.spawn(_worker, args=(str(tmp_path / "rendezvous"), str(tmp_path)), nprocs=WORLD, join=True)
    ranks = [torch.load(tmp_path / f"rank{r}.pt") for r in range(WORLD)]
    shares = [rank_step(r, 1) for r in range(WORLD)]
    assert len({sum(int((b["labels"][:, 1:] != -100).sum()) for b in s.micro) for s in shares}) == 2  # uneven
    n_threads = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        for kind, cases in (("ddp", DDP_CASES), ("fsdp", FSDP_CASES)):
            for name, params in cases.items():
                ref = whole_batch_grads(name, params)
                assert any(float(g.abs().max()) > 0 for g in ref.values()), name
                for r in ranks:
                    for n, g in ref.items():
                        torch.testing.assert_close(r[kind][name][n], g, rtol=1e-4, atol=1e-6,
                                                   msg=lambda m: f"{kind} {name} {n}: {m}")
    finally:
        torch.set_num_threads(n_threads)
    for r in ranks:
        assert r["allreduces"][3] == r["allreduces"][1] > 0
        assert r["fsdp_sharded_grads"] == [0, 0, r["n_params"]]
