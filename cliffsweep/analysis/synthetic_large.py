"""A synthetic store of a grid larger than any sweep run here (issue 62 part 3: the readers at
100,000 trials), written as a finished sweep leaves it: compacted, one Parquet file per table
named by its manifest (storage/store.py `Store.compact`), each row tagged with its write unit.

`synthetic.write_synthetic_store` writes a file per trial and table, one trial at a time; at this
size that is hours. Here every column is built at once with numpy, the samples a model at a time
(one row group each), so memory stays bounded by one model's rows. The ground truth is
synthetic.py's (`true_accuracy`: the cliff paper's two regimes, 000 Fig. 3 and 4), a model's
shape alternating cliff / gradual; each item is answered when its fixed difficulty plus a little
per-checkpoint noise is below the checkpoint's accuracy, and an evaluation's value is the mean of
its items, so `evals` and `samples` agree as a real store's do.

    python -m cliffsweep.analysis.synthetic_large OUT_STORE [MODELS] [ITEMS]
"""

from __future__ import annotations

import sys
from dataclasses import dataclass

import numpy as np
import pyarrow as pa

from cliffsweep.analysis.regimes import CLIFF, GRADUAL
from cliffsweep.analysis.synthetic import true_accuracy
from cliffsweep.storage.ledger import checkpoint_key
from cliffsweep.storage.store import SCHEMAS, SPEC_FILE, Store, eval_key
from cliffsweep.sweep.grid import BASE
from cliffsweep.sweep.status import TrialStatus


@dataclass(frozen=True)
class LargeGrid:
    """Per model: 8 series x 10 lrs x 5 epochs x 5 seeds = 2,000 trials (50 models: 100,000),
    3 evaluated checkpoints each, on one learn and one retain task of `items` items."""

    models: int = 50
    items: int = 100
    series: tuple[str, ...] = ("sft", "sib", "ewc", "mas", "migu", "nanoadam", "kl", "lora")
    lrs: tuple[float, ...] = (1e-5, 1.67e-5, 2.78e-5, 4.64e-5, 7.74e-5, 1.29e-4, 2.15e-4, 3.59e-4, 5.99e-4, 1e-3)
    epochs: tuple[int, ...] = (1, 2, 3, 4, 6)
    seeds: int = 5
    checkpoints: int = 3
    steps_per_epoch: int = 10
    base: tuple[float, float] = (0.25, 0.6)
    tasks: tuple[tuple[str, str, str], ...] = (("chem_l3", "learn", "letter-v1"), ("gsm8k", "retain", "gsm8k-v1"))

    @property
    def per_model(self) -> int:
        return len(self.series) * len(self.lrs) * len(self.epochs) * self.seeds


def _trials_of(grid: LargeGrid, m: int) -> dict[str, np.ndarray]:
    """Model `m`'s trials, one entry per column (series, lr, epochs, seed vary fastest last)."""
    s, l, e, d = np.meshgrid(np.arange(len(grid.series)), np.arange(len(grid.lrs)), np.arange(len(grid.epochs)),
                             np.arange(grid.seeds), indexing="ij")
    s, l, e, d = (a.ravel() for a in (s, l, e, d))
    method = np.asarray(grid.series)[s]
    lr, ep = np.asarray(grid.lrs)[l], np.asarray(grid.epochs)[e]
    ids = np.asarray([f"m{m:03d}-{a}-lr{b:g}-e{c}-s{x}" for a, b, c, x in zip(method, lr, ep, d)])
    return {"trial_id": ids, "method": method, "lr": lr, "epochs": ep, "seed": d, "s": s, "l": l, "e": e}


def _accuracy_table(grid: LargeGrid, shape: str) -> np.ndarray:
    """True accuracy [series, lr, epochs, checkpoint, task] of a model of `shape`."""
    out = np.empty((len(grid.series), len(grid.lrs), len(grid.epochs), grid.checkpoints, 2))
    for i, method in enumerate(grid.series):
        for j, lr in enumerate(grid.lrs):
            for k, ep in enumerate(grid.epochs):
                for c in range(grid.checkpoints):
                    out[i, j, k, c] = true_accuracy(shape, method, lr, ep, (c + 1) / grid.checkpoints, grid.base)
    return out


def _table(name: str, cols: dict, units: np.ndarray) -> tuple[pa.Table, np.ndarray]:
    """`cols` typed as table `name`'s columns, and each row's write unit (Store.compacted_writer)."""
    types = {f.name: f.type for f in SCHEMAS[name]}
    return pa.table({k: pa.array(v, types[k]) for k, v in cols.items()}), units


def _evaluations(grid: LargeGrid, m: int, tr: dict, acc: np.ndarray, rng: np.random.Generator,
                 difficulty: np.ndarray, now) -> tuple[tuple, tuple]:
    """Model `m`'s evals and samples rows: its base once, then every trial x checkpoint x task."""
    base_id = f"m{m:03d}-base"
    ck, task = grid.checkpoints, len(grid.tasks)
    n_t = len(tr["trial_id"])
    t_idx = np.concatenate([np.full(task, -1), np.repeat(np.arange(n_t), ck * task)])  # -1: the base
    c_idx = np.concatenate([np.zeros(task, int), np.tile(np.repeat(np.arange(ck), task), n_t)])
    k_idx = np.concatenate([np.arange(task), np.tile(np.arange(task), n_t * ck)])
    real = t_idx >= 0
    p = np.where(real, acc[tr["s"][t_idx], tr["l"][t_idx], tr["e"][t_idx], c_idx, k_idx], np.asarray(grid.base)[k_idx])
    correct = difficulty[k_idx] + rng.normal(0.0, 0.04, (len(p), grid.items)) < p[:, None]
    ids = np.where(real, tr["trial_id"][t_idx], base_id)
    epochs = np.where(real, tr["epochs"][t_idx], 0)
    step = np.where(real, (c_idx + 1) * epochs * grid.steps_per_epoch // ck, 0)
    # unit keys as the files' names (this grid's ids need no escaping): synthetic.py's one unit per trial
    units = np.asarray([eval_key(t, 0, "all") for t in ids])
    names, roles, versions = (np.asarray([t[i] for t in grid.tasks])[k_idx] for i in range(3))
    pick = lambda key, base: np.where(real, tr[key][t_idx], base)  # noqa: E731
    evals = _table("evals", {
        "trial_id": ids, "model": np.full(len(p), f"m{m:03d}"), "method": pick("method", BASE),
        "series": pick("method", BASE), "optimizer": np.where(real, "adamw", ""), "lr": pick("lr", 0.0),
        "epochs": epochs, "seed": pick("seed", 0), "step": step, "epoch": step / grid.steps_per_epoch,
        "task": names, "role": roles, "metric": np.full(len(p), "accuracy"), "value": correct.mean(axis=1),
        "n": np.full(len(p), grid.items), "scorer_version": versions, "evaluated_at": np.full(len(p), now),
        "eval_seconds": np.full(len(p), 0.1), "n_scored": np.full(len(p), grid.items),
        "n_items": np.full(len(p), grid.items)}, units)
    rows = np.repeat(np.arange(len(p)), grid.items)
    item = np.tile(np.arange(grid.items), len(p))
    flat = correct.ravel()
    samples = _table("samples", {
        "trial_id": ids[rows], "step": step[rows], "task": names[rows],
        "example_id": np.char.add(np.char.add(names[rows].astype(str), "-"), item.astype(str)),
        "correct": flat, "prediction": np.where(flat, "ok", "wrong")}, units[rows])
    return evals, samples


def write_large_store(path: str, grid: LargeGrid | None = None, seed: int = 0) -> Store:
    """Write `grid`'s store at `path` (see the module docstring); returns it."""
    import pandas as pd

    grid = grid or LargeGrid()
    rng, store, now = np.random.default_rng(seed), Store(path), pd.Timestamp.now(tz="UTC")
    store.write_json(SPEC_FILE, {"name": "synthetic-large", "lrs": list(grid.lrs), "epochs": list(grid.epochs),
                                 "tasks": {"learn": {"name": grid.tasks[0][0], "params": {}},
                                           "retain": [{"name": grid.tasks[1][0], "params": {}}]}})
    difficulty = rng.uniform(size=(len(grid.tasks), grid.items))
    out = {t: store.compacted_writer(t) for t in ("trials", "checkpoints", "evals", "samples")}
    for m in range(grid.models):
        tr = _trials_of(grid, m)
        acc = _accuracy_table(grid, CLIFF if m % 2 == 0 else GRADUAL)
        evals, samples = _evaluations(grid, m, tr, acc, rng, difficulty, now)
        out["evals"].add(*evals)
        out["samples"].add(*samples)
        out["trials"].add(*_trials_table(grid, m, tr, now))
        out["checkpoints"].add(*_checkpoints_table(grid, tr, now))
    for c in out.values():
        c.publish()
    return store


def _trials_table(grid: LargeGrid, m: int, tr: dict, now) -> tuple:
    n = len(tr["trial_id"])
    steps = tr["epochs"] * grid.steps_per_epoch
    return _table("trials", {
        "trial_id": tr["trial_id"], "model": np.full(n, f"m{m:03d}"), "model_path": np.full(n, f"toy:m{m:03d}"),
        "method": tr["method"], "method_params": np.full(n, "{}"), "optimizer": np.full(n, "adamw"),
        "series": tr["method"], "lr": tr["lr"], "epochs": tr["epochs"], "seed": tr["seed"], "round": np.zeros(n, int),
        "status": np.full(n, TrialStatus.DONE.value), "attempt": np.ones(n, int), "started_at": np.full(n, now),
        "finished_at": np.full(n, now), "train_seconds": np.ones(n), "steps": steps, "total_steps": steps,
        "final_loss": np.full(n, 0.5), "config": np.full(n, "{}")}, tr["trial_id"])


def _checkpoints_table(grid: LargeGrid, tr: dict, now) -> tuple:
    ck = grid.checkpoints
    ids = np.repeat(tr["trial_id"], ck)
    c = np.tile(np.arange(1, ck + 1), len(tr["trial_id"]))
    step = c * np.repeat(tr["epochs"], ck) * grid.steps_per_epoch // ck
    return _table("checkpoints", {
        "trial_id": ids, "step": step, "epoch": step / grid.steps_per_epoch,
        "kind": np.where(c == ck, "final", "intermediate"), "uri": np.char.add("synthetic://", ids.astype(str)),
        "reported_at": np.full(len(ids), now)}, np.asarray([checkpoint_key(t, s) for t, s in zip(ids, step)]))


if __name__ == "__main__":
    models = int(sys.argv[2]) if len(sys.argv) > 2 else LargeGrid.models
    items = int(sys.argv[3]) if len(sys.argv) > 3 else LargeGrid.items
    g = LargeGrid(models=models, items=items)
    write_large_store(sys.argv[1], g)
    print(f"wrote a synthetic store of {models * g.per_model:,} trials ({items} items per evaluation) to {sys.argv[1]}")
