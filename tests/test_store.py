"""The Parquet store: atomic (no reader ever sees a partial file) and idempotent."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap
import time

import pandas as pd
import pyarrow.parquet as pq
import pytest

from cliffsweep.storage.store import Store, eval_key


def rows(n, trial="t1", step=10):
    return [{"trial_id": trial, "step": step, "task": "toy_arith", "example_id": str(i),
             "correct": i % 2 == 0, "prediction": "x" * 50} for i in range(n)]


def test_roundtrip_with_plain_pandas_and_pyarrow(tmp_path):
    s = Store(str(tmp_path))
    s.write("samples", eval_key("t1", 10, "toy_arith"), rows(5))
    s.write("trials", "t1", [{"trial_id": "t1", "status": "done", "lr": 1e-3, "epochs": 3}])
    assert len(pd.read_parquet(tmp_path / "samples")) == 5
    assert pq.read_table(tmp_path / "trials").num_rows == 1
    t = s.read("trials")
    assert t.loc[0, "status"] == "done" and pd.isna(t.loc[0, "finished_at"])
    assert s.read("evals").empty and list(s.read("evals").columns)[:2] == ["trial_id", "model"]


def test_rewriting_a_unit_replaces_it(tmp_path):
    s = Store(str(tmp_path))
    key = eval_key("t1", 10, "toy_arith")
    s.write("samples", key, rows(5))
    s.write("samples", key, rows(7))  # a retried evaluation
    s.write("samples", eval_key("t1", 20, "toy_arith"), rows(3, step=20))
    df = s.read("samples")
    assert len(df) == 10 and sorted(df["step"].unique()) == [10, 20]
    assert s.has("samples", key) and not s.has("samples", eval_key("t2", 10, "toy_arith"))


def test_unknown_column_is_an_error(tmp_path):
    s = Store(str(tmp_path))
    try:
        s.write("trials", "t", [{"trial_id": "t", "colour": "red"}])
    except ValueError as e:
        assert "colour" in str(e)
    else:
        raise AssertionError("unknown column accepted")


WRITER = textwrap.dedent("""
    import sys
    from cliffsweep.storage.store import Store
    s = Store(sys.argv[1])
    big = [{"trial_id": "t", "step": 1, "task": "x", "example_id": str(i), "correct": True,
            "prediction": "y" * 200} for i in range(50_000)]
    s.write("samples", "unit0", big)
    print("ready", flush=True)
    i = 1
    while True:
        s.write("samples", f"unit{i % 3}", big)
        i += 1
""")


def test_killed_writer_leaves_no_partial_file_visible(tmp_path):
    """A writer killed at random moments, a reader reading all along: every read succeeds and
    sees only complete units (50,000 rows each)."""
    proc = subprocess.Popen([sys.executable, "-c", WRITER, str(tmp_path)], stdout=subprocess.PIPE, text=True)
    assert proc.stdout.readline().strip() == "ready"
    s = Store(str(tmp_path))
    deadline, reads = time.time() + 8, 0
    while time.time() < deadline:
        df = s.read("samples")
        assert len(df) % 50_000 == 0
        pd.read_parquet(tmp_path / "samples") if (tmp_path / "samples").exists() else None
        reads += 1
    os.kill(proc.pid, signal.SIGKILL)
    proc.wait()
    leftovers = [f for f in os.listdir(tmp_path / "samples") if f.startswith(".")]
    df = s.read("samples")
    assert len(df) % 50_000 == 0 and len(df) > 0
    # temp files a killed writer leaves behind are invisible to plain readers too
    assert len(pd.read_parquet(tmp_path / "samples")) == len(df)
    assert reads > 3
    assert all(f.endswith(".tmp") for f in leftovers)


def test_compaction_folds_units_and_reads_the_same(tmp_path):
    """compact() folds every unit file into one file per table; the store reads the same rows
    before and after, a unit written again afterwards overrides its folded rows, has() still
    knows folded units, and compacting twice is harmless."""
    from cliffsweep.storage.store import Store

    store = Store(str(tmp_path / "s"))
    rows = lambda tid, st: [{"trial_id": tid, "status": st, "lr": 0.1}]  # noqa: E731
    for i in range(5):
        store.write("trials", f"t{i}", rows(f"t{i}", "running"))
    before = store.read("trials").sort_values("trial_id").reset_index(drop=True)
    assert store.compact(("trials",)) == {"trials": 5}
    files = sorted(p.name for p in (tmp_path / "s" / "trials").iterdir())
    assert len(files) == 2 and files[0] == "_compaction.json" and files[1].startswith("compacted-")
    after = store.read("trials").sort_values("trial_id").reset_index(drop=True)
    assert after.equals(before)
    assert store.has("trials", "t3") and not store.has("trials", "t9")
    store.write("trials", "t3", rows("t3", "done"))  # rewritten after compaction
    got = store.read("trials").set_index("trial_id")
    assert len(got) == 5 and got.loc["t3", "status"] == "done"
    assert store.compact(("trials",)) == {"trials": 1}
    got = store.read("trials").set_index("trial_id")
    assert len(got) == 5 and got.loc["t3", "status"] == "done" and got.loc["t1", "status"] == "running"
    assert store.compact(("trials",)) == {"trials": 0}
    assert len(list((tmp_path / "s" / "trials").iterdir())) == 2  # the old compacted file is gone


def test_status_on_a_path_without_a_store_says_so_exits_non_zero_and_creates_nothing(tmp_path, capsys):
    from cliffsweep.cli import main

    missing = tmp_path / "no" / "such" / "store"
    assert main(["status", str(missing)]) == 2
    err = capsys.readouterr().err.strip()
    assert err.count("\n") == 0 and f"no cliffsweep store at {missing}" in err, err
    assert not (tmp_path / "no").exists()


def test_many_files_read_as_pyarrow_dataset_reads_them_with_old_and_extra_columns(tmp_path):
    """parquetfiles.read_files's invariant: the rows, order and types `pyarrow.dataset` gives with
    the table's schema, for files written by an older version (a column missing) or with a column
    the schema dropped; tagged per file; the same through the remote path's fetch pool."""
    import pyarrow as pa
    import pyarrow.dataset as ds
    import pyarrow.fs as pafs

    from cliffsweep.storage.parquetfiles import read_files
    from cliffsweep.storage.store import SCHEMAS

    schema = SCHEMAS["evals"]
    full = pd.DataFrame({"trial_id": ["a", "a"], "step": [1, 2], "task": ["t", "t"], "metric": ["accuracy"] * 2,
                         "value": [0.5, 0.25], "lr": [1e-4, 1e-4], "epochs": [1, 1]})
    pq.write_table(pa.Table.from_pandas(full), tmp_path / "a.parquet")
    pq.write_table(pa.Table.from_pandas(full.drop(columns=["lr"]).assign(trial_id="b")), tmp_path / "b.parquet")
    pq.write_table(pa.Table.from_pandas(full.assign(trial_id="c", gone=[1, 2]).astype({"step": "int32"})),
                   tmp_path / "c.parquet")
    paths = [str(tmp_path / f"{n}.parquet") for n in "abc"]
    want = ds.dataset(paths, schema=schema, format="parquet").to_table()
    local = read_files(pafs.LocalFileSystem(), paths, schema)
    assert local.equals(want) and local["lr"].null_count == 2 and local.schema.names == schema.names
    remote = read_files(pafs.SubTreeFileSystem("/", pafs.LocalFileSystem()), [p.lstrip("/") for p in paths], schema,
                        tag="file", labels=["A", "B", "C"])  # not a LocalFileSystem: the fetch pool
    assert remote.drop_columns(["file"]).equals(want)
    assert remote["file"].to_pylist() == ["A", "A", "B", "B", "C", "C"]
    assert read_files(pafs.LocalFileSystem(), [], schema, tag="file").schema.names[-1] == "file"


def test_a_read_that_listed_files_a_compaction_then_deleted_starts_over(tmp_path, monkeypatch):
    """A run compacts its store as it finishes, while `status` or the dashboard may be reading
    (CI: `status` failed with FileNotFoundError at the end of the README's sweep). Here a real
    compaction runs between a reader's listing and its reading, every time: `Store.read` and the
    dashboard's `TableCache.read` start over from a new listing and return every row."""
    import cliffsweep.storage.tablecache as tables
    import cliffsweep.storage.store as storage

    store = Store(str(tmp_path / "s"))
    for i in range(4):
        store.write("trials", f"t{i}", [{"trial_id": f"t{i}", "status": "running", "lr": 0.1}])
    expected = store.read("trials").sort_values("trial_id").reset_index(drop=True)

    def compacting_first(module, name):
        real = getattr(module, name)
        fired = []

        def reading(*args, **kwargs):
            if not fired:  # the files were listed; a compaction folds and deletes them now
                fired.append(None)
                fired[0] = Store(store.uri).compact(("trials",))
            return real(*args, **kwargs)
        monkeypatch.setattr(module, name, reading)
        return fired

    fired = compacting_first(storage, "read_files")
    got = Store(store.uri).read("trials").sort_values("trial_id").reset_index(drop=True)
    assert fired == [{"trials": 4}] and got.equals(expected)

    for i in range(4):  # unit files again, over the compacted rows
        store.write("trials", f"t{i}", [{"trial_id": f"t{i}", "status": "done", "lr": 0.1}])
    fired = compacting_first(tables, "Underway")  # the dashboard's reads begin once their files are listed
    frame, changed = tables.TableCache(Store(store.uri)).read("trials")
    assert fired == [{"trials": 4}] and changed
    assert list(frame.sort_values("trial_id")["status"]) == ["done"] * 4


def test_the_dashboard_s_first_read_begun_before_a_compaction_is_read_again(tmp_path):
    """`cliffsweep dashboard` begins its first read before it imports its server (cli.py); a
    compaction that folds the files it listed before they are parsed leaves it to read again
    from a new listing, with every row."""
    from cliffsweep.dashboard.refresh import Refresher
    from cliffsweep.storage.tablecache import GRID_PASS, TablesRead, open_caches

    store = Store(str(tmp_path / "s"))
    store.write_json("spec.json", {})
    for i in range(4):
        store.write("trials", f"t{i}", [{"trial_id": f"t{i}", "status": "done", "lr": 0.1}])
    caches = open_caches([store.uri], None, None)
    first, probe = (TablesRead(list(caches.values()), GRID_PASS, list(caches)) for _ in range(2))
    assert Store(store.uri).compact(("trials",)) == {"trials": 4}
    with pytest.raises(FileNotFoundError):  # what they listed is gone
        probe.end()
    board = Refresher([store.uri], cache_root=None, first=first)
    board._grid_first()
    assert board._first is None and board.version == 0  # used once; nothing published from a stale listing
    tables, changed = board._read()
    assert changed and sorted(tables["tables"]["trials"][0]["trial_id"]) == ["t0", "t1", "t2", "t3"]


def test_the_dashboard_s_first_page_is_the_grid_from_the_trials_alone(tmp_path):
    """Issue 62 part 3: the first snapshot is the grid and counts read from the trials (and
    errors) alone, the evaluations said to be "being read", not 0; the evaluations are read only
    after it is published, and the next snapshot counts them."""
    import json

    from cliffsweep.dashboard.refresh import Refresher
    from cliffsweep.storage.tablecache import GRID_PASS, TablesRead, open_caches

    store = Store(str(tmp_path / "s"))
    store.write_json("spec.json", {})
    for i in range(3):
        store.write("trials", f"t{i}", [{"trial_id": f"t{i}", "status": "done", "lr": 0.1, "model": "m",
                                          "series": "sft", "epochs": 1, "seed": 0}])
        store.write("evals", f"t{i}__2", [{"trial_id": f"t{i}", "step": 2, "task": "x", "metric": "accuracy",
                                            "value": 0.5, "series": "sft", "role": "learn", "n": 10}])
    caches = open_caches([store.uri], None, None)
    board = Refresher([store.uri], cache_root=None, first=TablesRead(list(caches.values()), GRID_PASS, list(caches)))
    board._grid_first()
    page = json.loads(board.current()[1])
    assert page["sweep"]["total"] == 3 and page["sweep"]["counts"] == {"done": 3}, page["sweep"]
    assert page["sweep"]["evals"] == {"reading": True} and page["sweep"]["cost"]["eval_hours"] is None
    assert page["partial"] and "evals" not in board.caches[store.uri]._frames  # not read yet
    board.refresh()
    page = json.loads(board.current()[1])
    assert page["sweep"]["evals"]["checkpoints_done"] == 3 and not page["partial"], page["sweep"]["evals"]


def test_a_file_rewritten_at_the_same_size_within_its_mtime_s_second_is_read_again(tmp_path):
    """Issue 62 part 2: the driver reads its store through TableCache, which trusts a file by
    (size, mtime). S3 dates a file to the second, so a unit rewritten within that second at the
    same size (a trial's `pending` -> `running`) lists exactly as before. Replayed here by putting
    the old mtime back on the rewritten file: the cache still returns the new row, since the file
    was young when read (SETTLE_S); once aged, the file is read no more."""
    import os

    import cliffsweep.storage.tablecache as tables

    store = Store(str(tmp_path / "s"))
    store.write("trials", "t0", [{"trial_id": "t0", "status": "pending", "lr": 0.1}])
    path = tmp_path / "s" / "trials" / "t0.parquet"
    cache = tables.TableCache(Store(store.uri))
    assert list(cache.read("trials")[0]["status"]) == ["pending"]
    before = path.stat()
    store.write("trials", "t0", [{"trial_id": "t0", "status": "running", "lr": 0.1}])
    os.utime(path, ns=(before.st_atime_ns, before.st_mtime_ns))
    assert path.stat().st_size == before.st_size  # the listing cannot tell the two apart
    frame, changed = cache.read("trials")
    assert changed and list(frame["status"]) == ["running"]
    old = before.st_mtime_ns - int(2 * tables.SETTLE_S * 1e9)
    os.utime(path, ns=(old, old))  # aged: now trusted by (size, mtime)
    assert list(cache.read("trials")[0]["status"]) == ["running"]
    path.write_bytes(bytes(before.st_size))  # garbled, listed the same: not read again
    os.utime(path, ns=(old, old))
    frame, changed = cache.read("trials")
    assert not changed and list(frame["status"]) == ["running"]


def test_the_incremental_reader_equals_store_read_through_compactions_rewrites_and_kills(tmp_path):
    """Issue 50 part 2: the dashboard's incremental reader (storage/tablecache.py) returns exactly
    the rows `Store.read` returns, one cache kept across every step, as a dashboard keeps it
    while a sweep writes: unit files written, compacted, written again over their folded rows,
    compacted again, and two compactions SIGKILLed midway in a process of their own (after the
    new compacted file is written, before its manifest; after the manifest, before the folded
    unit files are deleted: faults.py's points in Store._compact)."""
    from cliffsweep.storage.tablecache import TableCache

    store = Store(str(tmp_path / "s"))
    cache = TableCache(Store(store.uri))

    def same(label: str) -> None:
        want = store.read("trials").sort_values("trial_id").reset_index(drop=True)
        got = cache.read("trials")[0].sort_values("trial_id").reset_index(drop=True)
        assert got.equals(want), (label, got, want)

    def write(ids, status: str) -> None:
        for i in ids:
            store.write("trials", f"t{i}", [{"trial_id": f"t{i}", "status": status, "lr": 0.1 * (i + 1)}])

    def killed_compaction(point: str) -> None:
        code = (f"from cliffsweep.storage.store import Store; Store({store.uri!r}).compact(('trials',))")
        env = {**os.environ, "CLIFFSWEEP_FAULTS": f"compact:trials:{point}=kill", "CLIFFSWEEP_FAULTS_DIR": str(tmp_path)}
        done = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=120)
        assert done.returncode == -signal.SIGKILL, done.stderr  # it died at that point

    write(range(4), "running")
    same("unit files")
    assert store.compact(("trials",)) == {"trials": 4}
    same("compacted")
    write([1, 2], "done")  # written again over their folded rows
    write([4], "running")
    same("rewritten over the compacted rows")
    killed_compaction("written")  # a new compacted file no manifest names
    same("killed before the manifest")
    write([2], "failed")
    killed_compaction("published")  # the manifest names the new file; the folded unit files remain
    same("killed after the manifest")
    write([3, 5], "done")
    same("written after the killed compaction")
    assert store.compact(("trials",)) == {"trials": 5}  # the unit files left by the kill, and the new ones
    same("compacted again")
    assert sorted(store.read("trials")["status"]) == ["done", "done", "done", "failed", "running", "running"]
