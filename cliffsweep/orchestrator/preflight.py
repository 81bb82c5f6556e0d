"""Checks that need more than the sweep file: each model's own config and each task's local
data files, read before anything starts.

A sweep whose evaluations can never succeed must not train first (issue 10: `eval.max_model_len`
above the toy's 256-token context trained every trial, then failed every evaluation). What a
model's `config.json` can tell is checked here, for models whose folder is local (toy models,
local paths); a hub id is checked at run time by its base evaluation, which runs before its
trials train (driver.py).
"""

from __future__ import annotations

import os

from cliffsweep.models import context_length, folder_config
from cliffsweep.sweep.spec import SpecError, SweepSpec


def local_config(path: str) -> dict | None:
    """The model's config.json when its folder is on this machine or can be built here without
    the hub (toy models, cached once built: archs.local_folder; smollm2 read without building it:
    realmodels.known_config); None for a hub id."""
    from cliffsweep import realmodels
    from cliffsweep.planner.archs import local_folder

    if realmodels.is_real_path(path):
        return realmodels.known_config(path)
    folder = local_folder(path)
    return folder_config(folder) if folder else None


def is_local_path(path: str) -> bool:
    """A model path meant as a folder on this machine: written as one (/, ., ~) or present here."""
    return path.startswith(("/", ".", "~")) or os.path.isdir(os.path.expanduser(path))


def model_path_problems(paths: list[tuple[int, str]]) -> tuple[list[str], list[str]]:
    """(problems, notes) of each model path (models.<i>.path): a folder that is not on this machine,
    a hub id not of the hub's form or not on the hub; where the hub is offline (hub.py) an id
    neither cached nor checkable is a note, "not checked: offline", never a wait."""
    from cliffsweep import hub, realmodels

    problems, notes = [], []
    for i, path in paths:
        if path.startswith("toy:") or realmodels.is_real_path(path):
            continue  # checked with the sweep file (specfile.py)
        where = f"models.{i}.path"
        if is_local_path(path):
            folder = os.path.expanduser(path)
            if not os.path.isdir(folder):
                relative = "" if os.path.isabs(folder) else f", a relative path read as {os.path.abspath(folder)}"
                problems.append(f"{where}: {path}: no such folder on this machine{relative} (validate and run "
                                "check the machine they run on)")
            continue
        bad = hub.id_problem(path)
        if bad is not None:
            problems.append(f"{where}: {path!r} is not a folder here, nor a model id of the hub: {bad}")
        elif hub.cached_folder(path) is None:
            if hub.offline():
                notes.append(f"{where}: {path!r}: not checked: the model hub is offline here and the model is not in "
                             "its local cache (a node that reaches the hub checks it when the sweep runs)")
            else:
                problems += _on_hub(where, path)
    return problems, notes


def _on_hub(where: str, model_id: str) -> list[str]:
    """A problem if the hub answers that `model_id` does not exist (or is gated for this user)."""
    from huggingface_hub import model_info
    from huggingface_hub.utils import GatedRepoError, RepositoryNotFoundError

    try:
        model_info(model_id, timeout=10)
    except GatedRepoError:
        return [f"{where}: {model_id!r} is gated on the hub: accept its terms and log in (hf auth login) first"]
    except RepositoryNotFoundError:
        return [f"{where}: {model_id!r}: no such model on the hub (or a private one this user cannot read)"]
    except Exception:  # noqa: BLE001 - the hub did not answer clearly: the run's base evaluation will say
        return []
    return []


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


def local_problems(path: str) -> list[str]:
    """What the sweep file at `path` names on this machine that is not there, read from the file
    as written (it may not parse as a sweep): model folders (model_path_problems) and task data
    files (dataset.missing_sources). Cheap: existence checks, no row is read."""
    from pathlib import Path

    from cliffsweep.evals.tasks.dataset import missing_sources
    from cliffsweep.sweep.specfile import read_yaml

    data, _ = read_yaml(Path(path))
    if not isinstance(data, dict):
        return []
    models = data.get("models") if isinstance(data.get("models"), list) else []
    paths = [(i, m["path"]) for i, m in enumerate(models) if isinstance(m, dict) and isinstance(m.get("path"), str)]
    problems = model_path_problems(paths)[0]
    tasks = data.get("tasks") if isinstance(data.get("tasks"), dict) else {}
    entries = [("tasks.learn", tasks.get("learn")), ("tasks.retain_data", tasks.get("retain_data"))]
    for key in ("retain", "learn_suite"):
        listed = tasks.get(key) if isinstance(tasks.get(key), list) else []
        entries += [(f"tasks.{key}.{i}", t) for i, t in enumerate(listed)]
    for where, t in entries:
        params = t.get("params") if isinstance(t, dict) and isinstance(t.get("params"), dict) else {}
        for key in ("path", "eval_path"):
            if isinstance(params.get(key), str) and missing_sources(params[key]):
                problems.append(f"{where}.params.{key}: {missing_sources(params[key])}")
    return problems


def check_preflight(spec: SweepSpec, backend: str | None = None, source: str = "<spec>") -> None:
    """Raise SpecError with every problem found in the models' configs and the tasks' data."""
    problems = model_path_problems([(i, m.path) for i, m in enumerate(spec.models)])[0]
    problems += preflight_problems(spec, {m.name: local_config(m.path) for m in spec.models},
                                   backend or spec.eval.backend)
    problems += task_data_problems(spec) + resource_problems(spec)
    problems += packing_problems(spec)  # issue 39: what shares a GPU must fit, each process its own cap
    if problems:
        raise SpecError(source, problems)


def resource_problems(spec: SweepSpec) -> list[str]:
    """Resources a command will need that the file leaves out: a sweep that trains on GPUs with
    evaluators given none (they would serve vLLM on CPU beside GPU training; `simulate` refused
    it, issue 63)."""
    if spec.resources.gpus_per_worker > 0 and spec.eval.gpus_per_evaluator <= 0:
        return [f"eval.gpus_per_evaluator: 0 in a sweep that trains on GPUs (resources.gpus_per_worker "
                f"{spec.resources.gpus_per_worker:g}): its evaluators would get no GPU; set it (1: a GPU each; "
                "0.3: a share of one beside training, docs/gpu.md)"]
    return []


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
