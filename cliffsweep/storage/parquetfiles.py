"""Many small Parquet files read as one table: what a store written one unit file per trial and
table (storage/store.py) costs to read, and the bulk of `analyze`'s and the dashboard's reading
of a running sweep.

Why not `pyarrow.dataset`: on a local disk its scan costs 2-2.5x the CPU of reading each file's
bytes and parsing them from memory (bench/bench_parquetfiles.py: 1,326 evals files, 1.17 s
against 0.47 s). On object storage each file is a request, so the bytes are fetched by a thread
pool there; parsing stays serial (for a small file, most of it holds the GIL).

Invariant: `read_files(fs, paths, schema)` returns what `ds.dataset(paths, schema=schema).to_table()`
returns: every file's rows in `paths` order, each file's columns conformed to `schema` (a column
a file lacks, as written by an older version, is null; one it has beyond `schema` is dropped).
"""

from __future__ import annotations

from concurrent.futures import ThreadPoolExecutor

import pyarrow as pa
import pyarrow.fs as pafs
import pyarrow.parquet as pq

FETCHERS = 16  # concurrent requests to object storage


def read_files(fs: pafs.FileSystem, paths: list[str], schema: pa.Schema, tag: str | None = None,
               labels: list[str] | None = None) -> pa.Table:
    """The rows of `paths` under `schema`; with `tag`, a last string column of that name holding
    each row's file path (or its file's entry in `labels`)."""
    out = schema.append(pa.field(tag, pa.string())) if tag else schema
    if not paths:
        return out.empty_table()
    if isinstance(fs, pafs.LocalFileSystem) or len(paths) == 1:
        blobs = map(lambda p: _fetch(fs, p), paths)
    else:
        with ThreadPoolExecutor(min(FETCHERS, len(paths))) as pool:
            blobs = list(pool.map(lambda p: _fetch(fs, p), paths))
    tables = []
    for label, blob in zip(labels or paths, blobs):
        table = conform(pq.ParquetFile(pa.BufferReader(blob)).read(use_threads=False), schema)
        if tag:
            table = table.append_column(tag, pa.array([label] * len(table), pa.string()))
        tables.append(table)
    return pa.concat_tables(tables).combine_chunks()  # one chunk, not one per file: later filters and to_pandas are per chunk


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
