"""lm-evaluation-harness tasks on cliffsweep's evaluators (issue 30 part 2, evals/harness.py):
item for item the same results as lm-eval's own `hf` model on the same weights, for lm-eval's own
gsm8k definition (generation, pointed at the repository's GSM8K file) and a custom multiple-choice
YAML over the SciKnowEval file (log-likelihood); and the errors a user meets before anything runs."""

from __future__ import annotations

import math
from pathlib import Path

import pytest

from cliffsweep.evals.tasks import build_task

DATA = Path(__file__).parent / "data"
GSM8K = {"dataset_path": "json", "dataset_name": None,
         "dataset_kwargs": {"data_files": {"train": str(DATA / "gsm8k/train.jsonl.gz"),
                                           "test": str(DATA / "gsm8k/test.jsonl.gz")}},
         # lm-eval's own stops; a short budget keeps the CPU run short (both sides use it)
         "generation_kwargs": {"until": ["Question:", "</s>", "<|im_end|>"], "do_sample": False, "temperature": 0.0,
                               "max_gen_toks": 40}}

MCQ_YAML = """task: chem_molar_weight_mcq
dataset_path: json
dataset_name: null
dataset_kwargs:
  data_files:
    test: {data}
test_split: test
output_type: multiple_choice
doc_to_text: "Question: {{{{question}}}}\\nAnswer:"
doc_to_choice: "{{{{choices.text}}}}"
doc_to_target: "{{{{choices.label.index(answerKey)}}}}"
metric_list:
  - metric: acc
    aggregation: mean
    higher_is_better: true
  - metric: acc_norm
    aggregation: mean
    higher_is_better: true
metadata:
  version: 1.0
"""


def mcq_folder(tmp_path: Path) -> str:
    folder = tmp_path / "tasks"
    folder.mkdir()
    (folder / "chem_mcq.yaml").write_text(MCQ_YAML.format(data=DATA / "sciknoweval-chem-l3/molar_weight_calculation.jsonl.gz"))
    return str(folder)


def test_an_unknown_task_is_refused_with_the_close_names():
    problems = build_task("lm_eval", {"task": "gsm8kk"}).data_problems()
    assert len(problems) == 1 and "'gsm8kk' is not an lm-eval task" in problems[0] and "'gsm8k'" in problems[0], problems


def test_a_task_whose_data_cannot_be_reached_says_how_to_point_it_at_local_files():
    missing = {**GSM8K, "dataset_kwargs": {"data_files": {"test": "/nonexistent/test.jsonl"}}}
    (problem,) = build_task("lm_eval", {"task": "gsm8k", "overrides": missing}).data_problems()
    assert "did not load" in problem and "dataset_kwargs" in problem and "data_files" in problem, problem


def test_params_say_what_does_not_apply():
    from pydantic import ValidationError

    with pytest.raises(ValidationError, match="limit"):
        build_task("lm_eval", {"task": "gsm8k", "n_eval": 5})


def own_and_ours(spec_params: dict, limit: int):
    """lm-eval's own run (its HF model) and ours (the HF evaluator backend) on SmolLM2-135M."""
    from lm_eval import simple_evaluate
    from lm_eval.models.huggingface import HFLM

    from cliffsweep.evals.backends.hf_backend import HFBackend
    from cliffsweep.evals.harness import evaluate_lm_eval
    from cliffsweep.realmodels import ensure_smollm2

    path = ensure_smollm2()
    task = build_task("lm_eval", {**spec_params, "limit": limit})
    assert task.data_problems() == []
    own = simple_evaluate(model=HFLM(pretrained=path, device="cpu", batch_size=8, dtype="float32"),
                          tasks=[task.lm_eval_spec()], num_fewshot=spec_params.get("num_fewshot"), limit=limit,
                          log_samples=True, bootstrap_iters=0, task_manager=task.manager(), verbosity="ERROR")
    ours = evaluate_lm_eval(HFBackend(path, batch_size=8), task)
    return task, own, ours


@pytest.mark.slow
def test_lm_evals_own_gsm8k_gives_the_same_items_through_our_evaluator():
    task, own, ours = own_and_ours({"task": "gsm8k", "num_fewshot": 1, "overrides": GSM8K}, limit=6)
    name = "gsm8k"
    assert ours.n == 6 and task.primary().metric == "exact_match" and task.primary().filter == "strict-match"
    assert ours.accuracy == own["results"][name]["exact_match,strict-match"]
    assert ours.extra["exact_match,flexible-extract"] == own["results"][name]["exact_match,flexible-extract"]
    theirs = {(s["doc_id"], s["filter"]): s for s in own["samples"][name]}
    for item_id, correct, prediction in ours.samples:
        s = theirs[(int(item_id.split("/")[1]), "strict-match")]
        assert prediction == str(s["filtered_resps"][0]) and correct == (s["exact_match"] == 1.0), (item_id, prediction, s)
    # The raw generations too (the flexible filter reads more of them than the strict one).
    flexible = sorted((s["doc_id"], str(s["filtered_resps"][0])) for s in own["samples"][name] if s["filter"] == "flexible-extract")
    assert len(flexible) == 6


@pytest.mark.slow
def test_a_custom_multiple_choice_yaml_gives_lm_evals_own_log_likelihoods(tmp_path):
    task, own, ours = own_and_ours({"task": "chem_molar_weight_mcq", "include_path": mcq_folder(tmp_path)}, limit=8)
    name = "chem_molar_weight_mcq"
    assert task.primary().metric == "acc" and ours.n == 8
    assert ours.accuracy == own["results"][name]["acc,none"]
    assert ours.extra["acc_norm,none"] == own["results"][name]["acc_norm,none"]
    theirs = {s["doc_id"]: s for s in own["samples"][name]}
    for item_id, correct, _ in ours.samples:
        assert correct == (theirs[int(item_id.split("/")[1])]["acc"] == 1.0), item_id
    # The log-likelihoods themselves, not only the argmax: batching differs (fp32 on a CPU).
    from cliffsweep.evals.backends.hf_backend import HFBackend
    from cliffsweep.evals.harness import BackendLM
    from cliffsweep.realmodels import ensure_smollm2

    lm = BackendLM(HFBackend(ensure_smollm2()))
    s = own["samples"][name][0]
    pairs = [a for a in s["arguments"]]
    mine = lm.loglikelihood([type("R", (), {"args": a})() for a in pairs])
    for (lp, greedy), (their_lp, their_greedy) in zip(mine, [r[0] for r in s["resps"]]):
        assert math.isclose(lp, their_lp, rel_tol=1e-4, abs_tol=1e-3) and greedy == their_greedy


def test_validate_refuses_an_unknown_lm_eval_task_and_a_task_listed_twice(tmp_path, capsys):
    import yaml

    from cliffsweep.cli import main

    sweep = tmp_path / "sweep.yaml"
    toy = {"name": "lm_eval", "params": {"task": "toy_arith_lm", "include_path": "toy"}}
    sweep.write_text(yaml.safe_dump({
        "name": "x", "models": [{"name": "q", "path": "toy:qwen2-tiny"}], "methods": [{"name": "sft"}],
        "lrs": [1e-3], "epochs": [1], "store": str(tmp_path / "store"),
        "tasks": {"learn": {"name": "toy_facts"},
                  "retain": [toy, {"name": "lm_eval", "params": {"task": "arc_easyy"}}, toy]}}))
    assert main(["validate", str(sweep)]) == 2
    err = capsys.readouterr().err
    assert "tasks.retain.1 (lm_eval:arc_easyy): lm_eval task 'arc_easyy' is not an lm-eval task" in err, err
    assert "'arc_easy'" in err and "tasks.retain.2: the same task as tasks.retain.0 (lm_eval:toy_arith_lm)" in err, err
    assert not (tmp_path / "store").exists()


def test_a_method_that_needs_retain_data_gets_it_from_retain_data_not_from_a_benchmark_without_one(tmp_path, capsys):
    """Replay and the statistics methods draw D_R from a training split: an lm-eval benchmark
    first in tasks.retain has none here (toy_arith_lm is evaluation only), which validate says;
    tasks.retain_data names the data instead (issue 31: the replay source as a task setting)."""
    import yaml

    from cliffsweep.cli import main
    from cliffsweep.orchestrator.specfile import load_spec

    data = {"name": "x", "models": [{"name": "q", "path": "toy:qwen2-tiny"}],
            "methods": [{"name": "sft"}, {"name": "replay"}], "lrs": [1e-3], "epochs": [1],
            "store": str(tmp_path / "store"),
            "tasks": {"learn": {"name": "toy_facts"},
                      "retain": [{"name": "lm_eval", "params": {"task": "toy_arith_lm", "include_path": "toy"}}]}}
    sweep = tmp_path / "sweep.yaml"
    sweep.write_text(yaml.safe_dump(data))
    assert main(["validate", str(sweep)]) == 2
    err = capsys.readouterr().err
    assert "tasks.retain.0: the methods ['replay'] draw retain data D_R from it" in err and "has no training split" in err, err
    data["tasks"]["retain_data"] = {"name": "toy_arith"}
    sweep.write_text(yaml.safe_dump(data))
    assert main(["validate", str(sweep)]) == 0, capsys.readouterr().err
    assert load_spec(sweep).tasks.replay.name == "toy_arith"


def test_an_lm_eval_task_that_samples_runs_as_its_yaml_says():
    """Issue 40 part 2: a task whose generation_kwargs sample (do_sample, temperature > 0) with
    `repeats` (lm-eval sends each request that many times) is run, not refused: the copies of a
    request are different samples, the same call draws the same samples again (seeded per copy,
    evals/harness.py), and greedy requests beside them stay greedy. Then lm-eval's own toy task,
    its YAML overridden to sample 3 times and vote, through the evaluator's lm-eval path."""
    from types import SimpleNamespace

    from cliffsweep.evals.backends import build_backend
    from cliffsweep.evals.harness import BackendLM
    from cliffsweep.evals.runner import evaluate_task
    from cliffsweep.evals.tasks import build_task
    from cliffsweep.models import resolve_model

    backend = build_backend("hf", resolve_model("toy:qwen2-tiny"), batch_size=8)
    try:
        lm = BackendLM(backend)
        greedy = {"until": ["<|im_end|>"], "do_sample": False, "max_gen_toks": 16}
        sampled = {**greedy, "do_sample": True, "temperature": 2.5}
        prompt = "<|im_start|>user\nWhat is 12 + 9 ?<|im_end|>\n<|im_start|>assistant\n"
        reqs = [SimpleNamespace(args=(prompt, sampled)) for _ in range(6)] + [SimpleNamespace(args=(prompt, greedy))]
        first, again = lm.generate_until(reqs), lm.generate_until(reqs)
        assert first == again and len(set(first[:6])) > 1, first
        assert first[6] == backend.complete([lm.tok_encode(prompt)], 16, ["<|im_end|>"])[0]
        task = build_task("lm_eval", {"task": "toy_arith_lm", "include_path": "toy", "apply_chat_template": True,
                                      "limit": 8, "overrides": {
                                          "repeats": 3, "generation_kwargs": {**sampled, "temperature": 0.7},
                                          "filter_list": [{"name": "vote", "filter": [
                                              {"function": "regex", "regex_pattern": "#### (\\-?[0-9]+)"},
                                              {"function": "majority_vote"}, {"function": "take_first"}]}]}})
        res = evaluate_task(backend, task)
    finally:
        backend.close()
    assert res.n == 8 and "exact_match,vote" in res.extra and 0 <= res.accuracy <= 1, res


def test_an_lm_eval_generate_task_accepts_sampling_with_repeats():
    """Issue 52 part 4: `sampling` on an lm-eval generate task (004's benchmarks: avg@k, pass@k)
    runs its n repeats beside the greedy pass, each repeat scored alone through the task's own
    filter and metric: avg@n and pass@k as the native tasks store them, every sample kept, the
    same samples again on a second run (seeded per item and repeat). A log-likelihood task says it
    has nothing to sample; `sampling` and `overrides.repeats` together are refused."""
    import math

    from cliffsweep.evals.backends import build_backend
    from cliffsweep.evals.runner import evaluate_task
    from cliffsweep.evals.tasks import build_task
    from cliffsweep.models import resolve_model

    params = {"task": "toy_arith_lm", "include_path": "toy", "apply_chat_template": True, "limit": 6,
              "sampling": {"n": 4, "temperature": 1.0, "k": [1, 4]}}
    task = build_task("lm_eval", params)
    backend = build_backend("hf", resolve_model("toy:qwen2-tiny"), batch_size=8)
    try:
        res, again = evaluate_task(backend, task), evaluate_task(backend, task)
    finally:
        backend.close()
    assert res.n == 6 and len(res.draws) == 6 * 4 and res.draws == again.draws
    assert sorted({j for _, j, _, _ in res.draws}) == [0, 1, 2, 3]
    counts: dict[str, int] = {}
    for item, _, ok, _ in res.draws:
        counts[item] = counts.get(item, 0) + ok
    assert sorted(counts) == sorted(i for i, _, _ in res.samples)
    assert res.extra["avg@4"] == pytest.approx(sum(counts.values()) / 24)
    assert res.extra["pass@4"] == pytest.approx(sum(c > 0 for c in counts.values()) / 6)
    assert res.extra["pass@1"] == pytest.approx(sum(1 - math.comb(4 - c, 1) / 4 for c in counts.values()) / 6)
    with pytest.raises(Exception, match="not both"):
        build_task("lm_eval", {**params, "overrides": {"repeats": 2}})


def test_the_task_index_kept_on_disk_is_keyed_by_the_installation_it_names(tmp_path, monkeypatch):
    """The index kept on disk holds every task YAML's absolute path: an index built by another
    installation of lm-eval (another virtual environment at another place, same version) must not
    be used here, or every task fails to load for files this one lacks (it did, 2026-12-07: an
    index CI's checkout had built)."""
    import shutil

    import cliffsweep.evals.tasks.lm_eval as lm_eval_task

    here = lm_eval_task._lm_eval_tasks_dir()
    key = lm_eval_task._fingerprint([here])
    assert lm_eval_task._fingerprint([here]) == key  # the same installation: the index is reused
    other = tmp_path / "other-venv" / "lm_eval" / "tasks"  # the same version installed elsewhere
    shutil.copytree(Path(here) / "gsm8k", other / "gsm8k")
    monkeypatch.setattr(lm_eval_task, "_lm_eval_tasks_dir", lambda: str(other))
    assert lm_eval_task._fingerprint([str(other)]) != key
