"""One task of one checkpoint scored in stages until the stopping rule settles (issue 51).

Invariant: every item of a task is scored at most once per checkpoint in the store, however often
the evaluation is interrupted and re-run. The items are put in one seeded order per model and
task (evals/stopping.py `item_order`); each stage scores the next items of that order and is one `samples` write unit of its own, keyed by the item it begins at (store.stage_key),
so writing it again replaces it; where the next stage ends is the rule's forecast
(StopRule.next_total). An evaluation resumed after a kill reads the stages stored and scores only
the next ones. The `evals` rows are written last, once the rule has settled (or every item is
scored): as before, their presence is what makes the checkpoint evaluated (storage/ledger.py).

The base model is scored on every item, once per model (evaluator/actor.py sends it in full):
each checkpoint's interval is paired with the base's items. While the base's items are not in
the store yet, a checkpoint is read on its own, and only its interval's width can stop it.
"""

from __future__ import annotations

import time

import numpy as np

from cliffsweep.evaluator.request import EvalRequest
from cliffsweep.evaluator.results import sample_rows
from cliffsweep.evals.result import TaskResult
from cliffsweep.evals.stopping import item_order
from cliffsweep.storage.store import Store, eval_key, stage_key
from cliffsweep.sweep.grid import base_trial_id


def item_ids(model: str, label: str, example_ids: list[str]) -> tuple[list[str], np.ndarray]:
    """A task's example ids in the model's order, and their positions in `task.eval_examples()`."""
    order = item_order(len(example_ids), 0, f"{model}/{label}")
    return [example_ids[i] for i in order], order


def base_scores(store: Store, model: str, label: str, ids: list[str]) -> np.ndarray | None:
    """The base's correctness on every item, in `ids`' order; None until it is in the store."""
    rows = store.read_unit("samples", eval_key(base_trial_id(model), 0, label))
    if rows is None:
        return None
    by_id = dict(zip(rows["example_id"], rows["correct"].astype(float)))
    if any(i not in by_id for i in ids):
        return None  # a base scored on other items (another task size): nothing to pair with
    return np.array([by_id[i] for i in ids])


def stored_stage(store: Store, req: EvalRequest, label: str, start: int, ids: list[str]) -> np.ndarray | None:
    """The stored stage beginning at item `start`: its correctness in order; None if none is stored."""
    rows = store.read_unit("samples", stage_key(req.trial_id, req.step, label, start))
    if rows is None:
        return None
    by_id = dict(zip(rows["example_id"], rows["correct"].astype(float)))
    if sorted(by_id) != sorted(ids[start:start + len(by_id)]):
        raise RuntimeError(f"{req.trial_id}@{req.step} {label}: the stage from item {start} holds other items than "
                           "the order gives (the task's items changed since it was written)")
    return np.array([by_id[i] for i in ids[start:start + len(by_id)]])


def evaluate_staged(score_stage, store: Store, req: EvalRequest, role: str, label: str, example_ids: list[str],
                    base: np.ndarray | None) -> TaskResult:
    """Score `label` (a task of `role`) on `req`'s checkpoint in stages, each stage's samples
    written before the next starts, until `req.rule` settles and `req.at_least` items are scored;
    the stages stored already (an interrupted evaluation, a top-up) are read, not scored.
    `score_stage(positions)` scores those items of the task (evals/runner.evaluate_task with
    `items`) and returns their TaskResult. Returns the result the `evals` rows are written from:
    the accuracy on the items scored, with its interval (headline metric only: a stage read back
    from the store has no secondary metrics)."""
    from cliffsweep.faults import maybe_fail

    rule, n = req.rule, len(example_ids)
    ids, order = item_ids(req.model, label, example_ids)
    scored: list[np.ndarray] = []
    seconds, done, reading = 0.0, 0, None
    stored = True  # stages are written in order: past the first one missing, none is stored
    while done < n:
        x = stored_stage(store, req, label, done, ids) if stored else None
        if x is None:
            stored = False
            hi = rule.next_total(done, n, reading, label)
            t0 = time.perf_counter()
            res = score_stage([int(i) for i in order[done:hi]])
            store.write("samples", stage_key(req.trial_id, req.step, label, done), sample_rows(req, res, len(scored)))
            seconds += time.perf_counter() - t0
            by_id = {str(e): float(ok) for e, ok, _ in res.samples}
            x = np.array([by_id[i] for i in ids[done:hi]])
            maybe_fail(f"stage:{req.trial_id}:{req.step}:{label}:{len(scored)}")  # the tests' kill between stages
        scored.append(x)
        done += x.size
        reading = rule.read(role, np.concatenate(scored), base)
        # a stage stored already (by a top-up killed before its `evals` rows) is read, never dropped
        if reading.settled and done >= min(req.at_least_on(label), n) and not (
                stored and store.has("samples", stage_key(req.trial_id, req.step, label, done))):
            break
    values = np.concatenate(scored)
    if req.at_least:  # a top-up: the seconds of the evaluation it continues count too
        before = store.read_unit("evals", eval_key(req.trial_id, req.step, label))
        seconds += float(before["eval_seconds"].iloc[0]) if before is not None and len(before) else 0.0
    return TaskResult(task=label, accuracy=float(values.mean()), n=int(values.size), seconds=seconds,
                      n_items=len(example_ids), interval=(reading.interval.low, reading.interval.high),
                      settled=values.size >= n or not reading.open)
