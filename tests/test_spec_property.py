"""`validate` and `plan` on generated broken sweep files (issue 29 part 8): whatever mix of
problems a file has, the command prints no traceback, lists every one of them (each named by its
field), and exits 2. Hypothesis picks which fields to break and how; 200 examples (valid files: 100, each through validate, plan and simulate)."""

from __future__ import annotations

import atexit
import contextlib
import gzip
import io
import math
import shutil
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


# --- valid files: whatever `validate` accepts, `plan` plans (issue 37 part 1) -----------------

SHIPPED = Path(__file__).resolve().parent / "data"


def _small_copy() -> Path:
    """The real files' first rows, gzipped as tests/data ships them: planning reads every row,
    and 200 examples of the full files would cost minutes."""
    out = Path(tempfile.mkdtemp(prefix="cliffsweep-prop-data-"))
    for src in SHIPPED.rglob("*.jsonl.gz"):
        dest = out / src.relative_to(SHIPPED)
        dest.parent.mkdir(parents=True, exist_ok=True)
        with gzip.open(src, "rt", encoding="utf-8") as f:
            head = [line for _, line in zip(range(120), f)]
        with gzip.open(dest, "wt", encoding="utf-8") as f:
            f.writelines(head)
    return out


DATA = _small_copy()
# Strategies below name the path at import, so the copy lives for the process and goes with it.
atexit.register(shutil.rmtree, DATA, ignore_errors=True)

gsm8k = st.fixed_dictionaries(
    {"path": st.just(str(DATA / "gsm8k")), "n_train": st.integers(20, 60), "n_eval": st.integers(5, 30)},
    optional={"protocol": st.sampled_from(["fewshot_chat", "zeroshot"]), "num_fewshot": st.integers(1, 8),
              "fewshot_seed": st.integers(0, 2**16), "max_tokens": st.integers(16, 512), "seed": st.integers(0, 3)})
chem = st.fixed_dictionaries(
    {"path": st.just(str(DATA / "sciknoweval-chem-l3")), "n_train": st.integers(20, 60), "n_eval": st.integers(5, 30)},
    optional={"test_fraction": st.floats(0.1, 0.5), "max_tokens": st.integers(4, 64)})
own_data = st.fixed_dictionaries(
    {"path": st.just("toy:facts_chat.jsonl")},
    optional={"eval_path": st.just("toy:facts_chat_held.jsonl"), "metric": st.sampled_from(["exact", "normalized",
              "number"]), "eval_fraction": st.floats(0.05, 0.5), "max_tokens": st.integers(1, 64),
              "n_eval": st.integers(5, 50), "format": st.sampled_from(["auto", "messages"])})
OWN_FILE = DATA / "my_train.jsonl"  # the user's own JSONL, as the README's pattern has it
OWN_FILE.write_text("".join('{"messages": [{"role": "user", "content": "What is %d + %d?"}, '
                            '{"role": "assistant", "content": "%d"}]}\n' % (i, i, 2 * i) for i in range(60)))
user_file = st.fixed_dictionaries({"path": st.just(str(OWN_FILE))},
                                  optional={"eval_fraction": st.floats(0.1, 0.5), "max_tokens": st.integers(1, 64)})
LEARN = st.one_of(st.builds(lambda p: {"name": "dataset", "params": p}, user_file),
                  st.builds(lambda p: {"name": "toy_facts", "params": p},
                            st.fixed_dictionaries({}, optional={"n_eval": st.integers(5, 50), "seed": st.integers(0, 3)})),
                  st.builds(lambda p: {"name": "chem_l3", "params": p}, chem),
                  st.builds(lambda p: {"name": "dataset", "params": p}, own_data))
loss_of = st.fixed_dictionaries(
    {"of": st.sampled_from([{"name": "toy_arith"}, {"name": "gsm8k", "params": {"path": str(DATA / "gsm8k"),
                                                                                "n_train": 30}}])},
    optional={"split": st.sampled_from(["eval", "train"]), "n_eval": st.integers(5, 40),
              "max_doc_tokens": st.integers(8, 256)})
lm_eval = st.fixed_dictionaries({"task": st.just("toy_arith_lm"), "include_path": st.just("toy")},
                                optional={"limit": st.integers(5, 60), "apply_chat_template": st.booleans()})
RETAIN = st.lists(st.one_of(st.just({"name": "toy_arith"}),
                            st.builds(lambda p: {"name": "lm_eval", "params": p}, lm_eval),
                            st.builds(lambda p: {"name": "gsm8k", "params": p}, gsm8k),
                            st.builds(lambda p: {"name": "loss", "params": p}, loss_of)),
                  min_size=1, max_size=2, unique_by=lambda t: t["name"])  # one task of a kind: a second is refused


def refused_by_design(task: dict) -> bool:
    """The one combination the generators make that a task must refuse: few-shot settings under
    the zero-shot protocol (GSM8KParams)."""
    p = task.get("params", {})
    return task["name"] == "gsm8k" and p.get("protocol") == "zeroshot" and bool({"num_fewshot", "fewshot_seed"} & set(p))


GPU = {"resources": {"workers_per_trial": 1, "gpus_per_worker": 1}, "eval": {"gpus_per_evaluator": 1}}


@settings(max_examples=100, deadline=None)
@given(learn=LEARN, retain=RETAIN, model=st.sampled_from(["toy:qwen2-tiny", "toy:llama-tiny", "Qwen/Qwen2.5-0.5B-Instruct"]),
       epochs=st.sampled_from([[1], [1, 2]]), micro=st.sampled_from([None, 4, 8]), gpu=st.booleans())
def test_every_file_validate_accepts_plans_and_simulates(learn, retain, model, epochs, micro, gpu):
    """`plan` rebuilds each task from what the file set, never from a dump of defaults: the
    zero-shot GSM8K file of issue 37 (a 40-line traceback before) is among what is generated.
    Issue 63: a hub model (offline here: its local data measured with a stand-in tokenizer), the
    user's own JSONL and an lm-eval task are generated too, and `simulate` prices every GPU file
    `validate` accepts (a CPU file it refuses in a sentence: it prices GPU clusters)."""
    data = {"name": "valid", "models": [{"name": "m", "path": model}], "methods": [{"name": "sft"}],
            "lrs": [1e-4], "epochs": epochs, "tasks": {"learn": learn, "retain": retain},
            "recipe": {"batch_size": 8, "max_seq_len": 128, **({"micro_batch_size": micro} if micro else {})},
            **(GPU if gpu else {})}
    with tempfile.TemporaryDirectory() as d:
        f = Path(d) / "sweep.yaml"
        f.write_text(yaml.safe_dump(data))
        code, err = run("validate", str(f))
        refused = any(refused_by_design(t) for t in [learn, *retain])
        assert code == (2 if refused else 0), (data, err)
        if code == 0:
            code, err = run("plan", str(f))
            assert code == 0 and "Traceback" not in err, (data, err)
            code, err = run("simulate", str(f))
            assert code == (0 if gpu else 2) and "Traceback" not in err, (data, err)
            if not gpu:
                assert err.startswith("error: ") and "simulate prices GPU work" in err, err
