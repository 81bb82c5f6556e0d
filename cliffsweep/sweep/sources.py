"""Where each setting of a sweep file comes from (issue 52 part 4): the paper that printed it, or
the project's choice where the paper is silent.

A sweep file that reproduces a paper says so in a `sources:` section:

    sources:
      paper: 004 (RPSFT)
      settings:
        recipe.batch_size: ours (Table 10's values are lost in our copy)
        models.llama3.1-8b.epochs: 004 App. E (20 epochs: its base checkpoint is weaker)

Each key is a setting's path in the file: fields joined by dots, a list item by its `name` where
that name is unique in its list, else by its lm-eval `task`, else by its index (`tasks.retain.0`).
A label on a path covers everything below it; `*` in a key stands for any part of a path
(`tasks.*.sampling.top_p`). A label that starts with "ours" marks the project's choice; any other label
cites the paper.

The invariant: in a file with `sources:`, every setting it sets that shapes the experiment (not
where it runs: `resources`, the store, the evaluators' engine) carries a label, and every label
names a setting the file sets. `problems` checks both; `rows` is what `plan` prints, with the
defaults that apply beside the settings (DEFAULT_ORIGINS: the cliff paper's recipe applies
unless a file says otherwise, which is how 000's schedule used to apply silently).
"""

from __future__ import annotations

from fnmatch import fnmatchcase
from typing import Any, Iterator, NamedTuple

from pydantic import BaseModel

OURS = "ours"
"""The label prefix of a setting that is the project's choice."""

NOT_SCIENCE = {"name", "store", "checkpoints", "keep_checkpoints", "resume_every_s", "async_checkpoints",
               "ray_address", "tracking", "resources", "sources",
               "eval.backend", "eval.evaluators_per_model", "eval.max_evaluators_per_model",
               "eval.cpus_per_evaluator", "eval.gpus_per_evaluator", "eval.gpu_memory_gb", "eval.kv_cache_mb",
               "eval.max_model_len", "eval.enforce_eager", "eval.engine_in_process"}
"""Settings that say where and how fast a sweep runs, not what it measures: they need no label."""

DEFAULT_ORIGINS = {
    "optimizers": "000 App. B (AdamW)",
    "epochs": "000 Sec. 5 (3 epochs)",
    "seeds": "ours (one run per lr)",
    "recipe.batch_size": "ours (000 prints none)",
    "recipe.max_seq_len": "ours",
    "recipe.weight_decay": "000 App. B",
    "recipe.warmup_steps": "000 App. B (20 steps)",
    "recipe.cooldown_steps": "000 App. B (50 steps; their linear shape is ours)",
    "recipe.min_lr_ratio": "000 App. B (cosine to 0.1x peak)",
    "recipe.grad_clip": "ours",
    "recipe.system_prompt": "000 (none)",
    "eval.points_per_trial": "ours",
    "eval.adaptive": "ours (issue 51's stopping rule)",
}
"""Where each default of a setting that shapes the experiment comes from; `plan` prints them for a
file with `sources:`, so that a default it did not mean to keep shows."""


class Row(NamedTuple):
    path: str
    value: Any
    label: str
    ours: bool
    default: bool


def _item_keys(items: list) -> list[str]:
    """Each list item's path part: its name where unique, else its lm-eval task where unique, else
    its index."""
    names = [getattr(x, "name", None) for x in items]
    tasks = [getattr(x, "params", {}).get("task") if isinstance(getattr(x, "params", None), dict) else None
             for x in items]
    return [n if isinstance(n, str) and names.count(n) == 1
            else t if isinstance(t, str) and tasks.count(t) == 1 else str(i)
            for i, (n, t) in enumerate(zip(names, tasks))]


def _items(name: str, items: list) -> Iterator[tuple[str, Any]]:
    for key, x in zip(_item_keys(items), items):
        yield f"{name}.{key}", x


def _walk(path: str, value: Any) -> Iterator[tuple[str, Any]]:
    if path in NOT_SCIENCE:
        return
    if isinstance(value, BaseModel):
        set_fields = [f for f in type(value).model_fields if f in value.model_fields_set]
        if not set_fields:
            yield path, value
        for f in set_fields:
            yield from _walk(f"{path}.{f}" if path else f, getattr(value, f))
    elif isinstance(value, dict) and value:
        for k, v in value.items():
            yield from _walk(f"{path}.{k}", v)
    elif isinstance(value, list) and value and all(isinstance(x, BaseModel) for x in value):
        for p, x in _items(path, value):
            yield from _walk(p, x)
    else:
        yield path, value


def settings(spec) -> list[tuple[str, Any]]:
    """(path, value) of every setting the file sets that shapes the experiment, in file order."""
    return list(_walk("", spec))


def _covers(label_path: str, path: str) -> bool:
    """`label_path` names `path` or an ancestor of it; `*` stands for any part of a path
    (`tasks.*.sampling.top_p`: every task's)."""
    return fnmatchcase(path, label_path) or fnmatchcase(path, label_path + ".*")


def label_of(path: str, labels: dict[str, str]) -> str | None:
    """The label of `path`: the most specific key that covers it (the deepest; at one depth a
    key without `*` before a pattern)."""
    best = max((p for p in labels if _covers(p, path)), key=lambda p: (p.count("."), "*" not in p, len(p)),
               default=None)
    return labels[best] if best is not None else None


def problems(spec) -> list[str]:
    """A `sources:` section's problems: labels that name no setting the file sets, settings
    without a label, empty labels. [] without a section."""
    if spec.sources is None:
        return []
    labels = spec.sources.settings
    paths = [p for p, _ in settings(spec)]
    out = [f"sources.settings.{k}: names no setting this file sets (paths: fields joined by dots, a list item "
           f"by its unique name, else its lm-eval task, else its index; `*` for any part)" for k in labels if not any(_covers(k, p) for p in paths)]
    out += [f"sources.settings.{k}: an empty label (cite the paper, or start with '{OURS}')"
            for k, v in labels.items() if not v.strip()]
    unlabelled = [p for p in paths if label_of(p, labels) is None]
    if unlabelled:
        out.append(f"sources.settings: {len(unlabelled)} setting(s) without a label (a paper's reference, or "
                   f"'{OURS} ...' for the project's choice): {', '.join(unlabelled)}; add each under sources.settings, "
                   f"e.g. `{unlabelled[0]}: \"{OURS} (why)\"`")
    return out


def _unused(spec, path: str) -> bool:
    """A default that does not apply: its setting is replaced by another one the file sets."""
    if path == "epochs":
        return spec.recipe.max_steps is not None or all(m.epochs is not None for m in spec.models)
    if path == "optimizers":
        return all(m.optimizers is not None for m in spec.methods)
    return path == "recipe.warmup_steps" and spec.recipe.warmup_fraction is not None


def _default_rows(spec) -> list[Row]:
    """The defaults that apply. One taken from the cliff paper is the paper's only in a file that
    follows 000; in any other it is the project's choice (000's schedule in a 004 sweep)."""
    follows_000 = spec.sources is not None and spec.sources.paper.startswith("000")
    out = []
    for path, origin in DEFAULT_ORIGINS.items():
        head, _, field = path.rpartition(".")
        owner = getattr(spec, head) if head else spec
        if field in owner.model_fields_set or _unused(spec, path):
            continue
        ours = origin.startswith(OURS) or not (follows_000 and origin.startswith("000"))
        out.append(Row(path, getattr(owner, field), origin, ours, True))
    return out


def rows(spec) -> list[Row]:
    """Every setting that shapes the experiment with where it comes from: the file's own (labelled
    by `sources:`; a file without one names no paper, so each is the file's choice) and the
    defaults that apply."""
    labels = spec.sources.settings if spec.sources is not None else {}
    own = []
    for path, value in settings(spec):
        label = label_of(path, labels) or f"{OURS} (the file names no paper)"
        own.append(Row(path, value, label, label.lower().startswith(OURS), False))
    return own + _default_rows(spec)


def _short(value: Any, width: int = 60) -> str:
    if value is None:
        return "off"
    if isinstance(value, BaseModel):
        value = value.model_dump(exclude_unset=True) or "(defaults)"
    text = str(value)
    return text if len(text) <= width else text[:width - 3] + "..."


def lines(spec) -> list[str]:
    """`plan`'s settings block: the settings grouped under their labels (in the order each label
    first applies), the project's choices marked [ours]."""
    paper = spec.sources.paper if spec.sources is not None else "none named: every setting is the file's choice"
    groups: dict[str, list[str]] = {}
    for r in rows(spec):
        heading = ("[ours] " if r.ours else "[paper]") + (" default, " if r.default else " ") + r.label
        groups.setdefault(heading, []).append(f"        {r.path} = {_short(r.value)}")
    out = [f"Settings (paper: {paper}; [ours] marks the project's choices, [paper] the paper's):"]
    for heading, settings_ in groups.items():
        out += [f"   {heading}:", *settings_]
    return out
