"""The import graph points down only (docs/style.md, "Layering"): the sweep's vocabulary
(cliffsweep/sweep/) and the store sit below everything that uses them, nothing below the
orchestrator imports it (not even for type hints: unpickling a TrainConfig in a Train worker
would load it), and no two modules import each other, directly or round a loop. Every import
counts: module-level, inside a function, and under TYPE_CHECKING, and so does a registry's
"module:attribute" string (registry.py imports it when the name is used: issue 50 part 4).
Reads the source, runs nothing."""

from __future__ import annotations

import ast
import subprocess
import sys
from pathlib import Path

PKG = Path(__file__).resolve().parents[1] / "cliffsweep"


def _modules(pkg: Path = PKG) -> dict[str, Path]:
    out = {}
    for p in pkg.rglob("*.py"):
        parts = list(p.relative_to(pkg.parent).with_suffix("").parts)
        if parts[-1] == "__init__":
            parts.pop()
        out[".".join(parts)] = p
    return out


def _registry_target(node: ast.AST, mods: dict[str, Path], module: str) -> str | None:
    """The module a registry's "module:attribute" string in `module` names, if `node` is one
    that names another package's. A package's registry naming its own modules (methods/,
    tasks/) stays inside its room and layer; through it a plug-in may build another by name (a
    loss task of another task), which is a recursion, not a loop between rooms."""
    if isinstance(node, ast.Constant) and isinstance(node.value, str) and node.value.count(":") == 1:
        target, attr = node.value.split(":")
        if target in mods and attr.isidentifier() and not target.startswith(module + "."):
            return target
    return None


def import_graph(pkg: Path = PKG) -> dict[str, set[str]]:
    """module -> the cliffsweep modules it imports anywhere in its source, registry strings too."""
    mods = _modules(pkg)
    graph: dict[str, set[str]] = {m: set() for m in mods}
    for m, path in mods.items():
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.ImportFrom) and node.module and node.module.startswith("cliffsweep"):
                for alias in node.names:
                    sub = f"{node.module}.{alias.name}"
                    graph[m].add(sub if sub in mods else node.module)
            elif isinstance(node, ast.Import):
                graph[m] |= {a.name for a in node.names if a.name.startswith("cliffsweep")}
            elif (target := _registry_target(node, mods, m)) is not None:
                graph[m].add(target)
    return graph


def up_arrows(graph: dict[str, set[str]]) -> list[str]:
    return sorted(f"{m} -> {t}" for m, targets in graph.items() for t in targets
                  if _layer(t) in FORBIDDEN.get(_layer(m), set()))


def _layer(module: str) -> str:
    parts = module.split(".")
    return parts[1] if len(parts) > 1 else ""


def cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """Strongly connected components of more than one module (Tarjan)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on: set[str] = set()
    out: list[list[str]] = []

    def visit(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        on.add(v)
        for w in graph.get(v, ()):
            if w not in graph:
                continue
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            comp = []
            while True:
                w = stack.pop()
                on.discard(w)
                comp.append(w)
                if w == v:
                    break
            if len(comp) > 1:
                out.append(sorted(comp))

    for v in sorted(graph):
        if v not in index:
            visit(v)
    return out


# layer -> the layers it must never import (directly, lazily or for type hints)
_ABOVE_EVALS = {"orchestrator", "trainables", "analysis", "tracking", "planner", "simulate", "cli", "submit"}
_LEAF = {"orchestrator", "trainables", "analysis", "tracking", "evals", "evaluator", "storage", "planner",
         "simulate", "cli", "submit"}
FORBIDDEN = {
    "sweep": {"orchestrator", "trainables", "analysis", "tracking", "evals", "evaluator", "storage", "toy", "planner",
              "simulate", "cli", "submit"},
    "storage": {"orchestrator", "trainables", "analysis", "tracking", "evals", "evaluator", "sweep", "planner",
                "simulate", "cli", "submit"},
    "trainables": {"orchestrator", "evaluator", "analysis", "tracking", "planner", "simulate", "cli", "submit"},
    "analysis": {"orchestrator", "trainables", "evaluator", "tracking", "simulate", "cli", "submit"},  # planner.archs: families, sizes
    "tracking": {"orchestrator", "trainables", "evaluator", "analysis", "planner", "simulate", "cli", "submit"},
    "evals": _ABOVE_EVALS | {"evaluator"},
    # the worker side of evaluation (issue 38): evals -> evaluator -> storage, never back up
    "evaluator": _ABOVE_EVALS,
    "toy": {"orchestrator", "trainables", "evaluator", "analysis", "tracking", "storage", "planner", "simulate",
            "cli", "submit"},
    # the planner prices a sweep from the methods' and tasks' declared facts; it runs nothing
    "planner": {"orchestrator", "evaluator", "analysis", "tracking", "simulate", "cli", "submit"},
    # the top-level modules: where models come from, chat rendering, fault injection, whether the
    # model hub answers, the name->class registry are leaves every layer may use; `submit` sits
    # under the CLI alone
    "models": _LEAF, "realmodels": _LEAF, "chat": _LEAF, "faults": _LEAF, "registry": _LEAF, "hub": _LEAF,
    "submit": {"cli"},
    # the driver runs a sweep; the simulator replays the driver's policies without Ray
    "orchestrator": {"cli", "submit"},
    "simulate": {"cli", "submit"},
}

# the live dashboard (issue 41) reads the store through the analysis and a stored sweep file
# through sweep/specfile.py (issue 50: not the driver's package); only the CLI starts it, and
# nothing else imports it
FORBIDDEN["dashboard"] = {"orchestrator", "trainables", "evaluator", "tracking", "simulate", "cli", "submit"}
for _name, _rule in FORBIDDEN.items():
    if _name != "dashboard":
        _rule.add("dashboard")
# `submit --slurm` (issue 53): the sbatch scripts sit under `submit` alone, beside the Jobs API
FORBIDDEN["slurm"] = {"cli", "submit", "dashboard"}
for _name, _rule in FORBIDDEN.items():
    if _name not in ("slurm", "submit"):
        _rule.add("slurm")


def test_every_package_and_top_level_module_has_its_rule():
    """A new room (package or top-level module) must say what it may not import."""
    rooms = {_layer(m) for m in import_graph()} - {"", "cli"}
    assert rooms <= set(FORBIDDEN), sorted(rooms - set(FORBIDDEN))


def test_no_import_runs_back_up_a_layer():
    bad = up_arrows(import_graph())
    assert not bad, "imports that run back up:\n" + "\n".join(bad)


def test_a_registry_string_that_points_up_is_an_arrow_up(tmp_path):
    """Issue 50 part 4: a registry in evals that names an orchestrator class by string is caught
    as surely as an import; a string that names no module (a tag, a message) is not an arrow."""
    pkg = tmp_path / "cliffsweep"
    for rel, text in {"__init__.py": "", "orchestrator/__init__.py": "", "orchestrator/driver.py": "class D: pass\n",
                      "evals/__init__.py": "", "registry.py": "",
                      "evals/tasks.py": 'TASKS = {"d": "cliffsweep.orchestrator.driver:D"}\n'
                                        'TAG = "cliffsweep.status"\nNOTE = "see cliffsweep.orchestrator: it runs"\n'}.items():
        (pkg / rel).parent.mkdir(parents=True, exist_ok=True)
        (pkg / rel).write_text(text)
    graph = import_graph(pkg)
    assert graph["cliffsweep.evals.tasks"] == {"cliffsweep.orchestrator.driver"}
    assert up_arrows(graph) == ["cliffsweep.evals.tasks -> cliffsweep.orchestrator.driver"]
    real = import_graph()
    # the toy world registers its tasks and files itself (pyproject.toml's entry points)
    assert not any(t.startswith("cliffsweep.toy") for m in real if m.startswith("cliffsweep.evals") for t in real[m])


def test_no_module_is_part_of_an_import_circle():
    assert cycles(import_graph()) == []


def test_the_checker_sees_arrows_and_circles():
    """The two checks above, on a graph that has what they look for."""
    graph = {"cliffsweep.trainables.a": {"cliffsweep.orchestrator.b"},
             "cliffsweep.orchestrator.b": {"cliffsweep.trainables.a"}, "cliffsweep.sweep.c": set()}
    assert cycles(graph) == [["cliffsweep.orchestrator.b", "cliffsweep.trainables.a"]]
    assert "orchestrator" in FORBIDDEN["trainables"]
    real = import_graph()
    assert "cliffsweep.sweep.spec" in real["cliffsweep.orchestrator.specfile"]  # the parser sees real imports
    assert "cliffsweep.sweep.grid" in real["cliffsweep.trainables.config"]  # TYPE_CHECKING ones too


def test_a_train_worker_that_unpickles_its_config_loads_no_orchestrator():
    code = ("import pickle, sys\n"
            "import cliffsweep.trainables.config\n"
            "loaded = sorted(m for m in sys.modules if m.startswith(('cliffsweep.orchestrator', 'yaml', 'ray')))\n"
            "print(loaded)\n")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout.strip()
    assert out == "[]", out


def test_the_driver_builds_its_train_jobs_without_torch():
    """The driver only routes: importing torch there cost every `cliffsweep run` about 3.5
    CPU-seconds (a policy, torch_threads, lived beside the DDP helpers in trainables/parallel.py)."""
    code = ("import sys\n"
            "from cliffsweep.orchestrator import driver\n"
            "from cliffsweep.orchestrator.jobs import Configs\n"
            "from cliffsweep.sweep.grid import expand_grid\n"
            "from cliffsweep.sweep.specfile import load_spec\n"
            "spec = load_spec('cliffsweep/configs/toy.yaml')\n"
            "jobs = Configs(spec, 'inbox', None).jobs(expand_grid(spec), 4)\n"
            "print(len(jobs), sorted(m for m in sys.modules if m.split('.')[0] in ('torch', 'transformers', 'vllm')))\n")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True,
                         cwd=Path(__file__).resolve().parents[1]).stdout.strip()
    assert out == "6 []", out  # 20 trials of two models, 4 a job


TRIAL_PATH = ("trainables/trial.py", "trainables/checkpoints.py", "trainables/loop.py", "trainables/job.py",
              "trainables/resume.py", "orchestrator/sweeprun.py", "orchestrator/trialbook.py",
              "orchestrator/tunecallback.py", "orchestrator/inbox.py", "orchestrator/driver.py", "sweep/reports.py")


def test_trial_path_functions_fit_a_screen():
    """Issue 24 part 4: no function in the trial path over ~60 lines (a factory that holds a small
    class, Tune's callback, counts its methods' lines too)."""
    long = []
    for rel in TRIAL_PATH:
        for node in ast.walk(ast.parse((PKG / rel).read_text())):
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)) and node.end_lineno - node.lineno >= 62:
                long.append(f"{rel}:{node.name} ({node.end_lineno - node.lineno + 1} lines)")
    assert not long, long


def test_orchestrator_and_planner_functions_fit_a_screen():
    """Issue 33: no function over 60 lines in the orchestrator or the planner."""
    long = []
    for folder in ("orchestrator", "planner"):
        for p in sorted((PKG / folder).glob("*.py")):
            for node in ast.walk(ast.parse(p.read_text())):
                if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)) and node.end_lineno - node.lineno >= 60:
                    long.append(f"{folder}/{p.name}:{node.name} ({node.end_lineno - node.lineno + 1} lines)")
    assert not long, long


def test_no_file_past_600_lines():
    big = [f"{p.relative_to(PKG)} ({n})" for p in PKG.rglob("*.py") if (n := len(p.read_text().splitlines())) > 600]
    assert not big, big


def test_no_circle_between_the_rooms_inside_a_layer():
    """Issue 33: inside a layer, its rooms (sub-packages and modules: evals/tasks, evals/scoring,
    evals/canary.py, trainables/methods, trainables/microbatch.py, ...) do not import each other
    round a loop either (scoring <-> tasks, canary <-> backends and microbatch <-> methods did)."""
    rooms: dict[str, set[str]] = {}
    for m, targets in import_graph().items():
        room = ".".join(m.split(".")[:3])
        rooms.setdefault(room, set()).update(".".join(t.split(".")[:3]) for t in targets)
    for room, targets in rooms.items():
        targets.discard(room)
    assert cycles(rooms) == []


STORE_FORMAT = {"MANIFEST", "UNIT", "COMPACTED_PREFIX", "unit_files", "relisted"}
"""The store's file format (storage/store.py): how a table's folder is laid out and read. Only
storage/ reads it; everyone else reads tables (issue 50 part 2)."""


def test_the_store_s_format_is_read_in_storage_alone():
    bad = []
    for m, path in _modules().items():
        if _layer(m) == "storage":
            continue
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.ImportFrom) and (node.module or "").startswith("cliffsweep.storage"):
                bad += [f"{m}: {a.name}" for a in node.names if a.name in STORE_FORMAT or a.name.startswith("_")]
    assert not bad, bad


def test_no_status_word_is_spelt_outside_its_enum():
    """Issue 50 part 1: a trial's statuses are written through sweep/status.py alone; the page
    takes them from the server. A quoted status word anywhere else in the package is a copy."""
    import re

    words = re.compile(r"""["'](pending|running|trained|done|diverged|failed)["']""")
    files = [p for p in PKG.rglob("*.py") if p != PKG / "sweep" / "status.py"] + list(PKG.rglob("*.js"))
    bad = [f"{p.relative_to(PKG)}:{i}" for p in files for i, line in enumerate(p.read_text().splitlines(), 1)
           if words.search(line)]
    assert not bad, bad


def _own_attributes(module: str, cls_name: str) -> set[str]:
    """Every `self.x` a class assigns anywhere in its body (tuple targets and `+=` included)."""
    tree = ast.parse((PKG / module).read_text())
    cls = next(n for n in tree.body if isinstance(n, ast.ClassDef) and n.name == cls_name)
    return {n.attr for n in ast.walk(cls) if isinstance(n, ast.Attribute) and isinstance(n.ctx, ast.Store)
            and isinstance(n.value, ast.Name) and n.value.id == "self"}


def test_the_eval_tracker_keeps_few_attributes():
    """Issue 50 part 3: the pool's records live in evalpool.py; the tracker sets at most 12
    attributes of its own (it had 25, mostly parallel dicts kept in step by hand)."""
    names = _own_attributes("orchestrator/evaltracker.py", "EvalTracker")
    assert len(names) <= 12, sorted(names)


def test_the_sweep_run_keeps_few_attributes_and_lines():
    """Issue 60 part 1: the run's hub holds at most 20 attributes (it had 31): many drivers live
    in orchestrator/sharing.py, the jobs' configs in jobs.Configs, the periodic chores in
    policies.Every; sweeprun.py stays within 400 lines."""
    names = _own_attributes("orchestrator/sweeprun.py", "SweepRun")
    assert len(names) <= 20, sorted(names)
    assert len((PKG / "orchestrator" / "sweeprun.py").read_text().splitlines()) <= 400


def test_the_trial_book_keeps_one_state_per_trial():
    """Issue 60 part 4: a trial's state is one `TrialState`, not parallel collections; the
    book keeps at most 12 attributes (it had 17)."""
    names = _own_attributes("orchestrator/trialbook.py", "TrialBook")
    assert len(names) <= 12, sorted(names)


def test_the_base_series_is_named_once():
    """Issue 60 part 5: the base evaluation's series is `sweep.grid.BASE` (`is_base` selects its
    rows); no other module compares with, or writes, the word, and the page reads a point's
    `is_base` from the server."""
    import re

    word = re.compile(r"""[=!]= ["']base["']|(series|method)=["']base["']""")
    files = [p for p in PKG.rglob("*.py") if p != PKG / "sweep" / "grid.py"] + list(PKG.rglob("*.js"))
    bad = [f"{p.relative_to(PKG)}:{i}" for p in files for i, line in enumerate(p.read_text().splitlines(), 1)
           if word.search(line) or (p.suffix == ".js" and re.search(r"""["']base["']""", line))]
    assert not bad, bad


def test_the_store_s_file_names_are_spelt_in_storage_store_only():
    """Issue 60 part 5: the sweep file's copy (`SPEC_FILE`) and the compaction manifest
    (`MANIFEST`) are named in storage/store.py; every other module says `{SPEC_FILE}`."""
    import re

    names = re.compile(r"spec\.json|_compaction\.json")
    bad = [f"{p.relative_to(PKG)}:{i}" for p in PKG.rglob("*.js")
           for i, line in enumerate(p.read_text().splitlines(), 1) if names.search(line)]
    for p in PKG.rglob("*.py"):
        if p == PKG / "storage" / "store.py":
            continue
        tree = ast.parse(p.read_text())
        docs = {id(n.body[0].value) for n in ast.walk(tree) if isinstance(n, (ast.Module, ast.FunctionDef, ast.ClassDef))
                and n.body and isinstance(n.body[0], ast.Expr) and isinstance(n.body[0].value, ast.Constant)}
        bad += [f"{p.relative_to(PKG)}:{n.lineno}" for n in ast.walk(tree) if isinstance(n, ast.Constant)
                and isinstance(n.value, str) and id(n) not in docs and names.search(n.value)]
    assert not bad, bad


def test_the_claim_key_is_spelt_only_in_storage_claims():
    """Issue 60 part 2: a claim key is formatted and parsed in storage/claims.py alone."""
    import re

    # (an error row's key, `trial__<id>__attempt<n>`, is not a claim)
    key = re.compile(r"""["'](trial|base)__(\{[^}]*\})?["']|["'](round|verify)__""")
    bad = [f"{p.relative_to(PKG)}:{i}" for p in PKG.rglob("*.py") if p != PKG / "storage" / "claims.py"
           for i, line in enumerate(p.read_text().splitlines(), 1) if key.search(line)]
    assert not bad, bad
