"""Checks that need more than the sweep file: each model's own config and each task's local
data files, read before anything starts.

A sweep whose evaluations can never succeed must not train first (issue 10: `eval.max_model_len`
above the toy's 256-token context trained every trial, then failed every evaluation). What a
model's `config.json` can tell is checked here, for models whose folder is local (toy models,
local paths); a hub id is checked at run time by its base evaluation, which runs before its
trials train (driver.py).
"""

from __future__ import annotations


from cliffsweep.models import context_length, folder_config
from cliffsweep.sweep.spec import SpecError, SweepSpec


def local_config(path: str) -> dict | None:
    """The model's config.json when its folder is on this machine or can be built here without
    the hub (toy and smollm2 models, cached once built: archs.local_folder); None for a hub id."""
    from cliffsweep.planner.archs import local_folder

    folder = local_folder(path)
    return folder_config(folder) if folder else None


def preflight_problems(spec: SweepSpec, configs: dict[str, dict | None], backend: str) -> list[str]:
    """Problems of `spec`, evaluated with `backend`, given each model's config (None = unknown
    here). Pure. (`recipe.max_seq_len` is only a truncation cap: above the context it is
    harmless unless examples are that long, so it is not checked.)"""
    problems = []
    for i, m in enumerate(spec.models):
        cfg = configs.get(m.name)
        if cfg is None:
            continue
        if cfg.get("auto_map"):
            problems.append(f"models.{i}.path: {m.name!r} needs custom modelling code (config.json has "
                            "auto_map); cliffsweep never runs remote code (trust_remote_code): use a "
                            "model that transformers and vLLM support natively")
        ctx = context_length(cfg)
        if backend == "vllm" and ctx is not None and (spec.eval.max_model_len or 0) > ctx:
            problems.append(f"eval.max_model_len: {spec.eval.max_model_len} exceeds the context of model "
                            f"{m.name!r} ({ctx} tokens, its config.json); vLLM refuses it, so every "
                            f"evaluation would fail: set it to at most {ctx}")
    return problems


def task_data_problems(spec: SweepSpec) -> list[str]:
    """Every malformed row of every task's local data files, all of them (issue 29: a row missing
    a field was found only by the base evaluation, after Ray had started, and a second broken
    file never)."""
    from cliffsweep.evals.tasks import build_task

    entries = [(where, t) for where, _, t in spec.tasks.evaluated]
    built = [(where, build_task(t.name, t.params)) for where, t in entries]
    seen: dict[str, str] = {}
    problems = []
    for where, task in built:
        if task.label in seen:  # the store keys evaluations by it: one would overwrite the other
            problems.append(f"{where}: the same task as {seen[task.label]} ({task.label}); each task once")
        seen.setdefault(task.label, where)
    if spec.tasks.retain_data is not None:
        built.append(("tasks.retain_data", build_task(spec.tasks.retain_data.name, spec.tasks.retain_data.params)))
    problems += [f"{where} ({task.label}): {p}" for where, task in built for p in task.data_problems()]
    return problems + retain_data_problems(spec)


def retain_data_problems(spec: SweepSpec) -> list[str]:
    """A method that trains on or computes statistics from D_R (replay, EWC, MAS, SIB, FLOW) needs
    a task with a training split there: said now, not when its first trial starts."""
    from cliffsweep.evals.tasks import build_task
    from cliffsweep.sweep.grid import expand_params
    from cliffsweep.trainables.methods import build_method, method_class

    # the spec's own params (a method may require some; each grid combination, as trials build it)
    users = sorted({m.name for m in spec.methods for p in expand_params(m.params)
                    if method_class(m.name).costs.stats_data == "retain" or build_method(m.name, p).retain_fraction > 0})
    if not users:
        return []
    d_r = spec.tasks.replay
    where = "tasks.retain_data" if spec.tasks.retain_data is not None else "tasks.retain.0"
    task = build_task(d_r.name, d_r.params)
    if not task.data_is_local():  # the hub's copy: reading it here would download it (issue 29's rule)
        return []
    try:
        if not task.train_examples():
            raise ValueError("its training split is empty")
    except (ValueError, NotImplementedError, KeyError) as e:
        return [f"{where}: the methods {users} draw retain data D_R from it, and {e}; name a task with a "
                "training split as tasks.retain_data"]
    return []


def check_preflight(spec: SweepSpec, backend: str | None = None, source: str = "<spec>") -> None:
    """Raise SpecError with every problem found in the models' configs and the tasks' data."""
    problems = preflight_problems(spec, {m.name: local_config(m.path) for m in spec.models},
                                  backend or spec.eval.backend)
    problems += task_data_problems(spec)
    problems += packing_problems(spec)  # issue 39: what shares a GPU must fit, each process its own cap
    if problems:
        raise SpecError(source, problems)


def packing_problems(spec: SweepSpec) -> list[str]:
    """planner/packing.py's refusals, and an unknown `resources.gpu`."""
    from cliffsweep.planner import packing

    try:
        return packing.packing_problems(spec)
    except ValueError as e:  # an unknown GPU type
        return [f"resources.gpu: {e}"]


def tracking_warnings(spec: SweepSpec, timeout: float = 3.0) -> list[str]:
    """What `validate` and `run` warn about before launch: an MLflow tracking server that does
    not answer, a tracker whose client is not installed. Warnings, not errors: a tracker mirrors
    the store, so the sweep runs without it and a re-run or `export-tracking` catches up."""
    import importlib.util
    import urllib.request

    out = []
    packages = {"mlflow": "mlflow", "wandb": "wandb", "tensorboard": "tensorboard"}
    for name in spec.tracking.enabled:
        if importlib.util.find_spec(packages[name]) is None:
            out.append(f"tracking.{name}: the {packages[name]} package is not installed "
                       f"(pip install 'cliffsweep[tracking]'); nothing is sent to {name}")
    mlflow = spec.tracking.mlflow
    if mlflow is not None and mlflow.tracking_uri.startswith(("http://", "https://")):
        url = mlflow.tracking_uri.rstrip("/") + "/health"
        try:
            with urllib.request.urlopen(url, timeout=timeout) as r:
                if r.status != 200:
                    out.append(f"tracking.mlflow.tracking_uri: {url} answered HTTP {r.status}")
        except OSError as exc:
            out.append(f"tracking.mlflow.tracking_uri: {mlflow.tracking_uri} does not answer ({exc}); the sweep "
                       "runs anyway and its runs are sent once the server is up (a re-run or export-tracking)")
    return out
