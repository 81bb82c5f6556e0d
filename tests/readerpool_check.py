"""Run by tests/test_readerpool.py in a fresh Python, so that the pool starts as a dashboard's
does whatever threads the test process has left running: with one thread (fork) or with a
thread running (forkserver). Checks what defines the pool and prints "ok".

    python tests/readerpool_check.py fork|forkserver FOLDER|s3://bucket/store SLICE_FILES
"""

from __future__ import annotations

import sys
import threading
import time

import psutil
import pyarrow.fs as pafs

from cliffsweep.storage import parquetfiles
from cliffsweep.storage.parquetfiles import Read, Underway, read_files, reader_pool
from cliffsweep.storage.store import SCHEMAS, Store


def readers_of(pool_owner: psutil.Process) -> list[psutil.Process]:
    """The owner's descendants but a forkserver (its child; the readers, forked from it, share its
    command line) and the resource tracker."""
    helpers = {p.pid for p in pool_owner.children() if any(
        part in " ".join(p.cmdline()) for part in ("multiprocessing.forkserver", "resource_tracker"))}
    return [p for p in pool_owner.children(recursive=True) if p.pid not in helpers]


def cpu(procs: list[psutil.Process]) -> float:
    return sum(sum(p.cpu_times()[:2]) for p in procs)


def main(method: str, root: str, slice_files: int) -> None:
    parquetfiles.SLICE_FILES = slice_files
    if root.startswith("s3://"):
        store = Store(root)
        fs, folder = store.fs, f"{store.root}/evals"
    else:
        fs, folder = pafs.LocalFileSystem(), f"{root}/evals"
    paths = sorted(f.path for f in fs.get_file_info(pafs.FileSelector(folder)) if f.path.endswith(".parquet"))
    labels = [f"L{i}" for i in range(len(paths))]
    schema = SCHEMAS["evals"]
    want = read_files(fs, paths, schema, tag="file", labels=labels)
    if method == "forkserver":  # a thread running: no fork of this process
        threading.Thread(target=time.sleep, args=(600,), daemon=True).start()
    pool = reader_pool(2)
    assert pool.method == method, pool.method
    list(pool.executor.map(int, range(4)))  # its processes up: the reads below can share
    readers = readers_of(psutil.Process())
    assert len(readers) == 2, readers
    before = cpu(readers)
    for _ in range(2):  # rows, order, types, nulls of the older files, each row's label
        assert read_files(fs, paths, schema, tag="file", labels=labels, pool=pool).equals(want)
    if not root.startswith("s3://"):  # a few files fetched from S3 cost the readers little CPU
        assert cpu(readers) - before > 0.05, "the reader processes parsed nothing"
    if not root.startswith("s3://"):  # a read begun: the readers parse while this process does other work
        before = cpu(readers)
        underway = Underway([Read(fs, paths, schema, "file", labels), Read(fs, paths[:3], schema)], pool)
        deadline = time.time() + 60
        while cpu(readers) - before < 0.05 and time.time() < deadline:
            time.sleep(0.05)
        assert cpu(readers) - before >= 0.05, "the readers parsed nothing before end()"
        got = underway.end()
        assert got[0].equals(want) and got[1].equals(read_files(fs, paths[:3], schema))
    few = paths[:slice_files]
    assert read_files(fs, few, schema, pool=pool).equals(read_files(fs, few, schema))  # too few to send
    for p in readers:  # the readers die (out of memory, killed): the read is done here
        p.kill()
    psutil.wait_procs(readers, timeout=10)
    assert read_files(fs, paths, schema, tag="file", labels=labels, pool=pool).equals(want)
    pool.close()
    print("ok", flush=True)


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2], int(sys.argv[3]))
