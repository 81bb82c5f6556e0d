"""A task's result (evals/result.TaskResult) as the store's `samples` and `evals` rows.

Invariant: an `evals` row implies its `samples` rows exist (samples are written first), and
both are keyed by (trial, step, task) (storage/store.eval_key), so a repeated evaluation
replaces, never adds: exactly once per checkpoint and task (storage/ledger.py)."""

from __future__ import annotations

from datetime import datetime, timezone

from cliffsweep.evaluator.request import EvalRequest
from cliffsweep.storage.store import SAMPLED_SUFFIX, Store, eval_key

TRIAL_FIELDS = ("trial_id", "model", "method", "series", "optimizer", "lr", "epochs", "seed", "step", "epoch")


def eval_rows(r: EvalRequest, role: str, scorer_version: str, res, now: datetime,
              canary: float | None = None) -> list[dict]:
    """One row per metric of `res` (its headline metric, then its extras); `canary`: the
    distance the engine's canary check measured when it loaded the checkpoint (Backend.load)."""
    base = {k: getattr(r, k) for k in TRIAL_FIELDS}
    metrics = {res.metric: res.accuracy, **res.extra}
    low, high = res.interval if res.interval is not None else (None, None)
    return [dict(base, task=res.task, role=role, metric=m, value=float(v), n=res.n,
                 scorer_version=scorer_version, evaluated_at=now, eval_seconds=res.seconds, canary_distance=canary,
                 n_scored=res.n, n_items=res.n if res.n_items is None else res.n_items, ci_low=low, ci_high=high,
                 settled=bool(getattr(res, "settled", True)))
            for m, v in metrics.items()]


def sample_rows(r: EvalRequest, res, stage: int | None = None) -> list[dict]:
    """One row per evaluated item: its id, whether it was right, the prediction and its score;
    then one per sample of a sampled evaluation (store.SAMPLED_SUFFIX). `stage`: the stage of a
    staged evaluation these items are (evaluator/staged.py)."""
    scores = res.scores or [None] * len(res.samples)
    refs = getattr(res, "references", None) or [None] * len(res.samples)
    greedy = [{"trial_id": r.trial_id, "step": r.step, "task": res.task, "example_id": str(eid),
               "correct": bool(ok), "prediction": str(pred), "score": score, "reference": ref, "stage": stage}
              for (eid, ok, pred), score, ref in zip(res.samples, scores, refs, strict=True)]
    drawn = [{"trial_id": r.trial_id, "step": r.step, "task": res.task + SAMPLED_SUFFIX, "example_id": f"{eid}#{j}",
              "correct": bool(ok), "prediction": str(pred), "score": None}
             for eid, j, ok, pred in getattr(res, "draws", [])]
    return greedy + drawn


def write_result(store: Store, r: EvalRequest, role: str, scorer_version: str, res,
                 canary: float | None = None) -> None:
    """One task's evaluation of one checkpoint into the store, samples first."""
    store.write("samples", eval_key(r.trial_id, r.step, res.task), sample_rows(r, res))
    write_evals(store, r, role, scorer_version, res, canary)


def write_evals(store: Store, r: EvalRequest, role: str, scorer_version: str, res,
                canary: float | None = None) -> None:
    """The `evals` rows alone: a staged evaluation's samples are in the store already, stage by
    stage (evaluator/staged.py), and this write marks the evaluation final (the ledger's)."""
    key = eval_key(r.trial_id, r.step, res.task)
    store.write("evals", key, eval_rows(r, role, scorer_version, res, datetime.now(timezone.utc), canary))
