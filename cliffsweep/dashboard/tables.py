"""A store's tables, read again only where their files changed: what keeps the dashboard's
refresh cheap while a sweep writes (issue 41: "caches what has not changed, so serving never
slows the sweep").

Invariant: `TableCache.read(table)` returns exactly the rows `Store.read(table)` would (the unit
files, plus the compacted file's rows whose unit was not written again since: storage/store.py),
but reads a file's bytes only once per (path, size, mtime), in this process or, through
diskcache.py, in the run before. It never writes to the store.
"""

from __future__ import annotations

import json
from pathlib import Path

import pandas as pd
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.fs as pafs

from cliffsweep.dashboard import diskcache
from cliffsweep.storage.parquetfiles import ReaderPool, read_files
from cliffsweep.storage.store import MANIFEST, SCHEMAS, UNIT, Store, relisted, unit_files

_FILE = "__file"
# the first pass's tables, whose files hold a few rows each: parsing them is the cost that reader
# processes share. Not samples (600 rows a file on the paper-sized stores: sending them back cost
# more than parsing them here, 2.3 s against 1.6 s for one store)
POOLED = diskcache.TABLES


def listing(store: Store, table: str) -> dict[str, tuple[int, int]]:
    """path -> (size, mtime in ns) of every file in `table`'s folder (one list request)."""
    infos = store.fs.get_file_info(pafs.FileSelector(f"{store.root}/{table}", allow_not_found=True))
    return {f.path: (f.size, f.mtime_ns or 0) for f in infos if f.type == pafs.FileType.File}


class TableCache:
    """One store's tables as last read, and the listing each was read at."""

    def __init__(self, store: Store, disk: Path | None = None, readers: ReaderPool | None = None):
        self.store = store
        self.disk = disk  # this store's diskcache.folder, or None: nothing kept between runs
        self.readers = readers  # processes that parse a read of many files (parquetfiles.reader_pool)
        self._unsaved: dict[str, int] = {}  # table -> files read since its cache file was written
        self._rows: dict[str, pa.Table] = {}  # table -> rows of every file read, tagged with its path
        self._seen: dict[str, dict[str, tuple[int, int]]] = {}  # table -> the files behind _rows
        self._listed: dict[str, dict[str, tuple[int, int]]] = {}  # table -> its folder's last listing
        self._frames: dict[str, pd.DataFrame] = {}

    def read(self, table: str) -> tuple[pd.DataFrame, bool]:
        """(`table`'s rows, whether they changed since the last call)."""
        return relisted(lambda: self._read(table))

    def _read(self, table: str) -> tuple[pd.DataFrame, bool]:
        files = listing(self.store, table)
        if table in self._frames and files == self._listed.get(table):
            return self._frames[table], False
        manifest_path = f"{self.store.root}/{table}/{MANIFEST}"
        manifest = json.loads(self.store.read_bytes(f"{table}/{MANIFEST}")) if manifest_path in files else None
        compacted = f"{self.store.root}/{table}/{manifest['file']}" if manifest else None
        units = unit_files(list(files))  # as Store.read picks them
        wanted = set(units.values()) | ({compacted} if compacted else set())
        disk = self.disk is not None and table in diskcache.TABLES
        if disk and table not in self._rows:
            kept = diskcache.load(self.disk / f"{table}.arrow", self.store.uri, self._tagged(table))
            if kept is not None:
                self._rows[table], self._seen[table] = kept
        old = self._seen.get(table, {})
        keep = {p for p in wanted if p in old and old[p] == files[p]}
        rows = self._rows.get(table)
        parts = [rows.filter(pc.is_in(rows[_FILE], pa.array(sorted(keep), pa.string())))] if rows is not None and keep else []
        fresh = sorted(wanted - keep)
        schema = SCHEMAS[table].append(pa.field(UNIT, pa.string()))
        if compacted in fresh:
            parts.append(self._load([compacted], schema, table))
        fresh_units = [p for p in fresh if p != compacted]
        if fresh_units:
            parts.append(self._with_unit(self._load(fresh_units, SCHEMAS[table], table)))
        full = pa.concat_tables(parts).combine_chunks() if parts else self._tagged(table).empty_table()
        self._rows[table], self._seen[table] = full, {p: files[p] for p in wanted}
        self._unsaved[table] = self._unsaved.get(table, 0) + len(fresh)
        if disk and self._unsaved[table] >= diskcache.SAVE_AFTER_FILES:
            diskcache.save(self.disk / f"{table}.arrow", self.store.uri, full, self._seen[table])
            self._unsaved[table] = 0
        self._frames[table] = _visible(full, compacted, set(units), table)
        self._listed[table] = files  # last: a read that failed halfway is done again next time
        return self._frames[table], True

    @staticmethod
    def _tagged(table: str) -> pa.Schema:
        """The schema of the rows kept: the table's, its unit and each row's file."""
        return SCHEMAS[table].append(pa.field(UNIT, pa.string())).append(pa.field(_FILE, pa.string()))

    def _load(self, paths: list[str], schema: pa.Schema, table: str) -> pa.Table:
        """Rows of `paths`, each tagged with its file."""
        return read_files(self.store.fs, paths, schema, tag=_FILE, pool=self.readers if table in POOLED else None)

    @staticmethod
    def _with_unit(rows: pa.Table) -> pa.Table:
        """Unit files' rows carry no unit column: their unit is their file's name."""
        names = pc.replace_substring_regex(rows[_FILE], r"^.*/|\.parquet$", "")
        return rows.add_column(len(rows.schema) - 1, UNIT, names)


def _visible(rows: pa.Table, compacted: str | None, units: set[str], table: str) -> pd.DataFrame:
    """What Store.read returns: a compacted row is overridden by its unit's file written again."""
    if compacted is not None:
        from_compacted = pc.equal(rows[_FILE], compacted)
        overridden = pc.and_(from_compacted, pc.is_in(rows[UNIT], pa.array(sorted(units), pa.string())))
        rows = rows.filter(pc.invert(overridden))
    return rows.select(SCHEMAS[table].names).to_pandas()
