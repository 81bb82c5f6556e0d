"""The Parquet store: where every result of a sweep lands. Schema: docs/store.md.

Each table is a folder of small Parquet files, one per write unit (a trial's state, one
(trial, step, task) evaluation), named deterministically. A write goes to a hidden temporary
name first and is then renamed into place, so a reader never sees a partial file (pyarrow
and duckdb skip names starting with '.' or '_'), and writing the same unit again replaces it
instead of adding rows (idempotent retries). Works on local paths and any pyarrow/fsspec URI.
"""

from __future__ import annotations

import json
import re
import sys
import time
import uuid
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.fs as pafs
import pyarrow.parquet as pq

from cliffsweep.faults import maybe_fail
from cliffsweep.storage.parquetfiles import read_files

if TYPE_CHECKING:  # pandas is imported by what reads a table, not by every import of the store (a worker's)
    import pandas as pd

TABLES = ("trials", "checkpoints", "evals", "samples", "errors", "steps", "tracking")
LIVE_FILE = "live.json"
SPEC_FILE = "spec.json"
"""The sweep file as the run resolved it, written first: its presence makes a folder a store."""
"""The driver's live state in the store (orchestrator/sweeprun.py `write_live`, every few seconds),
read by `cliffsweep status` and the dashboard."""

PRIMARY_METRICS = ("accuracy", "loss")
"""The `evals.metric` of an evaluation's primary row: "accuracy" (higher is better) or, for a
loss task, "loss" (mean per-token NLL, lower is better). Exactly one per task and checkpoint."""
SAMPLED_SUFFIX = "@sampled"
"""A sampled evaluation's samples are `samples` rows of task `<task>@sampled`, example ids
`<id>#<j>` (the j-th sample), beside the greedy rows of `<task>` that analysis reads."""
LIKELIHOOD = "likelihood"
"""A loss task's row that analysis classifies on: the mean over items of exp(-item NLL), each
item's geometric-mean token probability, higher is better (analysis/points.py)."""

# Column order and types of each table; a write is cast to this so that files always union.
SCHEMAS: dict[str, pa.Schema] = {
    "trials": pa.schema([
        ("trial_id", pa.string()), ("model", pa.string()), ("model_path", pa.string()),
        ("method", pa.string()), ("method_params", pa.string()), ("optimizer", pa.string()),
        ("series", pa.string()), ("lr", pa.float64()), ("epochs", pa.int64()), ("seed", pa.int64()),
        ("round", pa.int64()),  # 0 = the grid, k = refinement round k (files without it read as null)
        ("max_steps", pa.int64()),  # the step budget (recipe.max_steps, epochs then 0); null = epochs
        ("status", pa.string()), ("attempt", pa.int64()), ("started_at", pa.timestamp("us", tz="UTC")),
        ("finished_at", pa.timestamp("us", tz="UTC")), ("train_seconds", pa.float64()),
        ("setup_seconds", pa.float64()), ("teardown_seconds", pa.float64()),
        ("checkpoint_seconds", pa.float64()), ("checkpoint_bytes", pa.int64()),  # the latest attempt's (issue 21)
        ("setup_phases", pa.string()),  # JSON {phase: seconds} (sweep/reports.SETUP_PHASES); older files: null
        ("compute", pa.string()),  # precision and kernels the latest attempt ran (trainables/fastpath.py); older: null
        ("steps", pa.int64()), ("total_steps", pa.int64()), ("resumed_from_step", pa.int64()), ("final_loss", pa.float64()), ("error", pa.string()),
        ("config", pa.string()),
        ("driver", pa.string()),  # the run that wrote the row: host:pid:start (issue 53, storage/claims.py); older: null
    ]),
    "checkpoints": pa.schema([
        ("trial_id", pa.string()), ("step", pa.int64()), ("epoch", pa.float64()), ("kind", pa.string()),
        ("uri", pa.string()), ("reported_at", pa.timestamp("us", tz="UTC")),
    ]),
    "evals": pa.schema([
        ("trial_id", pa.string()), ("model", pa.string()), ("method", pa.string()),
        ("series", pa.string()), ("optimizer", pa.string()), ("lr", pa.float64()),
        ("epochs", pa.int64()), ("seed", pa.int64()), ("step", pa.int64()), ("epoch", pa.float64()),
        ("task", pa.string()), ("role", pa.string()), ("metric", pa.string()), ("value", pa.float64()),
        ("n", pa.int64()), ("scorer_version", pa.string()), ("evaluated_at", pa.timestamp("us", tz="UTC")),
        ("eval_seconds", pa.float64()),
        # the engine's canary check when it loaded the checkpoint: mean |served - recorded| log-prob
        # (evals/canary.py; half precision's kernel noise, measured on every GPU sweep); null for
        # the hf backend's base model (nothing to check against) and in older files
        ("canary_distance", pa.float64()),
        # a staged evaluation (issue 51, evaluator/staged.py): the items scored (= n) of the task's
        # n_items, and the anytime-valid interval on the accuracy on every item; a full one has
        # n_scored = n_items and no interval; older files: null
        ("n_scored", pa.int64()), ("n_items", pa.int64()), ("ci_low", pa.float64()), ("ci_high", pa.float64()),
        # false: stopped by its width with a cut still inside that interval (issue 59 part 3,
        # evals/stopping.py `Reading.open`); a verdict reads it only once topped up; older files: null
        ("settled", pa.bool_()),
    ]),
    "samples": pa.schema([
        ("trial_id", pa.string()), ("step", pa.int64()), ("task", pa.string()),
        ("example_id", pa.string()), ("correct", pa.bool_()), ("prediction", pa.string()),
        ("score", pa.float64()),  # a loss task's item NLL (evals/tasks/loss.py); else and in older files: null
        ("reference", pa.string()),  # the item's reference answer as text (the dashboard's); older files: null
        ("stage", pa.int64()),  # a staged evaluation's stage (issue 51, stage_key); a full one: null
    ]),
    "errors": pa.schema([
        ("trial_id", pa.string()), ("step", pa.int64()), ("kind", pa.string()),
        ("message", pa.string()), ("at", pa.timestamp("us", tz="UTC")),
    ]),
    # Training curves, written by a trial's rank 0 (trainables/steplog.py): one write unit per
    # stretch between two checkpoints, so a resumed attempt rewrites its stretch, never adds to it.
    "steps": pa.schema([
        ("trial_id", pa.string()), ("attempt", pa.int64()), ("step", pa.int64()), ("epoch", pa.float64()),
        ("tokens", pa.int64()), ("loss", pa.float64()), ("terms", pa.string()), ("grad_norm", pa.float64()),
        ("lr", pa.float64()), ("seconds", pa.float64()), ("logged_at", pa.timestamp("us", tz="UTC")),
    ]),
    # What each experiment tracker has been sent (tracking/sync.py): one unit per (tracker, run).
    "tracking": pa.schema([
        ("tracker", pa.string()), ("trial_id", pa.string()), ("run_id", pa.string()),
        ("steps_to", pa.int64()), ("evals", pa.string()), ("status", pa.string()),
        ("synced_at", pa.timestamp("us", tz="UTC")),
    ]),
}


# Compaction (Store.compact): a table's folded rows live in one `compacted-<uuid>.parquet`, named
# by the table's manifest, each row tagged with its write unit.
COMPACTED_PREFIX = "compacted-"
MANIFEST = "_compaction.json"
UNIT = "_unit"


@dataclass(frozen=True)
class TableFiles:
    """One listing of a table's folder (`Store.list_table`), which every reader of the table reads
    from: `Store.read`, `Store.compact` and the incremental reader (storage/tablecache.py)."""

    files: dict[str, tuple[int, int]]
    """Every file listed: path -> (size, mtime in ns)."""
    units: dict[str, str]
    """Write unit key -> its file (`unit_files`)."""
    compacted: str | None
    """The compacted file the manifest names, if the table was compacted."""


def unfolded(folded: pa.Table, units) -> pa.Table:
    """The rows of a compacted file (tagged with their UNIT) that still count: a unit written again
    since the compaction, whose unit file is listed among `units` (keys), overrides its folded
    rows. The one visibility rule, by which a store reads the same before, during and after a
    compaction, whoever reads it."""
    if not units:  # a finished sweep's store: nothing written since (a filter would copy every row)
        return folded
    return folded.filter(pc.invert(pc.is_in(folded[UNIT], pa.array(sorted(units), pa.string()))))


def filesystem(uri: str) -> tuple[pafs.FileSystem, str]:
    """(pyarrow filesystem, path on it) of a URI (`s3://...`) or a local path."""
    from cliffsweep.storage.counting import counted

    fs, path = pafs.FileSystem.from_uri(uri) if "://" in uri else (pafs.LocalFileSystem(), uri)
    return counted(fs), path


def is_store(uri: str) -> bool:
    """Whether `uri` holds a sweep's store (its spec.json, which every run writes first), looked
    up without creating anything (a `Store` creates its folder)."""
    fs, root = filesystem(uri if "://" in uri else _abs(uri))
    return retrying(f"look up {uri}", uri, lambda: fs.get_file_info(f"{root}/{SPEC_FILE}")).type == pafs.FileType.File


def _safe(part: str) -> str:
    return re.sub(r"[^A-Za-z0-9_.=\-]", "_", part)


class StorageError(OSError):
    """Storage stayed unreachable through every retry; names the URI and the operation."""


# Object storage has bad seconds (throttling, a restarted endpoint, a dropped connection):
# each store operation is retried with exponential backoff before the sweep gives up on it.
RETRY_DELAYS = (0.5, 1.0, 2.0, 4.0, 8.0)
# Answers that retrying cannot change.
_PERMANENT = (FileNotFoundError, FileExistsError, IsADirectoryError, NotADirectoryError, PermissionError)


def retrying(what: str, uri: str, fn, delays=RETRY_DELAYS):
    """`fn()`, retried on transient OSErrors after each of `delays` seconds; then StorageError."""
    for delay in (*delays, None):
        try:
            return fn()
        except _PERMANENT:
            raise
        except OSError as exc:
            if delay is None:
                raise StorageError(f"storage at {uri}: {what} failed after {len(delays) + 1} attempts: "
                                   f"{type(exc).__name__}: {exc}") from exc
            time.sleep(delay)


# a read that found a file it listed gone starts over after each of these pauses at most: a
# compaction deletes its folded files one by one, so a listing made while it deletes can meet a
# second gone file; the pauses (6 s in all) outlast the deletion of a large table's units
RELIST_DELAYS = (0.05, 0.1, 0.2, 0.4, 0.8, 1.6, 3.2)


def relisted(fn, delays=RELIST_DELAYS):
    """`fn()`, a read that lists a table's files and then reads them, started over from a new
    listing while a file it listed is gone. A compaction running meanwhile (a run compacts its
    store as it finishes, while `status`, `analyze` or the dashboard may be reading) deletes the
    unit files it folded only after publishing the file that holds their rows, so the next
    listing finds them there (CI once saw `status` fail so, at the end of the README's sweep)."""
    for delay in (*delays, None):
        try:
            return fn()
        except FileNotFoundError:
            if delay is None:
                raise
            time.sleep(delay)


# The errors table keeps at most this many characters of a message: its head (where it
# happened) and always its tail (the exception type and message are the last lines).
MESSAGE_LIMIT = 8000


def clip_message(text: str, limit: int = MESSAGE_LIMIT) -> str:
    text = str(text)
    if len(text) <= limit:
        return text
    head = limit // 4
    cut = len(text) - limit
    return f"{text[:head]}\n... [{cut} characters cut] ...\n{text[-(limit - head):]}"


class Store:
    """A sweep's results at `uri` (a local folder or e.g. s3://bucket/prefix)."""

    def __init__(self, uri: str):
        self.uri = uri
        self.fs, self.root = filesystem(uri if "://" in uri else _abs(uri))
        self._retry("create the store folder", lambda: self.fs.create_dir(self.root, recursive=True))
        self._folded: dict[str, tuple[str, set[str]]] = {}

    def _retry(self, what: str, fn):
        return retrying(what, self.uri, fn)

    # --- writing ----------------------------------------------------------------------------
    def put_bytes(self, rel: str, data: bytes) -> None:
        """Atomic write of `rel`: hidden temp file in the same folder, then rename over the target."""
        final = f"{self.root}/{rel}"
        folder, name = final.rsplit("/", 1)

        def put() -> None:
            self.fs.create_dir(folder, recursive=True)
            tmp = f"{folder}/.{name}.{uuid.uuid4().hex}.tmp"
            with self.fs.open_output_stream(tmp) as f:
                f.write(data)
            self.fs.move(tmp, final)

        self._retry(f"write {rel}", put)

    def write(self, table: str, key: str, rows: list[dict[str, Any]] | pd.DataFrame) -> None:
        """Replace write-unit `key` of `table` with `rows` (idempotent, atomic)."""
        schema = SCHEMAS[table]
        pandas = sys.modules.get("pandas")  # a DataFrame exists only once pandas was imported
        tbl = None
        if pandas is not None and isinstance(rows, pandas.DataFrame):
            _known(table, set(rows.columns), schema)
            tbl = None if table == "errors" else _frame_table(rows, schema)
            rows = rows.to_dict("records") if tbl is None else rows
        if tbl is None:
            _known(table, {k for r in rows for k in r}, schema)
            if table == "errors":
                rows = [dict(r, message=clip_message(r.get("message", ""))) for r in rows]
            tbl = pa.Table.from_pylist([{c: _none_if_nan(r.get(c)) for c in schema.names} for r in rows], schema=schema)
        sink = pa.BufferOutputStream()
        pq.write_table(tbl, sink, **unit_file_options(len(tbl)))
        self.put_bytes(f"{table}/{_safe(key)}.parquet", sink.getvalue().to_pybytes())

    def write_json(self, name: str, obj: Any) -> None:
        self.put_bytes(name, json.dumps(obj, indent=2, sort_keys=True, default=str).encode())

    def write_text(self, name: str, text: str) -> None:
        self.put_bytes(name, text.encode())

    # --- reading ----------------------------------------------------------------------------
    def read(self, table: str) -> pd.DataFrame:
        """All rows of `table` (empty frame with the right columns if none yet)."""
        return relisted(lambda: self._retry(f"read table {table}", lambda: self._read(table)))

    def _read(self, table: str) -> pd.DataFrame:
        return self.read_arrow(table).to_pandas()

    def read_arrow(self, table: str) -> pa.Table:
        """All rows of `table` as Arrow, not converted: what a reader that only checks or counts
        needs (storage/health.py reads every table so; pandas' copy of a 100,000-trial store's
        samples alone is tens of GB, Arrow's a few)."""
        listed = self.list_table(table)
        schema = SCHEMAS[table]
        parts = []
        if listed.compacted:
            folded = self._read_files([listed.compacted], schema.append(pa.field(UNIT, pa.string())))
            parts.append(unfolded(folded, listed.units).drop_columns([UNIT]))
        if listed.units:
            parts.append(self._read_files(list(listed.units.values()), schema))
        if not parts:
            return schema.empty_table()
        return pa.concat_tables(parts)

    def _read_files(self, files: list[str], schema: pa.Schema) -> pa.Table:
        """Many small files (parquetfiles.py: fetched in parallel from object storage)."""
        return read_files(self.fs, sorted(files), schema)

    def table_listing(self, table: str) -> dict[str, tuple[int, int]]:
        """path -> (size, mtime in ns) of every file in `table`'s folder (one list request)."""
        infos = self.fs.get_file_info(pafs.FileSelector(f"{self.root}/{table}", allow_not_found=True))
        return {f.path: (f.size, f.mtime_ns or 0) for f in infos if f.type == pafs.FileType.File}

    def list_table(self, table: str, files: dict[str, tuple[int, int]] | None = None) -> TableFiles:
        """`table`'s folder, listed once (`files`: a listing the caller has made already), the
        manifest read if there is one."""
        path = f"{self.root}/{table}"
        files = self.table_listing(table) if files is None else files
        manifest = json.loads(self.read_bytes(f"{table}/{MANIFEST}")) if f"{path}/{MANIFEST}" in files else None
        return TableFiles(files, unit_files(list(files)), f"{path}/{manifest['file']}" if manifest else None)

    # --- compaction -------------------------------------------------------------------------
    def publish_compacted(self, table: str, name: str, rows: int) -> None:
        """Name `table`'s compacted file `name` (of `rows` rows) in its manifest, in one atomic write:
        the one writer of the manifest (compaction, and a repair that keeps the readable one)."""
        self.put_bytes(f"{table}/{MANIFEST}", json.dumps({"file": name, "rows": rows}).encode())

    def compacted_writer(self, table: str) -> "CompactedWriter":
        """A writer of `table` as compaction leaves it, for a store written whole rather than unit by
        unit (analysis/synthetic_large.py: 100,000 trials, hours as unit files)."""
        return CompactedWriter(self, table)

    def compact(self, tables: tuple[str, ...] = TABLES) -> dict[str, int]:
        """Fold each table's unit files into one Parquet file, so that reading a large store on
        object storage is a handful of requests instead of one per write unit. Returns the unit
        files folded per table.

        Safe against a crash at any point and against a reader at any time: the new compacted
        file is written first (atomically), then the manifest naming it is replaced (atomically:
        readers switch from old to new in one step), then the folded unit files and the old
        compacted file are deleted; a unit file still present is read in preference to its
        folded rows, so the store reads the same before, during and after. Writes stay unit
        files (atomic, idempotent); run it when no sweep writes (a run does it at its end).
        """
        folded = {}
        for table in tables:
            folded[table] = self._retry(f"compact table {table}", lambda t=table: self._compact(t))
        return folded

    def _compact(self, table: str) -> int:
        listed = self.list_table(table)
        units, compacted = listed.units, listed.compacted
        if not units:
            return 0
        schema = SCHEMAS[table]
        parts = []
        if compacted:
            parts.append(unfolded(self._read_files([compacted], schema.append(pa.field(UNIT, pa.string()))), units))
        parts.append(self._units_with_keys(units, schema))
        merged = pa.concat_tables(parts)
        name = f"{COMPACTED_PREFIX}{uuid.uuid4().hex}.parquet"
        sink = pa.BufferOutputStream()
        pq.write_table(merged, sink)
        self.put_bytes(f"{table}/{name}", sink.getvalue().to_pybytes())
        maybe_fail(f"compact:{table}:written")  # the tests' kill midway (faults.py)
        self.publish_compacted(table, name, len(merged))
        maybe_fail(f"compact:{table}:published")
        for f in units.values():
            self.fs.delete_file(f)
        if compacted:
            self.fs.delete_file(compacted)
        return len(units)

    def _units_with_keys(self, units: dict[str, str], schema: pa.Schema) -> pa.Table:
        """The unit files' rows, each tagged with its unit key."""
        by_path = {v: k for k, v in units.items()}
        paths = sorted(units.values())
        return read_files(self.fs, paths, schema, tag=UNIT, labels=[by_path[p] for p in paths])

    def has(self, table: str, key: str) -> bool:
        """Whether write unit `key` of `table` holds rows (a unit file, or folded by compaction)."""
        if self.exists(f"{table}/{_safe(key)}.parquet"):
            return True
        return _safe(key) in self._folded_units(table)

    def read_unit(self, table: str, key: str) -> pd.DataFrame | None:
        """The rows of write unit `key` of `table` (its unit file, else its folded rows), or None
        when it holds none: one unit read without reading the table (a staged evaluation's
        stages and its base's items, evaluator/staged.py)."""
        import pandas  # noqa: F401 - to_pandas needs it

        name = f"{table}/{_safe(key)}.parquet"
        if self.exists(name):
            return self._retry(f"read {name}", lambda: self._read_files([f"{self.root}/{name}"], SCHEMAS[table])).to_pandas()
        if _safe(key) not in self._folded_units(table):
            return None
        manifest = json.loads(self.read_bytes(f"{table}/{MANIFEST}"))
        folded = self._retry(f"read {table}/{manifest['file']}", lambda: pq.read_table(
            f"{self.root}/{table}/{manifest['file']}", filesystem=self.fs, filters=[(UNIT, "==", _safe(key))]))
        return folded.drop_columns([UNIT]).cast(SCHEMAS[table]).to_pandas()

    def _folded_units(self, table: str) -> set[str]:
        """Unit keys folded into `table`'s compacted file (cached per compacted file)."""
        if not self.exists(f"{table}/{MANIFEST}"):
            return set()
        name = json.loads(self.read_bytes(f"{table}/{MANIFEST}"))["file"]
        if self._folded.get(table, (None,))[0] != name:
            keys = pq.read_table(f"{self.root}/{table}/{name}", filesystem=self.fs, columns=[UNIT])[UNIT]
            self._folded[table] = (name, set(keys.to_pylist()))
        return self._folded[table][1]

    def read_bytes(self, name: str) -> bytes:
        def get() -> bytes:
            with self.fs.open_input_stream(f"{self.root}/{name}") as f:
                return f.read()

        return self._retry(f"read {name}", get)

    def read_json(self, name: str) -> Any:
        return json.loads(self.read_bytes(name))

    def exists(self, name: str) -> bool:
        info = self._retry(f"look up {name}", lambda: self.fs.get_file_info(f"{self.root}/{name}"))
        return info.type != pafs.FileType.NotFound


class CompactedWriter:
    """`Store.compacted_writer`: rows added in parts (one row group each, each row tagged with its
    write unit), then the file written and named in the manifest at once (`publish`), as
    `Store.compact` does: readers see the table whole or not at all."""

    def __init__(self, store: Store, table: str):
        self.store, self.table, self.rows = store, table, 0
        self.schema = SCHEMAS[table].append(pa.field(UNIT, pa.string()))
        self.name = f"{COMPACTED_PREFIX}{uuid.uuid4().hex}.parquet"
        self.sink = pa.BufferOutputStream()
        self.writer = pq.ParquetWriter(self.sink, self.schema)

    def add(self, rows: pa.Table, units) -> None:
        """`rows` (the table's columns; absent ones null) with `units`, each row's unit key."""
        cols = [rows[f.name].cast(f.type) if f.name in rows.column_names else pa.nulls(len(rows), f.type)
                for f in SCHEMAS[self.table]]
        self.writer.write_table(pa.Table.from_arrays(cols + [pa.array(units, pa.string())], schema=self.schema))
        self.rows += len(rows)

    def publish(self) -> None:
        self.writer.close()
        self.store.put_bytes(f"{self.table}/{self.name}", self.sink.getvalue().to_pybytes())
        self.store.publish_compacted(self.table, self.name, self.rows)


FEW_ROWS = 64


def unit_file_options(rows: int) -> dict[str, bool]:
    """pyarrow's write options for a unit file of `rows` rows. A file of a few rows (a trial's
    state, one checkpoint's evaluation) is read whole, never pruned, so its dictionary pages and
    column statistics only cost the reader: a paper-sized store's evals files parse 1.11x and its
    trials files 1.21x faster without them (bench/bench_parquetfiles.py), and a running sweep's
    dashboard and `analyze` read thousands. Larger files (a checkpoint's samples) keep both: a
    query engine reading the store (duckdb, pyarrow.dataset) prunes them by statistics."""
    return {"use_dictionary": False, "write_statistics": False} if rows < FEW_ROWS else {}


def unit_files(paths: list[str]) -> dict[str, str]:
    """Unit key -> path of a table folder's write units among its files' `paths`: not hidden
    (a write in flight), not the manifest, not a compacted file."""
    out = {}
    for p in paths:
        name = p.rsplit("/", 1)[-1]
        if name.endswith(".parquet") and not name.startswith((".", "_", COMPACTED_PREFIX)):
            out[name[: -len(".parquet")]] = p
    return out


def _known(table: str, columns: set, schema: pa.Schema) -> None:
    unknown = columns - set(schema.names)
    if unknown:
        raise ValueError(f"{table}: unknown column(s) {sorted(unknown)}")


def _frame_table(frame: "pd.DataFrame", schema: pa.Schema) -> pa.Table | None:
    """`frame` as `schema`'s table, column by column (NaN and None read as null, as the row path
    reads them); None where a column does not convert as it stands (the row path then decides).
    A row at a time cost ~10 us: 70 of the 105 s a paper-sized synthetic store took to write."""
    n = len(frame)
    try:
        cols = [_column(frame[f.name], f.type) if f.name in frame.columns else pa.nulls(n, f.type) for f in schema]
    except (pa.ArrowInvalid, pa.ArrowTypeError, pa.ArrowNotImplementedError, TypeError, ValueError):
        return None
    return pa.Table.from_arrays(cols, schema=schema)


def _column(col: "pd.Series", typ: pa.DataType) -> pa.Array:
    """One column as `typ`. A zoned time column is handed over as its UTC values: Arrow reading it
    directly goes through the `.values` pandas 3 warns about."""
    if getattr(col.dtype, "tz", None) is not None:
        return pa.array(col.dt.tz_convert("UTC").dt.tz_localize(None).to_numpy(), from_pandas=True).cast(typ)
    return pa.array(col, type=typ, from_pandas=True)


def _none_if_nan(v: Any) -> Any:
    return None if isinstance(v, float) and v != v else v


def _abs(path: str) -> str:
    import os

    return os.path.abspath(os.path.expanduser(path))


def absolute_uri(uri: str) -> str:
    """`uri` as every process of a cluster reads it: a URI as it is, a local path made absolute."""
    return uri if "://" in uri else _abs(uri)


def steps_key(trial_id: str, first_step: int) -> str:
    """Write-unit key of the training-curve rows from `first_step` on (up to the next checkpoint)."""
    return f"{trial_id}__{first_step:08d}"


def eval_key(trial_id: str, step: int, task: str) -> str:
    """Write-unit key of one evaluation: re-evaluating the same point replaces it."""
    return f"{trial_id}__{step:08d}__{task}"


def stage_key(trial_id: str, step: int, task: str, start: int) -> str:
    """Write-unit key of one stage's `samples` of a staged evaluation (issue 51): the stage that
    begins at item `start` of the model's order. Each stage begins where the one before ended, so
    a stage written again replaces itself, never adds, and the stages stored read as one chain."""
    return f"{eval_key(trial_id, step, task)}__from{start:06d}"
