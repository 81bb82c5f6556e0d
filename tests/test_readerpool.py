"""parquetfiles.reader_pool: processes that share the parsing of many small Parquet files (the
dashboard's first read of a running sweep). What defines it: the rows are exactly those of a read
without it, in order, the reader processes did part of the parsing, a pool whose processes died
leaves the read to the caller, and its processes never outlive the process that made them."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap
import threading

import pandas as pd
import psutil
import pyarrow as pa
import pyarrow.fs as pafs
import pyarrow.parquet as pq
import pytest

from cliffsweep.storage import parquetfiles
from cliffsweep.storage.parquetfiles import SLICE_FILES, read_files, reader_pool
from cliffsweep.storage.store import SCHEMAS


def _files(folder, n: int) -> list[str]:
    """n one-trial evals files; every third written by an older version (no `lr` column)."""
    folder.mkdir()
    paths = []
    for i in range(n):
        rows = pd.DataFrame({"trial_id": [f"t{i:04d}"] * 2, "step": [1, 2], "task": ["t", "t"],
                             "metric": ["accuracy"] * 2, "value": [i / n, i / n / 2], "lr": [1e-4, 1e-4]})
        table = pa.Table.from_pandas(rows.drop(columns=["lr"]) if i % 3 == 0 else rows, preserve_index=False)
        paths.append(str(folder / f"t{i:04d}.parquet"))
        pq.write_table(table, paths[-1])
    return paths


def _readers(before: set[int]) -> list[psutil.Process]:
    """This process's descendants started since `before`, but a forkserver (a child of this
    process; its readers, forked from it, share its command line) and the resource tracker."""
    helpers = [p.pid for p in psutil.Process().children() if any(
        part in " ".join(p.cmdline()) for part in ("multiprocessing.forkserver", "resource_tracker"))]
    return [p for p in psutil.Process().children(recursive=True) if p.pid not in before and p.pid not in helpers]


def _pool(method: str):
    """reader_pool as the dashboard gets it (fork: one thread running), or with a thread running
    (forkserver, as off Linux)."""
    if method == "fork":
        return reader_pool(2)
    done = threading.Event()
    threading.Thread(target=done.wait, daemon=True).start()
    try:
        return reader_pool(2)
    finally:
        done.set()


@pytest.mark.parametrize("method", ["fork", "forkserver"])
def test_a_pool_reads_what_this_process_reads_and_shares_the_parsing(tmp_path, method):
    paths = _files(tmp_path / "evals", 8 * SLICE_FILES)
    labels = [f"L{i}" for i in range(len(paths))]
    fs, schema = pafs.LocalFileSystem(), SCHEMAS["evals"]
    want = read_files(fs, paths, schema, tag="file", labels=labels)
    before = {p.pid for p in psutil.Process().children(recursive=True)}
    pool = _pool(method)
    try:
        assert pool.method == method
        list(pool.executor.map(int, range(4)))  # its processes up: the read below can share
        readers = _readers(before)
        assert len(readers) == 2
        cpu = sum(sum(p.cpu_times()[:2]) for p in readers)
        for _ in range(2):
            got = read_files(fs, paths, schema, tag="file", labels=labels, pool=pool)
            assert got.equals(want)  # rows, order, types, nulls of the older files, each row's label
        assert sum(sum(p.cpu_times()[:2]) for p in readers) - cpu > 0.05, "the reader processes parsed nothing"
        assert read_files(fs, paths[:SLICE_FILES], schema, pool=pool).equals(
            read_files(fs, paths[:SLICE_FILES], schema))  # too few to send: read here

        for p in readers:  # the readers die (out of memory, killed)
            p.kill()
        psutil.wait_procs(readers, timeout=10)
        assert read_files(fs, paths, schema, tag="file", labels=labels, pool=pool).equals(want)
    finally:
        pool.close()


def test_a_damaged_file_fails_the_read_as_it_would_without_a_pool(tmp_path):
    paths = _files(tmp_path / "evals", 4 * SLICE_FILES)
    with open(paths[5], "r+b") as f:  # a slice the reader processes take (they start from the first)
        f.write(b"garbage!")
    pool = reader_pool(1)
    try:
        list(pool.executor.map(int, range(2)))
        raised = []
        for use in (None, pool):
            try:
                read_files(pafs.LocalFileSystem(), paths, SCHEMAS["evals"], pool=use)
            except (OSError, pa.ArrowException) as e:
                raised.append((type(e), str(e)))
        assert len(raised) == 2 and raised[0] == raised[1], raised
    finally:
        pool.close()


@pytest.mark.parametrize("method", ["fork", "forkserver"])
def test_the_readers_exit_with_a_process_killed_with_sigkill(tmp_path, method):
    code = textwrap.dedent(f"""
        import os, sys, threading, time
        from cliffsweep.storage.parquetfiles import reader_pool
        if __name__ == "__main__":
            if {method!r} == "forkserver":
                threading.Thread(target=time.sleep, args=(600,), daemon=True).start()
            pool = reader_pool(2)
            assert pool.method == {method!r}, pool.method
            list(pool.executor.map(int, range(4)))
            print(os.getpid(), flush=True)
            time.sleep(600)
    """)
    script = tmp_path / "owner.py"
    script.write_text(code)
    owner = subprocess.Popen([sys.executable, str(script)], stdout=subprocess.PIPE, text=True)
    try:
        assert owner.stdout.readline().strip() == str(owner.pid)
        readers = psutil.Process(owner.pid).children(recursive=True)
        assert len(readers) >= 2  # two readers (and a forkserver and a resource tracker)
    finally:
        os.kill(owner.pid, signal.SIGKILL)
        owner.wait()
    gone, alive = psutil.wait_procs(readers, timeout=15)
    assert not alive, [p.cmdline()[:4] for p in alive]


def test_slices_cover_every_file_once_in_order():
    """What _in_slices cuts: contiguous slices of SLICE_FILES or more, covering the paths once."""
    for n in (2 * SLICE_FILES, 2 * SLICE_FILES + 1, 17 * SLICE_FILES - 3):
        cuts = parquetfiles._cuts(n)
        assert cuts[0][0] == 0 and cuts[-1][1] == n
        assert all(b == c for (_, b), (c, _) in zip(cuts, cuts[1:]))
        assert all(b - a >= SLICE_FILES for a, b in cuts)


def test_a_pool_reads_an_object_store_s_files_as_this_process_does(tmp_path, monkeypatch):
    """A dashboard against a cluster's bucket: each reader gets the store's S3 filesystem (its
    endpoint and credentials) pickled, and fetches its slices itself (a real S3 server, moto).
    Slices of 4 files here: moto takes about 0.5 s per atomic write on a loaded machine."""
    from objectstore import s3_server

    from cliffsweep.storage.store import Store

    monkeypatch.setattr(parquetfiles, "SLICE_FILES", 4)
    with s3_server(tmp_path, relay=False):
        store = Store("s3://sweeps/big")
        for i in range(24):
            store.write("evals", f"t{i:04d}", [{"trial_id": f"t{i:04d}", "step": 1, "task": "t", "metric": "accuracy",
                                                "value": i / 100}])
        paths = sorted(f"{store.root}/evals/t{i:04d}.parquet" for i in range(24))
        want = read_files(store.fs, paths, SCHEMAS["evals"], tag="file")
        pool = reader_pool(2)
        try:
            list(pool.executor.map(int, range(4)))  # up: the first slices go to the readers
            assert read_files(store.fs, paths, SCHEMAS["evals"], tag="file", pool=pool).equals(want)
            assert len(want) == 24
        finally:
            pool.close()
