"""The user's own data as the learn task (issue 30 part 1; evals/tasks/dataset.py): the four
formats finetuning tools read, multi-turn conversations trained on every assistant turn with the
turns before masked, a held-out split that is the same on every machine, the scorers, and every
malformed row named by file and line before anything starts."""

from __future__ import annotations

import warnings

import csv
import json
import subprocess
import sys
from pathlib import Path

import pandas as pd
import pytest
import yaml

from cliffsweep.evals.scoring.match import match_score, normalize_answer
from cliffsweep.evals.tasks import build_task
from cliffsweep.evals.tasks.formats import Conversation, conversation
from cliffsweep.evals.tasks.rows import DataError

ROOT = Path(__file__).resolve().parents[1]
CHAT = Conversation("Be brief.", (("Capital of France?", "Paris"), ("And of Italy?", "Rome")))
ROWS = {
    "messages": {"messages": [{"role": "system", "content": "Be brief."},
                              {"role": "user", "content": "Capital of France?"},
                              {"role": "assistant", "content": "Paris"},
                              {"role": "user", "content": "And of Italy?"},
                              {"role": "assistant", "content": "Rome"}]},
    "sharegpt": {"conversations": [{"from": "system", "value": "Be brief."},
                                   {"from": "human", "value": "Capital of France?"}, {"from": "gpt", "value": "Paris"},
                                   {"from": "human", "value": "And of Italy?"}, {"from": "gpt", "value": "Rome"}]},
    "alpaca": {"system": "Be brief.", "history": [["Capital of France?", "Paris"]],
               "instruction": "And of Italy?", "input": "", "output": "Rome"},
    "prompt_completion": {"prompt": [{"role": "system", "content": "Be brief."},
                                     {"role": "user", "content": "Capital of France?"},
                                     {"role": "assistant", "content": "Paris"},
                                     {"role": "user", "content": "And of Italy?"}],
                          "completion": [{"role": "assistant", "content": "Rome"}]},
}


@pytest.mark.parametrize("fmt", sorted(ROWS))
def test_each_format_reads_as_the_same_conversation(fmt):
    assert conversation("f:1", ROWS[fmt], fmt) == CHAT
    assert conversation("f:1", ROWS[fmt]) == CHAT  # auto detects it
    assert conversation("f:1", {"instruction": "Sum 2 and 3", "input": "please", "output": "5"}) == \
        Conversation("", (("Sum 2 and 3\n\nplease", "5"),))


@pytest.mark.parametrize("row, says", [
    ({"text": "hello"}, "no known format"),
    ({"messages": [{"role": "user", "content": "q"}]}, "in pairs"),
    ({"messages": [{"role": "assistant", "content": "a"}, {"role": "user", "content": "q"}]}, "expected a user then"),
    ({"prompt": "q", "completion": ""}, "empty assistant answer"),
    ({"conversations": [{"from": "robot", "value": "x"}]}, "'from'"),
    ({"instruction": 3, "output": "x"}, "instruction should be text"),
])
def test_a_broken_row_is_refused_with_its_place(row, says):
    with pytest.raises(DataError, match=f"^f.jsonl:7: .*{says}"):
        conversation("f.jsonl:7", row)


def write_jsonl(path: Path, rows: list[dict]) -> Path:
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return path


def test_every_assistant_turn_trains_and_the_last_is_evaluated(tmp_path):
    rows = [ROWS["messages"]] + [{"prompt": f"q{i}", "completion": f"a{i}"} for i in range(40)]
    data = write_jsonl(tmp_path / "train.jsonl", rows)
    held = write_jsonl(tmp_path / "held.jsonl", [ROWS["sharegpt"]])
    task = build_task("dataset", {"path": str(data), "eval_path": str(held)})
    train = task.train_examples()
    assert len(train) == 42  # both turns of the two-turn conversation, one of each other
    second = next(e for e in train if e.prompt == "And of Italy?")
    assert (second.response, second.system, second.history) == ("Rome", "Be brief.", (("Capital of France?", "Paris"),))
    (item,) = task.eval_examples()
    assert (item.prompt, item.reference, item.shots, item.system) == ("And of Italy?", "Rome",
                                                                      (("Capital of France?", "Paris"),), "Be brief.")
    assert item.chat()[0] == {"role": "system", "content": "Be brief."} and item.chat()[-1]["content"] == "And of Italy?"


def test_the_held_out_share_is_chosen_by_content_and_seed(tmp_path):
    rows = [{"prompt": f"question {i}", "completion": f"answer {i}"} for i in range(300)]
    data = write_jsonl(tmp_path / "d.jsonl", rows)
    a = build_task("dataset", {"path": str(data), "eval_fraction": 0.2})
    b = build_task("dataset", {"path": str(data), "eval_fraction": 0.2})
    held = {e.reference for e in a.eval_examples()}
    assert held == {e.reference for e in b.eval_examples()} and 40 <= len(held) <= 80
    assert not held & {e.response for e in a.train_examples()}  # no held-out answer is trained on
    # rows added later leave the earlier rows where they were
    more = write_jsonl(tmp_path / "more.jsonl", rows + [{"prompt": "new", "completion": "row"}])
    c = build_task("dataset", {"path": str(more), "eval_fraction": 0.2})
    assert held <= {e.reference for e in c.eval_examples()} | {"row"}
    other_seed = build_task("dataset", {"path": str(data), "eval_fraction": 0.2, "seed": 1})
    assert {e.reference for e in other_seed.eval_examples()} != held


def test_json_csv_and_parquet_files_and_folders_read_alike(tmp_path):
    import pandas as pd

    rows = [{"prompt": f"q{i}", "completion": f"a{i}"} for i in range(10)]
    (tmp_path / "a.json").write_text(json.dumps(rows[:4]))
    with (tmp_path / "b.csv").open("w", newline="") as f:
        w = csv.DictWriter(f, ["prompt", "completion"])
        w.writeheader()
        w.writerows(rows[4:7])
    pd.DataFrame(rows[7:]).to_parquet(tmp_path / "c.parquet")
    task = build_task("dataset", {"path": str(tmp_path), "eval_fraction": 0.5})
    got = {e.response for e in task.train_examples()} | {e.reference for e in task.eval_examples()}
    assert got == {r["completion"] for r in rows}


def test_the_scorers():
    assert match_score("  The Eiffel Tower! ", "eiffel tower", "normalized").correct
    assert not match_score("Eiffel", "eiffel tower", "normalized").correct
    assert match_score("so it is 12.0", "#### 12", "number").correct and not match_score("13", "12", "number").correct
    assert match_score("Paris", "Paris", "exact").correct and not match_score("paris", "Paris", "exact").correct
    assert normalize_answer("An  apple, the pie.") == "apple pie"


def test_a_number_within_a_relative_tolerance_scores_as_medcalc_does(tmp_path):
    """003's MedCalc-Bench counts a calculated value within a tolerance of the gold one (issue 40):
    `rel_tol` 0.05 takes 104.9 and 95.0 for 100, not 105.1; 0 is the exact number, as before;
    a tolerance on a text metric is refused, and the scorer's version names it."""
    import pydantic

    assert match_score("about 104.9", "100", "number", rel_tol=0.05).correct
    assert match_score("#### 95", "100", "number", rel_tol=0.05).correct
    assert not match_score("105.1", "100", "number", rel_tol=0.05).correct
    assert not match_score("100.5", "100", "number").correct
    assert match_score("-2.1", "-2", "number", rel_tol=0.05).correct  # |reference|, whatever the sign
    (tmp_path / "rows.jsonl").write_text('{"prompt": "q", "completion": "1"}\n')
    with pytest.raises(pydantic.ValidationError, match="rel_tol applies to metric number only"):
        build_task("dataset", {"path": str(tmp_path), "rel_tol": 0.05})
    task = build_task("dataset", {"path": str(tmp_path), "metric": "number", "rel_tol": 0.05})
    assert task.scorer_version.endswith("+number@rel0.05")


def test_every_malformed_row_is_listed_before_anything_starts(tmp_path):
    good = {"prompt": "q", "completion": "a"}
    data = tmp_path / "data.jsonl"
    data.write_text("\n".join([json.dumps(good), "{not json", json.dumps({"prompt": "q"}), json.dumps(good),
                               json.dumps({"messages": [{"role": "user", "content": "only a question"}]})]) + "\n")
    held = tmp_path / "held.csv"
    held.write_text("prompt,completion\nq,a\nq2,\n")
    sweep = tmp_path / "sweep.yaml"
    sweep.write_text(yaml.safe_dump({
        "name": "mine", "models": [{"name": "m", "path": "toy:qwen2-tiny"}], "methods": [{"name": "sft"}],
        "lrs": [1e-3], "epochs": [1], "store": str(tmp_path / "store"),
        "tasks": {"learn": {"name": "dataset", "params": {"path": str(data), "eval_path": str(held)}},
                  "retain": [{"name": "toy_arith"}]}}))
    r = subprocess.run([sys.executable, "-m", "cliffsweep.cli", "validate", str(sweep)], capture_output=True,
                       text=True, timeout=300, cwd=ROOT)
    assert r.returncode == 2, r.stdout + r.stderr
    for where, what in ((f"{data}:2", "bad JSON"), (f"{data}:3", "format prompt_completion needs field"),
                        (f"{data}:5", "in pairs"), (f"{held}:3", "empty assistant answer")):
        assert any(f"{where}: " in line and what in line for line in r.stderr.splitlines()), (where, r.stderr)
    assert "Traceback" not in r.stderr


def chat_rows(examples, prompt_of, answer_of) -> list[dict]:
    return [{"messages": [{"role": "user", "content": prompt_of(e)}, {"role": "assistant", "content": answer_of(e)}]}
            for e in examples]


@pytest.mark.slow
@pytest.mark.ray
def test_a_sweep_learns_from_a_jsonl_of_chat_messages_and_plan_prices_it(tmp_path):
    """The toy facts written as the user's own JSONL of chat messages (training phrasings) and a
    second file of held-out questions (the evaluation phrasing): a real sweep trains on it, every
    checkpoint is evaluated on it (exact match of the answer letter) and it is learned; `plan`
    prices it from the file's own token lengths. A learn suite (issue 40 part 6) is read as the
    learning axis."""
    from cliffsweep.cli import main
    from cliffsweep.orchestrator.specfile import load_spec
    from cliffsweep.planner.text import plan_text
    from cliffsweep.storage.store import Store

    facts = build_task("toy_facts", {"n_eval": 60})
    train = write_jsonl(tmp_path / "train.jsonl", chat_rows(facts.train_examples(), lambda e: e.prompt,
                                                             lambda e: e.response))
    held = write_jsonl(tmp_path / "held.jsonl", chat_rows(facts.eval_examples(), lambda e: e.prompt,
                                                           lambda e: e.reference))
    sweep = tmp_path / "sweep.yaml"
    sweep.write_text(yaml.safe_dump({
        "name": "mine", "models": [{"name": "q", "path": "toy:qwen2-tiny"}], "methods": [{"name": "sft"}],
        "lrs": [1e-3], "epochs": [2], "store": str(tmp_path / "store"),
        "tasks": {"learn": {"name": "dataset", "params": {"path": str(train), "eval_path": str(held),
                                                          "metric": "exact", "max_tokens": 8}},
                  "retain": [{"name": "toy_arith", "params": {"n_eval": 40}},
                             {"name": "lm_eval", "params": {"task": "toy_arith_lm", "include_path": "toy",
                                                            "apply_chat_template": True, "limit": 40}},
                             {"name": "loss", "params": {"of": {"name": "toy_arith"}, "split": "train", "n_eval": 40}}],
                  # in-domain benchmarks as the learning axis (issue 40 part 6: 004's ID average)
                  "learn_suite": [{"name": "toy_facts", "params": {"n_eval": 40}},
                                  {"name": "loss", "params": {"of": {"name": "toy_facts"}, "n_eval": 40}}]},
        "recipe": {"batch_size": 16, "max_seq_len": 128},
        "eval": {"points_per_trial": 1, "backend": "hf", "cpus_per_evaluator": 0.5},
        "resources": {"max_concurrent_trials": 1}}))
    text = plan_text([(str(sweep), load_spec(sweep))])
    assert "dataset: " in text and "exact lengths" in text
    import ray

    try:
        assert main(["run", str(sweep), "--num-cpus", "3"]) == 0
    finally:
        ray.shutdown()
    ev = Store(str(tmp_path / "store")).read("evals")
    mine = ev[(ev["task"] == "dataset") & (ev["metric"] == "accuracy")].set_index("trial_id")["value"]
    base = mine.pop("q-base")
    assert len(mine) == 1 and (ev.loc[ev["task"] == "dataset", "scorer_version"] == "match-v1+exact").all()
    assert mine.iloc[0] >= base + 0.2, (base, mine)  # the facts' shared customs are learned
    # lm-eval's task (issue 30 part 2) on the same evaluator: every checkpoint once, every metric
    # lm-eval reports under its own name, the primary as `accuracy`; the toy base model knows it
    lm = ev[ev["task"] == "lm_eval:toy_arith_lm"]
    assert not lm.duplicated(["trial_id", "step", "metric"]).any() and len(lm) == 2 * 2  # base + 1 checkpoint
    acc = lm.pivot_table(index="trial_id", columns="metric", values="value")
    assert (acc["accuracy"] == acc["exact_match,strict-match"]).all() and acc.loc["q-base", "accuracy"] >= 0.9, acc
    # the three retain tasks are a suite (issue 30 part 3): analyze reads their aggregate and each
    out = tmp_path / "report"
    with warnings.catch_warnings(record=True) as said:  # issue 37 part 6: a loss task's store draws cleanly
        warnings.simplefilter("always")
        assert main(["analyze", str(tmp_path / "store"), "--out", str(out), "--n-boot", "20"]) == 0
    assert not said, [f"{w.filename}:{w.lineno}: {w.message}" for w in said]
    per_task = pd.read_parquet(out / "suite.parquet")
    assert sorted(per_task["task"]) == ["lm_eval:toy_arith_lm", "loss:toy_arith:train", "toy_arith"]
    points = pd.read_parquet(out / "points.parquet").set_index("trial_id")
    assert points.loc["q-base", "R"] == pytest.approx(1.0)  # the base keeps all of itself
    assert 0 < points.loc["q-base", "R[loss:toy_arith:train]"] <= 1  # the loss read as its likelihood
    assert "Retention suite" in (out / "report.md").read_text()
    # the learn suite: every checkpoint evaluated on its tasks with role learn, and L is their mean
    suite = ev[ev["task"].isin(["toy_facts", "loss:toy_facts"]) & ev["metric"].isin(["accuracy", "likelihood"])]
    assert set(suite["role"]) == {"learn"} and len(suite) == 2 * 2, suite
    want = suite.groupby("trial_id")["value"].mean()
    assert points["L"].to_dict() == pytest.approx(want.to_dict())
    assert "learn suite (mean of toy_facts, loss:toy_facts)" in (out / "report.md").read_text()


def test_a_base_model_without_a_chat_template_trains_and_is_served_in_the_plain_format():
    """Issue 31: 001's base models (GPT-2, Llama-2 base) have no chat template; chat.py gives them
    PLAIN_TEMPLATE, the same text in training (response tokens learned, eos included) and in the
    evaluators' prompts (backends/base.render_chat)."""
    from cliffsweep.chat import encode_pair, render_prompt
    from cliffsweep.evals.backends.base import render_chat
    from cliffsweep.models import load_model, resolve_model

    _, tok = load_model(resolve_model("toy:qwen2-tiny"))
    tok.chat_template = None
    assert render_prompt(tok, "What is 2+2?") == "What is 2+2?\n"
    ids, labels = encode_pair(tok, "What is 2+2?", "4", 128, system="Be brief.", history=(("Hi", "Hello"),))
    text = tok.decode(ids)
    assert text == f"Be brief.\n\nHi\nHello{tok.eos_token}What is 2+2?\n4{tok.eos_token}", text
    assert tok.decode([i for i, lab in zip(ids, labels) if lab != -100]) == f"4{tok.eos_token}"
    chat = ({"role": "system", "content": "Be brief."}, {"role": "user", "content": "Hi"},
            {"role": "assistant", "content": "Hello"},
            {"role": "user", "content": "What is 2+2?"})
    assert text.startswith(render_chat(tok, chat))  # the evaluator's prompt is training's prefix


def test_a_recipe_system_prompt_reaches_training_and_evaluation_alike():
    """Issue 31: recipe.system_prompt before every training example and evaluation prompt that
    has none of its own; an example's own system prompt wins."""
    from cliffsweep.evals.backends.hf_backend import HFBackend
    from cliffsweep.evals.runner import evaluate_task
    from cliffsweep.evals.tasks.base import Example
    from cliffsweep.models import load_model, resolve_model
    from cliffsweep.trainables import data

    path = resolve_model("toy:qwen2-tiny")
    _, tok = load_model(path)
    own = Example("a", "Hi", "Hello", system="Own.")
    plain = Example("b", "Hi", "Hello")
    (mine, kept) = data.encode(tok, [plain, own], 128, system="Be brief.")
    assert tok.decode(mine.ids).startswith(tok.apply_chat_template(
        [{"role": "system", "content": "Be brief."}, {"role": "user", "content": "Hi"}], tokenize=False,
        add_generation_prompt=True))
    assert "Own." in tok.decode(kept.ids) and "Be brief." not in tok.decode(kept.ids)
    backend, seen = HFBackend(path, batch_size=8), []
    real = backend.generate
    backend.generate = lambda prompts, sampling: seen.extend(prompts) or real(prompts, sampling)
    evaluate_task(backend, build_task("toy_arith", {"n_eval": 3}), "Be brief.")
    assert all(p[0] == {"role": "system", "content": "Be brief."} for p in seen), seen


def test_a_toy_data_file_reads_as_a_jsonl_of_chat_messages_and_an_unknown_one_is_named(tmp_path, monkeypatch):
    """`toy:<file>` (the toy suite example's learn data) is a JSONL the toy world writes once, read
    by the same code as a user's file: the toy facts' training phrasings, their held-out phrasing."""
    import cliffsweep.toy.files as files

    monkeypatch.setattr(files, "DATA_DIR", tmp_path / "data")
    task = build_task("dataset", {"path": "toy:facts_chat.jsonl", "eval_path": "toy:facts_chat_held.jsonl"})
    facts = build_task("toy_facts", {"n_eval": 200})
    assert [(e.prompt, e.response) for e in task.train_examples()] != []
    assert sorted((e.prompt, e.response) for e in task.train_examples()) == sorted(
        (e.prompt, e.response) for e in facts.train_examples())
    assert (tmp_path / "data" / "facts_chat.jsonl").exists() and not list((tmp_path / "data").glob(".*"))
    assert build_task("dataset", {"path": "toy:nope.jsonl"}).data_problems() == [
        "toy:nope.jsonl: unknown toy data file 'nope.jsonl'; valid: ['facts_chat.jsonl', 'facts_chat_held.jsonl']"]


def test_balanced_accuracy_is_the_mean_of_each_classs_accuracy(tmp_path):
    """003 reports ESCI's balanced accuracy (issue 40): with `balanced_accuracy: true` a dataset
    task stores it beside accuracy, the mean over reference classes of their accuracy, which
    the stored samples reproduce by hand."""
    import json

    from cliffsweep.evals.backends.hf_backend import HFBackend
    from cliffsweep.evals.runner import balanced_accuracy, evaluate_task
    from cliffsweep.models import resolve_model

    # 3 of class E right, 1 of class S wrong: accuracy 0.75, balanced (1 + 0) / 2 = 0.5
    assert balanced_accuracy(["E", "E", "E", "S"], [True, True, True, False]) == 0.5
    rows = [{"prompt": f"Label {i}?", "completion": "yes" if i % 4 else "no"} for i in range(16)]
    (tmp_path / "rows.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    task = build_task("dataset", {"path": str(tmp_path), "eval_fraction": 0.5, "max_tokens": 2,
                                  "balanced_accuracy": True})
    res = evaluate_task(HFBackend(resolve_model("toy:qwen2-tiny"), batch_size=8), task)
    refs = {e.id: e.reference for e in task.eval_examples()}
    by_class: dict[str, list[bool]] = {}
    for eid, ok, _ in res.samples:
        by_class.setdefault(refs[eid], []).append(ok)
    assert res.extra["balanced_accuracy"] == sum(sum(v) / len(v) for v in by_class.values()) / len(by_class)
    assert "balanced_accuracy" not in evaluate_task(
        HFBackend(resolve_model("toy:qwen2-tiny"), batch_size=8),
        build_task("dataset", {"path": str(tmp_path), "eval_fraction": 0.5, "max_tokens": 2})).extra


def test_a_tasks_own_system_prompt_replaces_the_recipes_for_that_task_only():
    """003 gives its task prompt to the learn task only (issue 40): a task's `system_prompt` is
    what its prompts get in evaluation (and its examples in training: tasks/base.system_for);
    "" means none; a task without one keeps recipe.system_prompt."""
    from cliffsweep.evals.backends.hf_backend import HFBackend
    from cliffsweep.evals.runner import evaluate_task
    from cliffsweep.evals.tasks.base import system_for
    from cliffsweep.models import resolve_model

    backend, seen = HFBackend(resolve_model("toy:qwen2-tiny"), batch_size=8), []
    real = backend.generate
    backend.generate = lambda prompts, sampling: seen.extend(prompts) or real(prompts, sampling)
    for params, first in (({"system_prompt": "Compute."}, {"role": "system", "content": "Compute."}),
                          ({"system_prompt": ""}, None), ({}, {"role": "system", "content": "Be brief."})):
        seen.clear()
        task = build_task("toy_arith", {"n_eval": 2, **params})
        evaluate_task(backend, task, "Be brief.")
        # a prompt with no system message is its bare user text, else a tuple of messages (EvalExample.chat)
        assert all((p[0] if not isinstance(p, str) and p[0]["role"] == "system" else None) == first
                   for p in seen), (params, seen)
        assert system_for(task, "Be brief.") == (first or {"content": ""})["content"]
