"""Fig. 2 of the cliff paper (seed 000, Sec. 4) from the stores: SIB's statistics files
(`stats/<model>/sib-<key>.safetensors`, written once per model by the sweep) hold the retain
loss's top-k Hessian eigenvalues base and rescaled and the measured squared gradient norms
(trainables/methods/sib.py); this reads them into one table, a row per model x eigenvalue.
"""

from __future__ import annotations

import pandas as pd
import pyarrow.fs as pafs

from cliffsweep.storage.store import Store

CURVATURE_COLUMNS = ["model", "stats_file", "k", "eig_base", "eig_sib", "eig_ratio", "grad_sq_base", "grad_sq_sib",
                     "grad_sq_ratio"]


def _sib_files(store: Store) -> list[tuple[str, str]]:
    """(model, path) of every SIB statistics file of the store."""
    sel = pafs.FileSelector(f"{store.root}/stats", allow_not_found=True, recursive=True)
    out = []
    for info in store.fs.get_file_info(sel):
        name = info.path.rsplit("/", 1)[-1]
        if info.type == pafs.FileType.File and name.startswith("sib-") and name.endswith(".safetensors"):
            out.append((info.path.rsplit("/", 2)[-2], info.path))
    return sorted(out)


def curvature_table(uris: list[str]) -> pd.DataFrame:
    """One row per model x eigenvalue index k (1 = largest magnitude) of the stores' SIB
    statistics that carry spectra; the first store's file wins for a model in several (the
    same base model measured again). Files from before spectra were stored are skipped."""
    from safetensors.torch import load

    rows, seen = [], set()
    for uri in uris:
        store = Store(uri)
        for model, path in _sib_files(store):
            if model in seen:
                continue
            with store.fs.open_input_stream(path) as f:
                stats = load(f.read())
            if "sib:hessian_base" not in stats or "sib:hessian_rescaled" not in stats:
                continue
            seen.add(model)
            base, sib = stats["sib:hessian_base"].tolist(), stats["sib:hessian_rescaled"].tolist()
            g0, g1 = float(stats["sib:grad_sq_before"]), float(stats["sib:grad_sq_after"])
            for k, (a, b) in enumerate(zip(base, sib), start=1):
                rows.append({"model": model, "stats_file": path.rsplit("/", 1)[-1], "k": k, "eig_base": a,
                             "eig_sib": b, "eig_ratio": abs(b) / abs(a) if a else float("nan"),
                             "grad_sq_base": g0, "grad_sq_sib": g1, "grad_sq_ratio": g1 / g0 if g0 else float("nan")})
    return pd.DataFrame(rows, columns=CURVATURE_COLUMNS)
