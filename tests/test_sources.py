"""Where each setting of a sweep file comes from (issue 52 part 4, cliffsweep/sweep/sources.py):
the example files follow their papers where the papers print a setting, every other setting is
labelled as the project's choice, `validate` refuses a file whose labels and settings disagree,
and `plan` prints the settings with the project's choices marked."""

from __future__ import annotations

from pathlib import Path

import pytest

from cliffsweep.sweep import sources
from cliffsweep.sweep.spec import SpecError
from cliffsweep.sweep.specfile import load_spec, parse_spec

CONFIGS = Path(__file__).resolve().parents[1] / "cliffsweep" / "configs"
PAPERS = {"paper": "000", "paper_fsdp": "000", "paper_lora": "000", "paper_cl": "000",
          "seed001_optimizers": "001", "seed003_talr": "003", "seed004_rpsft": "004"}


def by_path(spec) -> dict[str, sources.Row]:
    return {r.path: r for r in sources.rows(spec)}


@pytest.mark.parametrize("stem", sorted(PAPERS))
def test_each_papers_file_labels_every_setting(stem):
    # types and labels only (sweep/specfile.py): the registries' checks need the files' data
    spec = load_spec(CONFIGS / f"{stem}.yaml")
    assert spec.sources is not None and spec.sources.paper.startswith(PAPERS[stem])
    rows = sources.rows(spec)
    assert {p for p, _ in sources.settings(spec)} <= {r.path for r in rows}
    assert any(r.ours for r in rows) and any(not r.ours for r in rows), stem
    text = "\n".join(sources.lines(spec))
    assert "[ours]" in text and "[paper]" in text and spec.sources.paper in text


def test_the_seed_files_follow_what_their_papers_print():
    s4 = load_spec(CONFIGS / "seed004_rpsft.yaml")
    assert {m.path: m.epochs for m in s4.models} == {"meta-llama/Llama-3.1-8B-Instruct": [20],
                                                     "Qwen/Qwen2.5-7B-Instruct": [12], "Qwen/Qwen2.5-3B-Instruct": [12]}
    assert [m.name for m in s4.methods] == ["sft", "dft", "iw", "rpsft"]
    assert s4.methods[3].params == {"k": 768, "lam": 1.0}
    ks = {t.params["task"]: t.params.get("sampling", {}).get("n") for t in [*s4.tasks.learn_suite, *s4.tasks.retain]}
    assert ks == {"aime24": 16, "aime25": 16, "minerva_math500": 4, "minerva_math": 8,
                  "gpqa_main_cot_zeroshot": 4, "ifeval": 4, "mmlu_pro": 4, "truthfulqa_mc2": None}
    rows = by_path(s4)
    assert not rows["models.llama3.1-8b.epochs"].ours and not rows["methods.rpsft.params.k"].ours
    for p in ("lrs", "recipe.batch_size", "recipe.min_lr_ratio", "recipe.cooldown_steps",
              "tasks.learn_suite.aime24.params.sampling.temperature"):
        assert rows[p].ours and not rows[p].default, p

    s1 = load_spec(CONFIGS / "seed001_optimizers.yaml")
    assert sorted(o for m in s1.methods for o in m.optimizers) == ["adamw", "muon", "sgd"]
    r1 = by_path(s1)
    assert r1["methods.1.lrs"].ours and not r1["lrs"].ours  # SGD's grid is ours, AdamW/Muon's 001's
    assert (s1.recipe.cooldown_steps, s1.recipe.min_lr_ratio, s1.eval.points_per_trial) == (0, 0.0, 4)

    s3 = load_spec(CONFIGS / "seed003_talr.yaml")
    assert all(not t.params.get("apply_chat_template") and "num_fewshot" not in t.params for t in s3.tasks.retain)
    r3 = by_path(s3)
    assert all(r3[p].ours for p in ("methods.l2sp.params.lam", "methods.lora.params.rank", "methods.wise_ft.params.alpha"))


def test_the_cliff_papers_defaults_are_the_papers_only_in_its_own_files():
    paper, toy = by_path(load_spec(CONFIGS / "paper.yaml")), by_path(load_spec(CONFIGS / "toy.yaml"))
    for p in ("recipe.cooldown_steps", "recipe.min_lr_ratio", "recipe.warmup_steps"):
        assert paper[p].default and not paper[p].ours, p
        assert toy[p].default and toy[p].ours, p  # a file that names no paper: the project's choice
    assert all(r.ours for r in toy.values())


BASE = {"name": "s", "models": [{"name": "m", "path": "toy:qwen2-tiny"}], "methods": [{"name": "sft"}],
        "lrs": [1e-3], "tasks": {"learn": {"name": "toy_facts"}, "retain": [{"name": "toy_arith"}]}}


def test_validate_lists_unlabelled_settings_and_labels_that_name_nothing():
    data = {**BASE, "recipe": {"batch_size": 8},
            "sources": {"paper": "000", "settings": {"models": "000 Sec. 3", "methods": "000", "lrz": "ours",
                                                     "tasks.*.params.limit": "ours", "lrs": " "}}}
    with pytest.raises(SpecError) as e:
        parse_spec(data)
    problems = e.value.problems
    assert any(p.startswith("sources.settings.lrz: names no setting") for p in problems)
    assert any(p.startswith("sources.settings.tasks.*.params.limit: names no setting") for p in problems)
    assert any(p.startswith("sources.settings.lrs: an empty label") for p in problems)
    missing = [p for p in problems if "without a label" in p]
    assert len(missing) == 1 and "tasks.learn.name" in missing[0] and "recipe.batch_size" in missing[0]
    assert "models.m.path" not in missing[0] and "lrs" not in missing[0].split(": ", 2)[-1].split(", ")


def test_the_most_specific_label_wins_and_patterns_cover_every_match():
    labels = {"recipe": "000 App. B", "recipe.batch_size": "ours (memory)", "tasks.*.n_eval": "ours (time)",
              "tasks": "000 Sec. 3"}
    assert sources.label_of("recipe.batch_size", labels) == "ours (memory)"
    assert sources.label_of("recipe.max_seq_len", labels) == "000 App. B"
    assert sources.label_of("tasks.retain.gsm8k.params.n_eval", labels) == "ours (time)"
    assert sources.label_of("tasks.learn.name", labels) == "000 Sec. 3"
    assert sources.label_of("lrs", labels) is None
    tasks = {"learn": {"name": "toy_facts"}, "retain": [{"name": "toy_arith", "params": {"n_eval": 50}}]}
    spec = parse_spec({**BASE, "tasks": tasks, "recipe": {"batch_size": 8, "max_seq_len": 64},
                       "sources": {"paper": "000", "settings": {**labels, "models": "x", "methods": "x", "lrs": "x"}}})
    rows = by_path(spec)
    assert rows["recipe.batch_size"].ours and not rows["recipe.max_seq_len"].ours
    assert rows["recipe.warmup_steps"].default and not rows["recipe.warmup_steps"].ours  # a 000 file
