"""Any lm-evaluation-harness task or group as a retain task (issue 30 part 2):
`{name: lm_eval, params: {task: mmlu, num_fewshot: 5, limit: 500}}`.

lm-eval owns the task: its prompts, few-shot contexts, filters and metrics; the requests are
served by the evaluator's own engine (evals/harness.py). What cliffsweep adds:

- `include_path`: a folder of the user's own task YAMLs (lm-eval's --include_path);
- `overrides`: fields laid over a registered task's own config, above all its data, so a
  standard task runs offline on local files: `{dataset_path: json, dataset_name: null,
  dataset_kwargs: {data_files: {test: /data/gsm8k/test.jsonl}}}`;
- the primary metric, `metric` (`acc,none`; default: the task's first metric under its first
  filter) is what analysis reads; every other metric lm-eval reports is stored under its own name.

Checked before anything starts (`data_problems`): the task exists (else the close names), its
data loads (offline: the dataset it names and how to point it at local files), and its primary
metric is one where higher is better (a held-out loss is cliffsweep's own `loss` task,
evals/tasks/loss.py, which analysis reads in its direction).
"""

from __future__ import annotations

import difflib
import hashlib
import os
import pickle
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path
from typing import Any

from pydantic import Field, model_validator

from cliffsweep.evals.tasks.base import Example, Sampling, Task, TaskParams
from cliffsweep.evals.tasks.rows import seeded_subset

LM_EVAL_VERSION = "0.4.13"


UNLOADED_ITEMS = 1000
"""Items `plan` assumes for an lm-eval task it cannot load here and that sets no `limit` (ours:
the size of a typical benchmark's test split, e.g. ARC-Challenge 1,172, GSM8K 1,319)."""


class LmEvalParams(TaskParams):
    task: str = Field(min_length=1)
    """An lm-eval task or group name (`lm_eval --tasks list`), or one in `include_path`."""
    num_fewshot: int | None = Field(None, ge=0)
    """None: the task's own default."""
    limit: int | None = Field(None, ge=1)
    """Items per task (lm-eval's --limit: the first `limit` of its evaluation split); None: all."""
    include_path: str | None = None
    """A folder of task YAMLs; `toy`: the toy world's (cliffsweep/toy/lm_eval_tasks: toy_arith_lm)."""
    overrides: dict[str, Any] = Field(default_factory=dict)
    """Config fields laid over the task's own (one task, not a group)."""
    metric: str | None = None
    """`name,filter` as lm-eval reports it (e.g. `exact_match,flexible-extract`)."""
    apply_chat_template: bool = False
    """Render each request with the model's chat template (lm-eval's --apply_chat_template)."""
    fewshot_as_multiturn: bool = False

    @model_validator(mode="after")
    def _sampling_or_repeats(self):
        # `sampling` is the task's own repeats (issue 52): two ways of saying it would disagree
        if self.sampling is not None and "repeats" in self.overrides:
            raise ValueError("an lm-eval task samples through `sampling` (n samples, avg@n and pass@k) or through "
                             "its YAML's `repeats` and filters in `overrides`, not both")
        return self

    @model_validator(mode="after")
    def _limit_not_n_eval(self):
        # by value, not by fields set: a dumped and re-read params (plan does it) sets them all
        if self.path is not None or self.n_eval != TaskParams.model_fields["n_eval"].default:
            raise ValueError("an lm_eval task takes `limit` (items per task) and its data from lm-eval "
                             "(`overrides` to point it at local files), not n_eval / path")
        if self.fewshot_as_multiturn and not self.apply_chat_template:
            raise ValueError("fewshot_as_multiturn needs apply_chat_template: true (as in lm-eval)")
        return self


@lru_cache(maxsize=8)
def task_manager(include_path: str | None):
    """lm-eval's task index (one per include folder and process): building it reads ~15,000 task
    YAMLs, 10-25 s, which an evaluator must not pay again for every checkpoint, nor `validate`
    every time it runs (issue 63: seconds offline): the index is kept on disk (index_cache)."""
    try:
        from lm_eval.tasks import TaskManager
        from lm_eval.tasks import manager as lm_manager
    except ImportError as e:
        raise ImportError(f"the lm_eval task needs lm-evaluation-harness {LM_EVAL_VERSION}, a dependency of "
                          f"cliffsweep: pip install lm-eval=={LM_EVAL_VERSION}") from e
    built = lm_manager.TaskIndex
    lm_manager.TaskIndex = _cached_index(built)
    try:
        return TaskManager(include_path=include_path)
    finally:
        lm_manager.TaskIndex = built


INDEX_CACHE = Path(os.environ.get("CLIFFSWEEP_CACHE", Path.home() / ".cache" / "cliffsweep")) / "lm_eval_index"


def _fingerprint(paths) -> str:
    """The index's key: lm-eval's version and its own task folder's place, and every YAML file of
    the other folders (an include path) with its size and time, so that an edited task YAML is read
    again. The place, because the index holds each YAML's absolute path: an index built by another
    installation (another virtual environment, CI's checkout) named files this one lacks, and
    every lm-eval task then failed to load as "not in the local cache" (2026-12-07)."""
    parts = [LM_EVAL_VERSION]
    for p in paths:
        p = Path(p)
        if p.resolve() == Path(_lm_eval_tasks_dir()).resolve():
            parts.append(str(p.resolve()))
            continue
        for f in sorted(p.rglob("*.y*ml")) if p.is_dir() else [p]:
            st = f.stat()
            parts.append(f"{f.resolve()}:{st.st_size}:{st.st_mtime_ns}")
    return hashlib.sha1("\n".join(parts).encode()).hexdigest()[:16]


def _lm_eval_tasks_dir() -> str:
    import lm_eval.tasks

    return os.path.dirname(lm_eval.tasks.__file__)


def _cached_index(built):
    """lm-eval's TaskIndex whose `build` reads the index from INDEX_CACHE when its folders are
    unchanged, else builds it and writes it there (atomically: os.replace)."""

    class Cached(built):
        def build(self, paths):
            target = INDEX_CACHE / f"{_fingerprint(paths)}.pkl"
            try:
                with open(target, "rb") as f:
                    return pickle.load(f)
            except Exception:  # noqa: BLE001 - absent, partial or from another Python: build it
                pass
            index = super().build(paths)
            try:
                INDEX_CACHE.mkdir(parents=True, exist_ok=True)
                tmp = target.with_suffix(f".{os.getpid()}.tmp")
                with open(tmp, "wb") as f:
                    pickle.dump(index, f)
                os.replace(tmp, target)
            except OSError:
                pass  # a read-only home: the index is built each time, as before
            return index

    return Cached


def include_folder(include_path: str | None) -> str | None:
    if include_path == "toy":
        return str(Path(__file__).resolve().parents[2] / "toy" / "lm_eval_tasks")
    return include_path


@dataclass(frozen=True)
class Primary:
    metric: str
    filter: str


class LmEval(Task):
    name = "lm_eval"
    Params = LmEvalParams
    harness = "lm_eval"
    scorer_version = f"lm-eval-{LM_EVAL_VERSION}"
    sampling = Sampling(max_tokens=256)  # lm-eval's own default budget; each task sets its own

    def __init__(self, params: LmEvalParams):
        super().__init__(params)
        self._tasks = None  # lm-eval's task objects, loaded on first use (`_built`)
        # The version names the task and its overrides: analysis refuses to mix stored scores of
        # a different lm-eval or a different reading of the task.
        self.scorer_version = f"lm-eval-{LM_EVAL_VERSION}+{params.task}"

    @property
    def label(self) -> str:
        return f"lm_eval:{self.params.task}"

    def manager(self):
        return task_manager(include_folder(self.params.include_path))

    @property
    def _index(self):
        return self.manager()

    def known(self) -> list[str]:
        tm = self._index
        return sorted(set(tm.all_tasks) | set(tm.all_groups))

    def top_name(self) -> str:
        return self.params.task

    def lm_eval_spec(self) -> str | dict:
        """What lm-eval loads: the name, or the task's own config with `overrides` laid over it
        (lm-eval's inline dict configs do not merge with a registered task's YAML themselves)."""
        return self.params.task if not self.params.overrides else self._yaml_config("overrides")

    def _yaml_config(self, what: str) -> dict:
        """The task's YAML with `overrides` laid over it; `what` (overrides, sampling) needs it."""
        from lm_eval.tasks._yaml_loader import load_yaml

        p = self.params
        entry = self._index.task_index.get(p.task)
        if entry is None or entry.yaml_path is None:
            raise ValueError(f"lm_eval task {p.task!r}: {what} apply to a task defined by a YAML file, "
                             "not to a group or a Python task")
        return {**load_yaml(entry.yaml_path, resolve_func=True), **p.overrides}

    def _uncached_offline(self) -> bool:
        """Offline (hub.py), whether the task's hub dataset (`dataset_path` of its YAML, as the index
        read it) is not in the local cache: then it cannot load, and building the task, whose own
        code may import much (HumanEval's imports `evaluate` and transformers' pipelines), is
        skipped. False where it cannot tell (a group, a local builder, `overrides` of the data)."""
        from cliffsweep.hub import is_offline

        if not is_offline() or {"dataset_path", "dataset_kwargs"} & set(self.params.overrides):
            return False
        entry = self._index.task_index.get(self.params.task)
        path = (getattr(entry, "cfg", None) or {}).get("dataset_path")
        if not isinstance(path, str) or path.count("/") != 1:
            return False
        from huggingface_hub import snapshot_download

        try:
            snapshot_download(path, repo_type="dataset", local_files_only=True)
        except Exception:  # noqa: BLE001 - not cached, whatever the client calls it
            return True
        return False

    def sampled_spec(self) -> dict:
        """The task's config for its sampled pass (`params.sampling`, issue 52): `n` repeats of
        each request, sampled at the given temperature and top_p over the YAML's other
        generation settings (its stop sequences and length), scored per repeat by the harness
        (evals/harness.py `draws_of`)."""
        p, how = self.params, self.params.sampling
        cfg = self._yaml_config("`sampling` settings")
        if cfg.get("output_type", "generate_until") != "generate_until":
            raise ValueError(f"lm_eval task {p.task!r} scores log-likelihoods ({cfg['output_type']}): it generates "
                             "nothing to sample; `sampling` applies to generate_until tasks")
        gen = {**(cfg.get("generation_kwargs") or {}), "do_sample": True, "temperature": how.temperature,
               "top_p": how.top_p}
        return {**cfg, "repeats": how.n, "generation_kwargs": gen}

    def _built(self):
        """lm-eval's task objects (this loads their data, once per instance): {name: Task}. Read
        here for checks and plan only; an evaluation builds its own (simple_evaluate)."""
        if self._tasks is None:
            from cliffsweep.hub import quiet_offline

            with quiet_offline():  # offline: no task module fetches its own files, nor says it did
                self._tasks = self._index.load([self.lm_eval_spec()])["tasks"]
        return self._tasks

    def primary(self, configs: list[dict] | None = None) -> Primary:
        """`params.metric`, else the first metric under the first filter of the (first) task's
        config: `configs` as lm-eval's results give them, or the task's own (loads its data)."""
        if self.params.metric is not None:
            name, _, filt = self.params.metric.partition(",")
            return Primary(name, filt or "none")
        cfg = configs[0] if configs else next(iter(self._built().values())).config.to_dict()
        metrics = [m["metric"] for m in (cfg.get("metric_list") or [])]
        filters = [f["name"] for f in (cfg.get("filter_list") or [])] or ["none"]
        if not metrics:
            raise ValueError(f"lm_eval task {self.params.task!r} names no metric; give params.metric")
        return Primary(str(metrics[0]), filters[0])

    def data_problems(self) -> list[str]:
        p = self.params
        try:
            self.manager()
        except ImportError as e:
            return [str(e)]
        if p.task not in self.known():
            close = difflib.get_close_matches(p.task, self.known(), n=5, cutoff=0.6)
            return [f"lm_eval task {p.task!r} is not an lm-eval task or group"
                    + (f"; close: {close}" if close else "")
                    + ("" if p.include_path else "; your own task YAMLs go in params.include_path")]
        offline_said = ("lm_eval task {task!r}: its data did not load ({why}). Offline, point it at local files: "
                        "params.overrides {{dataset_path: json, dataset_name: null, dataset_kwargs: {{data_files: "
                        "{{test: /path/to/test.jsonl}}}}}}, or a task YAML in include_path")
        not_cached = "it is not in the local cache, and the model hub is offline here"
        if self._uncached_offline():  # said without building the task: its code imports take seconds
            return [offline_said.format(task=p.task, why=not_cached)]
        try:
            tasks = self._built()
        except Exception as e:  # lm-eval and datasets raise many kinds; the sentence is what counts
            from cliffsweep.hub import is_offline

            why = not_cached if is_offline() else f"{type(e).__name__}: {str(e)[:300]}"
            return [offline_said.format(task=p.task, why=why)]
        problems = []
        if p.sampling is not None:
            try:
                self.sampled_spec()
            except ValueError as e:
                problems.append(str(e))
        metric = self.primary().metric
        for name, t in tasks.items():
            better = t.higher_is_better()
            if metric in better and not better[metric]:
                problems.append(f"lm_eval task {name!r}: its metric {metric!r} is lower-is-better; an lm_eval "
                                "task is read as higher-is-better: for a held-out loss use the task `loss` "
                                "(docs/tasks.md)")
        return problems

    # --- what `plan` prices --------------------------------------------------------------------
    def data_is_local(self) -> bool:
        try:
            self._built()
        except Exception:  # noqa: BLE001 - not loadable here, whatever the cause: plan uses a proxy
            return False
        return True

    @property
    def eval_size(self) -> int:
        """Items per evaluation: `limit` per task, else every evaluation document (loads the data).
        A task that cannot be built here (its data or a package its code needs is not on this
        machine: `validate` says which) is priced at `limit`, else UNLOADED_ITEMS."""
        try:
            built = self._built()
        except Exception:  # noqa: BLE001 - `plan` prices what it can; `validate` names the cause
            return self.params.limit or UNLOADED_ITEMS
        return sum(min(self.params.limit or len(t.eval_docs), len(t.eval_docs)) for t in built.values())

    def plan_examples(self) -> list[Example]:
        """The evaluation documents as prompt / target pairs (what a request's tokens are made of;
        few-shot contexts are priced by `num_fewshot` in plan)."""
        out = []
        for name, t in self._built().items():
            docs = list(t.eval_docs)[: self.params.limit or None]
            for i, doc in enumerate(docs):
                target = t.doc_to_target(doc)
                if isinstance(target, int) and t.config.doc_to_choice is not None:
                    target = t.doc_to_choice(doc)[target]
                out.append(Example(f"{name}/{i}", str(t.doc_to_text(doc)), str(target).strip()))
        return out

    def train_examples(self) -> list[Example]:
        """The task's training split as prompt/response pairs (lm-eval's doc_to_text and the
        target, a choice's text for multiple choice): what a method that trains on retain data
        (replay, the statistics of ewc / mas) draws from."""
        out = []
        for name, t in self._built().items():
            if not t.has_training_docs():
                raise ValueError(f"lm_eval task {name!r} has no training split, which this sweep's method "
                                 "trains on (replay / statistics); put a task with one first in tasks.retain")
            for i, doc in enumerate(t.training_docs()):
                target = t.doc_to_target(doc)
                if isinstance(target, int) and t.config.doc_to_choice is not None:
                    target = t.doc_to_choice(doc)[target]
                out.append(Example(f"{name}/{i}", str(t.doc_to_text(doc)), str(target).strip()))
        n = self.params.n_train
        return seeded_subset(out, min(n, len(out)) if n else None, self.params.seed, f"lm_eval {self.params.task} train")
