"""Peak memory per training worker and tokens/s, by micro-batch size, with and without activation
checkpointing, on the real model (issue 9: on main the 135M model peaked at 15 GB RSS at batch
8 x 512 tokens).

    .venv/bin/python bench/bench_memory.py [--model smollm2:135m-instruct] [--batch 8] [--seq 512]
        [--micro 8,4,2,1] [--steps 1] [--warmup 0] [--threads 2] [--no-baseline]
    .venv/bin/python bench/bench_memory.py --stats --micro 2 [--checkpointing] [--stats-batches 2]
        (issue 15: each statistics method's compute_stats peak beside its training step's)

Each configuration runs in a fresh process (so its peak RSS is its own), as one worker runs a
trial: the model in fp32, AdamW (its state allocated up front by a step of lr 0 on zero gradients,
so that every measured peak holds it, as from a trial's second step on), --warmup untimed steps,
then --steps timed steps of `microbatch.accumulate` + optimizer step on the same global batch of
--batch rows x --seq
tokens (random token ids, the first half of each row a masked prompt: the loss counts the second
half). Rows: the baseline (`logits`, main's loss: the model's full-vocabulary logits and
`masked_token_ce`, one pass), then the chunked loss for each micro-batch size, without and with
checkpointing. Printed side by side with ratios to the baseline. Peak = the process's maximum
resident set (ru_maxrss; on a GPU, torch's peak allocation too). The machine is shared: a
configuration is stopped if the machine's available memory falls below --min-free-gb.
"""

from __future__ import annotations

import argparse
import json
import resource
import subprocess
import sys
import time

import torch


def make_batch(batch: int, seq: int, vocab: int) -> list:
    from cliffsweep.trainables import data

    g = torch.Generator().manual_seed(0)
    rows = []
    for i in range(batch):
        ids = torch.randint(3, vocab, (seq,), generator=g).tolist()
        rows.append(data.Encoded(ids, [-100] * (seq // 2) + ids[seq // 2:], i, False))
    return rows


def child(cfg: dict) -> dict:
    """One configuration: returns its peak memory and timings."""
    from cliffsweep.models import load_model, resolve_model
    from cliffsweep.trainables import data, microbatch
    from cliffsweep.trainables.losses import masked_token_ce
    from cliffsweep.trainables.methods import build_method
    from cliffsweep.trainables.optimizers import build_optimizer

    torch.set_num_threads(cfg["threads"])
    device = torch.device("cuda" if torch.cuda.is_available() else "cpu")
    model, _ = load_model(resolve_model(cfg["model"]), "float32")
    model.to(device).train()
    method = build_method("sft")
    if cfg["checkpointing"]:
        microbatch.enable_checkpointing(model)
    rows = make_batch(cfg["batch"], cfg["seq"], model.config.vocab_size)
    (step,) = data.epoch_steps(rows, [], cfg["batch"], 0.0, 0, 0, 0, 1, 0, cfg["micro"])
    micro = [{k: v.to(device) for k, v in b.items()} for b in step.micro]
    amp = microbatch.autocast_dtype(torch.float32, device.type)
    opt = build_optimizer("adamw", model, 1e-5, 0.01)
    rss_loaded = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 2**20

    def one_step() -> float:
        if cfg["loss"] == "logits":  # main's loss: full-vocabulary logits of the whole batch
            b = micro[0]
            logits = model(input_ids=b["input_ids"], attention_mask=b["attention_mask"]).logits
            loss = masked_token_ce(logits, b["labels"])
            loss.backward()
        else:
            loss = microbatch.accumulate(model, method, micro, step.n_tokens, world=1, amp=amp)
        opt.step()
        opt.zero_grad(set_to_none=True)
        return float(loss)

    for p in model.parameters():  # AdamW's state, allocated without moving a weight (lr 0)
        p.grad = torch.zeros_like(p)
    lr = opt.param_groups[0]["lr"]
    opt.param_groups[0]["lr"] = 0.0
    opt.step()
    opt.param_groups[0]["lr"] = lr
    opt.zero_grad(set_to_none=True)
    for _ in range(cfg["warmup"]):
        one_step()
    times, losses = [], []
    for _ in range(cfg["steps"]):
        t0 = time.perf_counter()
        losses.append(one_step())
        times.append(time.perf_counter() - t0)
    out = {"peak_rss_gb": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 2**20,
           "loaded_rss_gb": rss_loaded, "step_s": min(times),
           "tokens_per_s": cfg["batch"] * cfg["seq"] / min(times), "micro_batches": len(micro),
           "loss": losses[-1], "device": str(device)}
    if device.type == "cuda":
        out["cuda_peak_gb"] = torch.cuda.max_memory_allocated() / 2**30
    return out


def stats_child(cfg: dict) -> dict:
    """Issue 15: one side of a method's statistics-vs-training comparison, in its own process.
    side 'stats': the method's compute_stats on --stats-batches retain batches of --batch rows
    (micro None = whole batches, main's way; else the recipe's micro-batches), saving them to
    cfg['stats_file']; side 'train': the method prepared with those statistics, then one
    training step (accumulate + AdamW, its state allocated up front) in the same micro-batches."""
    from safetensors.torch import load_file, save_file

    from cliffsweep.models import load_model, resolve_model
    from cliffsweep.trainables import data, microbatch
    from cliffsweep.trainables.methods import build_method
    from cliffsweep.trainables.optimizers import build_optimizer

    torch.set_num_threads(cfg["threads"])
    model, _ = load_model(resolve_model(cfg["model"]), "float32")
    model.train()
    method = build_method(cfg["method"])
    vocab = model.config.vocab_size
    if cfg["checkpointing"]:
        microbatch.enable_checkpointing(model)
    rss_loaded = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 2**20
    t0 = time.perf_counter()
    if cfg["side"] == "stats":
        batches = []
        for i in range(cfg["stats_batches"]):
            rows = make_batch(cfg["batch"], cfg["seq"], vocab)
            batches.append(data.collate([data.Encoded(r.ids, r.labels, j + i * cfg["batch"], False)
                                         for j, r in enumerate(rows)], 0))
        stats = method.compute_stats(model, batches, batches, micro_batch_size=cfg["micro"])
        save_file({k: v.contiguous() for k, v in stats.items()}, cfg["stats_file"])
        loss = float("nan")
    else:
        model = method.prepare(model, load_file(cfg["stats_file"]))
        rows = make_batch(cfg["batch"], cfg["seq"], vocab)
        (step,) = data.epoch_steps(rows, [], cfg["batch"], 0.0, 0, 0, 0, 1, 0, cfg["micro"])
        opt = build_optimizer("adamw", model, 1e-5, 0.01)
        for p in model.parameters():  # AdamW's state, as from a trial's second step on
            if p.requires_grad:
                p.grad = torch.zeros_like(p)
        opt.step()
        opt.zero_grad(set_to_none=True)
        loss = float(microbatch.accumulate(model, method, step.micro, step.n_tokens, world=1))
        opt.step()
    return {"peak_rss_gb": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 2**20,
            "loaded_rss_gb": rss_loaded, "seconds": time.perf_counter() - t0, "loss": loss}


STATS_METHODS = ("ewc", "mas", "sib", "rpsft", "flow")


def stats_main(args, base: dict) -> None:
    """--stats: per method, its statistics' peak beside its training step's (issue 15)."""
    import tempfile

    micro = int(args.micro.split(",")[0])
    print(f"model {args.model}: statistics over {args.stats_batches} batch(es) of {args.batch} x {args.seq} tokens "
          f"vs one training step of the same batch; recipe micro-batch {micro}, checkpointing "
          f"{'on' if args.checkpointing else 'off'}; {args.threads} torch threads; peak RSS per process", flush=True)
    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        for name in STATS_METHODS:
            res = {}
            for label, cfg in (("stats, whole batches", {"side": "stats", "micro": None, "checkpointing": False}),
                               ("stats, recipe micro-batches", {"side": "stats", "micro": micro,
                                                                "checkpointing": args.checkpointing}),
                               ("training step", {"side": "train", "micro": micro, "checkpointing": args.checkpointing})):
                res[label] = run_config({**base, **cfg, "method": name, "stats_batches": args.stats_batches,
                                         "stats_file": f"{tmp}/{name}.safetensors", "mode": "stats"}, args.min_free_gb)
                print(f"  done: {name} / {label}: {res[label]}", flush=True)
            rows.append((name, res))
    print(f"\n{'method':8s} {'stats whole GB':>14s} {'stats micro GB':>14s} {'train step GB':>13s} "
          f"{'micro/train':>11s} {'whole/train':>11s}")
    for name, res in rows:
        vals = [res[k].get("peak_rss_gb") for k in ("stats, whole batches", "stats, recipe micro-batches",
                                                   "training step")]
        if any(v is None for v in vals):
            print(f"{name:8s} " + "; ".join(f"{k}: {v.get('error')}" for k, v in res.items() if "error" in v))
            continue
        whole, mic, train = vals
        print(f"{name:8s} {whole:14.2f} {mic:14.2f} {train:13.2f} {mic / train:11.2f} {whole / train:11.2f}")


def available_gb() -> float:
    with open("/proc/meminfo") as f:
        info = dict(line.split(":", 1) for line in f)
    return int(info["MemAvailable"].split()[0]) / 2**20


def run_config(cfg: dict, min_free_gb: float) -> dict:
    """`cfg` in a fresh Python process, stopped if the shared machine runs low on memory."""
    proc = subprocess.Popen([sys.executable, __file__, "--child", json.dumps(cfg)],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    while proc.poll() is None:
        if available_gb() < min_free_gb:
            proc.kill()
            proc.wait()
            return {"error": f"stopped: the machine had < {min_free_gb} GB available"}
        time.sleep(0.2)
    out, err = proc.communicate()
    if proc.returncode != 0:
        return {"error": err.strip().splitlines()[-1] if err.strip() else f"exit {proc.returncode}"}
    return json.loads(out.strip().splitlines()[-1])


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--model", default="smollm2:135m-instruct", help="spec path: smollm2:..., toy:..., or a folder")
    ap.add_argument("--batch", type=int, default=8)
    ap.add_argument("--seq", type=int, default=512)
    ap.add_argument("--micro", default="8,4,2,1", help="micro-batch sizes (rows per pass)")
    ap.add_argument("--steps", type=int, default=1, help="timed steps")
    ap.add_argument("--warmup", type=int, default=0, help="untimed steps before them")
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--no-baseline", action="store_true", help="skip main's full-logits loss")
    ap.add_argument("--min-free-gb", type=float, default=2.0)
    ap.add_argument("--stats", action="store_true",
                    help="per statistics method: its compute_stats' peak beside its training step's (issue 15); "
                         "the first --micro size is the recipe's")
    ap.add_argument("--stats-batches", type=int, default=2, help="--stats: retain batches the statistics run over")
    ap.add_argument("--checkpointing", action="store_true", help="--stats: the recipe has activation checkpointing")
    ap.add_argument("--child", help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.child:
        cfg = json.loads(args.child)
        print(json.dumps(stats_child(cfg) if cfg.get("mode") == "stats" else child(cfg)))
        return

    base = {"model": args.model, "batch": args.batch, "seq": args.seq, "steps": args.steps,
            "warmup": args.warmup, "threads": args.threads}
    if args.stats:
        stats_main(args, base)
        return
    configs = [] if args.no_baseline else [("main: full logits, 1 pass", {"loss": "logits", "micro": None, "checkpointing": False})]
    for m in [int(x) for x in args.micro.split(",")]:
        for ck in (False, True):
            configs.append((f"chunked, micro {m}" + (", ckpt" if ck else ""), {"loss": "chunked", "micro": m, "checkpointing": ck}))
    print(f"model {args.model}, global batch {args.batch} x {args.seq} tokens, fp32 + AdamW, "
          f"{args.threads} torch threads, {args.steps} timed step(s) after {args.warmup} warm-up", flush=True)
    # Smallest first, the baseline last: on a shared machine the largest is the one most likely
    # to be stopped, and it should not cost the others.
    results = {}
    for label, cfg in reversed(configs):
        results[label] = run_config({**base, **cfg}, args.min_free_gb)
        print(f"  done: {label}: {results[label]}", flush=True)
    ref = next((results[label] for label, _ in configs if "error" not in results[label]), None)
    print(f"\n{'configuration':32s} {'passes':>6s} {'peak RSS GB':>11s} {'x base':>7s} {'tokens/s':>9s} "
          f"{'x base':>7s} {'s/step':>7s}   (x base: ratio to the first row that ran)")
    for label, _ in configs:
        r = results[label]
        if "error" in r:
            print(f"{label:32s} {r['error']}")
            continue
        cuda = f"  (cuda peak {r['cuda_peak_gb']:.2f} GB)" if "cuda_peak_gb" in r else ""
        print(f"{label:32s} {r['micro_batches']:6d} {r['peak_rss_gb']:11.2f} {r['peak_rss_gb'] / ref['peak_rss_gb']:7.2f} "
              f"{r['tokens_per_s']:9.1f} {r['tokens_per_s'] / ref['tokens_per_s']:7.2f} {r['step_s']:7.1f}"
              f"  loss {r['loss']:.4f}, after load {r['loaded_rss_gb']:.2f} GB{cuda}")


if __name__ == "__main__":
    main()
