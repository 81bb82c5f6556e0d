"""`cliffsweep simulate` (issue 22 part 1): a schedule worked out by hand, the bookkeeping that must
hold for any sweep (every checkpoint evaluated once, the work conserved, the makespan above the
ideal), the driver's own packing policy, and the command on the paper grid's files."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from cliffsweep.planner import bill
from cliffsweep.orchestrator.specfile import parse_spec
from cliffsweep.planner.plan import ModelPlan
from cliffsweep.simulate.engine import Cluster, simulate

ROOT = Path(__file__).resolve().parents[1]


def spec(**resources):
    return parse_spec({
        "name": "sim", "models": [{"name": "m", "path": "toy:qwen2-tiny"}], "methods": [{"name": "sft"}],
        "lrs": [1e-3, 2e-3], "epochs": [1],
        "tasks": {"learn": {"name": "toy_facts"}, "retain": [{"name": "toy_arith"}]},
        "eval": {"gpus_per_evaluator": 1, "evaluators_per_model": 1},
        "resources": {"gpus_per_worker": 1, "workers_per_trial": 1, "max_concurrent_trials": 1, **resources},
        "store": "/tmp/unused"})


def plans(n: int = 2, stats: bool = False) -> list[ModelPlan]:
    from cliffsweep.planner.archs import PUBLISHED

    p = ModelPlan("m", PUBLISHED["Qwen/Qwen2.5-0.5B-Instruct"], base_eval_s=3.0)
    p.trial_costs = [bill.TrialCost(f"t{i}", "m", 1.0, 1.0, 10.0, 0.0, 2, 3.0, "k" if stats else None) for i in range(n)]
    if stats:
        p.stats_s = {"k": 7.0}
    return [p]


def test_a_schedule_worked_out_by_hand():
    # GPU 0: the evaluator starts its engine (60 s), evaluates the base (60-63). Training waits for
    # it (prepare_training); one job of both points (concurrency 1) on GPU 1 from 63: setup to 64,
    # checkpoints at 69 and 74; the second point's setup to 75, checkpoints at 80 and 85. Each
    # evaluation takes 3 s: 69-72, 74-77, 80-83, 85-88.
    r = simulate(spec(), plans(), Cluster(1, 2, 8))
    assert (r.concurrency, r.per_job, r.jobs) == (1, 2, 1)
    assert r.makespan == pytest.approx(88.0)
    assert r.work_gpu_s["training"] == pytest.approx(22.0)
    assert r.work_gpu_s["evaluating"] == pytest.approx(bill.ENGINE_START_S + 5 * 3.0)
    assert r.longest_chain == pytest.approx(14.0)  # setup + training + the last evaluation
    assert r.ideal == pytest.approx((22.0 + bill.ENGINE_START_S + 15.0) / 2)


def test_statistics_run_first_on_a_gpu_of_their_own():
    r = simulate(spec(), plans(stats=True), Cluster(1, 2, 8))
    # statistics on GPU 1 from 0 to 7; training still waits for the base evaluation (63)
    assert r.work_gpu_s["statistics"] == pytest.approx(7.0)
    assert r.makespan == pytest.approx(88.0)
    assert r.longest_chain == pytest.approx(21.0)


def test_the_drivers_packing_decides_the_jobs():
    from cliffsweep.orchestrator.policies import pack

    s = spec(trials_per_job=1, max_concurrent_trials=2)
    r = simulate(s, plans(4), Cluster(1, 3, 8))
    assert r.jobs == len(pack(["m"] * 4, 1)) == 4 and r.per_job == 1
    # two jobs at once on GPUs 1 and 2: each point 11 s, two rounds from 63, evaluations queue on one evaluator
    assert r.work_gpu_s["training"] == pytest.approx(4 * 11.0)
    assert r.makespan >= 63 + 2 * 11
    two = s.model_copy(update={"eval": s.eval.model_copy(update={"evaluators_per_model": 2})})
    with pytest.raises(ValueError, match="cannot hold the evaluators"):
        simulate(two, plans(4), Cluster(1, 1, 8))
    with pytest.raises(ValueError, match="does not fit the cluster"):
        simulate(spec(workers_per_trial=2), plans(4), Cluster(1, 1, 8))
    # one GPU: the idle evaluator gives way to the job once it has idled an engine start, and
    # comes back after it: 8 checkpoints of 3 s are fewer than an engine start's worth
    # (policies.evaluator_changes, starved_at 20), so not before training ends
    r = simulate(s, plans(4), Cluster(1, 1, 8))
    assert r.engines == 2 and r.evaluations == 1 + 4 * 2
    assert r.makespan == pytest.approx(63 + bill.ENGINE_START_S + 4 * 11 + bill.ENGINE_START_S + 8 * 3.0)
    # with 60 checkpoints waiting (30 points), the model gets an evaluator back during training:
    # it takes the GPU the next job would have taken
    r = simulate(s, plans(30), Cluster(1, 1, 8))
    assert r.engines >= 3 and r.evaluations == 1 + 30 * 2
    training_ends = max(e for _, e, _, kind in r.timeline.busy if kind == "training")
    evaluating = [(a, e) for a, e, _, kind in r.timeline.busy if kind == "evaluating"]
    assert any(e < training_ends for a, e in evaluating[2:])  # beyond the first engine and base evaluation


@pytest.mark.parametrize("nodes", [3, 4])  # paper_lora: 13 models, an evaluator GPU each
def test_any_sweep_evaluates_every_checkpoint_once_and_conserves_its_work(nodes):
    from cliffsweep.orchestrator.specfile import load_spec
    from cliffsweep.planner.plan import plan_spec

    s = load_spec(str(ROOT / "cliffsweep/configs/paper_lora.yaml"))
    ps = plan_spec(s)
    r = simulate(s, ps, Cluster(nodes, 8, 96))
    evals = [iv for iv in r.timeline.busy if iv[3] == "evaluating"]
    n_models = len(ps)
    assert r.evaluations == n_models + sum(pt.checkpoints for p in ps for pt in p.trial_costs)  # base + every checkpoint
    assert len(evals) == r.evaluations + r.engines and r.engines >= n_models
    train = sum(pt.gpus * (pt.setup_s + pt.train_s + pt.blocked_s) for p in ps for pt in p.trial_costs)
    assert r.work_gpu_s["training"] == pytest.approx(train)
    assert r.makespan >= r.ideal
    # never more GPUs in use than the cluster has
    edges = sorted({t for s_, e, _, _ in r.timeline.busy for t in (s_, e)})
    for t in edges[:-1]:
        assert sum(g for s_, e, g, _ in r.timeline.busy if s_ <= t < e) <= r.cluster.gpus + 1e-9


def test_simulate_prints_the_paper_grid_and_draws_its_utilisation(tmp_path):
    files = [f"cliffsweep/configs/{n}.yaml" for n in ("paper", "paper_lora", "paper_cl", "paper_fsdp")]
    out = subprocess.run([sys.executable, "-m", "cliffsweep.cli", "simulate", *files, "--figure", str(tmp_path / "u.png")],
                         capture_output=True, text=True, cwd=ROOT, timeout=300)
    assert out.returncode == 0, out.stderr[-2000:]
    assert out.stdout.count("makespan / ideal = ") == 4
    assert "GPU-hours by use: training" in out.stdout and "idle, work waiting" in out.stdout
    assert (tmp_path / "u.png").stat().st_size > 10_000


def test_job_starts_share_the_cores_they_run_on():
    """A rehearsal's fake nodes start their jobs on one machine's cores (simulate/rehearsal.py):
    two 10 s starts on one core both end at 20 s (processor sharing), on two cores at 10 s."""
    s = spec(trials_per_job=2, max_concurrent_trials=2)
    # 4 points in 2 jobs of 2 on 4 GPUs; the evaluator's start and the base evaluation come first
    free = simulate(s, plans(4), Cluster(1, 5, 8), job_start_s=10.0, start_cores=2.0)
    shared = simulate(s, plans(4), Cluster(1, 5, 8), job_start_s=10.0, start_cores=1.0)
    alone = simulate(s, plans(4), Cluster(1, 5, 8), job_start_s=10.0)
    assert free.makespan == pytest.approx(alone.makespan)
    assert shared.makespan == pytest.approx(alone.makespan + 10.0)
