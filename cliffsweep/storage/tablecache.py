"""A store's tables, read again only where their files changed: what keeps the dashboard's
refresh cheap while a sweep writes (issue 41: "caches what has not changed, so serving never
slows the sweep").

Invariant: `TableCache.read(table)` returns exactly the rows `Store.read(table)` would, but reads
a file's bytes only once per (path, size, mtime), in this process or, through diskcache.py, in
the run before. It never writes to the store. It reads the files `Store.list_table` lists and
keeps the compacted rows `store.unfolded` keeps, as `Store.read` does: the store's format is
stated once, in storage/ (issue 50 part 2: the dashboard restated it, and a change to
compaction would have shown wrong rows there without a word).

A file is trusted by (size, mtime) only once its mtime is `SETTLE_S` older than the clock of the
read that saw it. Object storage dates a file to the second (S3's LastModified), and a unit
rewritten within that second at the same size (a trial's `pending` -> `running`, a top-up's
counts) would otherwise keep its old rows for good; a file read while still that young is read
again on the next call, until it has aged. So what is read again stays what changed lately.
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

import pyarrow as pa
import pyarrow.compute as pc

from cliffsweep.storage import diskcache
from cliffsweep.storage.parquetfiles import Read, ReaderPool, Underway
from cliffsweep.storage.store import SCHEMAS, UNIT, Store, is_store, relisted, retrying, unfolded

if TYPE_CHECKING:  # imported by to_pandas: the dashboard begins its first read before pandas is (cli.py)
    import pandas as pd

_FILE = "__file"
# the first pass's tables, whose files hold a few rows each: parsing them is the cost that reader
# processes share. Not samples (600 rows a file on the paper-sized stores: sending them back cost
# more than parsing them here, 2.3 s against 1.6 s for one store)
POOLED = diskcache.TABLES
FIRST_PASS = diskcache.TABLES  # what the dashboard reads every turn; the samples only for the bootstrap
GRID_PASS = ("trials", "errors")  # what the dashboard's first page (the grid and counts) needs; read before the rest
SETTLE_S = 5.0  # a file's mtime this much older than the reading clock: its (size, mtime) names one version.
# One second of S3's dating, and clock skew between an object store and this machine up to the rest


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
        self._young: dict[str, set[str]] = {}  # table -> files read before their mtime settled (read again)
        self._frames: dict[str, pd.DataFrame] = {}

    def read(self, table: str) -> tuple[pd.DataFrame, bool]:
        """(`table`'s rows, whether they changed since the last call)."""
        return read_tables([self], (table,))[0][table]

    def rows(self, table: str) -> pd.DataFrame:
        """`table`'s rows, as `Store.read` returns them and retried as it retries (a store on object
        storage through an outage): what the driver reads each turn (issue 62 part 2)."""
        return retrying(f"read table {table}", self.store.uri, lambda: self.read(table)[0])

    def _plan(self, table: str) -> _Plan | None:
        """What reading `table` now takes: None while its folder's listing is the last one read."""
        listed_at, files = time.time(), self.store.table_listing(table)
        if table in self._frames and files == self._listed.get(table) and not self._young.get(table):
            return None  # unchanged: not even the manifest is read again (a request on object storage)
        listed = self.store.list_table(table, files)
        units, compacted = listed.units, listed.compacted
        wanted = set(units.values()) | ({compacted} if compacted else set())
        if self.disk is not None and table in diskcache.TABLES and table not in self._rows:
            kept = diskcache.load(self.disk / f"{table}.arrow", self.store.uri, self._tagged(table))
            if kept is not None:
                self._rows[table], self._seen[table] = kept
        old, again = self._seen.get(table, {}), self._young.get(table, set())
        keep = {p for p in wanted if p in old and old[p] == files[p] and p not in again}
        fresh = sorted(wanted - keep)
        fs, schema = self.store.fs, SCHEMAS[table]
        reads = ([Read(fs, [compacted], schema.append(pa.field(UNIT, pa.string())), _FILE)] if compacted in fresh else []) \
            + [Read(fs, [p for p in fresh if p != compacted], schema, _FILE)]
        return _Plan(self, table, files, compacted, set(units), wanted, keep, reads, listed_at)

    def _finish(self, plan: _Plan, loaded: list[pa.Table]) -> tuple[pd.DataFrame, bool]:
        """`plan`'s table from the rows kept and `loaded` (its reads' rows), kept for the next read,
        and whether it changed: a listing unchanged whose young files read as before did not."""
        table, rows = plan.table, self._rows.get(plan.table)
        listed_before = self._listed.get(table)
        parts = [rows.filter(pc.is_in(rows[_FILE], pa.array(sorted(plan.keep), pa.string())))] if rows is not None and plan.keep else []
        if len(plan.reads) == 2:  # the compacted file's rows carry their unit
            parts.append(loaded[0])
        if len(loaded[-1]):  # unit files' rows carry none: their unit is their file's name
            parts.append(self._with_unit(loaded[-1]))
        full = pa.concat_tables(parts).combine_chunks() if parts else self._tagged(table).empty_table()
        self._rows[table], self._seen[table] = full, {p: plan.files[p] for p in plan.wanted}
        self._young[table] = young(plan.files, plan.wanted, plan.listed_at)
        self._unsaved[table] = self._unsaved.get(table, 0) + len(plan.wanted - plan.keep)
        if self.disk is not None and table in diskcache.TABLES and self._unsaved[table] >= diskcache.SAVE_AFTER_FILES:
            settled = {p: v for p, v in self._seen[table].items() if p not in self._young[table]}
            diskcache.save(self.disk / f"{table}.arrow", self.store.uri, full, settled)
            self._unsaved[table] = 0
        read = pa.array(sorted(plan.wanted - plan.keep), pa.string())
        if table in self._frames and plan.files == listed_before and _of(rows, read).equals(_of(full, read)):
            return self._frames[table], False  # only young files read again, and as they were
        self._frames[table] = _visible(full, plan.compacted, plan.units, table)
        self._listed[table] = plan.files  # last: a read that failed halfway is done again next time
        return self._frames[table], True

    @staticmethod
    def _tagged(table: str) -> pa.Schema:
        """The schema of the rows kept: the table's, its unit and each row's file."""
        return SCHEMAS[table].append(pa.field(UNIT, pa.string())).append(pa.field(_FILE, pa.string()))

    @staticmethod
    def _with_unit(rows: pa.Table) -> pa.Table:
        """Unit files' rows carry no unit column: their unit is their file's name."""
        names = pc.replace_substring_regex(rows[_FILE], r"^.*/|\.parquet$", "")
        return rows.add_column(len(rows.schema) - 1, UNIT, names)


@dataclass(frozen=True)
class _Plan:
    """One table's read, listed and compared with what its cache holds (`TableCache._plan`)."""
    cache: TableCache
    table: str
    files: dict[str, tuple[int, int]]  # its folder's listing
    compacted: str | None  # the compacted file's path, if the table has one
    units: set[str]  # the write units listed
    wanted: set[str]  # the files whose rows make the table (Store.read's choice)
    keep: set[str]  # of those, the ones whose rows the cache holds, unchanged
    reads: list[Read]  # the rest: the compacted file if it changed, then the unit files
    listed_at: float  # this machine's clock when the folder was listed


def young(files: dict[str, tuple[int, int]], wanted: set[str], now: float) -> set[str]:
    """Of `wanted`, the files whose mtime is within SETTLE_S of `now`: another version of one may
    yet be written with the same size and mtime (the module's docstring)."""
    cut = int((now - SETTLE_S) * 1e9)
    return {p for p in wanted if files[p][1] > cut}


def open_caches(uris: list[str], cache_root: Path | None, readers: ReaderPool | None) -> dict[str, TableCache]:
    """uri -> its TableCache, for each of `uris` that holds a store now (one starting may not yet),
    its tables kept on disk under `cache_root` (None: not kept)."""
    out = {}
    for uri in uris:
        if is_store(uri):
            store = Store(uri)
            out[uri] = TableCache(store, diskcache.folder(store.uri, cache_root) if cache_root is not None else None, readers)
    return out


def read_tables(caches: list[TableCache], tables: tuple[str, ...]) -> list[dict[str, tuple[pd.DataFrame, bool]]]:
    """Per cache, each of `tables` as (its rows, whether they changed since the last read)."""
    return relisted(lambda: TablesRead(caches, tables).end())


class TablesRead:
    """`read_tables`, begun: each table listed and compared with its cache, and the files of all
    of them given to the caches' reader processes at once (the tables with few rows per file
    only, POOLED), so that they share all of a first read, not each table's in turn. The
    dashboard begins its first read before it imports its server and pandas, and the readers
    parse meanwhile (dashboard/cli.py)."""

    def __init__(self, caches: list[TableCache], tables: tuple[str, ...], uris: list[str] | None = None):
        self.caches, self.tables = caches, tables
        self.uris = uris if uris is not None else [c.store.uri for c in caches]  # as the caller named each store
        self.plans = [{t: c._plan(t) for t in tables} for c in caches]
        todo = [p for by_table in self.plans for p in by_table.values() if p is not None]
        self.groups = []
        for pooled in (True, False):
            mine = [p for p in todo if (p.table in POOLED) == pooled]
            readers = mine[0].cache.readers if pooled and mine else None  # a dashboard's caches share one pool
            self.groups.append((mine, Underway([r for p in mine for r in p.reads], readers)))

    def end(self) -> list[dict[str, tuple[pd.DataFrame, bool]]]:
        """What `read_tables` returns; a file found gone raises FileNotFoundError (read again)."""
        loaded: dict[int, list[pa.Table]] = {}
        for plans, underway in self.groups:
            rows = iter(underway.end())
            loaded.update({id(p): [next(rows) for _ in p.reads] for p in plans})
        return [{t: (c._frames[t], False) if p is None else c._finish(p, loaded[id(p)]) for t, p in by_table.items()}
                for c, by_table in zip(self.caches, self.plans)]


def _of(rows: pa.Table, files: pa.Array) -> pa.Table:
    """The rows read from `files`, in file order (each file's rows in their own order)."""
    return rows.filter(pc.is_in(rows[_FILE], files)).sort_by(_FILE)


def _visible(rows: pa.Table, compacted: str | None, units: set[str], table: str) -> pd.DataFrame:
    """What Store.read returns: the compacted file's rows that still count (store.unfolded), then
    the unit files' rows."""
    if compacted is not None:
        from_compacted = pc.equal(rows[_FILE], compacted)
        rows = pa.concat_tables([unfolded(rows.filter(from_compacted), units), rows.filter(pc.invert(from_compacted))])
    return rows.select(SCHEMAS[table].names).to_pandas()
