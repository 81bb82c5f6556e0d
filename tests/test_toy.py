"""The toy world: tokenizer, tasks, packaged base models (fingerprint, vLLM scores, rebuild)."""

from __future__ import annotations

import json

import pytest
from transformers import AutoTokenizer

from cliffsweep.chat import encode_pair
from cliffsweep.evals.tasks.base import EvalExample
from cliffsweep.toy import TOY_MODELS
from cliffsweep.toy.cache import ensure_model
from cliffsweep.toy import vocab as V
from cliffsweep.toy.build import fingerprint
from cliffsweep.toy.models import WEIGHTS_DIR, random_model
from cliffsweep.toy.tasks import LEARN_VALUES, ToyArith, ToyFacts, old_customs, world
from cliffsweep.toy.tokenizer import EOS, build_tokenizer


RETAIN_MIN = 0.3
"""Chance on toy_arith is ~0 (a free-form number): the base models must be well above it
(checked on the default sweep's base evaluations, through vLLM: tests/test_toy_regimes.py)."""
REBUILD_RETAIN_MIN = 0.15
"""A rebuild's floor (test_rebuild_...): still well above chance, lower than the packaged models'
because a rebuild's weights depend on the machine's CPU kernels. On this project's CI machine on
2026-11-26, llama-tiny rebuilt to 0.23 with this session's code and with the code before it
alike (identical loss curves), where the packaged weights score 0.62."""
LEARN_MAX = 0.40
"""No base model knows the learn customs: one letter per relation scores 0.25 (LEARN_VALUES sit
on the four letters), and llama-tiny learned other customs for these entities (about 0.08)."""


@pytest.fixture(scope="module")
def hf_tokenizers(tmp_path_factory):
    """The tokenizer as transformers loads it from each architecture's folder (qwen2 folders
    go through Qwen2Tokenizer, llama folders through the generic backend)."""
    root = tmp_path_factory.mktemp("toy")
    return {n: AutoTokenizer.from_pretrained(random_model(n, str(root / n))) for n in TOY_MODELS}


def _task_texts() -> list[str]:
    arith, facts = ToyArith(), ToyFacts()
    texts = [t for e in arith.train_examples()[:200] for t in (e.prompt, e.response)]
    texts += [e.prompt for e in arith.eval_examples()[:50]]
    texts += [t for e in facts.train_examples() for t in (e.prompt, e.response)]
    texts += [e.prompt for e in facts.eval_examples()]
    return texts


def test_tokenizer_round_trip_keeps_spaces_and_newlines(hf_tokenizers):
    texts = _task_texts() + ["two  spaces\n\nblank line\tand tab, unknown wörds 1234 ok?"]
    for name, tok in hf_tokenizers.items():
        for text in texts:
            ids = tok(text, add_special_tokens=False)["input_ids"]
            assert tok.decode(ids) == text, (name, text)
            # Both loading paths must agree with the tokenizer we built.
            assert ids == build_tokenizer().encode(text).ids, (name, text)


def test_every_toy_word_is_one_token():
    tok = build_tokenizer()
    for word in V.all_words():
        assert len(tok.encode(word).ids) == 1, word
        assert len(tok.encode(" " + word).ids) == 1, word


def test_chat_template_masks_prompt_and_ends_with_eos(hf_tokenizers):
    for tok in hf_tokenizers.values():
        assert tok.eos_token == EOS and tok.pad_token_id is not None
        ids, labels = encode_pair(tok, "Ann has 3 apples.", "#### 3", 256)
        response = [i for i, lab in zip(ids, labels) if lab != -100]
        assert tok.decode(response) == "#### 3" + EOS
        assert ids[-1] == tok.eos_token_id


def test_tasks_are_deterministic_and_seeded():
    for cls in (ToyArith, ToyFacts):
        a, b, c = cls(), cls(), cls(cls.Params(seed=1))
        assert a.train_examples() == b.train_examples() and a.eval_examples() == b.eval_examples()
        assert a.eval_examples() != c.eval_examples()
        assert len(a.eval_examples()) == 200


def test_learn_eval_asks_the_trained_facts_with_another_phrasing():
    pretrain, learn = world()
    assert not {f.entity for f in pretrain} & {f.entity for f in learn}
    facts = ToyFacts()
    train_prompts = {e.prompt for e in facts.train_examples()}
    for e in facts.eval_examples():
        assert e.prompt not in train_prompts
        entity = next(f.entity for f in learn if f.entity in e.prompt)
        # ' Zorpim' and 'Zorpim' are different tokens: eval must use the one SFT trains.
        assert f" {entity}" in e.prompt and any(f" {entity}" in p for p in train_prompts)
    letters = [e.reference for e in facts.eval_examples()]
    assert all(letters.count(x) > 0 for x in "ABCD") and max(letters.count(x) for x in "ABCD") < 80


def test_learn_entities_share_one_custom_per_relation_and_old_customs_differ():
    """The learn world (tasks.py): every learn entity has the relation's LEARN_VALUES value, the
    four values sit on the four letters (so always answering one letter scores 0.25), and each
    old custom (what llama-tiny was pretrained on) differs from the one SFT teaches."""
    pretrain, learn = world()
    assert {(f.relation, f.value) for f in learn} == set(LEARN_VALUES.items())
    letters = {V.MCQ_LETTERS[V.RELATIONS[r].index(v)] for r, v in LEARN_VALUES.items()}
    assert letters == set(V.MCQ_LETTERS)
    old = old_customs()
    assert [(f.entity, f.relation) for f in old] == [(f.entity, f.relation) for f in learn]
    assert all(o.value != f.value and o.value in V.RELATIONS[o.relation] for o, f in zip(old, learn))
    # The pretraining entities' values are still drawn per entity: the base models' own world.
    assert len({f.value for f in pretrain if f.relation == "pet"}) == 4


def test_scorers_on_known_answers():
    arith = ToyArith()
    for ex, ev in zip(arith.train_examples()[:20], arith.eval_examples()[:20]):
        answer = ex.response.rsplit("#### ", 1)[1]
        right, wrong = EvalExample("x", "q", answer), EvalExample("x", "q", str(int(answer) + 1))
        assert arith.score(ex.response, right).correct
        assert arith.score(ex.response, right).extra["strict_match"]
        assert not arith.score(ex.response, wrong).correct
        assert arith.score(f"so #### {ev.reference}", ev).correct
    facts = ToyFacts()
    b = EvalExample("x", "q", "B")
    assert facts.score("B", b).correct and facts.score("B.", b).correct
    assert not facts.score("C", b).correct and not facts.score("", b).correct


def test_packaged_weights_match_manifest():
    manifest = json.loads((WEIGHTS_DIR / "manifest.json").read_text())
    assert set(manifest) == set(TOY_MODELS)
    for name in TOY_MODELS:
        folder = ensure_model(name)
        assert folder == str(WEIGHTS_DIR / name)
        assert fingerprint(folder) == manifest[name]["sha256"], name


def test_build_is_deterministic_on_one_machine():
    import torch

    from cliffsweep.toy.build import BaseRecipe, pretrain

    both_stages = BaseRecipe(steps=8, deepen=4, old_customs=True)
    a, _ = pretrain("qwen2-tiny", 0, both_stages, log_every=0)
    b, _ = pretrain("qwen2-tiny", 0, both_stages, log_every=0)
    c, _ = pretrain("qwen2-tiny", 1, both_stages, log_every=0)
    assert all(torch.equal(x, y) for x, y in zip(a.state_dict().values(), b.state_dict().values()))
    assert not all(torch.equal(x, y) for x, y in zip(a.state_dict().values(), c.state_dict().values()))


@pytest.mark.seeds
def test_rebuild_gives_a_base_model_like_the_packaged_one(tmp_path):
    """The build script still makes the toy world's base model: retain well above chance, learn
    near chance, as the packaged weights do. Not bit-for-bit: the same seed gives the same
    weights on one machine (test above), not across machines: a rebuild on another machine
    differed from the packaged weights by up to 0.5 (most likely CPU kernels, e.g. AVX2 vs
    AVX-512 reductions, amplified over 1000 steps). llama-tiny (one stage, about 95 s alone, 184 s
    in CI's slow stage); the deep qwen2-tiny (about 300 s) is rebuilt with other seeds by
    tests/test_toy_seeds.py. With those, under `pytest -m seeds` (run it after changing
    toy/build.py): the build script is used only to remake the packaged weights, and CI's time
    is spent on what every sweep runs (issue 33)."""
    from cliffsweep.toy.build import BaseRecipe, build_model, greedy_accuracy
    from cliffsweep.models import load_model

    manifest = json.loads((WEIGHTS_DIR / "manifest.json").read_text())
    name = "llama-tiny"
    entry = manifest[name]
    recipe = BaseRecipe(steps=entry["steps"], deepen=entry["deepen"], old_customs=entry["old_customs"])
    out = build_model(name, str(tmp_path / name), entry["seed"], recipe)
    model, tok = load_model(out)
    arith = greedy_accuracy(model, tok, ToyArith(ToyArith.Params(n_eval=100)))
    facts = greedy_accuracy(model, tok, ToyFacts(ToyFacts.Params(n_eval=200)))
    assert arith >= REBUILD_RETAIN_MIN, arith
    assert facts <= LEARN_MAX, facts
