"""Reading benchmark rows with errors that name the file and line, and seeded splits.

Shared by the real-data tasks (GSM8K, ChemL3). A malformed row never becomes a default or a
skipped item: it raises DataError("<file>:<line>: ..."), so a broken download is found at once.
"""

from __future__ import annotations

import gzip
import hashlib
import io
import json
import random
from collections import defaultdict
from collections.abc import Callable, Iterable, Iterator
from pathlib import Path
from typing import Any


class DataError(ValueError):
    """A data file is missing or one of its rows is malformed (the message names file:line)."""


class DataWarning(UserWarning):
    """Rows left out on purpose (e.g. a repeated question with two different gold answers);
    the message names them (file:line)."""


# How benchmarks ship their files (GSM8K and SciKnowEval in tests/data/, most hub datasets):
# `datasets` and lm-eval read these as they are, so every local reader here does too.
COMPRESSIONS = (".gz", ".zst")


def plain_suffix(path: str | Path) -> str:
    """The data format's suffix of `path`, under any compression: `train.jsonl.gz` -> `.jsonl`."""
    p = Path(path)
    return Path(p.stem).suffix if p.suffix in COMPRESSIONS else p.suffix


def open_text(path: str | Path, newline: str | None = None) -> io.TextIOBase:
    """A UTF-8 text handle on `path`, decompressing `.gz` and `.zst` files as they are read."""
    p = Path(path)
    if p.suffix == ".gz":
        return io.TextIOWrapper(gzip.open(p, "rb"), encoding="utf-8", newline=newline)
    if p.suffix == ".zst":
        import zstandard

        return io.TextIOWrapper(zstandard.open(p, "rb"), encoding="utf-8", newline=newline)
    return p.open(encoding="utf-8", newline=newline)


def data_file(folder: str | Path, name: str) -> Path:
    """`folder/name`, or its compressed copy (`name.gz`, `name.zst`) where only that exists; the
    plain name when none does, so that the error names the file a user would look for."""
    plain = Path(folder) / name
    for candidate in (plain, *(plain.with_name(plain.name + c) for c in COMPRESSIONS)):
        if candidate.is_file():
            return candidate
    return plain


def data_files(folder: str | Path, suffixes: Iterable[str]) -> list[Path]:
    """The files of `folder` whose format (plain_suffix) is one of `suffixes`, compressed or not,
    sorted by name."""
    wanted = tuple(suffixes)
    return sorted(f for f in Path(folder).iterdir() if f.is_file() and plain_suffix(f) in wanted)


def _lines(path: Path) -> Iterator[tuple[str, str]]:
    """(location 'file:line', text) of every non-blank line of a text file (compressed or not)."""
    if not path.is_file():
        raise DataError(f"{path}: data file not found")
    try:
        handle = open_text(path)
    except ImportError:
        raise DataError(f"{path}: reading .zst files needs the `zstandard` package") from None
    with handle as f:
        try:
            for lineno, line in enumerate(f, start=1):
                if line.strip():
                    yield f"{path}:{lineno}", line
        except UnicodeDecodeError as e:
            raise DataError(f"{path}: not UTF-8 text (byte 0x{e.object[e.start]:02x}); save it as UTF-8") from None
        except Exception as e:  # noqa: BLE001 - gzip.BadGzipFile, EOFError, zstandard.ZstdError: one sentence
            if isinstance(e, DataError) or path.suffix not in COMPRESSIONS:
                raise
            raise DataError(f"{path}: cannot be decompressed ({type(e).__name__}: {e})") from None


def _json_row(where: str, line: str) -> dict[str, Any]:
    try:
        row = json.loads(line)
    except json.JSONDecodeError as e:
        raise DataError(f"{where}: bad JSON ({e.msg} at column {e.colno})") from None
    if not isinstance(row, dict):
        raise DataError(f"{where}: expected a JSON object, got {type(row).__name__}")
    return row


def read_jsonl(path: str | Path) -> Iterator[tuple[str, dict[str, Any]]]:
    """(location 'file:line', row) for every non-blank line of a JSON-lines file."""
    for where, line in _lines(Path(path)):
        yield where, _json_row(where, line)


def row_problems(files: Iterable[str | Path], parse: Callable[[str, dict[str, Any]], Any]) -> list[str]:
    """Every problem of `files` ('file:line: ...'), each row parsed by `parse` (which raises
    DataError): all of them, where reading stops at the first. What `validate` and `run` list
    before anything starts (orchestrator/preflight.py)."""
    problems = []
    for path in files:
        try:
            for where, line in _lines(Path(path)):
                try:
                    parse(where, _json_row(where, line))
                except DataError as e:
                    problems.append(str(e))
        except DataError as e:  # the file itself: missing, not UTF-8
            problems.append(str(e))
    return problems


def field(row: dict[str, Any], key: str, kind: type | tuple[type, ...], where: str) -> Any:
    """row[key], checked to exist and to be of `kind`."""
    if key not in row:
        raise DataError(f"{where}: missing field {key!r}")
    value = row[key]
    if not isinstance(value, kind):
        raise DataError(f"{where}: field {key!r} should be {kind}, got {type(value).__name__}")
    return value


def stable_unit(key: str, seed: int) -> float:
    """A number in [0, 1) that depends only on (seed, key): the same on every machine and
    Python run (unlike hash()), so splits never move between trials or workers."""
    digest = hashlib.sha256(f"{seed}\x00{key}".encode()).digest()
    return int.from_bytes(digest[:8], "big") / 2**64


def seeded_subset(items: list, n: int | None, seed: int, what: str) -> list:
    """A fixed random subset of n items (None = all), kept in the original order.
    Asking for more items than exist is an error, never a silent cap."""
    if n is None:
        return list(items)
    if n > len(items):
        raise DataError(f"{what}: asked for {n} examples but only {len(items)} exist")
    keep = sorted(random.Random(seed).sample(range(len(items)), n))
    return [items[i] for i in keep]


def stratified_subset(items: list, n: int | None, seed: int, key: Callable[[Any], str], what: str) -> list:
    """A fixed random subset of n items (None = all) in which every stratum (key(item)) has
    its share of n (largest remainders, ties to the larger stratum, then by name), each drawn
    with seeded_subset; kept in the original order."""
    if n is None:
        return list(items)
    if n > len(items):
        raise DataError(f"{what}: asked for {n} examples but only {len(items)} exist")
    strata: dict[str, list[int]] = defaultdict(list)
    for i, item in enumerate(items):
        strata[key(item)].append(i)
    exact = {k: n * len(v) / len(items) for k, v in strata.items()}
    quota = {k: int(x) for k, x in exact.items()}
    by_remainder = sorted(strata, key=lambda k: (-(exact[k] - quota[k]), -len(strata[k]), k))
    for k in by_remainder[: n - sum(quota.values())]:
        quota[k] += 1
    keep = sorted(i for k, idx in strata.items() for i in seeded_subset(idx, quota[k], seed, f"{what} ({k})"))
    return [items[i] for i in keep]
