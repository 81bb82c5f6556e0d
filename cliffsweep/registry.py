"""The one lookup behind every name -> class registry (methods, tasks, backends, optimizers).

Tables map a name to "module:attribute" so that heavy optional imports (vllm, peft) happen
only when that entry is used; an unknown name raises with the list of valid names.

A registry can also take plug-ins: an installed package's entry points in the registry's group
(`[project.entry-points."cliffsweep.tasks"]` in its pyproject.toml, as pytest's and
lm-eval's plug-ins are found). That is how the toy world registers its tasks and its data
files with evals without evals naming the toy world (issue 50 part 4): the registering side
names the registry, which is the direction the layers allow.
"""

from __future__ import annotations

import importlib
from functools import cache
from typing import Any


@cache
def plugins(group: str) -> dict[str, str]:
    """name -> "module:attribute" of the installed packages' entry points in `group`."""
    from importlib.metadata import entry_points

    return {ep.name: ep.value for ep in entry_points(group=group)}


def table_of(table: dict[str, str], group: str | None) -> dict[str, str]:
    """`table` with the plug-ins of `group` beside it (the table's own entries win)."""
    return {**plugins(group), **table} if group else table


def lookup(table: dict[str, str], name: str, kind: str, group: str | None = None) -> Any:
    if name not in table:
        table = table_of(table, group)
    if name not in table:
        raise KeyError(f"unknown {kind} {name!r}; valid: {sorted(table)}")
    module, attr = table[name].split(":")
    return getattr(importlib.import_module(module), attr)
