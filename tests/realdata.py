"""The real GSM8K and SciKnowEval chemistry L3 files the tests use, shipped gzipped in
tests/data/ (sources and licences: tests/data/README.md), unpacked once into a cache folder.

    python tests/realdata.py     # prints the unpacked folder (gsm8k/, sciknoweval-chem-l3/)

The folder's name is a hash of the shipped files, so a changed file unpacks afresh; each file is
written under a temporary name and renamed, so a test never reads a half-unpacked one (pytest
workers or two checkouts may unpack at once).
"""

from __future__ import annotations

import gzip
import hashlib
import os
import shutil
import tempfile
from pathlib import Path

SHIPPED = Path(__file__).resolve().parent / "data"


def folder() -> Path:
    """The unpacked data: `<cache>/gsm8k/{train,test}.jsonl`, `<cache>/sciknoweval-chem-l3/*.jsonl`."""
    packed = sorted(SHIPPED.rglob("*.gz")) + sorted(SHIPPED.rglob("LICENSE"))
    digest = hashlib.sha1()
    for p in packed:
        digest.update(str(p.relative_to(SHIPPED)).encode())
        digest.update(p.read_bytes())
    cache = Path(os.environ.get("XDG_CACHE_HOME", Path.home() / ".cache"))
    out = cache / "cliffsweep" / f"test-data-{digest.hexdigest()[:12]}"
    for p in packed:
        rel = p.relative_to(SHIPPED)
        dest = out / (rel.with_suffix("") if p.suffix == ".gz" else rel)
        if dest.exists():
            continue
        dest.parent.mkdir(parents=True, exist_ok=True)
        fd, tmp = tempfile.mkstemp(dir=dest.parent, prefix=".unpacking-")
        with os.fdopen(fd, "wb") as f:
            if p.suffix == ".gz":
                with gzip.open(p, "rb") as src:
                    shutil.copyfileobj(src, f)
            else:
                f.write(p.read_bytes())
        os.replace(tmp, dest)
    return out


if __name__ == "__main__":
    print(folder())
