"""One real sweep end to end: local Ray cluster, Ray Tune trials running Ray Train, the vLLM CPU
engine in evaluator actors, the Parquet store; then resume, status and analyze on that store.

Grid: toy qwen2-tiny x {sft, lora} x {1e-3, 1e30}. lr = 1e30 makes the weights overflow after
the first steps: those trials must end as 'diverged' while the sweep goes on.
"""

from __future__ import annotations

import json
import subprocess
import sys

import pandas as pd
import pytest

from cliffsweep.sweep.grid import base_trial_id, expand_grid
from cliffsweep.orchestrator.specfile import parse_spec
from cliffsweep.sweep.reports import SETUP_PHASES

pytestmark = [pytest.mark.ray, pytest.mark.vllm]


def spec_for(store: str):
    return parse_spec({
        "name": "e2e",
        "models": [{"name": "qwen2-tiny", "path": "toy:qwen2-tiny"}],
        "methods": [{"name": "sft"}, {"name": "lora", "params": {"rank": 8}}],
        "lrs": [1e-3, 1e30],
        "epochs": [1],
        "tasks": {"learn": {"name": "toy_facts", "params": {"n_eval": 40, "n_train": 96,
                                                            "sampling": {"n": 2, "temperature": 1.5}}},
                  # sampled too (issue 40 part 2): 3 samples a question through vLLM's sampling
                  "retain": [{"name": "toy_arith", "params": {"n_eval": 40, "sampling": {"n": 3, "temperature": 1.5}}}]},
        "recipe": {"batch_size": 16, "max_seq_len": 128},
        "eval": {"points_per_trial": 2, "backend": "vllm", "cpus_per_evaluator": 0.5, "kv_cache_mb": 32,
                 "max_model_len": 256},
        "resources": {"workers_per_trial": 1, "cpus_per_worker": 1, "max_concurrent_trials": 2},
        "store": store,
    })


@pytest.fixture(scope="module")
def swept(tmp_path_factory):
    import ray

    from cliffsweep.orchestrator.driver import run_sweep

    spec = spec_for(str(tmp_path_factory.mktemp("e2e") / "store"))
    store = run_sweep(spec, num_cpus=2)
    yield spec, store
    ray.shutdown()


def test_every_grid_point_recorded_with_its_evaluations(swept):
    spec, store = swept
    grid = expand_grid(spec)
    trials = store.read("trials").set_index("trial_id")
    assert set(trials.index) == {t.trial_id for t in grid}
    evals = store.read("evals")
    acc = evals[evals["metric"] == "accuracy"]
    for t in grid:
        status = trials.loc[t.trial_id, "status"]
        if t.lr == 1e-3:
            assert status == "done", trials.loc[t.trial_id, "error"]
            mine = acc[acc["trial_id"] == t.trial_id]
            # 2 eval points x 2 tasks (learn + retain), each read on the items scored of n_eval (the
            # learn task in stages under eval.adaptive, the default; the sampled retain task in full)
            assert sorted(mine["step"].unique()) == sorted({int(trials.loc[t.trial_id, "steps"]) // 2, int(trials.loc[t.trial_id, "steps"])})
            assert set(mine["role"]) == {"learn", "retain"} and len(mine) == 4
            assert (mine["n_items"] == 40).all() and (mine["n"] == mine["n_scored"]).all() and (mine["n"] <= 40).all()
            assert (mine.loc[mine["role"] == "retain", "n"] == 40).all()  # sampled: scored in full
            # the per-trial overhead split (bench/bench_overhead.py reads these)
            row = trials.loc[t.trial_id]
            assert 0 < row["setup_seconds"] < row["finished_at"].timestamp() - row["started_at"].timestamp()
            assert 0 <= row["teardown_seconds"] and 0 < row["train_seconds"]
            # what its checkpoints cost the training loop (issue 21): two exports of the toy model
            assert 0 <= row["checkpoint_seconds"] < row["train_seconds"]
            assert row["checkpoint_bytes"] > 2 * 1e5, row["checkpoint_bytes"]
            # ... and the setup by phase (issue 15): every phase, adding up to setup_seconds
            phases = json.loads(row["setup_phases"])
            assert list(phases) == [name for name, _ in SETUP_PHASES] and min(phases.values()) >= 0, phases
            assert sum(v for k, v in phases.items() if k != "first_step") == pytest.approx(row["setup_seconds"], abs=0.02)
    base = acc[acc["trial_id"] == base_trial_id("qwen2-tiny")]
    assert set(base["role"]) == {"learn", "retain"} and (base["lr"] == 0).all() and (base["step"] == 0).all()
    samples = store.read("samples")
    greedy = samples[~samples["task"].str.endswith("@sampled")]  # the sampled ones: their own test below
    assert len(greedy) == acc["n"].sum()  # per-example rows behind every accuracy, one per item scored


def test_every_sampled_evaluation_stores_avg_and_pass_at_k_as_its_samples_give(swept):
    from cliffsweep.storage.store import SAMPLED_SUFFIX

    spec, store = swept
    ev = store.read("evals").query("task == 'toy_arith'")
    drawn = store.read("samples").query(f"task == 'toy_arith{SAMPLED_SUFFIX}'")
    drawn = drawn.assign(q=drawn["example_id"].str.rsplit("#", n=1).str[0])
    counts = drawn.groupby(["trial_id", "step", "q"])["correct"].agg(["sum", "size"])
    assert (counts["size"] == 3).all() and len(counts) == 40 * len(ev.query("metric == 'accuracy'"))
    for (tid, step), c in counts.groupby(level=[0, 1]):
        row = ev[(ev["trial_id"] == tid) & (ev["step"] == step)].set_index("metric")["value"]
        assert row["avg@3"] == pytest.approx((c["sum"] / 3).mean()), (tid, step)
        assert row["pass@3"] == pytest.approx((c["sum"] > 0).mean()), (tid, step)


def test_diverged_trials_recorded_without_stopping_the_sweep(swept):
    spec, store = swept
    trials = store.read("trials")
    big = trials[trials["lr"] == 1e30]
    assert len(big) == 2 and (big["status"] == "diverged").all(), big[["trial_id", "status", "error"]]
    assert (trials[trials["lr"] == 1e-3]["status"] == "done").all()
    # the training curve keeps what happened: a diverged trial's last row is its non-finite loss
    steps = store.read("steps")
    assert not steps.duplicated(["trial_id", "step"]).any()
    for tid in big["trial_id"]:
        mine = steps[steps["trial_id"] == tid].sort_values("step")
        assert len(mine) >= 1 and pd.isna(mine["loss"].iloc[-1]), mine[["step", "loss"]]
    for row in trials[trials["lr"] == 1e-3].itertuples():
        mine = steps[steps["trial_id"] == row.trial_id]
        assert sorted(mine["step"]) == list(range(1, int(row.steps) + 1)) and mine["loss"].notna().all()


def test_trained_checkpoint_scores_differ_from_base(swept):
    _, store = swept
    samples = store.read("samples")
    base = samples[samples["trial_id"] == base_trial_id("qwen2-tiny")]
    sft = samples[samples["trial_id"].str.contains("-sft-lr0.001-")]
    last = sft[sft["step"] == sft["step"].max()]
    merged = base.merge(last, on=["task", "example_id"], suffixes=("_b", "_t"))
    assert (merged["prediction_b"] != merged["prediction_t"]).any(), "checkpoint served the base weights"


def test_resume_runs_nothing_and_duplicates_nothing(swept):
    spec, store = swept
    from cliffsweep.orchestrator.driver import run_sweep

    before_t, before_e = store.read("trials"), store.read("evals")
    run_sweep(spec)
    after_t, after_e = store.read("trials"), store.read("evals")
    assert len(after_e) == len(before_e)
    order = ["trial_id", "step", "task", "metric"]
    assert (after_e.sort_values(order)["evaluated_at"].tolist()
            == before_e.sort_values(order)["evaluated_at"].tolist())
    assert after_t.set_index("trial_id")["status"].to_dict() == before_t.set_index("trial_id")["status"].to_dict()


def test_status_and_analyze_on_the_real_store(swept, tmp_path):
    _, store = swept
    r = subprocess.run([sys.executable, "-m", "cliffsweep.cli", "status", store.uri], capture_output=True, text=True)
    assert r.returncode == 0 and "done 2" in r.stdout and "diverged 2" in r.stdout
    assert "live: last run finished at" in r.stdout, r.stdout  # the driver's live state, from the store
    from test_analysis_e2e import analyze_and_check, colored_pixels, screenshot

    out = str(tmp_path / "rep")
    table = analyze_and_check(store.uri, out, n_boot=20)
    assert {"sft", "lora(rank=8)"} <= set(table["series"])
    shot = str(tmp_path / "report.png")
    screenshot(f"{out}/report.html", shot, 5000)  # the real store's report, rendered in Chromium
    assert colored_pixels(shot) > 2000
    # a sampled metric as the frontier's axes (issue 40 part 2): each task's own avg@n
    from cliffsweep.analysis.run import analyze_store

    sampled = analyze_store(store.uri, str(tmp_path / "avg"), n_boot=0, report=False, metric="avg")
    points = pd.read_parquet(tmp_path / "avg" / "points.parquet").set_index(["trial_id", "step"])
    ev = store.read("evals").set_index(["trial_id", "step", "task", "metric"])["value"]
    for (tid, step), p in points.iterrows():
        assert p["L"] == pytest.approx(ev[(tid, step, "toy_facts", "avg@2")]), (tid, step)
    assert set(sampled["series"]) == set(table["series"])
