"""A store's files checked before anything reads them, and damaged ones set aside (issue 29).

Invariant: **nothing is deleted.** A file that cannot be read (a truncated or foreign Parquet
file, a manifest that is not JSON or names a missing file) is *moved* under
`_damaged/<UTC time>/<its path>`, where readers never look (names starting with `_` are skipped,
docs/store.md), and every readable row of the store stays. What the set-aside files held is
then missing from the store exactly as if it had never been written, which the ledger already
handles: a checkpoint without its evaluation is evaluated again, a trial without its row is
trained again (storage/ledger.py). So a repair never loses a result the sweep cannot redo.

`check` is cheap where nothing is wrong: per table its unit files read once and its compacted
file's footer; only a table that fails to read is opened file by file, to name every damaged file
at once.
"""

from __future__ import annotations

import time
from dataclasses import dataclass

import pyarrow.fs as pafs
import pyarrow.parquet as pq

from cliffsweep.storage.store import COMPACTED_PREFIX, MANIFEST, SCHEMAS, TABLES, Store

DAMAGED = "_damaged"


@dataclass(frozen=True)
class Damage:
    path: str
    """Relative to the store's root, e.g. evals/<unit>.parquet."""
    problem: str


class StoreDamaged(Exception):
    """Some of a store's files cannot be read; the message names each and what to do."""

    def __init__(self, uri: str, damages: list[Damage]):
        self.uri, self.damages = uri, damages
        lines = [f"  {uri.rstrip('/')}/{d.path}: {d.problem}" for d in damages]
        super().__init__(
            f"{len(damages)} file(s) of the store {uri} cannot be read:\n" + "\n".join(lines)
            + f"\nNothing was started. `cliffsweep compact {uri} --repair` moves them to {DAMAGED}/ (nothing is "
            "deleted) and keeps every readable row; the next `cliffsweep run` then re-evaluates or re-trains "
            "what they held.")


def _problem(exc: Exception) -> str:
    text = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
    return f"{type(exc).__name__}: {text}"


def _unreadable(store: Store, path: str) -> str | None:
    """Why the Parquet file at `path` cannot be read (footer and schema), or None."""
    try:
        with store.fs.open_input_file(path) as f:
            pq.read_schema(f)
    except FileNotFoundError:
        return "does not exist"
    except Exception as exc:  # noqa: BLE001 - pyarrow raises ArrowInvalid, OSError, ...
        return _problem(exc)
    return None


def table_damages(store: Store, table: str) -> list[Damage]:
    """Every unreadable file of `table`, each opened on its own."""
    try:
        listed = store.list_table(table)
        units, compacted = listed.units, listed.compacted
    except (ValueError, KeyError, OSError) as exc:  # the manifest is not JSON, or names no file
        return [Damage(f"{table}/{MANIFEST}", _problem(exc))]
    damages = []
    if compacted and (why := _unreadable(store, compacted)) == "does not exist":
        damages.append(Damage(f"{table}/{MANIFEST}", f"names {compacted.rsplit('/', 1)[1]}, which does not exist"))
    elif compacted and why:
        damages.append(Damage(compacted[len(store.root) + 1:], why))
    for path in units.values():
        if why := _unreadable(store, path):
            damages.append(Damage(path[len(store.root) + 1:], why))
    return damages


def check(store: Store, tables: tuple[str, ...] = TABLES) -> list[Damage]:
    """Every unreadable file of the store's `tables` (empty when the store reads)."""
    damages = []
    for table in tables:
        try:
            _read_cheaply(store, table)
        except Exception:  # noqa: BLE001 - whatever the reader raised, the per-file pass names it
            found = table_damages(store, table)
            damages += found or [Damage(table + "/", "the table cannot be read (no single file to blame)")]
    return damages


def _read_cheaply(store: Store, table: str) -> None:
    """Raise where `table` cannot be read: its unit files read as every reader reads them, its
    compacted file's footer and schema only. A compacted file is written whole and then named
    (Store.compact), so what goes wrong with one is a cut-short or foreign file, which its footer
    shows; reading all its rows to find that out cost `status` 80 s and 16 GB on a
    100,000-trial store (issue 62 part 3)."""
    listed = store.list_table(table)
    if listed.compacted and (why := _unreadable(store, listed.compacted)):
        raise OSError(why)
    if listed.units:
        store._read_files(list(listed.units.values()), SCHEMAS[table])


def ensure_readable(store: Store, tables: tuple[str, ...] = TABLES) -> None:
    damages = check(store, tables)
    if damages:
        raise StoreDamaged(store.uri, damages)


def _set_aside(store: Store, rel: str, stamp: str) -> None:
    target = f"{store.root}/{DAMAGED}/{stamp}/{rel}"
    store.fs.create_dir(target.rsplit("/", 1)[0], recursive=True)
    store.fs.move(f"{store.root}/{rel}", target)


def _readable_compacted(store: Store, table: str) -> list[str]:
    infos = store.fs.get_file_info(pafs.FileSelector(f"{store.root}/{table}", allow_not_found=True))
    return [i.base_name for i in infos if i.base_name.startswith(COMPACTED_PREFIX) and not _unreadable(store, i.path)]


def repair(store: Store) -> list[Damage]:
    """Set every damaged file aside under _damaged/<time>/; returns what was found.

    A damaged unit file goes alone. A damaged compacted file goes with its manifest (the table
    then reads its unit files). A damaged manifest goes, and is written anew when exactly one
    readable compacted file is there to name (its rows stay in the store)."""
    damages = check(store)
    stamp = time.strftime("%Y%m%dT%H%M%SZ", time.gmtime())
    for d in damages:
        if d.path.endswith("/"):
            continue
        table, name = d.path.split("/", 1)
        if name == MANIFEST or name.startswith(COMPACTED_PREFIX):
            if store.exists(f"{table}/{MANIFEST}"):
                _set_aside(store, f"{table}/{MANIFEST}", stamp)
            if name.startswith(COMPACTED_PREFIX):
                _set_aside(store, d.path, stamp)
            left = _readable_compacted(store, table)
            if len(left) == 1:
                rows = pq.read_metadata(store.fs.open_input_file(f"{store.root}/{table}/{left[0]}")).num_rows
                store.publish_compacted(table, left[0], rows)
        elif store.exists(d.path):
            _set_aside(store, d.path, stamp)
    return damages
