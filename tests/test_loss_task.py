"""Loss as a task (issue 30 part 4): held-out NLL, lower is better, from prompt log-probabilities
(evals/tasks/loss.py, evals/runner.evaluate_loss), and how analysis reads it (points.scores_of)."""

from __future__ import annotations

import json
import math

import numpy as np
import pandas as pd
import pytest
import torch

from cliffsweep.evals.tasks import build_task
from cliffsweep.evals.tasks.rows import DataError


def test_a_loss_task_names_one_source_and_its_bad_rows():
    with pytest.raises(ValueError, match="exactly one source"):
        build_task("loss", {})
    with pytest.raises(ValueError, match="exactly one source"):
        build_task("loss", {"path": "a.txt", "of": {"name": "toy_arith"}})
    with pytest.raises(ValueError, match="a text file has none"):
        build_task("loss", {"path": "a.txt", "split": "train"})
    assert build_task("loss", {"of": {"name": "toy_arith"}}).label == "loss:toy_arith"
    assert build_task("loss", {"of": {"name": "toy_arith"}, "split": "train"}).label == "loss:toy_arith:train"
    assert build_task("loss", {"path": "/x/held.txt"}).label == "loss:held"
    with pytest.raises(NotImplementedError, match="no training split"):
        build_task("loss", {"path": "a.txt"}).train_examples()
    assert len(build_task("loss", {"of": {"name": "toy_arith"}}).train_examples()) > 100  # learns from `of`


def test_a_malformed_text_row_names_its_file_and_line(tmp_path):
    f = tmp_path / "held.jsonl"
    f.write_text(json.dumps({"text": "fine"}) + "\n\n" + json.dumps({"txt": "no"}) + "\n")
    task = build_task("loss", {"path": str(f)})
    assert task.data_problems() == [f"{f}:3: a row needs a non-empty string field 'text'"]
    with pytest.raises(DataError, match="held.jsonl:3"):
        task.items()
    assert build_task("loss", {"path": str(tmp_path / "none.txt")}).data_problems() == [
        f"{tmp_path / 'none.txt'}: no such text file"]


def _manual_nll(model, context: list[int], scored: list[int]) -> float:
    """Mean NLL of `scored` after `context`, from one plain forward pass."""
    ids = torch.tensor([context + scored])
    with torch.no_grad():
        logp = torch.log_softmax(model(input_ids=ids).logits.float(), -1)[0]
    return -float(sum(logp[len(context) - 1 + k, t] for k, t in enumerate(scored))) / len(scored)


def test_the_loss_is_each_items_mean_token_nll_and_the_toy_model_knows_its_text(tmp_path):
    """On the hf backend: each item's NLL is what a plain forward pass gives (documents of a text
    file from the BOS token, answers after the chat-rendered prompt), the primary is their mean,
    likelihood the mean exp(-NLL); and the toy model, taught worked arithmetic, has a far lower
    loss on toy_arith's worked solutions than a random model of the same shape."""
    from cliffsweep.evals.backends import build_backend
    from cliffsweep.evals.runner import evaluate_task, loss_pairs
    from cliffsweep.models import load_model, resolve_model
    from cliffsweep.toy.models import random_model

    path = resolve_model("toy:qwen2-tiny")
    model, tok = load_model(path)
    backend = build_backend("hf", path, batch_size=3)
    text = tmp_path / "held.txt"
    text.write_text("Mia has 3 apples.\n\nShe buys 4 more. 3 + 4 = 7.\n" * 4)
    arith = {"name": "toy_arith", "params": {"n_eval": 8}}
    for params in ({"path": str(text), "n_eval": 8}, {"of": arith, "n_eval": 8}, {"of": arith, "split": "train", "n_eval": 8}):
        task = build_task("loss", params)
        res = evaluate_task(backend, task)
        pairs = loss_pairs(tok, task.items(), "", task.params.max_doc_tokens)
        want = [_manual_nll(model, c, s) for c, s in pairs]
        np.testing.assert_allclose(res.scores, want, rtol=1e-4, atol=1e-4)
        assert res.metric == "loss" and res.accuracy == pytest.approx(np.mean(want), abs=1e-4) and res.n == 8
        assert res.extra["likelihood"] == pytest.approx(np.mean(np.exp(-np.array(want))), abs=1e-4)
        assert res.extra["perplexity"] == pytest.approx(math.exp(res.accuracy))
    taught = build_task("loss", {"of": {"name": "toy_arith"}, "split": "train", "n_eval": 16})
    known = evaluate_task(backend, taught).accuracy
    backend.close()
    rand = build_backend("hf", random_model("qwen2-tiny", str(tmp_path / "r"), seed=5), batch_size=4)
    unknown = evaluate_task(rand, taught).accuracy
    rand.close()
    assert known < unknown - 2.0, (known, unknown)


def _as_loss_store(src, dst, task: str):
    """A copy of a synthetic store whose retain task `task` is a loss task: each item's NLL is
    -log 0.95 when the accuracy store had it right and -log 0.05 when wrong, so the loss rises
    exactly where accuracy falls; evals rows as evaluate_loss writes them."""
    from cliffsweep.storage.store import Store

    s, d = Store(str(src)), Store(str(dst))
    ev, sm = s.read("evals"), s.read("samples")
    sm["score"] = np.where(sm["correct"], -math.log(0.95), -math.log(0.05))
    lt = f"loss:{task}"
    sm.loc[sm["task"] == task, "task"] = lt
    sm.loc[sm["task"] != lt, "score"] = np.nan
    per = sm[sm["task"] == lt].groupby(["trial_id", "step"])["score"]
    rows = []
    for (tid, step), nll in per:
        meta = ev[(ev["trial_id"] == tid) & (ev["step"] == step) & (ev["task"] == task)].iloc[0]
        for metric, v in (("loss", nll.mean()), ("likelihood", np.exp(-nll).mean()), ("perplexity", math.exp(nll.mean()))):
            rows.append(dict(meta, task=lt, metric=metric, value=float(v), scorer_version="loss-v1"))
    ev = pd.concat([ev[ev["task"] != task], pd.DataFrame(rows)], ignore_index=True)
    d.write("evals", "all", ev)
    d.write("samples", "all", sm)
    d.write("trials", "all", s.read("trials"))
    return d


def test_a_loss_series_with_a_known_regime_reads_as_that_regime(tmp_path):
    """Loss is lower-is-better: analysis reads it as the likelihood exp(-NLL), so the retention
    share is the likelihood's share of the base model's. A series whose loss jumps at one lr is a
    cliff, one whose loss climbs lr by lr is gradual: the same verdicts as the accuracies they were
    drawn from, with bootstrap confidence from the items' NLLs."""
    from cliffsweep.analysis.points import load_store
    from cliffsweep.analysis.run import analyze_store
    from cliffsweep.analysis.synthetic import SyntheticSweep, write_synthetic_store

    write_synthetic_store(str(tmp_path / "acc"), SyntheticSweep(series=(("sft", "sft"),), epochs=(1,)))
    _as_loss_store(tmp_path / "acc", tmp_path / "loss", "toy_arith")
    d = load_store(str(tmp_path / "loss"))
    assert d.retain_task == "loss:toy_arith"
    raw = d.points.set_index("point_id")["R"]
    acc = load_store(str(tmp_path / "acc")).points.set_index("point_id")["R"]
    np.testing.assert_allclose(raw, 0.05 + 0.9 * acc.loc[raw.index], atol=1e-9)  # mean of 0.95 / 0.05 per item
    loss_t = analyze_store(str(tmp_path / "loss"), str(tmp_path / "out_loss"), n_boot=60, report=False)
    acc_t = analyze_store(str(tmp_path / "acc"), str(tmp_path / "out_acc"), n_boot=60, report=False)
    assert loss_t["regime_point_estimate"].tolist() == acc_t["regime_point_estimate"].tolist() == ["cliff", "gradual"]
    assert (loss_t["confidence_method"] == "bootstrap").all()  # the items' own NLLs, not a binomial
    ev = pd.read_parquet(tmp_path / "out_loss" / "points.parquet")
    assert ev["R"].between(0, 1).all()


def test_plan_counts_no_generation_for_a_loss_task():
    """A loss task is prefill only: `plan` counts its items' prompts, no generations."""
    from cliffsweep.planner.plan import eval_load

    assert build_task("loss", {"path": "a.txt"}).sampling.max_tokens == 0
    assert eval_load([(150, 0), (100, 64)]) == (100, 6400)


def test_a_loss_item_longer_than_the_engine_is_cut_to_fit_and_a_prompt_that_fills_it_is_named():
    from cliffsweep.evals.runner import loss_pairs
    from cliffsweep.evals.tasks.loss import LossItem
    from cliffsweep.models import load_model, resolve_model

    _, tok = load_model(resolve_model("toy:qwen2-tiny"))
    doc = LossItem("d", "three apples and four pears " * 40)
    (context, scored), = loss_pairs(tok, [doc], "", 10_000, max_length=64)
    assert len(context) + len(scored) == 64 and len(scored) > 0
    ask = build_task("toy_arith", {"n_eval": 1}).eval_examples()[0]
    with pytest.raises(ValueError, match="loss item x: its prompt is .* tokens, the engine serves 8"):
        loss_pairs(tok, [LossItem("x", "12", ask)], "", 256, max_length=8)
