"""The models of a store with their family and size (cliff paper, seed 000, Sec. 3 and Fig. 9:
"across model sizes within a family and across families at comparable scales").

Family and size come from each model's architecture (:func:`cliffsweep.planner.archs.family_and_size`:
the table of published configs, or a config.json already on this machine); nothing is built or
downloaded. A model neither knows keeps an empty family and size, and the report says so.
"""

from __future__ import annotations

import numpy as np
import pandas as pd

from cliffsweep.planner.archs import family_and_size

MODEL_COLUMNS = ["model", "model_path", "family", "size_b", "pretrain_optimizer"]


def model_table(trials: pd.DataFrame, models: list[str] | None = None,
                pretrain: dict[str, str] | None = None) -> pd.DataFrame:
    """One row per model: its spec path (the trials' ``model_path``; the first one when a model
    name was run from two paths), family and size in billions of parameters, and the optimizer
    it was pretrained with when the sweep file says (``pretrain``: model -> optimizer, from the
    stores' spec.json: models[].pretrain_optimizer). ``models`` adds models that have
    evaluations but no trials row (a base model only)."""
    paths = {}
    if len(trials) and "model_path" in trials:
        for model, path in trials.dropna(subset=["model_path"]).groupby("model", sort=True)["model_path"]:
            paths[model] = path.iloc[0]
    rows = []
    for model in sorted(set(paths) | set(models or [])):
        path = paths.get(model)
        known = family_and_size(path) if path else None
        family, size = known if known else (None, np.nan)
        rows.append({"model": model, "model_path": path, "family": family, "size_b": size,
                     "pretrain_optimizer": (pretrain or {}).get(model)})
    return pd.DataFrame(rows, columns=MODEL_COLUMNS)
