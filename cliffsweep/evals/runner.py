"""Evaluate one task on whatever checkpoint a backend currently serves.

Pure glue: all prompts go to the backend in one batched call (engines batch far better than a
loop), then every generation is scored by the task's own scorer. Multiple-choice tasks
(`task.choice_letters`) are also scored by log-probability: one more batched call returns the
log-probability of each letter as the start of the reply, and `logprob_accuracy` is whether the
most probable letter is the reference (the usual log-likelihood scoring of MCQ benchmarks; it
needs no answer extraction, so it separates "knows the answer" from "says it in a readable way").

Examples with a `group` (ChemL3's SciKnowEval task) also give `<metric>/<group>` for every
metric: per-subtask numbers, as SciKnowEval publishes them, beside the pooled ones.
"""

from __future__ import annotations

import time
from collections import defaultdict
from dataclasses import replace

from cliffsweep.evals.backends.base import Backend
from cliffsweep.evals.scoring import logprob_choice
from cliffsweep.evals.scoring.passk import sampled_metrics
from cliffsweep.evals.result import TaskResult
from cliffsweep.evals.stopping import stageable
from cliffsweep.evals.tasks.base import EvalExample, Score, Task, system_for


def balanced_accuracy(references: list[str], correct: list[bool]) -> float:
    """The mean over classes (distinct references) of each class's accuracy: a classifier that
    always answers the majority class scores 1 / n_classes, not the majority's share."""
    by_class: dict[str, list[bool]] = defaultdict(list)
    for ref, ok in zip(references, correct, strict=True):
        by_class[ref.strip()].append(bool(ok))
    return sum(sum(v) / len(v) for v in by_class.values()) / len(by_class)


def metric_means(examples: list[EvalExample], scores: list[Score]) -> dict[str, float]:
    """Secondary metrics pooled over all examples, then per group (`name/group`, accuracy
    included) when examples carry groups. Every score must report the same metric names."""
    names = sorted({k for s in scores for k in s.extra})
    for ex, s in zip(examples, scores):
        if sorted(s.extra) != names:
            raise ValueError(f"example {ex.id}: metrics {sorted(s.extra)}, others report {names}")
    means = {k: sum(s.extra[k] for s in scores) / len(scores) for k in names}
    by_group: dict[str, list[Score]] = defaultdict(list)
    for ex, s in zip(examples, scores):
        by_group[ex.group].append(s)
    if "" in by_group and len(by_group) > 1:
        raise ValueError("some examples have a group and some do not")
    by_group.pop("", None)
    for group, members in sorted(by_group.items()):
        means[f"accuracy/{group}"] = sum(s.correct for s in members) / len(members)
        for k in names:
            means[f"{k}/{group}"] = sum(s.extra[k] for s in members) / len(members)
    return means


def with_logprob_metric(scores: list[Score], examples: list[EvalExample], logprobs: list[list[float]],
                        letters: tuple[str, ...]) -> list[Score]:
    """Each score with `logprob_accuracy`: the most probable letter is the reference."""
    return [Score(s.correct, s.prediction,
                  {**s.extra, "logprob_accuracy": logprob_choice(lp, letters) == ex.reference.strip().upper()})
            for s, ex, lp in zip(scores, examples, logprobs)]


def sampled(backend: Backend, task: Task, examples: list[EvalExample], prompts: list, how,
            extra: dict[str, float]) -> list[tuple[str, int, bool, str]]:
    """`how.n` samples of every prompt (tasks/base.SampledDecoding), each scored as the greedy
    reply is; their avg@n and pass@k go into `extra`. Returns every sample (the store keeps them)."""
    drawn = backend.generate_n(prompts, task.sampling.drawn(how))
    if len(drawn) != len(examples) or any(len(d) != how.n for d in drawn):
        raise RuntimeError(f"backend returned {[len(d) for d in drawn][:5]}... samples for {len(examples)} "
                           f"prompts x {how.n}")
    correct = [[task.score(gen, ex).correct for gen in gens] for gens, ex in zip(drawn, examples)]
    extra.update(sampled_metrics(correct, how.ks))
    return [(ex.id, j, ok, gen) for ex, gens, oks in zip(examples, drawn, correct)
            for j, (gen, ok) in enumerate(zip(gens, oks))]


def evaluate_task(backend: Backend, task: Task, system: str = "", items: list[int] | None = None) -> TaskResult:
    """`task` on what `backend` serves; `system` (recipe.system_prompt, or the task's own
    system_prompt: tasks/base.system_for) before every prompt that has no system prompt of its
    own, as training puts it. `items`: only these of `task.eval_examples()`, in this order (a
    stage of a staged evaluation, evaluator/staged.py: cliffsweep's own greedy tasks only)."""
    system = system_for(task, system)
    if items is not None and not stageable(task):
        raise ValueError(f"task {task.name}: scored in full only (lm-eval's, loss and sampled tasks: docs/tasks.md)")
    if task.harness == "lm_eval":  # lm-eval builds the requests and the metrics (evals/harness.py)
        from cliffsweep.evals.harness import evaluate_lm_eval

        return evaluate_lm_eval(backend, task, system)
    if task.harness == "loss":
        return evaluate_loss(backend, task, system)
    start = time.perf_counter()
    examples = task.eval_examples()
    if items is not None:
        examples = [examples[i] for i in items]
    examples = [e if e.system or not system else replace(e, system=system) for e in examples]
    if not examples:
        raise ValueError(f"task {task.name}: no evaluation examples")
    prompts = [ex.chat() for ex in examples]
    generations = backend.generate(prompts, task.sampling)
    if len(generations) != len(examples):
        raise RuntimeError(f"backend returned {len(generations)} generations for {len(examples)} prompts")
    scores = [task.score(gen, ex) for gen, ex in zip(generations, examples)]
    if task.choice_letters:
        logprobs = backend.continuation_logprobs(prompts, task.choice_letters)
        if len(logprobs) != len(examples):
            raise RuntimeError(f"backend returned {len(logprobs)} log-prob rows for {len(examples)} prompts")
        scores = with_logprob_metric(scores, examples, logprobs, task.choice_letters)
    extra = metric_means(examples, scores)
    if task.class_balanced:
        extra["balanced_accuracy"] = balanced_accuracy([ex.reference for ex in examples], [s.correct for s in scores])
    how = getattr(task.params, "sampling", None)
    draws = sampled(backend, task, examples, prompts, how, extra) if how is not None else []
    return TaskResult(
        task=task.label,
        accuracy=sum(s.correct for s in scores) / len(scores),
        n=len(scores),
        extra=extra,
        samples=[(ex.id, s.correct, s.prediction) for ex, s in zip(examples, scores)],
        references=[str(ex.reference) for ex in examples],
        draws=draws,
        seconds=time.perf_counter() - start,
        scorer_version=task.scorer_version,
    )


def loss_pairs(tokenizer, items, system: str, max_doc_tokens: int,
               max_length: int | None = None) -> list[tuple[list[int], list[int]]]:
    """(context, scored) token ids of each loss item (evals/tasks/loss.py): a reply after its chat
    prompt, tokenised as training tokenises replies; a document after the BOS (else EOS) token,
    cut to `max_doc_tokens`, so its first token is scored too. With `max_length` (the engine's
    context), the scored part is cut so that the whole fits; a prompt that alone fills it is an
    error naming the item."""
    from cliffsweep.evals.backends.base import continuation_ids, prompt_ids

    start = tokenizer.bos_token_id if tokenizer.bos_token_id is not None else tokenizer.eos_token_id
    out = []
    for it in items:
        if it.example is None:
            ids = tokenizer(it.text, add_special_tokens=False)["input_ids"][:max_doc_tokens]
            out.append(([start], ids))
            continue
        ex = it.example if it.example.system or not system else replace(it.example, system=system)
        out.append((prompt_ids(tokenizer, ex.chat()), continuation_ids(tokenizer, it.text)))
    if max_length is None:
        return out
    for it, (context, _) in zip(items, out):
        if len(context) >= max_length:
            raise ValueError(f"loss item {it.id}: its prompt is {len(context)} tokens, the engine serves "
                             f"{max_length}: raise eval.max_model_len or shorten the prompt")
    return [(context, scored[: max_length - len(context)]) for context, scored in out]


def evaluate_loss(backend: Backend, task, system: str = "") -> TaskResult:
    """A loss task: each item's mean per-token NLL from one batched scoring call (no generation).
    Primary `loss` = the mean over items (lower is better); `likelihood` = the mean of each item's
    exp(-NLL), what analysis classifies on (storage/store.LIKELIHOOD); `perplexity` = exp(loss)."""
    import math

    start = time.perf_counter()
    items = task.items()
    pairs = loss_pairs(backend.tokenizer, items, system, task.params.max_doc_tokens, backend.max_length)
    scored = backend.score_tokens(pairs)
    if len(scored) != len(items):
        raise RuntimeError(f"backend scored {len(scored)} items of {len(items)}")
    nll = [-lp / len(c) for (lp, _), (_, c) in zip(scored, pairs)]
    loss = sum(nll) / len(nll)
    return TaskResult(
        task=task.label, accuracy=loss, n=len(items), metric=task.metric,
        extra={"likelihood": sum(math.exp(-x) for x in nll) / len(nll), "perplexity": math.exp(loss),
               "tokens": float(sum(len(c) for _, c in pairs))},
        samples=[(it.id, greedy, "") for it, (_, greedy) in zip(items, scored)], scores=nll,
        seconds=time.perf_counter() - start, scorer_version=task.scorer_version)
