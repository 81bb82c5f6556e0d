"""Each method's once-per-model statistics (EWC's Fisher, SIB's importance, ...), computed before
its trials train, in parallel Ray tasks, once per distinct input: the store keeps them, so a
re-run or another trial with the same inputs reads them (trainables/stats.py)."""

from __future__ import annotations

from cliffsweep.orchestrator.policies import role_resources
from cliffsweep.storage import ledger
from cliffsweep.storage.store import Store, absolute_uri
from cliffsweep.sweep.grid import Trial
from cliffsweep.sweep.rehearsal import Rehearsal
from cliffsweep.sweep.spec import SweepSpec
from cliffsweep.trainables.config import StatsJob
from cliffsweep.trainables.stats import compute_stats, stats_key, stats_relpath, stats_task_resources


def ensure_stats(spec: SweepSpec, store: Store, rehearsal: Rehearsal | None,
                 todo: list[Trial]) -> tuple[dict[str, str | None], dict[str, str]]:
    """Compute each distinct (model, method stats inputs) once, in parallel Ray tasks, unless
    the store already holds it. Returns (trial_id -> stats URI or None when the method needs
    none, trial_id -> error for trials whose statistics could not be computed)."""
    import ray

    from cliffsweep.trainables.methods import build_method

    r = spec.recipe
    learn, retain = spec.tasks.learn.model_dump(), spec.tasks.replay.model_dump()
    if r.system_prompt:  # the statistics' inputs change with it (no key moves without one)
        learn["system_prompt"] = r.system_prompt
    out: dict[str, str | None] = {}
    needs: dict[str, list[str]] = {}  # stats relpath -> trial ids
    jobs: dict[str, Trial] = {}
    for t in todo:
        inputs = build_method(t.method, t.method_params).stats_inputs()
        if inputs is None:
            out[t.trial_id] = None
            continue
        key = stats_key(t.model_path, t.method, inputs, learn, retain, r.stats_examples,
                        r.max_seq_len, r.batch_size)
        rel = stats_relpath(t.model, t.method, key)
        out[t.trial_id] = f"{absolute_uri(store.uri).rstrip('/')}/{rel}"
        needs.setdefault(rel, []).append(t.trial_id)
        if not store.exists(rel):
            jobs.setdefault(rel, t)
    res = spec.resources
    # max_calls 1: the worker exits once its statistics are back. Ray keeps a CPU task's worker for
    # reuse, and with it the model and its Hessian-vector products' memory: 3.9 GB held by an idle
    # worker through the rest of the real-model sweep (SmolLM2-135M's SIB, 2026-12-07). A GPU
    # task's worker exits anyway (Ray's default for GPU tasks).
    options = dict(max_retries=1, max_calls=1,
                   resources=role_resources(res.cluster_roles, "trainer", res.gpus_per_worker),
                   **stats_task_resources(res.cpus_per_worker, res.gpus_per_worker, res.workers_per_trial))
    if rehearsal is not None:  # its planned length as a timed wait (sweep/rehearsal.py)
        from cliffsweep.trainables.rehearsal import timed_stats

        task = ray.remote(**options)(timed_stats)
        refs = {task.remote(rehearsal.trials[t.trial_id].stats_s): rel for rel, t in jobs.items()}
    else:
        task = ray.remote(**options)(compute_stats)
        refs = {task.remote(StatsJob(model_path=t.model_path, dtype=t.dtype, method=t.method,
                                     method_params=t.method_params, learn=spec.tasks.learn,
                                     retain=spec.tasks.replay, recipe=r)): rel for rel, t in jobs.items()}
    failed: dict[str, str] = {}
    for ref, rel in refs.items():
        try:
            store.put_bytes(rel, ray.get(ref))
        except Exception as exc:  # one method's statistics must not stop the other trials
            msg = f"statistics {rel} could not be computed: {exc}"
            ledger.record_error(store, f"stats__{rel.replace('/', '__')}", "stats", needs[rel][0], msg)
            failed.update({tid: msg for tid in needs[rel]})
    return out, failed
