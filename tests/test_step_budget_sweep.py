"""Step budgets through a trained sweep (issue 52's acceptance): with `recipe.max_steps: [9, 18]`
and SFT plus a second method, each under AdamW and Muon, every claims table that `analyze` writes
keeps one series per budget: each budget's series compare with SFT at that budget, the forgetting
order ranks the methods without the `[muon]` and `@steps` parts of their labels, and no number
that is due is NaN. (tests/test_verdict_noise.py checks the same tables on a synthetic store; here
the store is the sweep's own.)"""

from __future__ import annotations

import pandas as pd
import pytest

from cliffsweep.orchestrator.specfile import parse_spec

pytestmark = [pytest.mark.ray, pytest.mark.slow]

BUDGETS = {"9 steps", "18 steps"}


def test_each_step_budget_is_a_series_of_its_own_in_every_claims_table(tmp_path):
    import ray

    from cliffsweep.analysis.run import analyze_store
    from cliffsweep.orchestrator.driver import run_sweep

    spec = parse_spec({
        "name": "budgets", "store": str(tmp_path / "store"),
        "models": [{"name": "qwen2-tiny", "path": "toy:qwen2-tiny"}],
        "methods": [{"name": "sft"}, {"name": "l2sp", "params": {"lam": 1.0}}],
        "optimizers": ["adamw", "muon"], "lrs": [1.0e-3, 1.0e-2],
        "tasks": {"learn": {"name": "toy_facts", "params": {"n_eval": 60}},
                  "retain": [{"name": "toy_arith", "params": {"n_eval": 60}}]},
        "recipe": {"batch_size": 16, "max_seq_len": 128, "max_steps": [9, 18], "stats_examples": 32},
        "eval": {"points_per_trial": 1, "backend": "hf", "adaptive": False},  # the budgets are the point here
        "resume_every_s": 0})
    try:
        store = run_sweep(spec, num_cpus=3)
    finally:
        ray.shutdown()
    trials = store.read("trials")
    assert len(trials) == 16 and (trials["status"] == "done").all(), trials[["trial_id", "status"]]
    out = tmp_path / "report"
    table = analyze_store(store.uri, str(out), n_boot=20, report=False)
    tables = {name: pd.read_parquet(out / f"{name}.parquet")
              for name in ("matched_gain", "optimizers", "forgetting_order", "epochs_effect", "size_effect")}
    print(table[["series", "regime", "max_safe_lr"]].to_string())
    for name, t in tables.items():
        print(name, t.to_string(), sep="\n")

    assert sorted(table["series"]) == sorted(f"{m}{o}@{s}steps" for m in ("sft", "l2sp(lam=1)")
                                             for o in ("", "[muon]") for s in (9, 18))
    gains = tables["matched_gain"]
    assert set(gains["budget"]) == BUDGETS and len(gains) == 6, gains  # 3 series against SFT per budget
    for r in gains.itertuples():
        assert r.reference == f"sft@{r.budget.split()[0]}steps", (r.series, r.reference)
    assert not gains[["gain_max", "learning_over_sft"]].isna().any().any(), gains
    opt = tables["optimizers"]
    assert sorted(opt["series"]) == ["sft[muon]@18steps", "sft[muon]@9steps"], opt
    order = tables["forgetting_order"]
    assert len(order) == 4 and set(order["budget"]) == BUDGETS, order  # 2 budgets x 2 optimizers
    assert not order["kendall_tau"].isna().any(), order
    assert set(order["order"].str.split(" > ").sum()) == {"sft", "l2sp(lam=1)"}, order
    eff = tables["epochs_effect"]
    assert len(eff) == 8 and set(eff["n_epochs"]) == {2}, eff  # each series across its two budgets
    safe = eff["max_safe_lr"].notna()
    assert not eff.loc[safe, "max_safe_lr_slope"].isna().any(), eff
    assert set(tables["size_effect"]["budget"]) == BUDGETS, tables["size_effect"]
