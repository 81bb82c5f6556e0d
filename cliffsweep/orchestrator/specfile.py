"""A sweep file read and checked (style.md 3): `load_spec(path)` reads it as sweep/specfile.py
does (YAML, every field's type) and checks every method, task, optimizer and toy-model name and
parameter against the registries, and raises one `SpecError` listing *all* problems, each
named by its field path. Nothing is started before a spec validates.

The registry checks live here, with the orchestrator, because they import the registries
(trainables, evals, toy); the types and the reader below them import none of it.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import yaml
from pydantic import ValidationError

from cliffsweep.sweep import specfile
from cliffsweep.sweep.spec import SweepSpec
from cliffsweep.sweep.specfile import default_spec_path, loc as _loc, message, read_yaml, unknown
from cliffsweep.sweep.tracking import CREDENTIAL_KEYS

__all__ = ["default_spec_path", "load_spec", "parse_spec", "read_yaml"]


def _items(data: dict, key: str) -> list[tuple[int, dict]]:
    v = data.get(key)
    return [(i, x) for i, x in enumerate(v) if isinstance(x, dict)] if isinstance(v, list) else []


def _params_problems(where: str, cls, params: Any, what: str) -> list[str]:
    from cliffsweep.sweep.grid import expand_params

    if params is None:
        params = {}
    if not isinstance(params, dict):
        return []  # the type check already reported it
    for combo in expand_params(params):
        try:
            cls.Params(**combo)
        except ValidationError as e:
            return [f"{where}.params.{_loc(err['loc'])}: {message(err, list(cls.Params.model_fields))} ({what})"
                    for err in e.errors()]
    return []


def _semantic_problems(data: dict) -> list[str]:
    """Checks pydantic cannot do alone: registry names and each plug-in's own params.
    Works on the raw mapping so that it runs even when type validation failed elsewhere:
    one `validate` lists every problem of the file."""
    problems = _model_problems(data) + _method_problems(data) + _task_problems(data) + _rule_problems(data)
    tracking = data.get("tracking") if isinstance(data.get("tracking"), dict) else {}
    for tool, section in tracking.items():
        for key in section if isinstance(section, dict) else ():
            if str(key).lower() in CREDENTIAL_KEYS:
                problems.append(f"tracking.{tool}.{key}: credentials are never read from the sweep file (it is "
                                f"copied into the store); set the tool's own environment variable instead "
                                f"(docs/tracking.md: MLFLOW_TRACKING_TOKEN, WANDB_API_KEY, ...)")
    res = data.get("resources") if isinstance(data.get("resources"), dict) else {}
    recipe = data.get("recipe") if isinstance(data.get("recipe"), dict) else {}
    if res.get("strategy") == "fsdp":
        problems += _fsdp_problems(data, "resources.strategy fsdp")
    elif recipe.get("precision") == "fsdp_bf16":  # FSDP2's mixed precision shards the model too
        problems += _fsdp_problems(data, "recipe.precision fsdp_bf16")
    return problems


def _rule_problems(data: dict) -> list[str]:
    from cliffsweep.evals.stopping import RULES

    ev = data.get("eval") if isinstance(data.get("eval"), dict) else {}
    adaptive = ev.get("adaptive") if isinstance(ev.get("adaptive"), dict) else {}
    rule = adaptive.get("rule")
    if isinstance(rule, str) and rule not in RULES:
        return [f"eval.adaptive.rule: {unknown('stopping rule', rule, list(RULES))}"]
    return []


def _model_problems(data: dict) -> list[str]:
    from cliffsweep import realmodels
    from cliffsweep.toy import TOY_MODELS

    problems: list[str] = []
    models = _items(data, "models")
    names = [m.get("name") for _, m in models]
    for dup in sorted({str(n) for n in names if names.count(n) > 1}):
        problems.append(f"models: duplicate model name {dup!r}")
    for i, m in models:
        path = m.get("path")
        if isinstance(path, str) and path.startswith("toy:") and path[4:] not in TOY_MODELS:
            problems.append(f"models.{i}.path: {unknown('toy model', path[4:], list(TOY_MODELS))}")
        if isinstance(path, str) and realmodels.is_real_path(path) and realmodels.path_problem(path):
            problems.append(f"models.{i}.path: {realmodels.path_problem(path)}")
        folder = Path(path).expanduser() if isinstance(path, str) and path.startswith(("/", ".", "~")) else None
        if folder is not None and folder.is_dir() and not (folder / "config.json").is_file():
            # (a path that does not exist here may exist on the cluster's nodes: not refused)
            problems.append(f"models.{i}.path: {path} has no config.json (not a transformers model folder)")
    return problems


def _method_problems(data: dict) -> list[str]:
    from cliffsweep.trainables.methods import METHODS, method_class
    from cliffsweep.trainables.optimizers import OPTIMIZERS

    problems: list[str] = []
    seen: dict[str, int] = {}
    for i, m in _items(data, "methods"):
        first = seen.setdefault(yaml.safe_dump(m, sort_keys=True), i)
        if first != i:
            problems.append(f"methods.{i}: the same as methods.{first} (its trials would repeat those trial ids)")
        name = m.get("name")
        if isinstance(name, str) and name not in METHODS:
            problems.append(f"methods.{i}.name: {unknown('method', name, list(METHODS))}")
        elif isinstance(name, str):
            problems += _params_problems(f"methods.{i}", method_class(name), m.get("params"), f"method {name}")
        mopts = m.get("optimizers")
        for j, o in enumerate(mopts if isinstance(mopts, list) else []):
            if isinstance(o, str) and o not in OPTIMIZERS:
                problems.append(f"methods.{i}.optimizers.{j}: {unknown('optimizer', o, list(OPTIMIZERS))}")
    opts = data.get("optimizers")
    for i, o in enumerate(opts if isinstance(opts, list) else []):
        if isinstance(o, str) and o not in OPTIMIZERS:
            problems.append(f"optimizers.{i}: {unknown('optimizer', o, list(OPTIMIZERS))}")
    for i, m in _items(data, "models"):
        o = m.get("pretrain_optimizer")
        if isinstance(o, str) and o not in OPTIMIZERS:
            problems.append(f"models.{i}.pretrain_optimizer: {unknown('optimizer', o, list(OPTIMIZERS))}")
    return problems + _optimizer_settings_problems(data)


def _optimizer_settings_problems(data: dict) -> list[str]:
    from cliffsweep.trainables.optimizers import OPTIMIZERS, settings_class

    recipe = data.get("recipe") if isinstance(data.get("recipe"), dict) else {}
    given = recipe.get("optimizer_settings")
    problems: list[str] = []
    for name, settings in (given.items() if isinstance(given, dict) else ()):
        where = f"recipe.optimizer_settings.{name}"
        if name not in OPTIMIZERS:
            problems.append(f"{where}: {unknown('optimizer', name, list(OPTIMIZERS))}")
        elif isinstance(settings, dict):
            try:
                settings_class(name)(**settings)
            except (ValidationError, ValueError) as e:
                errs = e.errors() if isinstance(e, ValidationError) else [{"loc": (), "msg": str(e)}]
                fields = list(getattr(settings_class(name), "model_fields", ()))
                problems += [f"{where}{'.' + _loc(err['loc']) if err['loc'] else ''}: {message(err, fields)}"
                             for err in errs]
    return problems


def _task_problems(data: dict) -> list[str]:
    from cliffsweep.evals.tasks import task_class, task_names

    problems: list[str] = []
    tasks = data.get("tasks") if isinstance(data.get("tasks"), dict) else {}
    entries = [("tasks.learn", tasks.get("learn"))]
    retain = tasks.get("retain")
    entries += [(f"tasks.retain.{i}", t) for i, t in enumerate(retain if isinstance(retain, list) else [])]
    suite = tasks.get("learn_suite")
    entries += [(f"tasks.learn_suite.{i}", t) for i, t in enumerate(suite if isinstance(suite, list) else [])]
    entries += [("tasks.retain_data", tasks.get("retain_data"))]
    for where, t in entries:
        if not isinstance(t, dict) or not isinstance(t.get("name"), str):
            continue
        if t["name"] not in task_names():
            problems.append(f"{where}.name: {unknown('task', t['name'], list(task_names()))}")
        else:
            problems += _params_problems(where, task_class(t["name"]), t.get("params"), f"task {t['name']}")
    return problems


def _fsdp_problems(data: dict, why: str) -> list[str]:
    """Methods and optimizers that cannot run on FSDP shards (trainables/parallel.py), which
    `why` (the setting that shards) asks for."""
    from cliffsweep.trainables.methods import METHODS, method_class
    from cliffsweep.trainables.parallel import FSDP_OPTIMIZERS

    problems = []
    sweep_opts = data.get("optimizers") if isinstance(data.get("optimizers"), list) else ["adamw"]
    for i, m in _items(data, "methods"):
        name = m.get("name")
        if isinstance(name, str) and name in METHODS and not method_class(name).fsdp_safe:
            safe = sorted(n for n in METHODS if method_class(n).fsdp_safe)
            problems.append(f"methods.{i}.name: {name} does not run under {why} "
                            f"(not shard-safe: see Method.fsdp_safe); use ddp and precision auto, or one of {safe}")
        opts = m.get("optimizers") if isinstance(m.get("optimizers"), list) else sweep_opts
        for o in opts:
            if isinstance(o, str) and o not in FSDP_OPTIMIZERS:
                problems.append(f"methods.{i}: optimizer {o!r} does not run under {why}; "
                                f"valid there: {sorted(FSDP_OPTIMIZERS)}")
    return problems


def parse_spec(data: Any, source: str = "<spec>") -> SweepSpec:
    """Validate a parsed sweep file, types and registries; raise SpecError with every problem."""
    return specfile.parse_spec(data, source, (_semantic_problems,))


def load_spec(path: str | Path) -> SweepSpec:
    """The sweep file at `path`, types and registries checked, or a SpecError naming every problem."""
    return specfile.load_spec(path, (_semantic_problems,))
