"""A sweep file read (style.md 3): YAML parsed, every field's type checked (the types:
sweep/spec.py), and one `SpecError` raised that lists *all* problems, each named by its field
path. What the types cannot check alone (every method, task, optimizer and toy-model name and
parameter against the registries) is handed in as `checks`: orchestrator/specfile.py runs the
registries' checks, which import the layers above this one. A spec stored by a run that
started was checked then: a reader of it (the dashboard, `status`) needs the types alone.
"""

from __future__ import annotations

import difflib
import typing
from functools import lru_cache
from pathlib import Path
from typing import Any, Callable, Sequence

import yaml
from pydantic import BaseModel, ValidationError

from cliffsweep.sweep.sources import problems as source_problems
from cliffsweep.sweep.spec import SpecError, SweepSpec

Check = Callable[[dict], list[str]]
"""A check of a sweep file's raw mapping: its problems, each 'field.path: message'. It runs even
where the types failed elsewhere, so that one `validate` lists every problem of the file."""


def loc(where: tuple) -> str:
    return ".".join(str(x) for x in where) or "<root>"


@lru_cache(maxsize=1)
def field_names() -> tuple[str, ...]:
    """Every field name of the sweep file's models, nested ones too: what a misspelled key is
    matched against."""
    seen: set[type] = set()
    names: set[str] = set()

    def walk(tp) -> None:
        if isinstance(tp, type) and issubclass(tp, BaseModel):
            if tp in seen:
                return
            seen.add(tp)
            for name, f in tp.model_fields.items():
                names.add(name)
                walk(f.annotation)
        for arg in typing.get_args(tp):
            walk(arg)

    walk(SweepSpec)
    return tuple(sorted(names))


def unknown(what: str, name: str, valid: Sequence[str]) -> str:
    """'unknown <what> <name>; did you mean <nearest>? valid: [...]' (issue 63 part 4)."""
    close = difflib.get_close_matches(name, list(valid), n=1, cutoff=0.6)
    return f"unknown {what} {name!r}; " + (f"did you mean {close[0]!r}? " if close else "") + f"valid: {sorted(valid)}"


def message(err: dict, fields: Sequence[str] | None = None) -> str:
    """A validation error in the tool's words (issue 63 part 4): a misspelled key with the
    nearest field of `fields` (default: every field of the sweep file) ("did you mean"), an empty
    list as such; else the library's message."""
    if err.get("type") == "extra_forbidden":
        key = str(err["loc"][-1]) if err["loc"] else ""
        close = difflib.get_close_matches(key, list(fields or field_names()), n=1, cutoff=0.75)
        return "not a field of this section" + (f"; did you mean '{close[0]}'?" if close else "")
    if err.get("type") == "too_short" and isinstance(err.get("input"), (list, tuple, dict)) and not err["input"]:
        return "must not be empty"
    return err["msg"]


def parse_spec(data: Any, source: str = "<spec>", checks: Sequence[Check] = ()) -> SweepSpec:
    """Validate a parsed sweep file; raise SpecError with every problem found."""
    if not isinstance(data, dict):
        raise SpecError(source, [f"<root>: expected a mapping of fields, got {type(data).__name__}"])
    problems: list[str] = []
    spec = None
    try:
        spec = SweepSpec.model_validate(data)
    except ValidationError as e:
        problems = [f"{loc(err['loc'])}: {message(err)}" for err in e.errors()]
    for check in checks:
        problems += check(data)
    if spec is not None:
        problems += source_problems(spec)
    if problems:
        raise SpecError(source, problems)
    return spec


class _Loader(yaml.SafeLoader):
    """YAML's safe loader that notes a mapping key given twice (YAML keeps the last one silently:
    a sweep file's second `lrs:` would replace the first without a word)."""

    def __init__(self, stream):
        super().__init__(stream)
        self.duplicates: list[str] = []

    def construct_mapping(self, node, deep=False):
        seen: dict = {}
        for key_node, _ in node.value:
            try:
                key = self.construct_object(key_node, deep=True)
                first = seen.setdefault(key, key_node.start_mark.line + 1)
            except TypeError:  # an unhashable key: the type check reports the field
                continue
            if first != key_node.start_mark.line + 1:
                self.duplicates.append(f"line {key_node.start_mark.line + 1}: key {key!r} given again (first on "
                                       f"line {first}); YAML would keep the last one silently")
        return super().construct_mapping(node, deep)


def read_yaml(path: Path) -> tuple[Any, list[str]]:
    """(the file's data, its problems as a file: not UTF-8, not YAML, keys given twice)."""
    raw = path.read_bytes()
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError as e:
        line = raw[:e.start].count(b"\n") + 1
        raise SpecError(str(path), [f"not UTF-8 text: byte 0x{raw[e.start]:02x} at offset {e.start} (line {line}); "
                                    "save the file as UTF-8"]) from None
    loader = _Loader(text)
    try:
        data = loader.get_single_data()
    except yaml.YAMLError as e:
        mark = getattr(e, "problem_mark", None)
        where = f"line {mark.line + 1}, column {mark.column + 1}: " if mark is not None else ""
        what = " ".join(x for x in (getattr(e, "context", None), getattr(e, "problem", None)) if x) or str(e)
        raise SpecError(str(path), [f"{where}not valid YAML: {what}"]) from None
    finally:
        loader.dispose()
    return data, loader.duplicates


def load_spec(path: str | Path, checks: Sequence[Check] = ()) -> SweepSpec:
    """The sweep file at `path`, or a SpecError that lists every problem of it."""
    path = Path(path)
    if not path.is_file():
        raise SpecError(str(path), ["file not found" if not path.exists() else "not a file"])
    data, duplicates = read_yaml(path)
    try:
        spec = parse_spec(data, str(path), checks)
    except SpecError as e:
        raise SpecError(str(path), duplicates + e.problems) from None
    if duplicates:
        raise SpecError(str(path), duplicates)
    return spec


def default_spec_path() -> Path:
    """The packaged toy sweep: the embedded default of `cliffsweep run`."""
    return Path(__file__).resolve().parent.parent / "configs" / "toy.yaml"
