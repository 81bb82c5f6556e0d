"""What a store's evaluation rows count (issue 51 part 3): the staged samples a row's accuracy was
taken on, and what the report says of a store evaluated under the stopping rule. Apart from the
top-up policy (analysis/topup.py), which reads verdicts: the points read this, the policy reads
the points."""

from __future__ import annotations

import numpy as np
import pandas as pd
from cliffsweep.sweep.grid import is_base


def within_evaluations(samples: pd.DataFrame, evals: pd.DataFrame) -> pd.DataFrame:
    """`samples` without the stages an `evals` row does not count yet: a top-up's stages written
    before its rows (evaluator/staged.py writes each stage, then the rows), so the items read
    are always those the stored accuracy was taken on. A stage counts while the items of it and
    of the stages before it are at most the row's n_scored."""
    if samples.empty or "stage" not in samples or samples["stage"].isna().all():
        return samples
    staged = samples[samples["stage"].notna()]
    sizes = staged.groupby(["trial_id", "step", "task", "stage"]).size().rename("k").reset_index()
    sizes = sizes.sort_values("stage")
    sizes["upto"] = sizes.groupby(["trial_id", "step", "task"])["k"].cumsum()
    n = evals.drop_duplicates(["trial_id", "step", "task"]).set_index(["trial_id", "step", "task"])["n_scored"]
    cap = n.reindex(pd.MultiIndex.from_frame(sizes[["trial_id", "step", "task"]])).to_numpy(float)
    keep = sizes[np.isnan(cap) | (sizes["upto"].to_numpy(float) <= cap)][["trial_id", "step", "task", "stage"]]
    kept = staged.merge(keep, on=["trial_id", "step", "task", "stage"], how="inner")
    return pd.concat([samples[samples["stage"].isna()], kept], ignore_index=True)


def scored_notes(evals: pd.DataFrame) -> list[str]:
    """What the report says of a store evaluated under the rule: the items scored and how each
    checkpoint is read from them."""
    short = evals[evals["metric"].isin(("accuracy", "loss")) & ~is_base(evals)] if len(evals) else evals
    if short.empty or "n_items" not in short or not (short["n_scored"] < short["n_items"]).any():
        return []
    scored, items = int(short["n_scored"].fillna(short["n"]).sum()), int(short["n_items"].fillna(short["n"]).sum())
    return [f"evaluated until the verdict is settled (eval.adaptive): {scored:,} of {items:,} items scored "
            f"({scored / items:.0%}); each checkpoint is read from the items it scored, and its bootstrap draws "
            "from those only; the checkpoints each series' verdict is read at were scored on every item"]
