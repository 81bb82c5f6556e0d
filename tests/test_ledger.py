"""The ledger's pure rules (storage/ledger.py) and the store's retry and error clipping."""

from __future__ import annotations

import pandas as pd
import pytest

from cliffsweep.storage import ledger
from cliffsweep.storage.store import SCHEMAS, StorageError, Store, clip_message, retrying

TASKS = ["learn_t", "retain_t"]


def frame(table: str, rows: list[dict]) -> pd.DataFrame:
    cols = SCHEMAS[table].names
    return pd.DataFrame([{c: r.get(c) for c in cols} for r in rows], columns=cols)


def ck(trial, step):
    return {"trial_id": trial, "step": step, "epoch": step / 4, "kind": "full",
            "uri": ledger.checkpoint_uri("s3://b/p/checkpoints", trial, step)}


def ev(trial, step, task, metric="accuracy"):
    return {"trial_id": trial, "step": step, "task": task, "metric": metric, "value": 0.5}


def test_checkpoint_uri_keeps_the_scheme():
    assert ledger.checkpoint_uri("s3://b/p/checkpoints/", "t1", 12) == "s3://b/p/checkpoints/t1/step-000012"
    assert ledger.checkpoint_uri("/data/ck", "t1", 3) == "/data/ck/t1/step-000003"


def test_unevaluated_lists_checkpoints_missing_any_task():
    cks = frame("checkpoints", [ck("a", 2), ck("a", 4), ck("b", 4), ck("a", 4)])  # a duplicate row
    evs = frame("evals", [ev("a", 2, "learn_t"), ev("a", 2, "retain_t"), ev("a", 4, "learn_t"),
                          ev("b", 4, "learn_t", "strict_match")])
    todo = ledger.unevaluated(cks, evs, TASKS)
    assert [c.key for c in todo] == [("a", 4), ("b", 4)]
    assert todo[0].uri == "s3://b/p/checkpoints/a/step-000004"
    assert [c.key for c in ledger.unevaluated(cks, evs, TASKS, trial_ids={"b"})] == [("b", 4)]
    assert ledger.unevaluated(frame("checkpoints", []), evs, TASKS) == []
    assert ledger.evaluated_keys(evs, TASKS) == {("a", 2)}


def test_a_trial_settles_only_with_its_final_checkpoint_evaluated():
    assert ledger.trial_settled(4, {2, 4}, {2, 4})
    assert not ledger.trial_settled(4, {2, 4}, {2})  # the final one still waits
    assert not ledger.trial_settled(4, {2}, {2})  # the final one was never recorded
    assert not ledger.trial_settled(None, set(), set())  # nothing reported at all
    assert ledger.trial_settled(None, {2}, {2})  # final step unknown: every reported one


def test_prunable_keeps_the_final_checkpoint():
    assert ledger.prunable(4, {1, 2, 4}, "final") == ([1, 2], True)
    assert ledger.prunable(4, {4}, "final") == ([], True)
    assert ledger.prunable(4, {2, 4}, "all") == ([], False)


def test_delete_checkpoints_frees_folders_and_state(tmp_path):
    for step in (2, 4):
        d = tmp_path / "t" / ledger.checkpoint_dir_name(step)
        d.mkdir(parents=True)
        (d / "model.safetensors").write_bytes(b"x" * 100)
        (d / "train_state.pt").write_bytes(b"y" * 50)
    freed = ledger.delete_checkpoints(str(tmp_path), "t", [2], state_of=4)
    assert freed == 200
    assert not (tmp_path / "t" / "step-000002").exists()
    assert sorted(p.name for p in (tmp_path / "t" / "step-000004").iterdir()) == ["model.safetensors"]
    assert ledger.delete_checkpoints(str(tmp_path), "t", [2], state_of=4) == 0  # again: nothing left


def test_record_checkpoint_is_idempotent(tmp_path):
    store = Store(str(tmp_path / "s"))
    for _ in range(2):
        ledger.record_checkpoint(store, "s3://b/ck", "a", 4, 1.0, "lora")
    rows = store.read("checkpoints")
    assert len(rows) == 1 and rows.iloc[0]["uri"] == "s3://b/ck/a/step-000004" and rows.iloc[0]["kind"] == "lora"


def test_error_messages_keep_their_tail():
    trace = "Traceback (most recent call last):\n" + "  frame\n" * 5000 + "ValueError: the real cause"
    clipped = clip_message(trace, limit=1000)
    assert len(clipped) < 1100
    assert clipped.startswith("Traceback") and clipped.endswith("ValueError: the real cause")
    assert clip_message("short") == "short"


def test_errors_table_clips_long_messages(tmp_path):
    store = Store(str(tmp_path / "s"))
    store.write("errors", "e", [{"trial_id": "t", "step": 1, "kind": "eval", "message": "x" * 20000 + "\nKeyError: 'k'"}])
    msg = store.read("errors").iloc[0]["message"]
    assert msg.endswith("KeyError: 'k'") and len(msg) < 9000


def test_retrying_retries_transient_errors_then_names_the_uri():
    calls = []

    def flaky():
        calls.append(1)
        if len(calls) < 3:
            raise OSError("AWS Error NETWORK_CONNECTION during PutObject")
        return "ok"

    assert retrying("write x", "s3://b/p", flaky, delays=(0, 0, 0)) == "ok" and len(calls) == 3

    def down():
        raise OSError("connection refused")

    with pytest.raises(StorageError, match=r"storage at s3://b/p: write x failed after 3 attempts"):
        retrying("write x", "s3://b/p", down, delays=(0, 0))

    def missing():
        calls.append(1)
        raise FileNotFoundError("no such key")

    calls.clear()
    with pytest.raises(FileNotFoundError):  # not transient: no retry
        retrying("read y", "s3://b/p", missing, delays=(0, 0))
    assert len(calls) == 1
