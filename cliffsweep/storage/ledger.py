"""Which checkpoints exist, which are evaluated, and when a trial is finished: from the store alone.

The invariant this module keeps (issue 10): every checkpoint a trial reports is evaluated
exactly once on every task, whatever stops the sweep and however often it is re-run, and a
trial counts as `done` only once its checkpoints (the final one included) are evaluated.

Why the store and not the driver's memory: a driver can be SIGKILLed between any two lines.
What it knew then (reports in flight, evaluations queued on actors) is gone; what the store
holds is not. So the bookkeeping is two tables and pure functions over them:

- `checkpoints`: one row per reported checkpoint (trial, step, URI, kind). Rank 0's checkpoint
  writer (trainables/checkpoints.py) writes it once the folder is complete in storage (its
  META file written last), before it reports the checkpoint to the driver's inbox, and again
  when a retried trial resumes from that checkpoint, so a worker killed between the write and
  the report leaves no gap. The driver writes it too when the report reaches it (idempotent:
  same key, same content).
- `evals`: one write unit per (trial, step, task), written by the evaluator actor after the
  task's samples.

A driver, at start and after training, evaluates `unevaluated(...)`; a trial whose training
ended is `trained` until `trial_settled(...)` says its checkpoints are all evaluated, then
`done`. Re-running reaches the same state from any interruption: idempotent writes mean a
checkpoint evaluated twice (a race with a kill) still has one row set per task.
"""

from __future__ import annotations

from dataclasses import dataclass

import pandas as pd


TRAIN_STATE = "train_state.pt"
"""A checkpoint folder's training state, for resume (trainables/resume.py); evaluators skip it."""
META = "cliffsweep_meta.json"
"""Written last into a checkpoint folder: a folder without it is incomplete."""


def saves_state(train_s: float, last_state_s: float, resume_every_s: float) -> bool:
    """Whether a checkpoint taken after `train_s` seconds of training also saves the training
    state: `resume_every_s` of training has passed since the last one that did (at
    `last_state_s`). The trainer follows it (trainables/trial.py), the bill prices it
    (planner/bill.py state_points)."""
    return train_s - last_state_s >= resume_every_s


def checkpoint_dir_name(step: int) -> str:
    """Ray Train's `checkpoint_dir_name` of the checkpoint at `step` (under <root>/<trial_id>/)."""
    return f"step-{step:06d}"


def checkpoint_uri(root: str, trial_id: str, step: int) -> str:
    """Where the checkpoint of `trial_id` at `step` lives, scheme included (`s3://...`): the
    evaluators read it from here. Ray Train's own `Checkpoint.path` drops the scheme (it is
    relative to its filesystem), which is why a sweep on object storage evaluated nothing."""
    return f"{root.rstrip('/')}/{trial_id}/{checkpoint_dir_name(step)}"


def checkpoint_key(trial_id: str, step: int) -> str:
    """Write-unit key of one checkpoint row."""
    return f"{trial_id}__{step:08d}"


@dataclass(frozen=True)
class CheckpointRecord:
    trial_id: str
    step: int
    epoch: float
    kind: str  # "full" | "lora"
    uri: str

    @property
    def key(self) -> tuple[str, int]:
        return (self.trial_id, self.step)


def records(checkpoints: pd.DataFrame) -> list[CheckpointRecord]:
    """The rows of a `checkpoints` table as records, one per (trial, step), in order."""
    if checkpoints.empty:
        return []
    rows = checkpoints.drop_duplicates(["trial_id", "step"], keep="last").sort_values(["trial_id", "step"])
    return [CheckpointRecord(r.trial_id, int(r.step), float(r.epoch), r.kind, r.uri)
            for r in rows.itertuples(index=False)]


def evaluated_keys(evals: pd.DataFrame, tasks: list[str]) -> set[tuple[str, int]]:
    """(trial, step) pairs with an evaluation on every task in `tasks`."""
    if evals.empty:
        return set()
    done = evals[evals["task"].isin(tasks)][["trial_id", "step", "task"]].drop_duplicates()
    counts = done.groupby(["trial_id", "step"])["task"].nunique()
    return {(t, int(s)) for (t, s), n in counts.items() if n == len(set(tasks))}


def unevaluated(checkpoints: pd.DataFrame, evals: pd.DataFrame, tasks: list[str],
                trial_ids: set[str] | None = None) -> list[CheckpointRecord]:
    """Checkpoints that still lack an evaluation on some task (restricted to `trial_ids`,
    the sweep's grid, when given: a store may hold trials of an earlier spec)."""
    done = evaluated_keys(evals, tasks)
    return [c for c in records(checkpoints)
            if c.key not in done and (trial_ids is None or c.trial_id in trial_ids)]


def trial_settled(final_step: int | None, steps: set[int], evaluated_steps: set[int]) -> bool:
    """A trial whose training finished is settled (counts as `done`) when it has a checkpoint at
    its final step (when known) and every checkpoint it reported (`steps`) is evaluated."""
    if not steps or (final_step is not None and final_step not in steps):
        return False
    return steps <= evaluated_steps


def record_checkpoint(store, root: str, trial_id: str, step: int, epoch: float, kind: str) -> CheckpointRecord:
    """Write the `checkpoints` row of a reported checkpoint (idempotent: same key, same row)."""
    from datetime import datetime, timezone

    rec = CheckpointRecord(trial_id, step, epoch, kind, checkpoint_uri(root, trial_id, step))
    store.write("checkpoints", checkpoint_key(trial_id, step), [{
        "trial_id": trial_id, "step": step, "epoch": epoch, "kind": kind, "uri": rec.uri,
        "reported_at": datetime.now(timezone.utc)}])
    return rec


def prunable(final_step: int, steps: set[int], keep: str) -> tuple[list[int], bool]:
    """What a done trial no longer needs: (steps whose folders can go, whether the final
    checkpoint's training state can go). Every one is evaluated (the trial is done) and no
    resume will read them (a done trial is never retrained)."""
    if keep == "all":
        return [], False
    return sorted(s for s in steps if s != final_step), True


def delete_checkpoints(root: str, trial_id: str, steps: list[int], state_of: int | None) -> int:
    """Delete the checkpoint folders of `steps` and the training state of checkpoint `state_of`;
    returns the bytes freed. Missing files are fine (a re-run may prune again)."""
    import pyarrow.fs as pafs

    from cliffsweep.storage.store import filesystem

    fs, base = filesystem(root)
    freed = 0
    for step in steps:
        folder = f"{base.rstrip('/')}/{trial_id}/{checkpoint_dir_name(step)}"
        infos = fs.get_file_info(pafs.FileSelector(folder, recursive=True, allow_not_found=True))
        freed += sum(i.size or 0 for i in infos if i.type == pafs.FileType.File)
        if infos:
            fs.delete_dir(folder)
    if state_of is not None:
        path = f"{base.rstrip('/')}/{trial_id}/{checkpoint_dir_name(state_of)}/{TRAIN_STATE}"
        info = fs.get_file_info(path)
        if info.type == pafs.FileType.File:
            freed += info.size or 0
            fs.delete_file(path)
    return freed


def prune_done(store, root: str, trial_id: str, final_step: int, steps: set[int], keep: str) -> None:
    """Delete what a done trial no longer needs (`prunable`); space not freed is no reason to
    stop a sweep: the failure is an `errors` row."""
    drop, drop_state = prunable(final_step, steps, keep)
    try:
        delete_checkpoints(root, trial_id, drop, final_step if drop_state else None)
    except OSError as exc:
        record_error(store, f"prune__{trial_id}", "prune", trial_id, f"{type(exc).__name__}: {exc}")


def record_error(store, key: str, kind: str, trial_id: str, message: str, step: int = -1) -> None:
    """The one writer of `errors` rows (store.py's schema): what failed (`kind`: eval,
    eval_resent, trial_retry, trial_failed, stats, prune, tracking), for which trial and step
    (-1: not a checkpoint's), when, and the message (clipped by the store). `key` is the row's
    write unit: writing the same key again replaces it (one row per failed attempt, per
    evaluation, per tracker), so a re-run never piles up copies."""
    from datetime import datetime, timezone

    store.write("errors", key, [{"trial_id": trial_id, "step": step, "kind": kind, "message": message,
                                 "at": datetime.now(timezone.utc)}])
