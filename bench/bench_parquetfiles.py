"""Many small Parquet files read as one table: `storage/parquetfiles.read_files` against
`pyarrow.dataset`, side by side on the same files, in one process; the same rows written as
unit files were before and as they are now (`store.unit_file_options`), parsed side by side;
then `read_files` alone against a `reader_pool` given each read in turn, and given all of them
at once (`read_many`, the dashboard's first read), in wall seconds.

    .venv/bin/python bench/bench_parquetfiles.py [--out /tmp/cliffsweep-dashboard-bench]

The files are one synthetic paper-sized store's evals and trials as written (one file per trial:
`bench/bench_dashboard.py` writes them once under --out). Each reader runs 3 times per table,
alternating; the best CPU seconds of each are printed, and their ratio. The pool's comparison
reads all three stores' evals and trials (4,417 files) and prints the best wall seconds of 3.
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

import pyarrow.dataset as ds
import pyarrow.fs as pafs


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--out", default="/tmp/cliffsweep-dashboard-bench")
    args = ap.parse_args()
    sys.path.insert(0, str(Path(__file__).resolve().parent))
    from bench_dashboard import stores

    from cliffsweep.storage.parquetfiles import read_files
    from cliffsweep.storage.store import SCHEMAS

    raw, _ = stores(Path(args.out))
    fs = pafs.LocalFileSystem()
    for table in ("evals", "trials"):
        paths = sorted(str(p) for p in (Path(raw[0]) / table).glob("*.parquet") if not p.name.startswith("_"))
        readers = {"pyarrow.dataset": lambda: ds.dataset(paths, schema=SCHEMAS[table], filesystem=fs, format="parquet").to_table(),
                   "parquetfiles.read_files": lambda: read_files(fs, paths, SCHEMAS[table])}
        best = {name: float("inf") for name in readers}
        for _ in range(3):
            for name, read in readers.items():
                c0 = time.process_time()
                rows = read()
                best[name] = min(best[name], time.process_time() - c0)
        assert readers["pyarrow.dataset"]().equals(rows)
        print(f"{table}: {len(paths)} files, {len(rows)} rows; CPU s, best of 3: "
              + ", ".join(f"{n} {v:.3f}" for n, v in best.items())
              + f"; ratio {best['pyarrow.dataset'] / best['parquetfiles.read_files']:.1f}x")
    write_options(raw[0])
    with_pool(raw, fs)
    return 0


def write_options(root: str) -> None:
    """Parsing one store's trials and evals files as written before (pyarrow's defaults:
    dictionary pages, statistics) and now (`unit_file_options`), the same rows in memory."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    from cliffsweep.storage.parquetfiles import conform
    from cliffsweep.storage.store import SCHEMAS, unit_file_options

    for table in ("evals", "trials"):
        rows = [pq.read_table(p) for p in sorted((Path(root) / table).glob("*.parquet")) if not p.name.startswith("_")]
        blobs = {}
        for name, options in (("defaults", lambda n: {}), ("unit_file_options", unit_file_options)):
            blobs[name] = []
            for r in rows:
                sink = pa.BufferOutputStream()
                pq.write_table(r, sink, **options(len(r)))
                blobs[name].append(sink.getvalue())
        best = {name: float("inf") for name in blobs}
        for _ in range(3):
            for name, mine in blobs.items():
                c0 = time.process_time()
                for b in mine:
                    conform(pq.ParquetFile(pa.BufferReader(b)).read(use_threads=False), SCHEMAS[table])
                best[name] = min(best[name], time.process_time() - c0)
        print(f"{table}: {len(rows)} files parsed from memory, CPU s, best of 3: as pyarrow's defaults write them "
              f"{best['defaults']:.3f}, as unit_file_options write them {best['unit_file_options']:.3f}; "
              f"ratio {best['defaults'] / best['unit_file_options']:.2f}x")


def with_pool(raw: list[str], fs: pafs.FileSystem) -> None:
    from cliffsweep.storage.parquetfiles import Read, read_files, read_many, reader_pool
    from cliffsweep.storage.store import SCHEMAS

    pool = reader_pool()  # as the dashboard makes it: before any other thread
    try:
        list(pool.executor.map(int, range(2 * pool.workers)))
        files = {t: [sorted(str(p) for p in (Path(r) / t).glob("*.parquet")) for r in raw] for t in ("trials", "evals")}
        reads = [Read(fs, paths, SCHEMAS[t]) for t, per_store in files.items() for paths in per_store]
        ways = {"alone": lambda: [read_files(r.fs, r.paths, r.schema) for r in reads],
                "one read at a time": lambda: [read_files(r.fs, r.paths, r.schema, pool=pool) for r in reads],
                "all at once": lambda: read_many(reads, pool)}
        best = {name: float("inf") for name in ways}
        for _ in range(3):
            for name, way in ways.items():
                w0 = time.perf_counter()
                way()
                best[name] = min(best[name], time.perf_counter() - w0)
        n = sum(len(r.paths) for r in reads)
        print(f"three stores' trials and evals, {n} files; wall s, best of 3: read_files alone {best['alone']:.2f}; "
              f"with a pool of {pool.workers} ({pool.method}) and this process, one read at a time "
              f"{best['one read at a time']:.2f}, all at once (read_many) {best['all at once']:.2f}; "
              f"ratio alone / all at once {best['alone'] / best['all at once']:.1f}x")
    finally:
        pool.close()


if __name__ == "__main__":
    sys.exit(main())
