"""Many small Parquet files read as one table: what a store written one unit file per trial and
table (storage/store.py) costs to read, and the bulk of `analyze`'s and the dashboard's reading
of a running sweep.

Why not `pyarrow.dataset`: on a local disk its scan costs 2-2.5x the CPU of reading each file's
bytes and parsing them from memory (bench/bench_parquetfiles.py: 1,326 evals files, 1.17 s
against 0.47 s). On object storage each file is a request, so the bytes are fetched by a thread
pool there. Parsing a small file mostly holds the GIL (0.5-0.9 ms each for the paper-sized stores'
evals and trials), so threads do not share it; a caller that reads thousands of files at once (the
dashboard's first read of a running sweep) passes a `reader_pool`, whose processes parse
contiguous slices of `paths` (the three paper-sized stores' 4,417 trials and evals files: 2.1 s
-> 1.0 s of wall time on 2 cores, one reader beside the caller; bench/bench_parquetfiles.py).
`read_many` shares several reads' files with the pool at once, and `Underway` is such a read
begun, for a caller with other work to do while the readers parse.

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
    processes share the parsing of many files (`read_many`)."""
    return read_many([Read(fs, paths, schema, tag, labels)], pool)[0]


@dataclass(frozen=True)
class Read:
    """One `read_files` call's arguments: what `read_many` reads several of at once."""
    fs: pafs.FileSystem
    paths: list[str]
    schema: pa.Schema
    tag: str | None = None
    labels: list[str] | None = None


def read_many(reads: list[Read], pool: ReaderPool | None = None) -> list[pa.Table]:
    """Each of `reads` as `read_files` reads it. With `pool`, the slices of all of them are shared
    with its processes at once, so a reader never waits while this process assembles one read's
    rows (the dashboard's first read is five tables of each store: a pool given them one at a
    time idled through each one's tail and assembly)."""
    return Underway(reads, pool).end()


class Underway:
    """`read_many`'s reads, begun: with a pool, its processes parse them from the moment this
    object exists, and `end` joins in. So a caller begins a read, does other work (the
    dashboard imports its server while the readers parse), then ends it."""

    def __init__(self, reads: list[Read], pool: ReaderPool | None):
        self.reads = reads
        sliced = [pool is not None and len(r.paths) >= 2 * SLICE_FILES for r in reads]  # fewer: sending costs more
        self.slices = [_Slice(i, r.fs, r.paths[a:b], r.schema, r.tag, (r.labels or r.paths)[a:b])
                       for i, r in enumerate(reads) for a, b in (_cuts(len(r.paths)) if sliced[i] else [(0, len(r.paths))])]
        # the unsliced last: this process parses them first
        self.order = sorted(range(len(self.slices)), key=lambda j: not sliced[self.slices[j].read])
        self.shared = _Shared(pool, [self.slices[j] for j in self.order]) if any(sliced) else None

    def end(self) -> list[pa.Table]:
        """Every read's rows, once parsed here or by the pool."""
        if self.shared is not None:
            tables = dict(zip(self.order, self.shared.end()))
        else:
            tables = {j: _parse(s) for j, s in enumerate(self.slices)}
        parts: list[list[pa.Table]] = [[] for _ in self.reads]
        for j, s in enumerate(self.slices):  # each read's slices in file order
            parts[s.read].append(tables[j])
        # one chunk, not one per file: later filters and to_pandas are per chunk
        return [pa.concat_tables(mine).combine_chunks() for mine in parts]


@dataclass(frozen=True)
class _Slice:
    """Contiguous files of one read (`read`: its index in `read_many`'s list), parsed in one task."""
    read: int
    fs: pafs.FileSystem
    paths: list[str]
    schema: pa.Schema
    tag: str | None
    labels: list[str]


def _parse(s: _Slice) -> pa.Table:
    """`s`'s rows in file order, each file conformed to the schema and tagged."""
    if isinstance(s.fs, pafs.LocalFileSystem) or len(s.paths) <= 1:
        blobs = map(lambda p: _fetch(s.fs, p), s.paths)
    else:
        with ThreadPoolExecutor(min(FETCHERS, len(s.paths))) as fetchers:
            blobs = list(fetchers.map(lambda p: _fetch(s.fs, p), s.paths))
    tables = []
    for label, blob in zip(s.labels, blobs):
        table = conform(pq.ParquetFile(pa.BufferReader(blob)).read(use_threads=False), s.schema)
        if s.tag:
            table = table.append_column(s.tag, pa.array([label] * len(table), pa.string()))
        tables.append(table)
    out = s.schema.append(pa.field(s.tag, pa.string())) if s.tag else s.schema
    return pa.concat_tables(tables).combine_chunks() if tables else out.empty_table()


class _Shared:
    """Slices shared between the pool and this process. A sender thread queues them for the pool
    from the first on; `end` parses them here from the last back, and then each one queued that
    no reader process has begun. So nothing waits on a pool still starting (its first `submit`
    blocks until a process is up, 0.5-0.7 s from a forkserver), and a broken pool leaves the
    parsing to this process."""

    def __init__(self, pool: ReaderPool, slices: list[_Slice]):
        self.pool, self.slices = pool, slices
        self.lock, self.unsent, self.sent = threading.Lock(), deque(range(len(slices))), {}
        threading.Thread(target=self._send, name="reader-pool-send", daemon=True).start()

    def _send(self) -> None:
        while True:
            with self.lock:
                if not self.unsent:
                    return
                i = self.unsent.popleft()
            try:
                queued = self.pool.executor.submit(_parse, self.slices[i])
            except (BrokenExecutor, RuntimeError):  # broken or closed: this process parses the rest
                return
            with self.lock:
                self.sent[i] = queued

    def end(self) -> list[pa.Table]:
        parts: dict[int, pa.Table] = {}
        while True:
            with self.lock:
                if not self.unsent:
                    break
                i = self.unsent.pop()
            parts[i] = _parse(self.slices[i])
        for i in reversed(range(len(self.slices))):
            with self.lock:
                queued = self.sent.get(i)
            if i not in parts and (queued is None or queued.cancel()):  # not yet queued, or not begun
                parts[i] = _parse(self.slices[i])
        for i in range(len(self.slices)):
            if i not in parts:
                try:
                    parts[i] = self.sent[i].result()
                except BrokenExecutor:  # its reader process died (out of memory, killed): parsed here
                    parts[i] = _parse(self.slices[i])
        return [parts[i] for i in range(len(self.slices))]


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
