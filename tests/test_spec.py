"""Sweep-file validation: every problem at once, named by field; nothing started."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from cliffsweep.sweep.grid import expand_grid, expand_params, series_label, trial_id
from cliffsweep.sweep.spec import SpecError
from cliffsweep.orchestrator.specfile import default_spec_path, load_spec, parse_spec

CONFIGS = sorted((Path(__file__).resolve().parents[1] / "cliffsweep" / "configs").glob("*.yaml"))


def minimal(**over):
    data = {"name": "t", "models": [{"name": "m", "path": "toy:qwen2-tiny"}], "methods": [{"name": "sft"}],
            "lrs": [1e-3], "tasks": {"learn": {"name": "toy_facts"}, "retain": [{"name": "toy_arith"}]}}
    data.update(over)
    return data


@pytest.mark.parametrize("path", CONFIGS, ids=[p.name for p in CONFIGS])
def test_every_shipped_config_validates_and_says_how_to_run_it(path):
    spec = load_spec(path)
    assert expand_grid(spec)
    first = path.read_text().splitlines()[0]
    assert first.startswith("# cliffsweep run"), f"{path.name} must open with the command that runs it"


def test_default_spec_is_the_toy_world():
    spec = load_spec(default_spec_path())
    assert all(m.path.startswith("toy:") for m in spec.models) and len(spec.models) >= 2
    assert {m.name for m in spec.methods} >= {"sft", "lora"} and len(spec.lrs) >= 5


def test_all_problems_reported_at_once():
    bad = minimal(
        name="has space", extra=1, lrs=[0.0], epochs=[0],
        models=[{"name": "m", "path": "toy:nope"}, {"name": "m", "path": "x", "colour": 1}],
        methods=[{"name": "sftt"}, {"name": "lora", "params": {"rank": 0, "bogus": 2}}],
        optimizers=["adam"],
        tasks={"learn": {"name": "toy_facts", "params": {"n_eval": 0}}, "retain": [{"name": "gsm9k"}]},
        resources={"strategy": "fsdp"},
    )
    with pytest.raises(SpecError) as e:
        parse_spec(bad, "bad.yaml")
    text = "\n".join(e.value.problems)
    for needle in ["name:", "extra: not a field of this section", "lrs:", "epochs:", "models.1.colour", "duplicate model name 'm'",
                   "models.0.path: unknown toy model 'nope'", "methods.0.name: unknown method 'sftt'",
                   "methods.1.params.rank", "methods.1.params.bogus", "optimizers.0: unknown optimizer 'adam'",
                   "tasks.learn.params.n_eval", "tasks.retain.0.name: unknown task 'gsm9k'",
                   "methods.1.name: lora does not run under resources.strategy fsdp"]:
        assert needle in text, f"missing problem {needle!r} in:\n{text}"
    assert len(e.value.problems) >= 14
    assert "bad.yaml" in str(e.value)


def test_fsdp_accepts_only_shard_safe_methods_and_optimizers():
    ok = minimal(methods=[{"name": "sft"}, {"name": "kl"}, {"name": "sib"}],
                 resources={"strategy": "fsdp", "workers_per_trial": 2})
    assert parse_spec(ok).resources.strategy == "fsdp"  # CPU too: FSDP2 runs over gloo
    bad = minimal(methods=[{"name": "sft", "optimizers": ["muon"]}, {"name": "ewc"}, {"name": "kl"}],
                  resources={"strategy": "fsdp", "workers_per_trial": 2})
    with pytest.raises(SpecError) as e:
        parse_spec(bad)
    assert len(e.value.problems) == 2, e.value.problems
    assert "methods.0: optimizer 'muon' does not run under resources.strategy fsdp" in e.value.problems[0]
    assert "methods.1.name: ewc does not run under resources.strategy fsdp" in e.value.problems[1]
    # the same methods are fine under DDP
    bad["resources"]["strategy"] = "ddp"
    assert parse_spec(bad).resources.strategy == "ddp"


def test_validate_cli_lists_problems_and_starts_nothing(tmp_path):
    bad = tmp_path / "bad.yaml"
    bad.write_text(yaml.safe_dump(minimal(methods=[{"name": "nope"}], store=str(tmp_path / "store"))))
    r = subprocess.run([sys.executable, "-m", "cliffsweep.cli", "validate", str(bad)], capture_output=True, text=True)
    assert r.returncode == 2 and "unknown method 'nope'" in r.stderr
    assert not (tmp_path / "store").exists()
    good = tmp_path / "good.yaml"
    good.write_text(yaml.safe_dump(minimal(lrs=[1e-3, 1e-2], store=str(tmp_path / "store"))))
    r = subprocess.run([sys.executable, "-m", "cliffsweep.cli", "validate", str(good)], capture_output=True, text=True)
    assert r.returncode == 0 and "2 trials" in r.stdout
    assert not (tmp_path / "store").exists()


def test_not_yaml_and_missing_file(tmp_path):
    p = tmp_path / "x.yaml"
    p.write_text("name: [unclosed")
    with pytest.raises(SpecError, match="line 1, column 16: not valid YAML") as e:
        load_spec(p)
    assert "unicode string" not in str(e.value) and str(p) in str(e.value)  # the file, and its line
    with pytest.raises(SpecError, match="file not found"):
        load_spec(tmp_path / "absent.yaml")


def test_grid_is_the_cross_product_with_stable_ids():
    spec = parse_spec(minimal(methods=[{"name": "sft"}, {"name": "lora", "params": {"rank": [8, 16]}}],
                              optimizers=["adamw", "sgd"], lrs=[1e-4, 1e-3], epochs=[1, 3], seeds=[0, 1]))
    grid = expand_grid(spec)
    assert len(grid) == 1 * 3 * 2 * 2 * 2 * 2
    assert len({t.trial_id for t in grid}) == len(grid)
    assert [t.trial_id for t in expand_grid(spec)] == [t.trial_id for t in grid]
    assert {t.series for t in grid} == {"sft", "sft[sgd]", "lora(rank=8)", "lora(rank=16)",
                                         "lora(rank=8)[sgd]", "lora(rank=16)[sgd]"}


def test_expand_params_and_labels():
    assert expand_params({"a": [1, 2], "b": 3}) == [{"a": 1, "b": 3}, {"a": 2, "b": 3}]
    assert expand_params({}) == [{}]
    assert series_label("ewc", {"lam": 10.0}, "muon") == "ewc(lam=10)[muon]"


def test_readme_sweep_example_validates():
    readme = (Path(__file__).resolve().parents[1] / "README.md").read_text()
    block = readme.split("```yaml\n", 1)[1].split("```", 1)[0]
    spec = parse_spec(yaml.safe_load(block), "README.md")
    assert spec.name == "qwen-chem" and len(spec.methods) == 3


def test_a_method_sweeps_its_own_lrs_and_warmup_can_be_a_fraction():
    """Issue 31: the seeds sweep each method over its own range (LoRA ~10x above full finetuning);
    warmup as a share of a trial's steps, as most LLM recipes give it."""
    from cliffsweep.sweep.grid import expand_grid
    from cliffsweep.trainables.schedule import lr_multiplier, warmup_of

    data = {"name": "x", "models": [{"name": "q", "path": "toy:qwen2-tiny"}], "lrs": [1e-5, 3e-5],
            "methods": [{"name": "sft"}, {"name": "lora", "lrs": [1e-4, 3e-4, 1e-3]}], "epochs": [1],
            "tasks": {"learn": {"name": "toy_facts"}, "retain": [{"name": "toy_arith"}]},
            "recipe": {"warmup_fraction": 0.1}}
    spec = parse_spec(data)
    lrs = {m: sorted(t.lr for t in expand_grid(spec) if t.method == m) for m in ("sft", "lora")}
    assert lrs == {"sft": [1e-5, 3e-5], "lora": [1e-4, 3e-4, 1e-3]}
    assert warmup_of(200, spec.recipe.warmup_steps, spec.recipe.warmup_fraction) == 20
    assert warmup_of(200, 20, None) == 20 and warmup_of(200, 5, 0.25) == 50
    assert [round(lr_multiplier(s, 200, 20, 50, 0.1), 3) for s in (0, 9, 19)] == [0.05, 0.5, 1.0]
    with pytest.raises(SpecError) as e:
        parse_spec({**data, "methods": [{"name": "lora", "lrs": [1e-4, 1e-4, -1.0]}]})
    assert "methods.0.lrs" in str(e.value) and "more than once" in str(e.value) and "> 0" in str(e.value)


def test_local_data_paths_are_made_absolute_where_the_file_is_read(tmp_path, monkeypatch):
    """Tune runs each trial in a directory of its own (and a cluster's workers start elsewhere),
    so a relative `path` must name the file the driver checked: it is made absolute when the
    sweep file is read. A hub id, a URI or a name that is nothing here stays as written."""
    (tmp_path / "data" / "gsm8k").mkdir(parents=True)
    (tmp_path / "data" / "mine.jsonl").write_text("{}\n")
    monkeypatch.chdir(tmp_path)
    raw = yaml.safe_load((Path(__file__).parent.parent / "cliffsweep/configs/toy.yaml").read_text())
    raw["tasks"] = {
        "learn": {"name": "dataset", "params": {"path": "data/mine.jsonl", "eval_path": "org/held-out"}},
        "retain": [{"name": "loss", "params": {"of": {"name": "gsm8k", "params": {"path": "data/gsm8k"}}}},
                   {"name": "dataset", "params": {"path": "s3://bucket/rows.jsonl"}}],
    }
    tasks = parse_spec(raw).tasks
    assert tasks.learn.params["path"] == str(tmp_path / "data" / "mine.jsonl")
    assert tasks.learn.params["eval_path"] == "org/held-out"
    assert tasks.retain[0].params["of"]["params"]["path"] == str(tmp_path / "data" / "gsm8k")
    assert tasks.retain[1].params["path"] == "s3://bucket/rows.jsonl"


def test_a_models_pretraining_optimizer_must_be_a_known_one():
    """models[].pretrain_optimizer (001, issue 40) names an optimizer of the registry."""
    raw = yaml.safe_load((Path(__file__).parent.parent / "cliffsweep/configs/toy.yaml").read_text())
    raw["models"][0]["pretrain_optimizer"] = "muon"
    assert parse_spec(raw).models[0].pretrain_optimizer == "muon"
    raw["models"][0]["pretrain_optimizer"] = "lion"
    with pytest.raises(SpecError, match=r"models.0.pretrain_optimizer: unknown optimizer 'lion'"):
        parse_spec(raw)


def test_a_step_budget_is_a_grid_axis_that_replaces_epochs():
    """Issue 40 part 1 (001 compares optimizers at 800, 1,800 and 6,100 iterations):
    recipe.max_steps is a length axis like epochs; ids and series name the budget, epoch trials
    keep their ids, the bill counts the budget's steps, and a file setting both is refused."""
    from cliffsweep.planner import plan
    from cliffsweep.trainables.schedule import eval_steps, passes, total_steps

    by_epochs = expand_grid(parse_spec(minimal(epochs=[1])))
    budget = parse_spec(minimal(recipe={"max_steps": [5, 40], "batch_size": 16}))
    grid = expand_grid(budget)
    assert [(t.epochs, t.max_steps) for t in grid] == [(0, 5), (0, 40)]
    assert [t.series for t in grid] == ["sft@5steps", "sft@40steps"] and "-t40-" in grid[1].trial_id
    assert by_epochs[0].trial_id == trial_id("m", "sft", {}, "adamw", by_epochs[0].lr, 1, 0)  # unchanged
    assert parse_spec(minimal(recipe={"max_steps": 7})).recipe.max_steps == [7]
    with pytest.raises(SpecError) as e:
        parse_spec(minimal(epochs=[2], recipe={"max_steps": [0, 3, 3]}))
    assert "max_steps must be positive" in str(e.value)
    with pytest.raises(SpecError, match="set epochs .* or recipe.max_steps .* not both"):
        parse_spec(minimal(epochs=[2], recipe={"max_steps": [4]}))
    # 10 steps an epoch: 25 steps are 3 passes, the last cut to 5; checkpoints end at the budget
    assert total_steps(10, 0, 25) == 25 and passes(25, 10) == 3 and passes(20, 10) == 2
    assert eval_steps(25, 10, 2, every_epoch=True) == [10, 12, 20, 25]
    # the bill: tokens grow with the budget, not with the (unused) epochs
    small, large = (plan.plan_spec(parse_spec(minimal(recipe={"max_steps": n})))[0] for n in (5, 40))
    assert large.tokens == pytest.approx(8 * small.tokens)


def test_a_model_may_train_for_its_own_epochs():
    """Issue 52 part 4: 004 trains Qwen for 12 epochs and Llama for 20. A model's `epochs` replace
    the sweep's for its trials only; with recipe.max_steps they are refused (two length axes)."""
    spec = parse_spec(minimal(models=[{"name": "q", "path": "toy:qwen2-tiny", "epochs": [12]},
                                      {"name": "l", "path": "toy:llama-tiny"}], epochs=[3]))
    lengths = {(t.model, t.epochs) for t in expand_grid(spec)}
    assert lengths == {("q", 12), ("l", 3)}
    with pytest.raises(SpecError, match="set one of the two"):
        parse_spec(minimal(models=[{"name": "q", "path": "toy:qwen2-tiny", "epochs": [12]}],
                           recipe={"max_steps": [9]}))


def test_a_misspelled_key_names_the_field_it_is_close_to_and_an_empty_list_reads_as_such():
    """Issue 63 part 4: the tool's words, not the library's ("recipie: Extra inputs are not
    permitted"; "List should have at least 1 item after validation, not 0")."""
    bad = minimal(recipie={"batch_size": 2}, lrs=[], zzz=1)
    with pytest.raises(SpecError) as e:
        parse_spec(bad, "bad.yaml")
    text = "\n".join(e.value.problems)
    assert "recipie: not a field of this section; did you mean 'recipe'?" in text, text
    assert "lrs: must not be empty" in text and "zzz: not a field of this section" in text, text
    assert "did you mean" not in text.split("zzz:")[1].splitlines()[0]  # nothing close: no guess


def test_a_misspelled_method_task_or_optimizer_names_the_one_it_is_close_to():
    bad = minimal(methods=[{"name": "sftt"}, {"name": "zzzz"}], optimizers=["adamww"],
                  tasks={"learn": {"name": "toy_fact"}, "retain": [{"name": "toy_arith"}]})
    with pytest.raises(SpecError) as e:
        parse_spec(bad, "bad.yaml")
    text = "\n".join(e.value.problems)
    assert "methods.0.name: unknown method 'sftt'; did you mean 'sft'?" in text, text
    assert "optimizers.0: unknown optimizer 'adamww'; did you mean 'adamw'?" in text, text
    assert "tasks.learn.name: unknown task 'toy_fact'; did you mean 'toy_facts'?" in text, text
    assert "unknown method 'zzzz'; valid:" in text  # nothing close: no guess


def test_validate_lists_key_data_and_model_problems_in_one_run_and_a_yaml_error_alone(tmp_path):
    """Issue 63 part 2: a misspelled key, a missing data file and a missing local model folder in
    one list (the relative paths shown resolved), not in rounds; a YAML error stands alone with
    its file, line and column."""
    text = f"""
name: t
models: [{{name: m, path: ./no-such-model}}]
methods: [{{name: sft}}]
lrs: [1.0e-3]
epochz: [1]
tasks:
  learn: {{name: dataset, params: {{path: data/missing.jsonl}}}}
  retain: [{{name: toy_arith}}]
store: {tmp_path / 'store'}
"""
    path = tmp_path / "sweep.yaml"
    path.write_text(text)
    env = {**os.environ, "HF_ENDPOINT": "http://127.0.0.1:9"}  # a hub that does not answer, on loopback
    r = subprocess.run([sys.executable, "-m", "cliffsweep.cli", "validate", str(path)], capture_output=True,
                       text=True, cwd=tmp_path, env=env, timeout=300)
    assert r.returncode == 2, r.stdout + r.stderr
    assert "epochz: not a field of this section; did you mean 'epochs'?" in r.stderr, r.stderr
    assert f"models.0.path: ./no-such-model: no such folder on this machine, a relative path read as " \
           f"{tmp_path.resolve() / 'no-such-model'}" in r.stderr, r.stderr
    assert f"tasks.learn.params.path: data/missing.jsonl: no such file or folder (a relative path, read as " \
           f"{tmp_path.resolve() / 'data' / 'missing.jsonl'})" in r.stderr, r.stderr
    assert "Traceback" not in r.stderr
    path.write_text(text + "resources: {workers_per_trial: 1\n")  # a flow mapping never closed
    r = subprocess.run([sys.executable, "-m", "cliffsweep.cli", "validate", str(path)], capture_output=True,
                       text=True, cwd=tmp_path, env=env, timeout=300)
    assert r.returncode == 2 and f"{path}: 1 problem(s)" in r.stderr and "line 12, column 1: not valid YAML" in r.stderr, r.stderr
