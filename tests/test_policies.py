"""Pure policies: lr schedule, eval points, resume rule, trial lifecycle."""

from __future__ import annotations

import math
from dataclasses import replace

import pytest

from cliffsweep.sweep.status import TrialStatus
from cliffsweep.orchestrator.policies import default_concurrency, final_status, trials_to_run
from cliffsweep.trainables.schedule import eval_steps, fit_phases, lr_multiplier


def test_schedule_follows_the_paper_recipe_on_a_long_run():
    total, m = 1000, lambda s: lr_multiplier(s, total, 20, 50, 0.1)
    assert m(0) == pytest.approx(1 / 20) and m(19) == pytest.approx(1.0)   # linear warmup
    assert m(20) == pytest.approx(1.0)                                    # cosine starts at peak
    assert m(949) == pytest.approx(0.1, abs=1e-3)                         # decays to 0.1x
    assert m(950) == pytest.approx(0.1) and m(999) == pytest.approx(0.1 / 50)  # linear cool-down to ~0
    vals = [m(s) for s in range(20, 1000)]
    assert all(a >= b - 1e-12 for a, b in zip(vals, vals[1:]))            # monotone after warmup


def test_short_runs_scale_warmup_and_cooldown():
    assert fit_phases(1000, 20, 50) == (20, 50)
    w, c = fit_phases(40, 20, 50)
    assert w + c <= 20 and w > 0 and c > 0
    assert all(0 < lr_multiplier(s, 40, 20, 50, 0.1) <= 1 for s in range(40))


def test_eval_steps():
    assert eval_steps(30, 10, 3, False) == [10, 20, 30]
    assert eval_steps(30, 10, 1, True) == [10, 20, 30]
    assert eval_steps(7, 7, 3, False) == [2, 5, 7]
    assert eval_steps(2, 2, 5, False) == [1, 2]


def test_resume_rule():
    stored = {"a": "done", "b": "failed", "c": "running", "d": "diverged"}
    assert trials_to_run(["a", "b", "c", "d", "e"], stored, retry_failed=False) == ["c", "e"]
    assert trials_to_run(["a", "b", "c", "d", "e"], stored, retry_failed=True) == ["b", "c", "e"]


def test_lifecycle():
    from cliffsweep.sweep.reports import EndReport

    end = EndReport(trial_id="t", diverged=True, step=3, epoch=1.0, total_steps=9)
    assert final_status(end) is TrialStatus.DIVERGED
    assert final_status(replace(end, diverged=False)) is TrialStatus.TRAINED  # done once evaluated (ledger)
    assert TrialStatus.FAILED.terminal and not TrialStatus.RUNNING.terminal
    assert default_concurrency(2, 1, 1.0) == 1 and default_concurrency(16, 2, 2) == 7
    assert default_concurrency(1, 4, 0) == 1
    assert math.isclose(lr_multiplier(0, 1, 0, 0, 0.1), 1.0)


def test_capacity_check_names_the_shortfall():
    from cliffsweep.orchestrator.driver import check_capacity, local_cpus
    from cliffsweep.orchestrator.specfile import default_spec_path, load_spec

    spec = load_spec(default_spec_path())
    check_capacity(spec, local_cpus(spec), 0)  # the default sweep fits any local machine
    with pytest.raises(RuntimeError, match="CPU: evaluators take 1 and one trial needs 1.01, but the cluster has 2"):
        check_capacity(spec, 2, 0)
    gpu = spec.model_copy(update={"resources": spec.resources.model_copy(update={"gpus_per_worker": 1.0})})
    with pytest.raises(RuntimeError, match="GPU: .* the cluster has 0"):
        check_capacity(gpu, 8, 0)


def test_cpu_evaluators_run_the_vllm_engine_in_process():
    """On CPU the engine core and its worker spin-wait on each other (docs/benchmarks.md), so a
    CPU evaluator keeps vLLM in its own process; a GPU evaluator keeps vLLM's default."""
    from cliffsweep.orchestrator.pool import evaluator_env
    from cliffsweep.sweep.spec import EvalSpec

    assert evaluator_env(EvalSpec(), "vllm")["VLLM_ENABLE_V1_MULTIPROCESSING"] == "0"
    assert "VLLM_ENABLE_V1_MULTIPROCESSING" not in evaluator_env(EvalSpec(gpus_per_evaluator=1), "vllm")
    assert "VLLM_ENABLE_V1_MULTIPROCESSING" not in evaluator_env(EvalSpec(engine_in_process=False), "vllm")
    assert evaluator_env(EvalSpec(gpus_per_evaluator=1, engine_in_process=True), "vllm")[
        "VLLM_ENABLE_V1_MULTIPROCESSING"] == "0"
    assert "VLLM_ENABLE_V1_MULTIPROCESSING" not in evaluator_env(EvalSpec(), "hf")


def test_cpu_engines_merge_adapters_and_gpu_engines_serve_them():
    """LoRA on a CPU engine costs every generation step (2.4-3x, docs/benchmarks.md): a CPU
    evaluator starts without it and merges each adapter into its weights; a GPU one serves
    adapters; a sweep with no adapter method never turns LoRA on."""
    from cliffsweep.orchestrator.pool import engine_options
    from cliffsweep.sweep.specfile import load_spec

    from pathlib import Path

    toy = load_spec(Path(__file__).resolve().parents[1] / "cliffsweep/configs/toy.yaml")  # sft and lora(rank=16)
    on_gpu = toy.model_copy(update={"eval": toy.eval.model_copy(update={"gpus_per_evaluator": 1.0})})
    sft_only = on_gpu.model_copy(update={"methods": [m for m in toy.methods if m.name == "sft"]})
    assert engine_options(toy, "vllm")["enable_lora"] is False
    assert engine_options(on_gpu, "vllm")["enable_lora"] is True and engine_options(on_gpu, "vllm")["max_lora_rank"] == 16
    assert engine_options(sft_only, "vllm")["enable_lora"] is False
    assert engine_options(toy, "hf") == {}


def test_statistics_task_asks_for_a_gpu_only_when_trials_train_on_gpus():
    from cliffsweep.trainables.stats import stats_task_resources

    assert stats_task_resources(1.0, 0.0, 1) == {"num_cpus": 1.0, "num_gpus": 0.0}
    assert stats_task_resources(4.0, 1.0, 4) == {"num_cpus": 1.0, "num_gpus": 1.0}
    # never more than one trial asks for, so it fits wherever a trial fits
    assert stats_task_resources(0.5, 0.5, 1) == {"num_cpus": 0.5, "num_gpus": 0.5}


@pytest.mark.parametrize("total", [1, 2, 3, 4, 7])
def test_schedule_is_defined_for_tiny_runs(total):
    # LambdaLR evaluates the multiplier once more after the last step (step == total)
    values = [lr_multiplier(s, total, 20, 50, 0.1) for s in range(total + 1)]
    assert all(0 <= v <= 1 for v in values), values
    assert values[0] > 0  # the first update is not lost


def test_cluster_roles_pin_work_to_node_types():
    from cliffsweep.orchestrator.policies import cluster_concurrency, role_resources

    assert role_resources(False, "trainer", 1.0) == {}
    assert role_resources(True, "driver") == {"cliffsweep_driver": 1.0}
    assert role_resources(True, "trainer", 1.0) == {"cliffsweep_trainer": 1.0}
    assert role_resources(True, "evaluator", 0.5) == {"cliffsweep_evaluator": 0.5}  # shares a GPU when asked
    from cliffsweep.orchestrator.policies import trial_driver_resources

    # a trial's coordinator lives on the head, with or without roles: it must not die with a worker node
    assert trial_driver_resources(True) == {"CPU": 0.01, "cliffsweep_driver": 1.0}
    assert trial_driver_resources(False) == {"CPU": 0, "node:__internal_head__": 0.001}
    assert role_resources(True, "trainer", 0.0) == {"cliffsweep_trainer": 1.0}  # CPU workers: one slot each
    # an autoscaling cluster at start: the head alone, 8 CPUs, 16 driver slots
    assert cluster_concurrency({"CPU": 8, "cliffsweep_driver": 16}, True, default=1) == 16
    assert cluster_concurrency({"CPU": 8, "cliffsweep_driver": 16}, False, default=1) == 1
    assert cluster_concurrency({"CPU": 8}, True, default=2) == 2


def test_setup_phases_follow_each_other_from_the_driver_start():
    """Issue 15: a trial's setup split into phases, each from the end of the previous one; a
    phase whose mark an attempt did not reach is left out (the next one absorbs its time)."""
    from cliffsweep.sweep.reports import SETUP_PHASES, phase_seconds

    marks = {mark: 100.0 + i for i, (_, mark) in enumerate(SETUP_PHASES, start=1)}
    got = phase_seconds(100.0, marks)
    assert list(got) == [name for name, _ in SETUP_PHASES] and all(v == 1.0 for v in got.values())
    del marks["imported"]
    got = phase_seconds(100.0, marks)
    assert "imports" not in got and got["model_load"] == 2.0 and sum(got.values()) == len(SETUP_PHASES)


def test_pack_keeps_models_apart_in_order_and_balances_sizes():
    from cliffsweep.orchestrator.policies import pack

    keys = ["q"] * 10 + ["l"] * 3 + ["q"]
    jobs = pack(keys, 4)
    # every item exactly once; one model per job; grid order kept within a job
    assert sorted(i for j in jobs for i in j) == list(range(len(keys)))
    assert all(len({keys[i] for i in j}) == 1 and j == sorted(j) for j in jobs)
    # q's 11 items (10 + the last one) in ceil(11/4) = 3 jobs of 4, 4, 3
    assert [len(j) for j in jobs if keys[j[0]] == "q"] == [4, 4, 3] and [len(j) for j in jobs if keys[j[0]] == "l"] == [3]
    assert all(len(j) == 1 for j in pack(keys, 1)) and len(pack(keys, 1)) == 14
    assert pack([], 3) == []


def test_trials_per_job_gives_each_slot_one_job_of_at_most_sixteen():
    from cliffsweep.orchestrator.policies import MAX_AUTO_TRIALS_PER_JOB, trials_per_job

    assert trials_per_job(20, 2, None) == 10  # the default toy sweep: one job per model, 2 at a time
    assert trials_per_job(3, 4, None) == 1  # more slots than points: one point per job
    assert trials_per_job(1176, 8, None) == MAX_AUTO_TRIALS_PER_JOB == 16
    # drivers sharing the store (issue 53): a driver claims a job's trials as it starts the job, so
    # jobs are smaller, and the first driver up leaves most of the grid to the others
    assert trials_per_job(20, 2, None, shared=True) == 3
    assert trials_per_job(20, 2, 10, shared=True) == 10  # the spec's word still goes
    assert trials_per_job(1176, 8, 3) == 3 and trials_per_job(5, 1, 1) == 1


def test_wait_reasons_say_what_each_pending_trial_waits_for():
    from cliffsweep.orchestrator.policies import wait_reasons

    running = {"job-1": ["a", "b"]}
    common = dict(running_jobs=running, training={"job-1": "a"}, queued_jobs=[["c"], ["d"]], need={"CPU": 1.0, "GPU": 2.0})
    got = wait_reasons(["b", "c", "e"], "training", concurrency=1, free={"CPU": 4.0, "GPU": 8.0}, **common)
    assert got["b"].startswith("its job job-1, which trains a first")
    assert got["c"].startswith("the concurrency limit: 1 job(s) running of 1")
    assert got["e"].startswith("nothing in this run")
    short = wait_reasons(["c"], "training", concurrency=4, free={"CPU": 4.0, "GPU": 1.0}, **common)
    assert short["c"] == "resources: a job needs GPU 2 more than the cluster has free; held by job-1"
    free = wait_reasons(["c"], "training", concurrency=4, free={"CPU": 4.0, "GPU": 2.0}, **common)
    assert free["c"] == "Tune's queue (its job starts next)"
    early = wait_reasons(["c"], "statistics", concurrency=4, free={}, **common)
    assert early["c"].startswith("the run's statistics")


def test_evaluators_follow_the_load_and_give_way_to_training():
    """Issue 22: evaluators start for a model whose waiting evaluations exceed what its
    evaluators take next, busiest model first, only in resources no Train job took and up to the
    cap; idle ones stop when their model has nothing waiting (down to eval.evaluators_per_model)
    or when a queued Train job needs what they hold (down to none: training first); a model left
    without an evaluator gets one for its backlog at once, free resources or not."""
    from cliffsweep.orchestrator.policies import EVAL_DEPTH, ModelPool, PoolSize
    from cliffsweep.orchestrator.policies import evaluator_changes as rule

    def evaluator_changes(backlog, evaluators, idle, base, cap, free, job_waits, lingered=None, starved_at=None):
        """The rule's cases as counts per model, each model's `ModelPool` built from them."""
        pools = {m: ModelPool(backlog.get(m, 0), n, idle.get(m, 0),
                              None if lingered is None else lingered.get(m, 0), (starved_at or {}).get(m, 1))
                 for m, n in evaluators.items()}
        return rule(pools, PoolSize(base, cap), free, job_waits)

    busy = {"a": 10, "b": 3, "c": 0}
    one = {"a": 1, "b": 1, "c": 1}
    assert evaluator_changes(busy, one, {}, 1, 8, 0, False) == {}  # no room
    assert evaluator_changes(busy, one, {}, 1, 8, 1, False) == {"a": 1}  # the busiest first
    # each slot to the model with the most waiting per evaluator: a (10/1, 10/2, 10/3 > b's 3/1)
    assert evaluator_changes(busy, one, {}, 1, 8, 3, False) == {"a": 3}
    # with room: a until its 10 waiting fit its evaluators' depth (5 x EVAL_DEPTH), b one more
    # (3 > 2 x 1), c none (nothing waits)
    assert EVAL_DEPTH == 2
    assert evaluator_changes(busy, one, {}, 1, 8, 10, False) == {"a": 4, "b": 1}
    assert evaluator_changes(busy, one, {}, 1, 2, 10, False) == {"a": 1, "b": 1}  # the cap
    assert evaluator_changes({"a": 1}, {"a": 1}, {}, 1, 8, 5, False) == {}  # a queue of one is not worth an engine
    assert evaluator_changes({"a": 3}, {"a": 0}, {}, 1, 8, 1, False) == {"a": 1}  # none left: one for the backlog
    # ... even with no room and a job waiting: it takes the next freed resources (never starved)
    assert evaluator_changes({"a": 3}, {"a": 0}, {}, 1, 8, 0, False) == {"a": 1}
    assert evaluator_changes({"a": 3, "b": 0}, {"a": 0, "b": 0}, {}, 1, 8, 0, True) == {"a": 1}
    # (once its backlog is worth an engine start: `starved_at`)
    assert evaluator_changes({"a": 3}, {"a": 0}, {}, 1, 8, 0, True, starved_at={"a": 4}) == {}
    assert evaluator_changes({"a": 4}, {"a": 0}, {}, 1, 8, 0, True, starved_at={"a": 4}) == {"a": 1}
    # stopping: idle ones of a model with nothing waiting, down to the base pool ...
    assert evaluator_changes({"a": 0}, {"a": 3}, {"a": 2}, 1, 8, 0, False) == {"a": -2}
    assert evaluator_changes({"a": 0}, {"a": 1}, {"a": 1}, 1, 8, 0, False) == {}
    assert evaluator_changes({"a": 9}, {"a": 3}, {"a": 1}, 1, 8, 0, False) == {}  # work waits for it
    assert evaluator_changes({"a": 9}, {"a": 3}, {"a": 1}, 1, 8, 4, True) == {}  # even for a waiting job
    # ... and down to none when a waiting Train job needs what they hold (training first), once
    # they have been idle for an engine start (`lingered`)
    assert evaluator_changes({"a": 0, "b": 2}, {"a": 1, "b": 1}, {"a": 1, "b": 0}, 1, 8, 0, True) == {"a": -1}
    assert evaluator_changes({"a": 0}, {"a": 1}, {"a": 1}, 1, 8, 0, True, lingered={"a": 0}) == {}
    assert evaluator_changes({"a": 0}, {"a": 3}, {"a": 3}, 1, 8, 0, True, lingered={"a": 1}) == {"a": -2}


def test_the_evaluator_cap_by_kind_of_evaluator():
    from cliffsweep.orchestrator.policies import evaluator_cap
    from cliffsweep.sweep.spec import EvalSpec

    assert evaluator_cap(EvalSpec()) == 1  # CPU evaluators: the static pool (no spare cores)
    assert evaluator_cap(EvalSpec(gpus_per_evaluator=1)) > 1000  # GPUs: as many as are free
    assert evaluator_cap(EvalSpec(gpus_per_evaluator=1, max_evaluators_per_model=3)) == 3
    assert evaluator_cap(EvalSpec(evaluators_per_model=2, max_evaluators_per_model=1)) == 2


def test_an_evaluation_is_sent_again_only_when_its_evaluator_was_lost_and_at_most_three_times():
    from cliffsweep.orchestrator.policies import EVAL_SENDS, resend_evaluation

    assert EVAL_SENDS == 3
    assert resend_evaluation(True, 1) and resend_evaluation(True, 2)
    assert not resend_evaluation(True, 3)  # a checkpoint that kills every evaluator it meets
    assert not resend_evaluation(False, 1)  # the evaluation raised: it would only raise again


def test_points_handed_back_keep_their_place_in_the_line():
    """A failed job's later points, never started, go back to the front of Tune's queue: behind
    later jobs, another model's trials overtook them (tunecallback._job_failed)."""
    from cliffsweep.orchestrator.jobqueue import JobQueue

    queue = JobQueue(["b1", "b2"], more=lambda: False)
    queue.put_back(["a2", "a3"])
    queue.add(["c1"])
    assert list(queue.items) == ["a2", "a3", "b1", "b2", "c1"]


def test_sigterm_stops_a_sweep_as_ctrl_c_does():
    """driver.stop_on_sigterm: SIGTERM goes to whatever handles SIGINT at that moment (Tune's
    graceful stop while trials run), else it is a KeyboardInterrupt, as Ctrl-C is. The sweep's
    own SIGTERM path is tests/test_faults.py's first test."""
    import os
    import signal

    from cliffsweep.orchestrator.driver import stop_on_sigterm

    seen = []
    before = signal.getsignal(signal.SIGINT), signal.getsignal(signal.SIGTERM)
    try:
        stop_on_sigterm()
        signal.signal(signal.SIGINT, lambda signum, frame: seen.append(signum))
        os.kill(os.getpid(), signal.SIGTERM)
        assert seen == [signal.SIGINT]
        signal.signal(signal.SIGINT, signal.SIG_IGN)  # no callable handler: Ctrl-C's default
        with pytest.raises(KeyboardInterrupt):
            os.kill(os.getpid(), signal.SIGTERM)
    finally:
        signal.signal(signal.SIGINT, before[0])
        signal.signal(signal.SIGTERM, before[1])


def test_a_grid_past_what_one_driver_was_measured_with_is_told_how_many_drivers_to_run():
    """Issue 62 part 2: where a limit remains, `validate` says so and names the remedy. Within the
    rehearsed size nothing is said; past it, the number of drivers keeps each within it."""
    from cliffsweep.orchestrator.policies import ONE_DRIVER_TRIALS, drivers_for, one_driver_note

    assert one_driver_note(ONE_DRIVER_TRIALS, "s.yaml") is None and drivers_for(1) == 1
    note = one_driver_note(10_000, "s.yaml")
    k = drivers_for(10_000)
    assert (k - 1) * ONE_DRIVER_TRIALS < 10_000 <= k * ONE_DRIVER_TRIALS
    assert f"run {k} drivers" in note and "--join" in note and f"--array {k}" in note and "10,000 trials" in note
