"""Many small Parquet files read as one table: what a store written one unit file per trial and
table (storage/store.py) costs to read, and the bulk of `analyze`'s and the dashboard's reading
of a running sweep.

Why not `pyarrow.dataset`: on a local disk its scan costs 2-2.5x the CPU of reading each file's
bytes and parsing them from memory (bench/bench_parquetfiles.py: 1,326 evals files, 1.17 s
against 0.47 s). On object storage each file is a request, so the bytes are fetched by a thread
pool there. Parsing a small file mostly holds the GIL (0.5-0.9 ms each for the paper-sized stores'
evals and trials), so threads do not share it; a caller that reads thousands of files at once (the
dashboard's first read of a running sweep) passes a `reader_pool`, whose processes parse
contiguous slices of `paths` (the three paper-sized stores' 4,417 trials and evals files: 1.93 s
-> 1.01 s of wall time on 2 cores, one reader beside the caller; bench/bench_parquetfiles.py).

Invariant: `read_files(fs, paths, schema)` returns what `ds.dataset(paths, schema=schema).to_table()`
returns: every file's rows in `paths` order, each file's columns conformed to `schema` (a column
a file lacks, as written by an older version, is null; one it has beyond `schema` is dropped).
"""

from __future__ import annotations

import multiprocessing
import os
import sys
import threading
import time
from collections import deque
from concurrent.futures import BrokenExecutor, ProcessPoolExecutor, ThreadPoolExecutor
from dataclasses import dataclass

import pyarrow as pa
import pyarrow.fs as pafs
import pyarrow.parquet as pq

FETCHERS = 16  # concurrent requests to object storage
SLICE_FILES = 64  # files a reader process is sent at once (~30-60 ms of parsing on the paper-sized stores)


def read_files(fs: pafs.FileSystem, paths: list[str], schema: pa.Schema, tag: str | None = None,
               labels: list[str] | None = None, pool: ReaderPool | None = None) -> pa.Table:
    """The rows of `paths` under `schema`; with `tag`, a last string column of that name holding
    each row's file path (or its file's entry in `labels`). With `pool` (`reader_pool`), its
    processes share the parsing of many files (`_in_slices`)."""
    out = schema.append(pa.field(tag, pa.string())) if tag else schema
    if not paths:
        return out.empty_table()
    if pool is not None and len(paths) >= 2 * SLICE_FILES:  # else sending them costs more than it spares
        try:
            return _in_slices(pool, fs, paths, schema, tag, labels or paths)
        except BrokenExecutor:  # a reader process died (out of memory, killed): this read is done here
            pass
    if isinstance(fs, pafs.LocalFileSystem) or len(paths) == 1:
        blobs = map(lambda p: _fetch(fs, p), paths)
    else:
        with ThreadPoolExecutor(min(FETCHERS, len(paths))) as fetchers:
            blobs = list(fetchers.map(lambda p: _fetch(fs, p), paths))
    tables = []
    for label, blob in zip(labels or paths, blobs):
        table = conform(pq.ParquetFile(pa.BufferReader(blob)).read(use_threads=False), schema)
        if tag:
            table = table.append_column(tag, pa.array([label] * len(table), pa.string()))
        tables.append(table)
    return pa.concat_tables(tables).combine_chunks()  # one chunk, not one per file: later filters and to_pandas are per chunk


def _in_slices(pool: ReaderPool, fs: pafs.FileSystem, paths: list[str], schema: pa.Schema, tag: str | None,
               labels: list[str]) -> pa.Table:
    """Slices of about SLICE_FILES files. A sender thread queues them for the pool from the first
    on; this process reads them from the last back, and then each one queued that no reader
    process has begun. So nothing waits on a pool still starting (its first `submit` blocks
    until a process is up, 0.5-0.7 s), and a broken pool leaves the reading to this process."""
    args = [(fs, paths[a:b], schema, tag, labels[a:b]) for a, b in _cuts(len(paths))]
    n = len(args)
    lock, unsent, sent = threading.Lock(), deque(range(n)), {}

    def send() -> None:
        while True:
            with lock:
                if not unsent:
                    return
                i = unsent.popleft()
            try:
                queued = pool.executor.submit(read_files, *args[i])
            except (BrokenExecutor, RuntimeError):  # broken or closed: this process reads the rest
                return
            with lock:
                sent[i] = queued

    threading.Thread(target=send, name="reader-pool-send", daemon=True).start()
    parts: dict[int, pa.Table] = {}
    while True:
        with lock:
            if not unsent:
                break
            i = unsent.pop()
        parts[i] = read_files(*args[i])
    for i in reversed(range(n)):
        with lock:
            queued = sent.get(i)
        if i not in parts and (queued is None or queued.cancel()):  # not yet queued, or not begun
            parts[i] = read_files(*args[i])
    return pa.concat_tables([parts[i] if i in parts else sent[i].result() for i in range(n)]).combine_chunks()


def _cuts(n: int) -> list[tuple[int, int]]:
    """[start, end) of n files' contiguous slices, each of SLICE_FILES files or more."""
    k = n // SLICE_FILES
    return [(n * i // k, n * (i + 1) // k) for i in range(k)]


@dataclass(frozen=True)
class ReaderPool:
    """`reader_pool`'s processes, how many, and how they were started (fork, forkserver, spawn)."""
    executor: ProcessPoolExecutor
    workers: int
    method: str

    def close(self) -> None:
        self.executor.shutdown(wait=True, cancel_futures=True)


def reader_pool(workers: int = min(7, max(1, (os.cpu_count() or 1) - 1))) -> ReaderPool:
    """Processes for `read_files` (one fewer than the CPUs: the caller reads too, `_in_slices`).

    On Linux, called while this process runs one Python thread, they are forked from it at once:
    up in milliseconds with what it imported (pyarrow, this module), where a forkserver's or
    spawned process imports the package again (0.5-1 s of CPU on a 2-core machine that the first
    read needs). pyarrow's own native threads (jemalloc's, Arrow's pools) survive a fork, as every
    fork-started multiprocessing pool relies on; another Python thread could hold a lock the child
    copies, so with one running (and off Linux) they are forked from a forkserver that imported
    this module, started in the background. Either way they exit with the caller, even one
    killed with SIGKILL (`_exit_with`)."""
    methods = multiprocessing.get_all_start_methods()
    forked = sys.platform == "linux" and threading.active_count() == 1
    context = multiprocessing.get_context("fork" if forked else "forkserver" if "forkserver" in methods else "spawn")
    if context.get_start_method() == "forkserver":
        context.set_forkserver_preload(["__main__", __name__])  # each reader a fork of a process that imported both
    pool = ProcessPoolExecutor(workers, mp_context=context, initializer=_exit_with, initargs=(os.getpid(),))
    if forked:  # a fork pool starts all its processes at its first task, here, before any other thread
        pool.submit(int)
    else:
        threading.Thread(target=_start, args=(pool, workers), name="reader-pool-start", daemon=True).start()
    return ReaderPool(pool, workers, context.get_start_method())


def _start(pool: ProcessPoolExecutor, workers: int) -> None:
    """One task each starts them all (the pool starts a process per task while none is idle)."""
    try:
        for _ in range(workers):
            pool.submit(int)
    except RuntimeError:  # closed before they all started: nothing to start
        pass


def _exit_with(parent: int) -> None:
    """A reader process's watch over the process that made its pool: gone, so is the reader."""
    def watch() -> None:
        while True:
            try:
                os.kill(parent, 0)
            except ProcessLookupError:
                os._exit(0)
            time.sleep(1.0)

    threading.Thread(target=watch, name="exit-with-parent", daemon=True).start()


def _fetch(fs: pafs.FileSystem, path: str) -> pa.Buffer:
    with fs.open_input_stream(path) as f:
        return f.read_buffer()


def conform(table: pa.Table, schema: pa.Schema) -> pa.Table:
    """`table` with exactly `schema`'s columns, types and no metadata of its own."""
    if table.schema.equals(schema, check_metadata=False):
        return table.replace_schema_metadata(schema.metadata)
    names = set(table.column_names)
    columns = [table[f.name].cast(f.type) if f.name in names else pa.nulls(len(table), f.type) for f in schema]
    return pa.Table.from_arrays(columns, schema=schema)
