"""How an lr is written, the same in plots, tables and sentences (no plotting import: the
analysis's pure modules and the driver use it too)."""

from __future__ import annotations

import numpy as np


def lr_text(lr: float) -> str:
    """Compact lr label, the same in plots and tables: 3e-05 -> '3e-5', 2.5e-05 -> '2.5e-5'."""
    if not np.isfinite(lr):
        return "-"
    mant, exp = f"{lr:.2g}".split("e") if "e" in f"{lr:.2g}" else (f"{lr:.2g}", None)
    if exp is None:
        mant, exp = f"{lr:.1e}".split("e")
    mant = mant.rstrip("0").rstrip(".") if "." in mant else mant
    return f"{mant}e{int(exp)}"
