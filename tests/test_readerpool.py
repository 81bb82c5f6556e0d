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
from pathlib import Path

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


CHECK = Path(__file__).with_name("readerpool_check.py")


def _check(method: str, root: str, slice_files: int) -> None:
    """tests/readerpool_check.py in a fresh Python: the pool made as a dashboard makes it, so the
    way its readers start does not depend on the threads earlier tests left in this process."""
    out = subprocess.run([sys.executable, str(CHECK), method, root, str(slice_files)], capture_output=True,
                         text=True, timeout=300)
    assert out.returncode == 0 and out.stdout.strip() == "ok", out.stderr[-3000:]


@pytest.mark.parametrize("method", ["fork", "forkserver"])
def test_a_pool_reads_what_this_process_reads_and_shares_the_parsing(tmp_path, method):
    """The same rows, order, types and labels as a read without it, the readers' share of the
    parsing, too few files read here, and a pool whose readers died (readerpool_check.py)."""
    _files(tmp_path / "evals", 8 * SLICE_FILES)
    _check(method, str(tmp_path), SLICE_FILES)


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


def test_a_pool_reads_an_object_store_s_files_as_this_process_does(tmp_path):
    """A dashboard against a cluster's bucket: each reader gets the store's S3 filesystem pickled
    and fetches its slices itself, with the credentials of the environment it was started in (a
    real S3 server, moto). Slices of 4 files: moto takes about 0.5 s per atomic write here."""
    from objectstore import s3_server

    from cliffsweep.storage.store import Store

    with s3_server(tmp_path, relay=False):
        store = Store("s3://sweeps/big")
        for i in range(24):
            store.write("evals", f"t{i:04d}", [{"trial_id": f"t{i:04d}", "step": 1, "task": "t", "metric": "accuracy",
                                                "value": i / 100}])
        _check("fork", "s3://sweeps/big", 4)
