"""GSM8K against lm-evaluation-harness 0.4.13's own code (installed by scripts/setup.sh).

lm-eval's `gsm8k` task is built from its own gsm8k.yaml, on the real GSM8K files instead of the
hub, and scores completions with its own filters (`strict-match`, `flexible-extract`) and its
own `exact_match` (ConfigurableTask.process_results), exactly as its evaluator does. Our
`strict_match` and `flexible_extract` must give its verdict on every completion: all gold
answers, a table of tricky ones, and thousands of random ones. Our fewshot_chat prompts must
equal the contexts lm-eval builds with --apply_chat_template --fewshot_as_multiturn.
"""

from __future__ import annotations

import json
import random
import re
from pathlib import Path

import pytest
import realdata
import yaml

from cliffsweep.evals.backends.base import render_chat
from cliffsweep.evals.scoring import gsm8k_reference, gsm8k_score
from cliffsweep.evals.tasks import build_task
from cliffsweep.evals.tasks.gsm8k import LM_EVAL_MAX_GEN_TOKS, LM_EVAL_STOP

GSM8K_DIR = realdata.folder() / "gsm8k"
FILTERS = {"strict-match": "strict_match", "flexible-extract": "flexible_extract"}


def _jsonl(name: str) -> list[dict]:
    return [json.loads(line) for line in (GSM8K_DIR / name).read_text().splitlines() if line.strip()]


@pytest.fixture(scope="module")
def lm_task(tmp_path_factory):
    """lm-eval's gsm8k ConfigurableTask: its YAML, only the data source swapped for the files."""
    import lm_eval
    from lm_eval.api.task import ConfigurableTask

    assert lm_eval.__version__ == "0.4.13"
    cfg = yaml.safe_load((Path(lm_eval.__file__).parent / "tasks" / "gsm8k" / "gsm8k.yaml").read_text())
    assert cfg["metadata"]["version"] == 3.0
    cfg.pop("tag")
    cfg.pop("dataset_name")
    cfg["dataset_path"] = "json"
    cfg["dataset_kwargs"] = {"data_files": {s: str(GSM8K_DIR / f"{s}.jsonl") for s in ("train", "test")},
                             "cache_dir": str(tmp_path_factory.mktemp("hf_datasets"))}
    task = ConfigurableTask(config=cfg)
    assert [f.name for f in task._filters] == list(FILTERS)
    return task


def lm_eval_verdicts(task, docs: list[dict], completions: list[str], evaluator_route: bool = False
                     ) -> list[dict[str, bool]]:
    """lm-eval's verdicts, per completion: instances with one response each, every filter
    ensemble of the task applied, then its exact_match with the YAML's arguments against the
    gold answer. evaluator_route=True calls process_results(doc, [filtered response]) as its
    evaluator does; the same metric call, but it compiles the doc_to_target template on every
    call (~4 ms), too slow for tens of thousands of completions."""
    from lm_eval.api.instance import Instance

    insts = [Instance("generate_until", doc, ("", {}), 0, ("gsm8k", i, 1)) for i, doc in enumerate(docs)]
    for inst, completion in zip(insts, completions):
        inst.resps = [completion]
    for ensemble in task._filters:
        ensemble.apply(insts)
    metric, kwargs = task._metric_fn_list["exact_match"], task._metric_fn_kwargs["exact_match"]

    def verdict(inst, key):
        if evaluator_route:
            return task.process_results(inst.doc, [inst.filtered_resps[key]])["exact_match"] == 1.0
        return metric(references=[inst.doc["answer"]], predictions=[inst.filtered_resps[key]], **kwargs)[
            "exact_match"] == 1.0

    return [{ours: verdict(inst, theirs) for theirs, ours in FILTERS.items()} for inst in insts]


def our_verdicts(docs: list[dict], completions: list[str]) -> list[dict[str, bool]]:
    out = []
    for doc, completion in zip(docs, completions):
        extra = gsm8k_score(completion, gsm8k_reference(doc["answer"])).extra
        out.append({k: extra[k] for k in FILTERS.values()})
    return out


def _assert_same(lm_task, docs, completions):
    theirs, ours = lm_eval_verdicts(lm_task, docs, completions), our_verdicts(docs, completions)
    diff = [(c, t, o) for c, t, o in zip(completions, theirs, ours) if t != o]
    assert not diff, f"{len(diff)} of {len(docs)} differ, e.g. (completion, lm-eval, ours): {diff[:3]}"
    return theirs


def test_gold_answers_and_variants_agree_with_lm_eval(lm_task):
    """Every test and train gold answer as written against its own reference; for the test
    questions also three variants and the gold of the next question (a wrong answer)."""
    test, train = _jsonl("test.jsonl"), _jsonl("train.jsonl")
    assert (len(test), len(train)) == (1319, 7473)
    rows, completions = test + train, [doc["answer"] for doc in test + train]
    for i, doc in enumerate(test):
        gold, final = doc["answer"], doc["answer"].rsplit("#### ", 1)[1]
        variants = [gold.replace("#### ", ""),                      # no marker: flexible only
                    gold.rsplit("\n", 1)[0] + f"\nThe answer is ${final}.00.",
                    gold + "\n\nQuestion 2: 1 + 1",                # rambles on
                    test[(i + 1) % len(test)]["answer"]]            # another question's answer
        rows += [doc] * len(variants)
        completions += variants
    verdicts = _assert_same(lm_task, rows, completions)
    # The shortcut (gold = doc["answer"], the metric called directly) is lm-eval's own route:
    assert all(lm_task.doc_to_target(doc) == doc["answer"] for doc in rows[:: 200])
    some = slice(0, len(rows), 97)
    assert lm_eval_verdicts(lm_task, rows[some], completions[some], evaluator_route=True) == verdicts[some]
    golds = verdicts[: len(test) + len(train)]
    assert all(v == {"strict_match": True, "flexible_extract": True} for v in golds)


TRICKY = [
    # completion, reference, lm-eval strict, lm-eval flexible, our numeric_match
    ("so #### 18", "18", True, True, True),
    ("#### 18.00", "18", False, False, True),          # strings, not numbers
    ("#### 007", "7", False, False, True),
    ("#### -0", "0", False, False, True),
    ("The answer is 42...", "42", False, False, True),  # only one trailing '.' is ignored
    ("The answer is 42.", "42", False, True, True),
    ("It costs $1,000.00", "1000", False, False, True),
    ("It costs $1,000.", "1000", False, True, True),
    ("#### 9007199254740993", "9007199254740992", False, False, False),  # 2**53 + 1 vs 2**53
    ("#### 9007199254740992", "9007199254740992", True, True, True),
    ("####18", "18", False, True, True),               # strict needs '#### '
    ("#### 18\nThat is 2 dozen less.", "18", True, False, True),
    ("#### 5 apples, #### 6 pears", "5", True, False, True),
    ("A total of -5 degrees.", "-5", False, True, True),
    ("The loss is $-5.", "-5", False, True, True),     # lm-eval takes "-5." (no "$" before a "-")
    ("He has 1,2,3 marbles", "123", False, True, True),
    ("", "4", False, False, False),
    ("I don't know.", "4", False, False, False),
    ("\\boxed{72}", "72", False, True, True),
    ("The answer is 72 (seventy-two)", "72", False, True, True),
    ("x = 3.5, so 7/2", "3.5", False, False, False),
]


@pytest.mark.parametrize("completion,ref,strict,flexible,numeric", TRICKY)
def test_tricky_completions(lm_task, completion, ref, strict, flexible, numeric):
    doc = {"question": "?", "answer": f"work\n#### {ref}"}
    (theirs,) = lm_eval_verdicts(lm_task, [doc], [completion], evaluator_route=True)
    assert theirs == {"strict_match": strict, "flexible_extract": flexible}
    extra = gsm8k_score(completion, gsm8k_reference(doc["answer"])).extra
    assert extra == {"strict_match": strict, "flexible_extract": flexible, "numeric_match": numeric}
    assert gsm8k_score(completion, ref).extra == extra  # the bare number as reference: same verdicts


PIECES = ["#### ", "####", "# ", "$", ",", ".", "..", "-", "--", " ", "\n", "0", "00", "7", "18", "18.00", "1,000",
          "3.5", "-0", "The answer is ", " apples", "Question:", "x", "<<4*5=20>>", "1e3", "½", "٣", "\\boxed{", "}"]


def test_random_completions_agree_with_lm_eval(lm_task):
    rng = random.Random(0)
    refs = ["18", "7", "0", "1000", "20", "3.5", "-5", "9007199254740993"]
    docs, completions = [], []
    for _ in range(4000):
        docs.append({"question": "?", "answer": f"work\n#### {rng.choice(refs)}"})
        pieces = [rng.choice(PIECES + refs) for _ in range(rng.randint(0, 10))]
        if rng.random() < 0.3:  # often a marked answer somewhere, as models write them
            pieces.insert(rng.randint(0, len(pieces)), "#### " + rng.choice(refs))
        completions.append("".join(pieces))
    verdicts = _assert_same(lm_task, docs, completions)
    # The sample is not trivial: both metrics say yes and no many times.
    for k in FILTERS.values():
        assert 100 < sum(v[k] for v in verdicts) < 3900, k


def _lm_eval_contexts(lm_task, tokenizer, limit: int) -> list[tuple[str, dict]]:
    """(context, gen_kwargs) lm-eval builds for the first `limit` test questions with
    --num_fewshot 5 --apply_chat_template --fewshot_as_multiturn and its default seed."""
    def chat_template(history, add_generation_prompt=True):
        # lm-eval's HFLM/VLLM.apply_chat_template without the system-role retry.
        return tokenizer.apply_chat_template(history, tokenize=False, add_generation_prompt=add_generation_prompt,
                                             continue_final_message=not add_generation_prompt)

    lm_task.set_fewshot_seed(1234)  # simple_evaluate's default fewshot_random_seed
    lm_task.build_all_requests(limit=limit, rank=0, world_size=1, apply_chat_template=True,
                               fewshot_as_multiturn=True, chat_template=chat_template)
    return [inst.args for inst in sorted(lm_task.instances, key=lambda x: x.doc_id)]


def test_fewshot_chat_prompts_equal_lm_eval_contexts(lm_task):
    from transformers import AutoTokenizer

    from cliffsweep.toy.cache import ensure_model

    tok = AutoTokenizer.from_pretrained(ensure_model("qwen2-tiny"))
    # lm-eval renders templates slowly (~35 ms a question): the first 150 questions.
    theirs = _lm_eval_contexts(lm_task, tok, limit=150)
    task = build_task("gsm8k", {"path": str(GSM8K_DIR), "n_eval": 1319})
    ours = task.eval_examples()
    assert [ex.id for ex in ours] == [f"test-{i}" for i in range(1319)] and len(theirs) == 150
    for (context, gen_kwargs), ex in zip(theirs, ours):
        assert render_chat(tok, ex.chat()) == context, ex.id
    assert context.count("Question:") == 6 and task.params.num_fewshot == 5
    assert tuple(gen_kwargs["until"]) == LM_EVAL_STOP == task.sampling.stop
    assert "max_gen_toks" not in gen_kwargs and task.sampling.max_tokens == LM_EVAL_MAX_GEN_TOKS
    # ... which is lm-eval's model default when the task sets none (vllm_causallms.VLLM).
    import lm_eval

    source = (Path(lm_eval.__file__).parent / "models" / "vllm_causallms.py").read_text()
    assert re.search(r"max_gen_toks: int = (\d+)", source).group(1) == str(LM_EVAL_MAX_GEN_TOKS)
    # A seeded subset keeps each question's own shots.
    sub = build_task("gsm8k", {"path": str(GSM8K_DIR), "n_eval": 20, "seed": 3}).eval_examples()
    assert any(int(ex.id.split("-")[1]) >= 150 for ex in sub)
    by_id = {ex.id: ex for ex in ours}
    assert all(ex == by_id[ex.id] for ex in sub)
