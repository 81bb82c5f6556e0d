"""The evaluator pool: long-lived Ray actors, one eval engine each, one base model per engine.

Engine start is paid once per actor; each new checkpoint is swapped in (full weights: reload;
LoRA: a new LoRARequest) and checked with its canary. Results are written to the store by the
actor itself (atomic, idempotent per (trial, step, task)), so a driver crash loses nothing that
was evaluated. Ray restarts a crashed actor and retries its pending calls; a call that still
fails is returned to the driver, which records it in the `errors` table.
"""

from __future__ import annotations

import os
import tempfile
import time
from dataclasses import asdict, dataclass
from datetime import datetime, timezone
from typing import Any

from cliffsweep.storage.store import Store, eval_key
from cliffsweep.sweep.gpushare import GpuShare, GpuShareExceeded, evaluator_share


@dataclass(frozen=True)
class EvalRequest:
    """One checkpoint to evaluate on every task, with the trial fields its rows carry."""

    trial_id: str
    model: str
    method: str
    series: str
    optimizer: str
    lr: float
    epochs: int
    seed: int
    step: int
    epoch: float
    checkpoint: str | None  # None = the base model
    kind: str = "full"  # "full" | "lora"

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


def _local_copy(uri: str) -> tuple[str, tempfile.TemporaryDirectory | None]:
    """vLLM reads local folders: fetch a checkpoint from remote storage first."""
    if "://" not in uri or uri.startswith("file://"):
        return uri.removeprefix("file://"), None
    import pyarrow.fs as pafs

    tmp = tempfile.TemporaryDirectory(prefix="cliffsweep-eval-")
    fs, path = pafs.FileSystem.from_uri(uri)
    copy_for_eval(fs, path, tmp.name)
    return tmp.name, tmp


def copy_for_eval(fs, folder: str, dest: str) -> None:
    """Copy a checkpoint folder without its training state (trainables/resume.py): that holds
    the optimizer's moments, several times the model's size, and evaluation never reads it."""
    import pyarrow.fs as pafs

    from cliffsweep.storage.ledger import TRAIN_STATE

    root = folder.rstrip("/")
    for info in fs.get_file_info(pafs.FileSelector(root, recursive=True)):
        if info.type != pafs.FileType.File or info.base_name == TRAIN_STATE:
            continue
        target = os.path.join(dest, info.path[len(root):].lstrip("/"))
        os.makedirs(os.path.dirname(target), exist_ok=True)
        pafs.copy_files(info.path, target, source_filesystem=fs,
                        destination_filesystem=pafs.LocalFileSystem())


class Evaluator:
    """Body of the evaluator actor (wrapped with ray.remote by `evaluator_starter`)."""

    def __init__(self, model_path: str, dtype: str, backend: str, backend_options: dict,
                 tasks: list[tuple[str, str, dict]], store_uri: str, system: str, gpu_share: GpuShare):
        from cliffsweep.evals.backends import build_backend
        from cliffsweep.evals.backends.share import capped_options, device_fraction
        from cliffsweep.evals.tasks import build_task
        from cliffsweep.models import resolve_model
        from cliffsweep.orchestrator.preflight import engine_context

        folder = resolve_model(model_path)
        if "max_model_len" in backend_options:
            backend_options = dict(backend_options, max_model_len=engine_context(
                backend_options["max_model_len"], folder))
        backend_options = capped_options(backend, backend_options, gpu_share)  # issue 39: a budget, not a label
        self.shared, self.gpu_share = device_fraction(gpu_share) is not None, gpu_share
        self._make_backend = lambda: build_backend(backend, folder, dtype=dtype, **backend_options)
        t0 = time.time()
        self.backend = self._make_backend()
        self.engine_seconds = time.time() - t0
        self.tasks = [(role, build_task(name, params)) for role, name, params in tasks]
        self.system = system  # recipe.system_prompt
        self.store = Store(store_uri)

    def ready(self) -> float:
        return self.engine_seconds

    def evaluate(self, req: dict[str, Any]) -> dict[str, float]:
        from cliffsweep.evals.backends import CheckpointRef, StaleWeightsError
        from cliffsweep.evals.runner import evaluate_task
        from cliffsweep.faults import maybe_fail

        r = EvalRequest(**req)
        maybe_fail(f"eval:{r.trial_id}:{r.step}")
        path, tmp = _local_copy(r.checkpoint) if r.checkpoint else (None, None)
        try:
            ref = CheckpointRef(path=path, kind=r.kind)
            try:
                self.backend.load(ref)
            except StaleWeightsError:
                # Known vLLM failure mode: restart the engine once, then trust the canary.
                self.backend.close()
                self.backend = self._make_backend()
                self.backend.load(ref)
            out = {}
            for role, task in self.tasks:
                res = evaluate_task(self.backend, task, self.system)
                self._write(r, role, task, res)
                out[f"{role}:{task.label}"] = res.accuracy
            return out
        except Exception as e:
            if type(e).__name__ != "OutOfMemoryError":  # torch's CUDA OOM, without importing torch here
                raise
            from cliffsweep.evals.backends.share import device_total_gb

            raise GpuShareExceeded(self.gpu_share.out_of_memory(device_total_gb(), str(e).splitlines()[0][:300])) from e
        finally:
            if tmp is not None:
                tmp.cleanup()
            if self.shared:  # a shared GPU gets back what this evaluation's peak took
                from cliffsweep.evals.backends.share import release_cached

                release_cached()

    def _write(self, r: EvalRequest, role: str, task, res) -> None:
        write_result(self.store, r, role, task.scorer_version, res)

    def close(self) -> None:
        self.backend.close()


class RehearsalEvaluator:
    """A rehearsal's evaluator (sweep/rehearsal.py): its engine start and each evaluation are
    timed waits of their planned length. It writes the rows a real evaluator writes (accuracy 0,
    no samples: nothing was evaluated), so the ledger, the exactly-once invariant and `status`
    read a rehearsal's store as they read a real one."""

    def __init__(self, engine_start_s: float, eval_s: float, base_eval_s: float, tasks: list[tuple[str, str]],
                 store_uri: str):
        time.sleep(engine_start_s)
        self.engine_seconds, self.eval_s, self.base_eval_s = engine_start_s, eval_s, base_eval_s
        self.tasks, self.store = tasks, Store(store_uri)

    def ready(self) -> float:
        return self.engine_seconds

    def evaluate(self, req: dict[str, Any]) -> dict[str, float]:
        from cliffsweep.evals.result import TaskResult
        from cliffsweep.faults import maybe_fail

        r = EvalRequest(**req)
        maybe_fail(f"eval:{r.trial_id}:{r.step}")
        seconds = self.base_eval_s if r.checkpoint is None else self.eval_s
        time.sleep(seconds)
        for role, name in self.tasks:
            write_result(self.store, r, role, "rehearsal", TaskResult(name, 0.0, 0, seconds=seconds / len(self.tasks)))
        return {f"{role}:{name}": 0.0 for role, name in self.tasks}

    def close(self) -> None:
        pass


def write_result(store: Store, r: EvalRequest, role: str, scorer_version: str, res) -> None:
    """One task's evaluation of one checkpoint into the store (evals/runner.TaskResult `res`)."""
    now = datetime.now(timezone.utc)
    base = {k: getattr(r, k) for k in ("trial_id", "model", "method", "series", "optimizer",
                                       "lr", "epochs", "seed", "step", "epoch")}
    metrics = {res.metric: res.accuracy, **res.extra}
    rows = [dict(base, task=res.task, role=role, metric=m, value=float(v), n=res.n,
                 scorer_version=scorer_version, evaluated_at=now, eval_seconds=res.seconds)
            for m, v in metrics.items()]
    key = eval_key(r.trial_id, r.step, res.task)
    # samples first: an evals row implies its samples exist
    scores = res.scores or [None] * len(res.samples)
    store.write("samples", key, [
        {"trial_id": r.trial_id, "step": r.step, "task": res.task, "example_id": str(eid),
         "correct": bool(ok), "prediction": str(pred), "score": score}
        for (eid, ok, pred), score in zip(res.samples, scores, strict=True)])
    store.write("evals", key, rows)


def evaluator_env(e, backend: str) -> dict[str, str]:
    """Environment of an evaluator actor (e: the spec's EvalSpec)."""
    env = {"OMP_NUM_THREADS": str(max(1, int(e.cpus_per_evaluator) or 1)),
           "VLLM_CPU_OMP_THREADS_BIND": os.environ.get("VLLM_CPU_OMP_THREADS_BIND", "nobind")}
    in_process = e.engine_in_process if e.engine_in_process is not None else e.gpus_per_evaluator == 0
    if backend == "vllm" and in_process:
        env["VLLM_ENABLE_V1_MULTIPROCESSING"] = "0"
    return env


def evaluator_resources(spec) -> dict[str, float]:
    """Ray resources one evaluator actor holds (what `rebalance` must find free to add one)."""
    from cliffsweep.orchestrator.policies import role_resources

    e = spec.eval
    return {"CPU": e.cpus_per_evaluator, **({"GPU": e.gpus_per_evaluator} if e.gpus_per_evaluator > 0 else {}),
            **role_resources(spec.resources.cluster_roles, "evaluator", e.gpus_per_evaluator)}


EVALUATOR_RESTARTS = 2
"""Ray restarts a dead evaluator this often, then the driver starts a new one
(evaltracker.EvalTracker: each evaluation is sent at most policies.EVAL_SENDS times). Its calls
in flight are retried without a limit of their own (`max_task_retries=-1`): Ray spends a call's
retries while the actor's constructor runs (ray-project/ray#44719), and an engine start takes
about a minute, so a finite count ran out while the evaluator restarted after its node died
(the rehearsal's node kills: two checkpoints failed `ActorUnavailableError` and their trials
stayed unsettled). The restarts bound the retries."""


def evaluator_starter(models: dict[str, tuple[str, str]], spec, store_uri: str, backend: str, rehearsal=None):
    """A function that starts one evaluator actor of a model label. Creation is asynchronous;
    call `ready()` on the actor to wait for its engine. `rehearsal` (sweep/rehearsal.py): timed
    stand-ins with the same resources instead."""
    import ray

    e = spec.eval
    if rehearsal is not None:
        return _rehearsal_starter(spec, store_uri, rehearsal)
    tasks = [("learn", spec.tasks.learn.name, spec.tasks.learn.params)] + [
        ("retain", t.name, t.params) for t in spec.tasks.retain]
    options: dict[str, Any] = {}
    if backend == "vllm":
        from cliffsweep.sweep.grid import expand_params
        from cliffsweep.trainables.methods import method_class

        # adapter methods' ranks (their checkpoints are served as LoRA adapters)
        ranks = [method_class(m.name).Params(**p).rank for m in spec.methods
                 if method_class(m.name).checkpoint_kind == "lora" for p in expand_params(m.params)]
        options = {"kv_cache_mb": e.kv_cache_mb, "max_model_len": e.max_model_len,
                   "enable_lora": bool(ranks), "max_lora_rank": max(ranks, default=16),
                   "enforce_eager": e.enforce_eager if e.enforce_eager is not None else e.gpus_per_evaluator == 0}
    env = evaluator_env(e, backend)
    from cliffsweep.orchestrator.policies import role_resources

    actor_cls = ray.remote(Evaluator).options(
        num_cpus=e.cpus_per_evaluator, num_gpus=e.gpus_per_evaluator, max_restarts=EVALUATOR_RESTARTS,
        resources=role_resources(spec.resources.cluster_roles, "evaluator", e.gpus_per_evaluator),
        max_task_retries=-1, runtime_env={"env_vars": env})

    def start(label: str):
        path, dtype = models[label]
        return actor_cls.remote(path, dtype, backend, options, tasks, store_uri, spec.recipe.system_prompt,
                                evaluator_share(e))

    return start


def _rehearsal_starter(spec, store_uri: str, rehearsal):
    import ray

    from cliffsweep.orchestrator.policies import role_resources

    e = spec.eval
    from cliffsweep.evals.tasks import task_label

    tasks = [("learn", task_label(spec.tasks.learn.name, spec.tasks.learn.params))] + [
        ("retain", task_label(t.name, t.params)) for t in spec.tasks.retain]
    actor_cls = ray.remote(RehearsalEvaluator).options(
        num_cpus=e.cpus_per_evaluator, num_gpus=e.gpus_per_evaluator, max_restarts=EVALUATOR_RESTARTS,
        max_task_retries=-1,
        resources=role_resources(spec.resources.cluster_roles, "evaluator", e.gpus_per_evaluator))

    def start(label: str):
        return actor_cls.remote(rehearsal.engine_start_s, rehearsal.eval_s[label], rehearsal.base_eval_s[label],
                                tasks, store_uri)

    return start
