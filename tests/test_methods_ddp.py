"""Parameter-space methods under DDP (2 gloo processes on the CPU): prepare() runs before the
wrap, penalties are computed on the unwrapped parameters, and one DDP step gives the value,
gradient and update of a single process on the same global batch. WiSE-FT exports from the
wrapped model.

A tiny pure-torch LM (tests/tinylm.py) stands in for a transformer so that the two spawned
processes only import torch."""

from __future__ import annotations

import pytest
import torch
import torch.distributed as dist
import torch.multiprocessing as mp
from torch.nn.parallel import DistributedDataParallel as DDP

from cliffsweep.trainables.methods import build_method
from tinylm import TinyLM

VOCAB, WORLD, LR = 50, 2, 0.1
CASES = {"ewc": {"lam": 0.5}, "mas": {"lam": 0.5}, "l2sp": {"lam": 0.5}, "rpsft": {"k": 4, "lam": 0.5}}


def make_batch(seed: int, rows: int = 3, width: int = 8) -> dict[str, torch.Tensor]:
    g = torch.Generator().manual_seed(seed)
    ids = torch.randint(0, VOCAB, (rows, width), generator=g)
    labels = ids.clone()
    labels[:, :3] = -100
    return {"input_ids": ids, "attention_mask": torch.ones_like(ids), "labels": labels,
            "example_idx": torch.arange(rows), "is_retain": torch.zeros(rows, dtype=torch.bool)}


def prepared(name: str, params: dict):
    """Seeded model, stats on retain batches, prepare(), then a drift so the penalty is live."""
    torch.manual_seed(0)
    model = TinyLM(VOCAB, mlp_mult=2)
    method = build_method(name, params)
    stats = method.compute_stats(model, [make_batch(100), make_batch(101)], [])
    method.prepare(model, stats)
    g = torch.Generator().manual_seed(1)
    with torch.no_grad():
        for p in model.parameters():
            p.add_(0.05 * torch.randn(p.shape, generator=g))
    return model, method


def _worker(rank: int, rendezvous: str, out_dir: str) -> None:
    torch.set_num_threads(1)
    dist.init_process_group("gloo", init_method=f"file://{rendezvous}", rank=rank, world_size=WORLD)
    results = {}
    for name, params in CASES.items():
        model, method = prepared(name, params)
        ddp = DDP(model)
        loss, logs = method.loss(ddp, make_batch(rank))  # each rank its half of the global batch
        loss.backward()
        grads = {n: p.grad.clone() for n, p in model.named_parameters()}
        torch.optim.SGD(ddp.parameters(), lr=LR).step()
        results[name] = {"loss": float(loss.detach()), "penalty": logs["penalty"], "grads": grads,
                         "params": {n: p.detach().clone() for n, p in model.named_parameters()}}
    model, method = prepared("wise_ft", {"alpha": 0.25})
    results["wise_ft"] = method.export(DDP(model)).state_dict()
    torch.save(results, f"{out_dir}/rank{rank}.pt")
    dist.destroy_process_group()


def single_process(name: str, params: dict) -> dict:
    model, method = prepared(name, params)
    parts = [method.loss(model, make_batch(r)) for r in range(WORLD)]
    loss = sum(p[0] for p in parts) / WORLD  # DDP averages gradients over ranks
    loss.backward()
    grads = {n: p.grad.clone() for n, p in model.named_parameters()}
    torch.optim.SGD(model.parameters(), lr=LR).step()
    return {"loss": float(loss.detach()), "penalty": parts[0][1]["penalty"], "grads": grads,
            "params": {n: p.detach().clone() for n, p in model.named_parameters()}}


def test_penalties_under_ddp_match_single_process(tmp_path):
    mp.spawn(_worker, args=(str(tmp_path / "rendezvous"), str(tmp_path)), nprocs=WORLD, join=True)
    ranks = [torch.load(tmp_path / f"rank{r}.pt") for r in range(WORLD)]
    n_threads = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        for name, params in CASES.items():
            ref = single_process(name, params)
            assert ref["penalty"] > 0, name
            assert sum(r[name]["loss"] for r in ranks) / WORLD == pytest.approx(ref["loss"], rel=1e-6)
            for r in ranks:
                assert r[name]["penalty"] == pytest.approx(ref["penalty"], rel=1e-6), name
                for n, g in ref["grads"].items():
                    assert torch.allclose(r[name]["grads"][n], g, atol=1e-6, rtol=1e-5), (name, n)
                    assert torch.allclose(r[name]["params"][n], ref["params"][n], atol=1e-6), (name, n)

        model, method = prepared("wise_ft", {"alpha": 0.25})
        expected = method.export(model).state_dict()
        for r in ranks:
            assert expected.keys() == r["wise_ft"].keys()
            assert all(torch.equal(v, r["wise_ft"][k]) for k, v in expected.items())
    finally:
        torch.set_num_threads(n_threads)

