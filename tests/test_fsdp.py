"""FSDP (torch FSDP2 over gloo, 2 CPU processes) on a real toy transformer: for every method that
declares `fsdp_safe`, one sharded AdamW step gives the loss and the weights of one process
stepping on the same global batch (RPSFT's penalty, computed on row shards, included); the gathered checkpoint rebuilds into a plain model with
those weights and logits, which saves and reloads as an ordinary HF folder
(cliffsweep/trainables/parallel.py)."""

from __future__ import annotations

import pytest
import torch
import torch.distributed as dist
import torch.multiprocessing as mp

WORLD, LR, BATCH = 2, 1e-3, 8


def fsdp_methods() -> list[str]:
    from cliffsweep.trainables.methods import METHODS, method_class

    return sorted(n for n in METHODS if method_class(n).fsdp_safe)


def setup(name: str):
    """Toy model + method prepared as a trial does (stats as trainables/stats.py computes
    them), and each rank's batch of the first step as the training loop shards it."""
    from cliffsweep.evals.tasks import build_task
    from cliffsweep.models import load_model, resolve_model
    from cliffsweep.trainables import data
    from cliffsweep.trainables.methods import build_method

    torch.manual_seed(0)
    model, tok = load_model(resolve_model("toy:qwen2-tiny"), "float32")
    pad = tok.pad_token_id if tok.pad_token_id is not None else tok.eos_token_id
    learn = data.encode(tok, build_task("toy_facts", {"n_train": 64}).train_examples(), 128)
    retain = data.encode(tok, build_task("toy_arith", {}).train_examples()[:32], 128, retain=True)
    method = build_method(name, {})
    stats = {}
    if method.stats_inputs() is not None:
        chunk = lambda xs: [data.collate(xs[i:i + BATCH], pad) for i in range(0, len(xs), BATCH)]  # noqa: E731
        stats = method.compute_stats(model, chunk(retain), chunk(learn))
    model = method.prepare(model, stats)
    if name == "rpsft":  # away from W0, so that the penalty and its gradient are not zero
        from cliffsweep.trainables.methods.rpsft import covered_weights

        noise = torch.Generator().manual_seed(1)
        with torch.no_grad():
            for w in covered_weights(model).values():
                w.add_(0.02 * torch.randn(w.shape, generator=noise))
        assert float(method.penalty(model).detach()) > 0
    batches = [data.epoch_batches(learn, retain if method.retain_fraction > 0 else [], BATCH,
                                  method.retain_fraction, 0, 0, r, WORLD, pad)[0] for r in range(WORLD)]
    return model, method, batches


def step(model, method, batch_loss, grads) -> float:
    """One training step in the loop's order: the recipe's AdamW is built before any forward
    (FSDP2 swaps the root's parameters for unsharded ones between forward and backward, so an
    optimizer built then would hold stale tensors); `grads(model)` sees the gradients."""
    from cliffsweep.trainables.optimizers import build_optimizer

    opt = build_optimizer("adamw", model, LR, 0.01)
    loss = batch_loss()
    loss.backward()
    grads(model)
    opt.step()
    return float(loss.detach())


def _worker(rank: int, rendezvous: str, out_dir: str, names: list[str]) -> None:
    from cliffsweep.trainables import parallel

    torch.set_num_threads(1)
    dist.init_process_group("gloo", init_method=f"file://{rendezvous}", rank=rank, world_size=WORLD)
    results = {}
    for name in names:
        model, method, batches = setup(name)
        parallel.shard(model)
        assert parallel.is_sharded(model)
        results[name] = {}
        # full_tensor() gathers a sharded gradient: a collective, like full_state below
        results[name]["loss"] = step(model, method, lambda: method.loss(model, batches[rank])[0],
                                     lambda m: results[name].update(
                                         grads={n: p.grad.full_tensor() for n, p in m.named_parameters()}))
        state = parallel.full_state(model)
        if rank == 0:
            plain = parallel.plain_model(model, state)
            assert not parallel.is_sharded(plain)
            results[name]["state"] = {k: v.clone() for k, v in plain.state_dict().items()}
            with torch.no_grad():
                results[name]["logits"] = plain(input_ids=batches[0]["input_ids"],
                                                attention_mask=batches[0]["attention_mask"]).logits
            if name == names[0]:
                plain.save_pretrained(f"{out_dir}/ckpt", safe_serialization=True)
    torch.save(results, f"{out_dir}/rank{rank}.pt")
    dist.destroy_process_group()


@pytest.fixture(scope="module")
def sharded_runs(tmp_path_factory):
    out = tmp_path_factory.mktemp("fsdp")
    names = fsdp_methods()
    mp.spawn(_worker, args=(str(out / "rendezvous"), str(out), names), nprocs=WORLD, join=True)
    return out, names, [torch.load(out / f"rank{r}.pt") for r in range(WORLD)]


def test_shard_safe_methods_are_the_loss_only_ones():
    # the list the spec check and the test below rely on; a new method opts in only with it
    assert fsdp_methods() == ["dft", "flow", "iw", "kl", "replay", "rpsft", "sft", "sib", "talr"]


def test_one_fsdp_step_equals_one_process_on_the_global_batch(sharded_runs):
    _, names, ranks = sharded_runs
    n_threads = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        for name in names:
            model, method, batches = setup(name)
            before = {k: v.clone() for k, v in model.state_dict().items()}
            parts: list = []

            def global_loss():
                losses = [method.loss(model, b)[0] for b in batches]
                parts.extend(float(x.detach()) for x in losses)
                return sum(losses) / WORLD  # FSDP, like DDP, averages gradients over ranks

            ref_grads: dict = {}
            step(model, method, global_loss, lambda m: ref_grads.update({n: p.grad.clone() for n, p in m.named_parameters()}))
            for r in range(WORLD):
                assert ranks[r][name]["loss"] == pytest.approx(parts[r], rel=1e-5), name
                for n, g in ref_grads.items():
                    assert torch.allclose(ranks[r][name]["grads"][n], g, atol=1e-7, rtol=1e-4), (name, n)
            got = ranks[0][name]["state"]
            assert got.keys() == model.state_dict().keys(), name
            moved, matched = 0, {}
            for k, v in model.state_dict().items():
                # AdamW's first step is lr * g / (|g| + eps): where g is rounding noise its sign
                # is too, so weights are compared where the gradient is not vanishingly small.
                g = ref_grads.get(k)
                live = torch.ones_like(v, dtype=torch.bool) if g is None else g.abs() > 1e-6
                assert torch.allclose(got[k][live], v[live], atol=1e-6), (name, k, (got[k] - v)[live].abs().max())
                moved += int(not torch.equal(v, before[k]))
                matched[k] = torch.where(live, v, got[k])
            assert moved > 0, f"{name}: the step changed no weight"
            # the rebuilt plain model computes what one process computes with the same weights:
            # the reference's where compared above, the sharded run's where rounding noise moved
            # them (an lr-sized step of either sign, which can shift a logit by 3e-5)
            model.load_state_dict(matched)
            with torch.no_grad():
                ref = model(input_ids=batches[0]["input_ids"], attention_mask=batches[0]["attention_mask"]).logits
            assert torch.allclose(ranks[0][name]["logits"], ref, atol=1e-5), \
                (name, (ranks[0][name]["logits"] - ref).abs().max())
    finally:
        torch.set_num_threads(n_threads)


def test_gathered_checkpoint_reloads_as_an_hf_folder(sharded_runs):
    from transformers import AutoModelForCausalLM

    out, names, ranks = sharded_runs
    reloaded = AutoModelForCausalLM.from_pretrained(out / "ckpt", dtype=torch.float32)
    saved = ranks[0][names[0]]["state"]
    for k, v in reloaded.state_dict().items():
        assert torch.equal(v, saved[k]), k
