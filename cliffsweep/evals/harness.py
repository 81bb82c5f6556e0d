"""Any lm-evaluation-harness task on cliffsweep's own evaluators (issue 30 part 2).

lm-eval builds the requests (its prompts, few-shot contexts, chat template if asked), applies its
filters and computes its metrics; the requests are served by the evaluator actor's backend, the
engine that already reloaded the checkpoint in place and checked its canary. `BackendLM` is the
`lm_eval.api.model.LM` over that backend: lm-eval's `TemplateLM` encodes each log-likelihood pair
exactly as its own HF model does (`_encode_pair`), and the three request kinds reach the backend
as token ids through its two primitives (backends/base.py: `complete`, `score_tokens`).

What matches lm-eval's own `hf` model, and why (tests/test_lmeval.py compares item by item):
tokenisation (`tok_encode` as HFLM's: the tokenizer's own special tokens, none added before a
string that already starts with BOS), left truncation of contexts to `max_length - max_gen_toks`,
stop sequences with the EOS text added (`handle_stop_sequences`), the rolling windows of
`loglikelihood_rolling` (`get_rolling_token_windows`, prefix token BOS else EOS).

Decoding is as the task's YAML says (issue 40 part 2): greedy unless its `generation_kwargs` ask
for `do_sample` with a temperature > 0; then each request is sampled at that temperature and
top_p, and a task's `repeats` (lm-eval sends the same request that many times, and reads the
answers with its filters: majority vote, pass@k) get different samples, because the j-th copy
of a request in one call is sampled with seed LM_EVAL_SEED + task seed + j, hashed with its
context (backends/seeded.py): the same item draws the same samples again, whatever else the call
holds, on either backend.

A task's `sampling` (issue 52) runs a second pass beside the greedy one: `n` repeats sampled as
it says (tasks/lm_eval.LmEval.sampled_spec), each repeat scored alone through the primary
metric's filter and the task's own process_results (`draws_of`), for avg@n and pass@k as the
native tasks store them (evals/scoring/passk.py).
"""

from __future__ import annotations

import time
from collections import defaultdict

from lm_eval.api.model import TemplateLM
from lm_eval.models.utils import handle_stop_sequences, normalize_gen_kwargs, postprocess_generated_text
from lm_eval.utils import get_rolling_token_windows, make_disjoint_window

from cliffsweep.evals.result import TaskResult
from cliffsweep.evals.scoring.passk import sampled_metrics
from cliffsweep.evals.tasks.base import Sampling
from cliffsweep.evals.tasks.lm_eval import LmEval, Primary

LM_EVAL_SEED = 1234
"""simple_evaluate's default numpy, torch and few-shot seeds."""
DEFAULT_MAX_GEN_TOKS = 256
"""lm-eval's own default when a task does not say (HFLM.max_gen_toks)."""


def decoding_of(kw: dict) -> tuple[float, float] | None:
    """(temperature, top_p) of generation kwargs that sample, None for greedy ones (lm-eval's
    HFLM samples only with do_sample and a temperature > 0)."""
    if kw.get("do_sample") and float(kw.get("temperature", 0.0) or 0.0) > 0:
        return float(kw["temperature"]), float(kw.get("top_p", 1.0) or 1.0)
    return None


class BackendLM(TemplateLM):
    """lm-eval's model interface over an evaluator backend (the checkpoint it serves now);
    `seed`: the first sampling seed (module doc)."""

    def __init__(self, backend, seed: int = LM_EVAL_SEED):
        super().__init__()
        self.backend = backend
        self.tokenizer = backend.tokenizer
        self.seed = seed

    # --- what TemplateLM needs ---------------------------------------------------------------
    @property
    def eot_token_id(self) -> int:
        return self.tokenizer.eos_token_id

    @property
    def prefix_token_id(self) -> int:
        bos = self.tokenizer.bos_token_id
        return bos if bos is not None else self.tokenizer.eos_token_id

    @property
    def max_length(self) -> int:
        return self.backend.max_length

    @property
    def tokenizer_name(self) -> str:
        return self.tokenizer.name_or_path.replace("/", "__")

    def tok_encode(self, string: str, add_special_tokens: bool | None = None, **kwargs) -> list[int]:
        if add_special_tokens is None:
            bos = self.tokenizer.bos_token
            if bos and string.startswith(bos):
                add_special_tokens = False
        kw = {} if add_special_tokens is None else {"add_special_tokens": add_special_tokens}
        return self.tokenizer.encode(string, **kw)

    def apply_chat_template(self, chat_history: list[dict[str, str]], add_generation_prompt: bool = True) -> str:
        return self.tokenizer.apply_chat_template(chat_history, tokenize=False, add_generation_prompt=add_generation_prompt,
                                                  continue_final_message=not add_generation_prompt)

    # --- the three request kinds ----------------------------------------------------------------
    def _loglikelihood_tokens(self, requests, disable_tqdm: bool = False, **kwargs) -> list[tuple[float, bool]]:
        """((context, continuation), context ids, continuation ids) -> (log p, greedy), the
        sequence cut on the left to the engine's length as HFLM cuts it."""
        pairs = []
        for _, ctx, cont in requests:
            whole = (ctx + cont)[-self.max_length:]  # HFLM keeps max_length + 1 and drops the last as input
            pairs.append((whole[: len(whole) - len(cont)], cont))
        out = self.backend.score_tokens(pairs)
        for (key, _, _), answer in zip(requests, out):
            self.cache_hook.add_partial("loglikelihood", key, answer)
        return out

    def loglikelihood_rolling(self, requests, disable_tqdm: bool = False) -> list[float]:
        """A whole text's log-likelihood in disjoint windows of the engine's length (perplexity tasks)."""
        windows, owner = [], []
        for i, req in enumerate(requests):
            (string,) = req.args
            for ctx, cont in map(make_disjoint_window, get_rolling_token_windows(
                    token_list=self.tok_encode(string), prefix_token=self.prefix_token_id,
                    max_seq_len=self.max_length, context_len=1)):
                windows.append((list(ctx), list(cont)))
                owner.append(i)
        sums = [0.0] * len(requests)
        for i, (logp, _) in zip(owner, self.backend.score_tokens(windows)):
            sums[i] += logp
        for req, total in zip(requests, sums):
            self.cache_hook.add_partial("loglikelihood_rolling", (req.args[0],), total)
        return sums

    def generate_until(self, requests, disable_tqdm: bool = False) -> list[str]:
        """Generations as each request's kwargs say (module doc), batched per (stop sequences,
        length budget, decoding)."""
        eos = self.tokenizer.decode([self.eot_token_id], skip_special_tokens=False)
        groups: dict[tuple, list[int]] = defaultdict(list)
        settings, copies = [], defaultdict(int)
        for i, req in enumerate(requests):
            context, gen_kwargs = req.args
            kw = normalize_gen_kwargs(dict(gen_kwargs), DEFAULT_MAX_GEN_TOKS)
            until = handle_stop_sequences(kw.pop("until", None), eos=eos)
            decoding = decoding_of(kw)
            key = (context, tuple(until), decoding)
            settings.append((context, until, int(kw["max_gen_toks"]), self.seed + copies[key]))
            copies[key] += 1  # the j-th copy of a request (a task's repeats) gets seed + j
            groups[(tuple(until), int(kw["max_gen_toks"]), decoding)].append(i)
        out = [""] * len(requests)
        for (until, max_gen, decoding), idx in groups.items():
            keep = self.max_length - max_gen
            if keep <= 0:
                raise ValueError(f"the task asks for {max_gen} generated tokens; the engine serves {self.max_length} in all")
            ids = [self.tok_encode(settings[i][0])[-keep:] for i in idx]
            how = None if decoding is None else Sampling(max_gen, tuple(until), 1, *decoding)
            texts = self.backend.complete(ids, max_gen, list(until), how, [settings[i][3] for i in idx])
            for i, text in zip(idx, texts):
                out[i] = postprocess_generated_text(text, list(until), None)
                self.cache_hook.add_partial("generate_until", requests[i].args, out[i])
        return out


def evaluate_lm_eval(backend, task: LmEval, system: str = "") -> TaskResult:
    """Run `task`'s lm-eval task(s) on what `backend` serves; every metric lm-eval reports, the
    primary one as `accuracy` (what analysis reads), each item's primary score for the
    bootstrap."""
    from lm_eval import simple_evaluate

    start = time.perf_counter()
    p = task.params
    # lm-eval's own seeds at params.seed 0 (0 and 1234: its defaults pick the few-shot examples),
    # so that a task reads as lm-eval reads it; another seed moves all of them.
    seeds = dict(random_seed=p.seed, numpy_random_seed=LM_EVAL_SEED + p.seed, torch_random_seed=LM_EVAL_SEED + p.seed,
                 fewshot_random_seed=LM_EVAL_SEED + p.seed)
    def run(spec):
        return simple_evaluate(model=BackendLM(backend, LM_EVAL_SEED + p.seed), tasks=[spec], num_fewshot=p.num_fewshot,
                               limit=p.limit, log_samples=True, bootstrap_iters=0,
                               apply_chat_template=p.apply_chat_template, fewshot_as_multiturn=p.fewshot_as_multiturn,
                               task_manager=task.manager(), system_instruction=system or None, **seeds)

    res = run(task.lm_eval_spec())
    primary = task.primary([cfg for _, cfg in sorted(res.get("configs", {}).items())])
    value, extra = metrics_of(res, task.top_name(), primary)
    samples = item_scores(res, primary)
    draws = []
    if p.sampling is not None:  # n repeats sampled beside the greedy pass, each scored (issue 52)
        spec = task.sampled_spec()
        draws = draws_of(run(spec), task.manager().load([spec])["tasks"], primary)
        correct: dict[str, list[bool]] = defaultdict(list)
        for item, _, ok, _ in draws:
            correct[item].append(ok)
        extra.update(sampled_metrics(list(correct.values()), p.sampling.ks))
    return TaskResult(task=task.label, accuracy=value, n=len(samples), extra=extra, samples=samples, draws=draws,
                      seconds=time.perf_counter() - start, scorer_version=task.scorer_version)


def draws_of(res: dict, tasks: dict, primary: Primary) -> list[tuple[str, int, bool, str]]:
    """Every repeat of every item of a sampled run (item id, repeat, correct, filtered answer),
    each repeat read alone through the primary filter's pipeline and the task's own
    process_results, so that avg@n and pass@k count each sample (lm-eval's own filters reduce
    the repeats to one answer per item: take_first, majority_vote)."""
    out = []
    for name, samples in sorted(res.get("samples", {}).items()):
        t = tasks[name]
        (ensemble,) = [f for f in t._filters if f.name == primary.filter]
        for s in samples:
            if s.get("filter", "none") != primary.filter:
                continue
            (repeats,) = s["resps"]  # one request per item (generate_until), its n repeats' answers
            for j, resp in enumerate(repeats):
                answers = [[resp]]
                for f in ensemble.filters:
                    answers = list(f().apply(answers, [s["doc"]]))
                answer = answers[0]
                score = t.process_results(s["doc"], [answer])[primary.metric]
                out.append((f"{name}/{s['doc_id']}", float(score) >= 0.5, j, str(answer)[:500]))
    return [(item, j, ok, text) for item, ok, j, text in out]


def metrics_of(res: dict, top: str, primary: Primary) -> tuple[float, dict[str, float]]:
    """The primary value and every numeric metric: the task's (or group's) own under lm-eval's
    names (`acc,none`), a group's subtasks' as `<name>/<subtask>`. Standard errors left out
    (bootstrap_iters=0: cliffsweep bootstraps over items itself)."""
    tables = {**res.get("results", {}), **res.get("groups", {})}
    extra: dict[str, float] = {}
    for name, table in tables.items():
        for key, v in table.items():
            if "_stderr," in key or not isinstance(v, (int, float)) or key in ("sample_len", "sample_count"):
                continue
            extra[key if name == top else f"{key}/{name}"] = float(v)
    key = f"{primary.metric},{primary.filter}"
    if key not in extra:
        raise ValueError(f"lm-eval reported no {key!r} for {top}; it reported {sorted(k for k in extra if '/' not in k)}")
    return extra[key], extra


def item_scores(res: dict, primary: Primary) -> list[tuple[str, bool, str]]:
    """(item id, correct, prediction) per item under the primary metric's filter; an item id
    is `<subtask>/<doc_id>` so that a group's items stay distinct."""
    out = []
    for name, samples in sorted(res.get("samples", {}).items()):
        for s in samples:
            if s.get("filter", "none") != primary.filter or primary.metric not in s:
                continue
            pred = s.get("filtered_resps")
            out.append((f"{name}/{s['doc_id']}", float(s[primary.metric]) >= 0.5, str(pred[0] if pred else "")[:500]))
    return out
