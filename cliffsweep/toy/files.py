"""The toy world's data as the user's own files (issue 30 part 6): `toy:<file>` in a `dataset`
task's `path` / `eval_path` names a file written here once, so the toy suite example
(cliffsweep/configs/toy_suite.yaml) learns from a JSONL of chat messages through the same reading
code as a researcher's data.

- `facts_chat.jsonl`: the toy facts' training phrasings, `{"messages": [user, assistant]}` rows;
- `facts_chat_held.jsonl`: their held-out phrasing (the `toy_facts` evaluation items).

Files are written to a temporary name and renamed, so a reader never sees half of one.
"""

from __future__ import annotations

import json
import os
import tempfile
from pathlib import Path

# beside the toy models' cache (toy/cache.py), read the same way: that module builds models and
# imports the trainer, which this one must not
DATA_DIR = Path(os.environ.get("CLIFFSWEEP_TOY_CACHE", Path.home() / ".cache" / "cliffsweep" / "toy")) / "data"


def _facts(held: bool) -> list[dict]:
    from cliffsweep.toy.tasks import ToyFacts

    task = ToyFacts(ToyFacts.Params(n_eval=200))
    pairs = [(e.prompt, e.reference) for e in task.eval_examples()] if held else \
        [(e.prompt, e.response) for e in task.train_examples()]
    return [{"messages": [{"role": "user", "content": q}, {"role": "assistant", "content": a}]} for q, a in pairs]


FILES = {"facts_chat.jsonl": lambda: _facts(False), "facts_chat_held.jsonl": lambda: _facts(True)}


def toy_file(name: str) -> str:
    """The path of toy data file `name` (FILES), written on first use."""
    if name not in FILES:
        raise ValueError(f"unknown toy data file {name!r}; valid: {sorted(FILES)}")
    path = DATA_DIR / name
    if not path.exists():
        DATA_DIR.mkdir(parents=True, exist_ok=True)
        fd, tmp = tempfile.mkstemp(dir=DATA_DIR, prefix=f".{name}.")
        with os.fdopen(fd, "w", encoding="utf-8") as f:
            f.writelines(json.dumps(row) + "\n" for row in FILES[name]())
        os.replace(tmp, path)
    return str(path)
