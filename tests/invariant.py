"""The invariant every fault test checks after its sweep (storage/ledger.py): every
checkpoint a trial reported is evaluated exactly once on every task; every grid point has one
trials row, `done`; the final checkpoint of every trial is among the evaluated ones; nothing
is duplicated; every checkpoint folder in storage is in the ledger; every training step is in
the `steps` table once."""

from __future__ import annotations

import pandas as pd
import pyarrow.fs as pafs

from cliffsweep.storage.store import PRIMARY_METRICS
from cliffsweep.sweep.grid import base_trial_id, expand_grid


def checkpoint_folders(spec) -> set[tuple[str, int]]:
    """(trial, step) of every checkpoint folder with its cliffsweep_meta.json, in storage."""
    root = spec.checkpoint_uri
    fs, path = pafs.FileSystem.from_uri(root) if "://" in root else (pafs.LocalFileSystem(), root)
    out = set()
    for info in fs.get_file_info(pafs.FileSelector(path, recursive=True, allow_not_found=True)):
        if info.base_name == "cliffsweep_meta.json":
            folder = info.path.rsplit("/", 1)[0]
            trial, step = folder.split("/")[-2], int(folder.split("/")[-1].split("-")[1])
            out.add((trial, step))
    return out


def assert_invariant(store, spec, curve: bool = True, diverged: frozenset[str] = frozenset()) -> None:
    """`curve`: check the training curve too (a rehearsal trains nothing and logs no step).
    `diverged`: trials that must end `diverged` (a non-finite loss ends them early: their final
    step is not a checkpoint and their curve stops there); every checkpoint they did report is
    still evaluated exactly once."""
    from cliffsweep.evals.tasks import task_label

    tasks = {task_label(t.name, t.params) for _, _, t in spec.tasks.evaluated}
    grid = {t.trial_id for t in expand_grid(spec)}
    trials, ck, ev = store.read("trials"), store.read("checkpoints"), store.read("evals")
    assert len(trials) == len(grid) and set(trials["trial_id"]) == grid, trials[["trial_id", "status"]]
    errors = store.read("errors")
    want = trials["trial_id"].map(lambda t: "diverged" if t in diverged else "done")
    assert (trials["status"] == want).all(), (
        trials.loc[trials["status"] != want, ["trial_id", "status", "error"]].to_string() + "\nerrors:\n"
        + "\n".join(f"{e.kind} {e.trial_id} {e.step}: {str(e.message)[:300]}" for e in errors.itertuples()))
    assert not ck.duplicated(["trial_id", "step"]).any()
    reported = set(zip(ck["trial_id"], ck["step"].astype(int)))
    assert checkpoint_folders(spec) <= reported, "a checkpoint in storage is missing from the ledger"
    assert not ev.duplicated(["trial_id", "step", "task", "metric"]).any(), "an evaluation is duplicated"
    samples = store.read("samples")
    assert not samples.duplicated(["trial_id", "step", "task", "example_id"]).any(), "an item is scored twice"
    acc = ev[ev["metric"].isin(PRIMARY_METRICS)]  # one primary row per task: accuracy, or a loss task's loss
    staged = samples[samples["stage"].notna()].groupby(["trial_id", "step", "task"]).size()
    if len(staged):  # a staged evaluation (issue 51): its rows count every item stored, no more, no less
        n = acc.set_index(["trial_id", "step", "task"])["n_scored"].reindex(staged.index)
        assert (n == staged).all(), pd.concat([n, staged], axis=1)[n != staged]
    evaluated = acc.groupby(["trial_id", "step"])["task"].apply(set).to_dict()
    for key in reported:
        assert evaluated.get(key) == tasks, f"checkpoint {key} evaluated on {evaluated.get(key)}, not {tasks}"
    for key in evaluated:
        assert key in reported or key[0] in {base_trial_id(m.name) for m in spec.models}, key
    for tid, steps in trials.set_index("trial_id")["steps"].items():
        assert tid in diverged or (tid, int(steps)) in reported, f"{tid}: final checkpoint (step {steps}) not reported"
    for m in spec.models:
        assert evaluated.get((base_trial_id(m.name), 0)) == tasks
    # the training curve (trainables/steplog.py): every step of every trial once, whatever the
    # retries and resumes (these trials are short enough to log every step)
    if not curve:
        return
    steps = store.read("steps")
    assert not steps.duplicated(["trial_id", "step"]).any(), "a training step is logged twice"
    logged = steps.groupby("trial_id")["step"].apply(set).to_dict()
    for tid, final in trials.set_index("trial_id")["steps"].items():
        if tid not in diverged:
            assert logged.get(tid) == set(range(1, int(final) + 1)), f"{tid}: steps logged {sorted(logged.get(tid, []))}"
