"""`validate` and `plan` on generated broken sweep files (issue 29 part 8): whatever mix of
problems a file has, the command prints no traceback, lists every one of them (each named by its
field), and exits 2. Hypothesis picks which fields to break and how; 200 examples."""

from __future__ import annotations

import contextlib
import io
import math
import tempfile
from pathlib import Path

import yaml
from hypothesis import given, settings
from hypothesis import strategies as st

from cliffsweep.cli import main

VALID = {
    "name": "prop",
    "models": [{"name": "m", "path": "toy:qwen2-tiny"}],
    "methods": [{"name": "sft"}],
    "lrs": [1e-4, 1e-3],
    "epochs": [1],
    "tasks": {"learn": {"name": "toy_facts"}, "retain": [{"name": "toy_arith"}]},
}

bad_float = st.sampled_from([math.inf, -math.inf, math.nan, 0.0, -1e-3])
# field path (as the error names it) -> strategy of values that cannot be valid there
BREAKERS: dict[str, st.SearchStrategy] = {
    "lrs": st.one_of(st.just([]), st.lists(bad_float, min_size=1, max_size=3),
                     st.just([1e-3, 1e-3]), st.text(max_size=5)),
    "epochs": st.one_of(st.sampled_from([[], [0], [-1], [2, 2], [10**6]]), st.text(min_size=1, max_size=5)),
    "seeds": st.sampled_from([[], [0, 0], "x", [None]]),
    "optimizers": st.sampled_from([[], ["nope"], ["adamw", "adamw"]]),
    "eval.points_per_trial": st.one_of(st.integers(max_value=0), st.integers(min_value=1001), st.just("many")),
    "name": st.sampled_from(["bad name!", "", "a/b"]),
    "methods": st.sampled_from([[], [{"name": "nope"}], [{"name": "sft"}, {"name": "sft"}],
                                [{"name": "sft", "params": {"nonsense": 1}}]]),
    "tasks.learn": st.sampled_from([{"name": "nope"}, {"name": "toy_facts", "params": {"bogus": 1}}, "x"]),
    "models": st.sampled_from([[], [{"name": "m", "path": "toy:nope"}], [{"name": "m"}]]),
    "resources.max_retries": st.one_of(st.integers(max_value=-1), st.just("x")),
    "surprise": st.one_of(st.integers(), st.text(max_size=5), st.none()),  # an unknown top-level key
}


def put(data: dict, path: str, value) -> None:
    *parents, leaf = path.split(".")
    for p in parents:
        data = data.setdefault(p, {})
    data[leaf] = value


def run(*argv: str) -> tuple[int, str]:
    err = io.StringIO()
    with contextlib.redirect_stderr(err), contextlib.redirect_stdout(io.StringIO()):
        code = main(list(argv))
    return code, err.getvalue()


@settings(max_examples=200, deadline=None)
@given(broken=st.dictionaries(st.sampled_from(sorted(BREAKERS)), st.none(), min_size=1).flatmap(
           lambda keys: st.fixed_dictionaries({k: BREAKERS[k] for k in keys})),
       duplicate_key=st.booleans(), not_utf8=st.integers(min_value=0, max_value=9))
def test_a_broken_sweep_file_lists_every_problem_and_exits_2(broken, duplicate_key, not_utf8):
    data = yaml.safe_load(yaml.safe_dump(VALID))
    for path, value in broken.items():
        put(data, path, value)
    text = yaml.safe_dump(data, allow_unicode=True)
    if duplicate_key:
        text += "store: results/a\nstore: results/b\n"  # a key no breaker touches
    raw = text.encode()
    if not_utf8 == 0:  # one file in ten is not UTF-8 at all: that alone is what can be said
        raw = raw.replace(b"name", b"n\xe4me", 1)
    with tempfile.TemporaryDirectory() as d:
        f = Path(d) / "sweep.yaml"
        f.write_bytes(raw)
        for command in ("validate", "plan"):
            code, err = run(command, str(f))
            assert code == 2, (command, broken, err)
            assert "Traceback" not in err
            problems = [line[4:] for line in err.splitlines() if line.startswith("  - ")]
            if not_utf8 == 0:
                assert len(problems) == 1 and problems[0].startswith("not UTF-8 text"), err
                continue
            for path in broken:  # every broken field is named, the unknown key by its own name
                assert any(p.startswith(path) for p in problems), (command, path, broken, err)
            if duplicate_key:
                assert any("key 'store' given again" in p for p in problems), err
