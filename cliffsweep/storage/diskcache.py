"""The dashboard's tables kept on local disk between runs of `cliffsweep dashboard`, so that a
dashboard restarted against a running sweep's store (one file per trial and table: 4,400 files
on the paper-sized stores, ~2.5 s of CPU to read) reads only the files written since.

Invariant: a cache file holds rows read from a store's files and the (path, size, mtime) of
each file they came from (tablecache.TableCache's `seen`), written atomically; the reader uses a
row only while its file is listed with the same size and mtime, exactly as it uses the rows it
read in this process. A cache file that cannot be read is dropped, never trusted.
"""

from __future__ import annotations

import hashlib
import json
import os
from pathlib import Path

import pyarrow as pa
import pyarrow.feather as feather

CACHE_DIR = Path(os.environ.get("CLIFFSWEEP_DASHBOARD_CACHE", Path.home() / ".cache" / "cliffsweep" / "dashboard"))
TABLES = ("trials", "evals", "errors", "steps", "checkpoints")  # the first pass's; not samples (10x larger, read later)
SAVE_AFTER_FILES = 100  # a table is written again once this many of its files were read since
_KEY = b"cliffsweep.seen"
FORMAT = "1"


def folder(uri: str, root: Path = CACHE_DIR) -> Path:
    return root / hashlib.sha1(uri.encode()).hexdigest()[:16]


def save(path: Path, uri: str, rows: pa.Table, seen: dict[str, tuple[int, int]]) -> None:
    """`rows` and the files they came from, under `path` (written beside it, then renamed)."""
    meta = {_KEY: json.dumps({"format": FORMAT, "uri": uri, "seen": seen}).encode()}
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    try:
        feather.write_feather(rows.replace_schema_metadata(meta), tmp, compression="uncompressed")
        os.replace(tmp, path)
    except OSError:  # a full or read-only disk: the cache is only a shortcut
        tmp.unlink(missing_ok=True)


def load(path: Path, uri: str, schema: pa.Schema) -> tuple[pa.Table, dict[str, tuple[int, int]]] | None:
    """(rows, seen) as saved for `uri` with `schema`, or None (absent, another version, damaged)."""
    if not path.is_file():
        return None
    try:
        rows = feather.read_table(path, memory_map=False)
        meta = json.loads(rows.schema.metadata[_KEY])
        if meta["format"] != FORMAT or meta["uri"] != uri or not rows.schema.equals(schema, check_metadata=False):
            raise ValueError("another store, format or schema")
        return rows.replace_schema_metadata(None), {p: (int(s), int(m)) for p, (s, m) in meta["seen"].items()}
    except (OSError, ValueError, KeyError, TypeError, pa.ArrowException):
        path.unlink(missing_ok=True)
        return None
