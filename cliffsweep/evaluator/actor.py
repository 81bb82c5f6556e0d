"""The evaluator actor's body (wrapped with ray.remote by orchestrator/pool.py): one engine,
one base model, every task, started once and serving checkpoints in turn.

Engine start is paid once per actor; each new checkpoint is swapped in (full weights: reload;
LoRA: a new LoRARequest) and checked with its canary. Results are written to the store by the
actor itself (evaluator/results.py: atomic, idempotent per (trial, step, task)), so a driver crash
loses nothing that was evaluated. Ray restarts a crashed actor and retries its pending calls; a
call that still fails is returned to the driver, which records it in the `errors` table."""

from __future__ import annotations

import time
from typing import Protocol

from cliffsweep.evaluator.fetch import local_copy
from cliffsweep.evaluator.request import EvalRequest
from cliffsweep.evaluator.results import write_evals, write_result
from cliffsweep.storage.store import Store
from cliffsweep.sweep.gpushare import GpuShare, GpuShareExceeded


class EvaluatorActor(Protocol):
    """What the driver calls on an evaluator actor (orchestrator/evaltracker.py), written once for
    both bodies behind it: the real `Evaluator` and a rehearsal's `RehearsalEvaluator`. The
    request crosses Ray as itself, typed both ways."""

    def ready(self) -> float:
        """Seconds its engine took to start (a call that returns once it has)."""

    def evaluate(self, req: EvalRequest) -> dict[str, float]:
        """Evaluate `req`'s checkpoint on every task, write the rows; "role:task" -> accuracy."""

    def close(self) -> None:
        """Free its engine."""


class Evaluator:
    """One engine (evals/backends) serving `model_path`, evaluating each request on `tasks`
    ((role, task name, params)) and writing the rows. `gpu_share`: its budget on a shared GPU
    (sweep/gpushare.py, issue 39)."""

    def __init__(self, model_path: str, dtype: str, backend: str, backend_options: dict,
                 tasks: list[tuple[str, str, dict]], store_uri: str, system: str, gpu_share: GpuShare):
        from cliffsweep.evals.backends.share import capped_options, device_fraction
        from cliffsweep.evals.tasks import build_task
        from cliffsweep.models import engine_context, resolve_model

        self.folder = resolve_model(model_path)
        if "max_model_len" in backend_options:
            backend_options = dict(backend_options, max_model_len=engine_context(
                backend_options["max_model_len"], self.folder))
        self.backend_name, self.dtype = backend, dtype
        self.options = capped_options(backend, backend_options, gpu_share)  # a budget, not a label
        self.shared, self.gpu_share = device_fraction(gpu_share) is not None, gpu_share
        t0 = time.time()
        self.engine_starts = 0
        self.backend = self._start_engine()
        self.engine_seconds = time.time() - t0
        # True from a load's start until it succeeds, and after an evaluation that raised: what
        # the engine serves (or whether it lives) is unknown, and the next request starts a fresh one.
        self.suspect = False
        self.tasks = [(role, build_task(name, params)) for role, name, params in tasks]
        self.system = system  # recipe.system_prompt
        self.store = Store(store_uri)
        self.bases: dict[tuple[str, str], object] = {}  # (model, task) -> the base's items in order (staged)

    def _start_engine(self):
        from cliffsweep.evals.backends import build_backend
        from cliffsweep.evals.backends.share import one_engine_start_per_gpu

        self.engine_starts += 1
        # vLLM sizes its KV cache from the GPU's free memory before and after its own profiling
        # run: another engine starting on the same GPU meanwhile is counted as this one's, and
        # one of them fails (docs/gpu.md, 2026-11-28). Engines sharing a GPU start in turn.
        with one_engine_start_per_gpu(self.backend_name == "vllm" and self.shared):
            return build_backend(self.backend_name, self.folder, dtype=self.dtype, **self.options)

    def _restart_engine(self) -> None:
        self.backend.close()
        self.backend = self._start_engine()

    def ready(self) -> float:
        return self.engine_seconds

    def evaluate(self, req: EvalRequest) -> dict[str, float]:
        from cliffsweep.evals.runner import evaluate_task
        from cliffsweep.evals.stopping import stageable
        from cliffsweep.faults import maybe_fail

        maybe_fail(f"eval:{req.trial_id}:{req.step}")
        path, tmp = local_copy(req.checkpoint) if req.checkpoint else (None, None)
        try:
            canary = self._load(path, req.kind)
            out = {}
            for role, task in self.tasks:
                kept = self._kept(req, task.label)
                if kept is not None:  # a top-up of another task: this one keeps its rows as they are
                    out[f"{role}:{task.label}"] = kept
                    continue
                if req.rule is not None and req.checkpoint is not None and stageable(task):
                    res = self._staged(req, role, task)
                    write_evals(self.store, req, role, task.scorer_version, res, canary)
                else:
                    res = evaluate_task(self.backend, task, self.system)
                    write_result(self.store, req, role, task.scorer_version, res, canary)
                out[f"{role}:{task.label}"] = res.accuracy
            return out
        except Exception as e:
            self.suspect = True  # an engine that raised may be dead (vLLM's EngineDeadError)
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

    def _kept(self, req: EvalRequest, label: str) -> float | None:
        """The stored accuracy of task `label` where `req` is a top-up of other tasks and this one's
        `evals` rows are in the store; None: evaluate it."""
        from cliffsweep.storage.store import eval_key

        if not req.skips(label):
            return None
        rows = self.store.read_unit("evals", eval_key(req.trial_id, req.step, label))
        return None if rows is None or rows.empty else float(rows["value"].iloc[0])

    def _staged(self, req: EvalRequest, role: str, task):
        """`task` on the served checkpoint in stages (evaluator/staged.py), paired with the base's
        items, which are read once per task (the base is scored once per model, in full)."""
        from cliffsweep.evals.runner import evaluate_task
        from cliffsweep.evaluator.staged import base_scores, evaluate_staged, item_ids

        ids = [str(ex.id) for ex in task.eval_examples()]
        key = (req.model, task.label)
        if self.bases.get(key) is None:
            self.bases[key] = base_scores(self.store, req.model, task.label, item_ids(req.model, task.label, ids)[0])
        return evaluate_staged(lambda items: evaluate_task(self.backend, task, self.system, items), self.store, req,
                               role, task.label, ids, self.bases[key])

    def _load(self, path: str | None, kind: str) -> float | None:
        """Serve the checkpoint (returns its canary's distance: Backend.load); a load that raises
        is tried once more on a fresh engine.

        Why a fresh one: the known failures leave the engine in an unknown state. A reload can
        silently keep old weights (the canary's StaleWeightsError), or raise halfway through a
        layerwise reload and leave layers on the meta device, after which the engine dies at its
        next request (vLLM 0.25 on an H200, docs/gpu.md): kept, it failed every later evaluation.
        The second failure is the request's error (recorded by the driver), and the engine is
        replaced again before the next request."""
        from cliffsweep.evals.backends import CheckpointRef

        ref = CheckpointRef(path=path, kind=kind)
        if self.suspect:
            self._restart_engine()
        self.suspect = True
        try:
            distance = self.backend.load(ref)
            self.suspect = False
            return distance
        except Exception:  # noqa: BLE001 - retried once on a fresh engine, then raised
            pass  # restarted below: the traceback, which holds the old engine, is gone by then
        self._restart_engine()
        distance = self.backend.load(ref)
        self.suspect = False
        return distance

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

    def evaluate(self, req: EvalRequest) -> dict[str, float]:
        from cliffsweep.evals.result import TaskResult
        from cliffsweep.faults import maybe_fail

        maybe_fail(f"eval:{req.trial_id}:{req.step}")
        seconds = self.base_eval_s if req.checkpoint is None else self.eval_s
        time.sleep(seconds)
        for role, name in self.tasks:
            write_result(self.store, req, role, "rehearsal", TaskResult(name, 0.0, 0, seconds=seconds / len(self.tasks)))
        return {f"{role}:{name}": 0.0 for role, name in self.tasks}

    def close(self) -> None:
        pass
