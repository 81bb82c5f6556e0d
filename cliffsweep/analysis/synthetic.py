"""A synthetic sweep store with known regimes, for tests and the example report.

It writes what `cliffsweep run` writes (docs/store.md: spec.json, trials, evals, samples) for
a grid of models x methods x lrs x epochs, with accuracies drawn from a chosen ground-truth
shape per model, so the analysis can be checked against a known answer:

- ``"cliff"`` (cliff paper, seed 000, Fig. 4): learning saturates at low lrs while retention
  stays at the base; past a critical lr retention collapses to a tenth with no learning gain.
  More epochs move learning and the cliff to lower lrs (Fig. 7).
- ``"gradual"`` (Fig. 3): learning rises with log lr while retention falls progressively.
- ``"flat"``: learning rises, retention stays at the base (no forgetting).

Per-example results come from a fixed latent difficulty per example (an example is answered
when its difficulty is below the checkpoint's accuracy, plus a little per-checkpoint noise), so
correctness is correlated across checkpoints as with a real model.

Run ``python -m cliffsweep.analysis.synthetic OUT_STORE`` to write the example store.
"""

from __future__ import annotations

import hashlib
import math
import sys
from dataclasses import dataclass, field

import numpy as np
import pandas as pd

from cliffsweep.storage.store import SPEC_FILE, Store, eval_key
from cliffsweep.sweep.status import TrialStatus
from cliffsweep.analysis.regimes import CLIFF, GRADUAL
from cliffsweep.sweep.grid import BASE

# Method effects (learning gain, forgetting scale), our choice for the example: SIB and the
# regularisers keep more retention along a gradual trade-off (Fig. 3, 5, 6: the frontier moves
# up) and do not move a cliff (Fig. 4); LoRA learns less (Fig. 8) and needs ~10x the lr
# (_LR_SCALE). Unknown methods act as SFT.
_METHOD_EFFECT = {"sft": (1.0, 1.0), "sib": (1.0, 0.55), "ewc": (1.0, 0.45), "mas": (0.97, 0.6),
                  "migu": (0.95, 0.75), "nanoadam": (1.0, 0.85), "kl": (0.95, 0.5), "lora": (0.7, 0.8)}
_LR_SCALE = {"lora": 0.1}


@dataclass(frozen=True)
class SyntheticSweep:
    models: dict[str, str] = field(default_factory=lambda: {"toy-a": CLIFF, "toy-b": GRADUAL})
    """Model label -> ground-truth shape ('cliff', 'gradual', 'flat')."""
    series: tuple[tuple[str, str], ...] = (("sft", "sft"), ("ewc", "ewc(lam=10)"), ("lora", "lora"))
    """(method, series label) pairs."""
    lrs: tuple[float, ...] = (1e-5, 3e-5, 1e-4, 3e-4, 1e-3, 3e-3)
    epochs: tuple[int, ...] = (1, 3)
    seeds: tuple[int, ...] = (0,)
    n_learn: int = 200
    n_retain: int = 200
    learn_task: str = "toy_facts"
    retain_task: str = "toy_arith"
    base: tuple[float, float] = (0.25, 0.60)
    """Base (L0, R0): a 4-choice learn task at chance, a generative retain task."""
    steps_per_epoch: int = 10
    seed: int = 0
    paths: dict[str, str] = field(default_factory=dict)
    """Model label -> spec path written in the trials (e.g. a hub id of archs.PUBLISHED, which
    gives the analysis a family and size); default ``toy:<label>``."""
    method_lrs: dict[str, tuple[float, ...]] = field(default_factory=dict)
    """Method -> its own lr grid (default ``lrs``), e.g. LoRA's ~10x higher one."""
    checkpoints: int | None = None
    """Evaluated checkpoints per trial, evenly spaced (None: one per epoch)."""
    seed_shift: float = 0.0
    """Standard deviation, in decades of lr, of a per-seed shift of the curve (seed spread)."""
    more_retain: tuple[tuple[str, str, float], ...] = ()
    """Further retain tasks, a suite (analysis/suite.py): (task, shape, base accuracy); shape ''
    follows the model's own shape, 'flat' never forgets."""


def true_accuracy(shape: str, method: str, lr: float, epochs: int, progress: float,
                  base: tuple[float, float]) -> tuple[float, float]:
    """Ground-truth (L, R) of a checkpoint at ``progress`` in (0, 1] of training."""
    L0, R0 = base
    learn_gain, forget_scale = _METHOD_EFFECT.get(method, (1.0, 1.0))
    x = math.log10(lr * _LR_SCALE.get(method, 1.0)) + math.log10(epochs) * 0.5  # more epochs act like a larger lr (Fig. 7)
    if shape == CLIFF:
        learned = 1 / (1 + math.exp(-4 * (x + 4.6)))
        kept = 1.0 if x < -3.3 else 0.08
    elif shape == GRADUAL:
        learned = 1 / (1 + math.exp(-2.2 * (x + 3.8)))
        kept = 1.0 - forget_scale * 0.9 * learned
    elif shape == "flat":
        learned = 1 / (1 + math.exp(-3 * (x + 4)))
        kept = 1.0
    else:
        raise ValueError(f"unknown shape {shape!r}; valid: cliff, gradual, flat")
    L = L0 + (0.9 - L0) * learn_gain * learned * progress
    R = R0 * (1.0 - (1.0 - kept) * progress)
    return L, R


_LOGIT_10_90 = 2 * math.log(9)  # a logistic rises from 10 % to 90 % over 2 ln 9 of its scale


@dataclass(frozen=True)
class Curve:
    """A ground-truth series: learning and retention as logistic functions of log10 lr, for
    property tests and the refinement benchmark (bench/bench_refine.py). Widths are the lr
    decades over which a logistic goes from 10 % to 90 % of its change, so a cliff "within
    1.5x of lr" has ``forget_decades = log10(1.5)``."""

    learn_at: float
    """log10 lr at half the learning gain."""
    learn_decades: float
    forget_at: float
    """log10 lr at half the retention loss."""
    forget_decades: float
    floor: float = 0.05
    """Share of R0 kept once retention has fallen."""
    base: tuple[float, float] = (0.25, 0.6)
    """(L0, R0): a 4-choice learn task at chance, a generative retain task."""
    L_max: float = 0.8

    def at(self, lr: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """True (L, R) at each lr (> 0)."""
        x = np.log10(np.asarray(lr, float))
        # logistic; arguments clipped where it is 0 or 1 to float precision anyway (no overflow)
        learned = 1 / (1 + np.exp(np.clip(-(x - self.learn_at) * _LOGIT_10_90 / self.learn_decades, -60, 60)))
        fallen = 1 / (1 + np.exp(np.clip(-(x - self.forget_at) * _LOGIT_10_90 / self.forget_decades, -60, 60)))
        L0, R0 = self.base
        return L0 + (self.L_max - L0) * learned, R0 * (1 - (1 - self.floor) * fallen)

    def series(self, lrs, n: tuple[int, int] | None = None, rng: np.random.Generator | None = None) -> pd.DataFrame:
        """Points ``lr, L, R`` at ``lrs`` plus the base (lr 0); with ``n = (n_L, n_R)`` each
        accuracy (the base's too) is drawn as ``Binomial(n, p) / n``, an eval of that size."""
        lr = np.concatenate([[0.0], np.sort(np.asarray(lrs, float))])
        L, R = (np.concatenate([[b], v]) for b, v in zip(self.base, self.at(lr[1:])))
        if n is not None:
            L, R = rng.binomial(n[0], L) / n[0], rng.binomial(n[1], R) / n[1]
        return pd.DataFrame({"lr": lr, "L": L, "R": R})


def random_curve(shape: str, rng: np.random.Generator) -> Curve:
    """A random ground-truth curve of a known regime (our families; docs/analysis.md):

    - ``"cliff"`` (paper Fig. 4): learning saturates 0.7-1.5 decades before retention collapses
      to 0-15 % of R0 within 1.05-1.5x of lr;
    - ``"gradual"`` (Fig. 3): retention falls to 5-40 % of R0 over 1.6-3 decades while learning
      rises alongside (its steepest 3.5x of lr loses at most 34 % of R0).
    """
    at = rng.uniform(-5, -3)
    base = (rng.uniform(0.2, 0.3), rng.uniform(0.4, 0.8))
    if shape == CLIFF:
        return Curve(learn_at=at - rng.uniform(0.7, 1.5), learn_decades=rng.uniform(0.5, 1.0), forget_at=at,
                     forget_decades=math.log10(rng.uniform(1.05, 1.5)), floor=rng.uniform(0, 0.15), base=base)
    if shape == GRADUAL:
        return Curve(learn_at=at + rng.uniform(-0.3, 0.2), learn_decades=rng.uniform(1.2, 2.5), forget_at=at,
                     forget_decades=rng.uniform(1.6, 3.0), floor=rng.uniform(0.05, 0.4), base=base)
    raise ValueError(f"unknown shape {shape!r}; valid: cliff, gradual")


def simulate_refinement(curve: Curve, lrs, cfg, n: tuple[int, int] | None = None,
                        rng: np.random.Generator | None = None, thresholds=None) -> pd.DataFrame:
    """What `run` with ``refine: cfg`` would measure on ``curve``: the grid ``lrs`` (round 0),
    then each round's :func:`cliffsweep.analysis.next_lrs.next_lrs` evaluated on the curve
    (with ``n``: binomial eval noise, the base drawn once). Returns ``lr, L, R, round`` rows,
    the base first (round 0)."""
    from cliffsweep.analysis.next_lrs import next_lrs

    pts = curve.series(lrs, n, rng).assign(round=0)
    for k in range(1, cfg.rounds + 1):
        new = next_lrs(pts, cfg, k, thresholds=thresholds)
        if not new:
            break
        more = curve.series(new, n, rng).iloc[1:]  # its base row is a fresh draw: drop it
        pts = pd.concat([pts, more.assign(round=k)], ignore_index=True)
    return pts


def geometric_lrs(lo: float, hi: float, step: float) -> list[float]:
    """lo, lo * step, ... up to hi (inclusive up to rounding): a grid of constant lr factor."""
    n = int(math.floor(math.log(hi / lo) / math.log(step) + 1e-9)) + 1
    return [float(f"{lo * step**k:.12g}") for k in range(n)]


def mantissa_lrs(lo: float, hi: float, mantissas: tuple[float, ...] = (1, 2, 5)) -> list[float]:
    """m x 10^e for each mantissa m, within [lo, hi]: (1, 2, 5) is a paper-like grid (2-2.5x
    steps), (1, 3) the toy default's (3x, 3.33x)."""
    grid = (float(f"{m * 10.0**e:.12g}") for e in range(math.floor(math.log10(lo)) - 1, math.ceil(math.log10(hi)) + 1)
            for m in mantissas)
    return [x for x in grid if lo <= x <= hi]


def _examples(n: int, rng: np.random.Generator) -> np.ndarray:
    return rng.uniform(size=n)


def _correct(difficulty: np.ndarray, p: float, rng: np.random.Generator) -> np.ndarray:
    return difficulty + rng.normal(0.0, 0.04, size=len(difficulty)) < p


def _eval_rows(buf: dict, meta: dict, step: int, epoch: float, task: str, role: str, correct: np.ndarray,
               version: str) -> None:
    """Add one evaluation's evals row and samples rows to ``buf`` (written per trial: _flush)."""
    now = pd.Timestamp.now(tz="UTC")
    buf["evals"].append(dict(meta, step=step, epoch=epoch, task=task, role=role, metric="accuracy",
                             value=float(correct.mean()), n=len(correct), scorer_version=version, evaluated_at=now,
                             eval_seconds=0.1))
    buf["samples"].append((step, task, correct))


def _flush(store: Store, trial_id: str, buf: dict) -> None:
    """One write unit per trial and table (a paper-sized store is ~7k files instead of ~30k); the
    samples as one frame built column by column (a frame per evaluation was a third of the time)."""
    store.write("evals", eval_key(trial_id, 0, "all"), buf["evals"])
    parts = buf["samples"]
    correct = np.concatenate([c for _, _, c in parts])
    store.write("samples", eval_key(trial_id, 0, "all"), pd.DataFrame({
        "trial_id": trial_id, "step": np.repeat([s for s, _, _ in parts], [len(c) for _, _, c in parts]),
        "task": np.repeat([t for _, t, _ in parts], [len(c) for _, _, c in parts]),
        "example_id": [f"{t}-{i}" for _, t, c in parts for i in range(len(c))], "correct": correct,
        "prediction": np.where(correct, "ok", "wrong")}))


def write_synthetic_store(path: str, sweep: SyntheticSweep | None = None) -> Store:
    """Write a synthetic store for ``sweep`` at ``path`` (see the module docstring)."""
    sw = sweep or SyntheticSweep()
    rng = np.random.default_rng(sw.seed)
    store = Store(path)
    retains = [(sw.retain_task, "", sw.base[1])] + list(sw.more_retain)
    store.write_json(SPEC_FILE, {"name": "synthetic", "tasks": {
        "learn": {"name": sw.learn_task, "params": {}}, "retain": [{"name": t, "params": {}} for t, _, _ in retains]},
        "lrs": list(sw.lrs), "epochs": list(sw.epochs)})
    diff_L = _examples(sw.n_learn, rng)
    tasks = ((sw.learn_task, "learn", diff_L, "letter-v1"),
             *((t, "retain", _examples(sw.n_retain, rng), "toy-v1") for t, _, _ in retains))
    for model, shape in sw.models.items():
        base = dict(trial_id=f"{model}-base", model=model, method=BASE, series=BASE, optimizer="", lr=0.0,
                    epochs=0, seed=0)
        buf = {"evals": [], "samples": []}
        for (task, role, diff, version), p in zip(tasks, (sw.base[0], *(b for _, _, b in retains))):
            _eval_rows(buf, base, 0, 0.0, task, role, _correct(diff, p, rng), version)
        _flush(store, base["trial_id"], buf)
        shifts = {seed: rng.normal(0.0, sw.seed_shift) if sw.seed_shift else 0.0 for seed in sw.seeds}
        for (method, label) in sw.series:
            h = hashlib.sha1(label.encode()).hexdigest()[:8]
            for lr in sw.method_lrs.get(method, sw.lrs):
                for ep in sw.epochs:
                    for seed in sw.seeds:
                        tid = f"{model}-{method}-lr{lr:g}-e{ep}-s{seed}-{h}"
                        meta = dict(trial_id=tid, model=model, method=method, series=label, optimizer="adamw",
                                    lr=lr, epochs=ep, seed=seed)
                        n_ck = ep if sw.checkpoints is None else sw.checkpoints
                        buf = {"evals": [], "samples": []}
                        for c in range(1, n_ck + 1):
                            x = (method, lr * 10 ** shifts[seed], ep, c / n_ck)
                            L, _ = true_accuracy(shape, *x, sw.base)
                            Rs = [true_accuracy(own or shape, *x, (sw.base[0], b))[1] for _, own, b in retains]
                            step = round(c / n_ck * ep * sw.steps_per_epoch)
                            for (task, role, diff, version), p in zip(tasks, (L, *Rs)):
                                _eval_rows(buf, meta, step, ep * c / n_ck, task, role, _correct(diff, p, rng),
                                           version)
                        _flush(store, tid, buf)
                        store.write("trials", tid, [dict(
                            meta, model_path=sw.paths.get(model, f"toy:{model}"), method_params="{}", status=TrialStatus.DONE.value,
                            attempt=1,
                            started_at=pd.Timestamp.now(tz="UTC"), finished_at=pd.Timestamp.now(tz="UTC"),
                            steps=ep * sw.steps_per_epoch, train_seconds=1.0, final_loss=0.5, error=None,
                            config="{}")])
    return store


_PAPER_LRS = (1e-6, 2e-6, 5e-6, 1e-5, 2e-5, 5e-5, 1e-4)
_SMALL = {"qwen2.5-0.5b": ("Qwen/Qwen2.5-0.5B-Instruct", GRADUAL), "qwen3-0.6b": ("Qwen/Qwen3-0.6B", CLIFF),
          "llama3.2-1b": ("meta-llama/Llama-3.2-1B-Instruct", CLIFF)}
_LARGE = {"qwen2.5-3b": ("Qwen/Qwen2.5-3B-Instruct", GRADUAL), "llama3.2-3b": ("meta-llama/Llama-3.2-3B-Instruct", CLIFF)}
_CL = (("sft", "sft"), ("sib", "sib"), ("ewc", "ewc"), ("mas", "mas"), ("migu", "migu"), ("nanoadam", "nanoadam"))


def paper_sized(n: int = 100) -> dict[str, SyntheticSweep]:
    """The paper grid's shape in three stores, as `cliffsweep/configs/paper*.yaml` splits it:
    7 methods x 3 epochs x 5 models (two families, 0.5-3B, real hub ids: archs.PUBLISHED sizes)
    x 3 seeds on the paper's lrs, LoRA on its own 10x grid, 3 checkpoints per trial, ``n``
    examples per eval. The lrs are ten times the paper's (1e-5..1e-3), where the curves of
    :func:`true_accuracy` bend."""
    common = dict(lrs=tuple(x * 10 for x in _PAPER_LRS), epochs=(1, 3, 6), seeds=(0, 1, 2), n_learn=n, n_retain=n,
                  learn_task="chem_l3", retain_task="gsm8k", checkpoints=3, seed_shift=0.04,
                  method_lrs={"lora": tuple(x * 100 for x in _PAPER_LRS)})
    def sweep(models, series, seed):
        return SyntheticSweep(models={m: shape for m, (_, shape) in models.items()}, series=series, seed=seed,
                              paths={m: p for m, (p, _) in models.items()}, **common)

    return {"paper": sweep(_SMALL, _CL + (("lora", "lora"),), 1), "paper_fsdp": sweep(_LARGE, _CL, 2),
            "paper_lora": sweep(_LARGE, (("lora", "lora"),), 2)}


if __name__ == "__main__":
    if len(sys.argv) > 2 and sys.argv[1] == "--paper":  # python -m ... --paper OUT_DIR: three stores
        for name, sw in paper_sized().items():
            write_synthetic_store(f"{sys.argv[2]}/{name}", sw)
        print(f"wrote the paper-sized synthetic stores paper, paper_fsdp, paper_lora under {sys.argv[2]}")
    else:
        write_synthetic_store(sys.argv[1])
        print(f"wrote a synthetic store to {sys.argv[1]}")
