"""Many small Parquet files read as one table: `storage/parquetfiles.read_files` against
`pyarrow.dataset`, side by side on the same files, in one process; then `read_files` alone
against `read_files` with a `reader_pool` (the dashboard's first read), in wall seconds.

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
    with_pool(raw, fs)
    return 0


def with_pool(raw: list[str], fs: pafs.FileSystem) -> None:
    from cliffsweep.storage.parquetfiles import read_files, reader_pool
    from cliffsweep.storage.store import SCHEMAS

    pool = reader_pool()  # as the dashboard makes it: before any other thread
    try:
        list(pool.executor.map(int, range(2 * pool.workers)))
        files = {t: [sorted(str(p) for p in (Path(r) / t).glob("*.parquet")) for r in raw] for t in ("trials", "evals")}
        best = {"alone": float("inf"), "with its pool": float("inf")}
        for _ in range(3):
            for name, use in (("alone", None), ("with its pool", pool)):
                w0 = time.perf_counter()
                for table, per_store in files.items():
                    for paths in per_store:
                        read_files(fs, paths, SCHEMAS[table], pool=use)
                best[name] = min(best[name], time.perf_counter() - w0)
        n = sum(len(p) for per_store in files.values() for p in per_store)
        print(f"three stores' trials and evals, {n} files; wall s, best of 3: read_files alone {best['alone']:.2f}, "
              f"with a pool of {pool.workers} ({pool.method}) and this process {best['with its pool']:.2f}; "
              f"ratio {best['alone'] / best['with its pool']:.1f}x")
    finally:
        pool.close()


if __name__ == "__main__":
    sys.exit(main())
