"""The driver's evaluation dispatch (orchestrator/evaltracker.py) when an evaluator fails beneath
its calls, on a real local Ray with the rehearsal's evaluator actors (evaluator/actor.py:
the real actor options, an engine start and each evaluation a timed wait, the real eval rows
written to a real store). What the rehearsal's node kills found: an evaluator that restarts
slowly (an engine start) must not turn the calls it had into failures, and a dead one is
replaced; an evaluation that raises is recorded, not sent again."""

from __future__ import annotations

from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
TASKS = ["toy_facts", "toy_arith"]


@pytest.fixture
def ray_local(tmp_path, monkeypatch):
    import ray

    def start(faults: str = ""):
        # the fault points are read in the actors' processes, which inherit this environment
        monkeypatch.setenv("CLIFFSWEEP_FAULTS", faults)
        monkeypatch.setenv("CLIFFSWEEP_FAULTS_DIR", str(tmp_path))
        ray.init(address="local", num_cpus=2, include_dashboard=False, log_to_driver=False)

    yield start
    ray.shutdown()


def tracker_of(tmp_path, engine_start_s: float):
    from cliffsweep.orchestrator.evaltracker import EvalTracker
    from cliffsweep.orchestrator.pool import evaluator_starter
    from cliffsweep.orchestrator.specfile import load_spec
    from cliffsweep.storage.store import Store
    from cliffsweep.sweep.rehearsal import Rehearsal

    spec = load_spec(str(ROOT / "cliffsweep/configs/toy.yaml"))
    assert [spec.tasks.learn.name] + [t.name for t in spec.tasks.retain] == TASKS
    store = Store(str(tmp_path / "store"))
    rehearsal = Rehearsal(scale=1.0, trials={}, eval_s={"m": 0.5}, base_eval_s={"m": 0.5},
                          engine_start_s=engine_start_s)
    start = evaluator_starter({"m": ("unused", "float32")}, spec, store.uri, "hf", rehearsal)
    return EvalTracker(store, start, TASKS, ["m"]), store


def request(step: int):
    from cliffsweep.evaluator.request import EvalRequest

    return EvalRequest(trial_id="t", model="m", method="sft", series="s", optimizer="adamw", lr=1e-4,
                       epochs=1, seed=0, step=step, epoch=step / 4, checkpoint=f"/ck/{step}")


def run_all(tracker, steps, during=lambda: None, timeout_s: float = 60.0):
    import time

    for s in steps:
        tracker.submit(request(s))
    during()
    end = time.time() + timeout_s
    while tracker.queued and time.time() < end:
        tracker.poll(timeout=0.2)
    assert not tracker.queued, tracker.queued


def evaluated(store) -> dict[int, set[str]]:
    ev = store.read("evals")
    return ev[ev["metric"] == "accuracy"].groupby("step")["task"].apply(set).to_dict()


@pytest.mark.ray
def test_an_evaluators_node_dies_and_its_calls_are_done_after_a_slow_restart(tmp_path, monkeypatch):
    """The node holding the only evaluator dies with two calls in flight; a new node joins and
    Ray restarts the evaluator there, which takes a 4 s engine start. Ray spends a call's retries
    while the constructor runs (ray-project/ray#44719): with a finite count (2, as before) both
    calls failed `ActorUnavailableError`, as in the rehearsal's node kills. Now every checkpoint
    is evaluated once and nothing failed."""
    import ray
    from ray.cluster_utils import Cluster

    from cliffsweep import faults

    # step 1's evaluation is held where it starts (faults.py `hold`) and its node killed there;
    # the nodes' processes inherit this environment
    monkeypatch.setenv("CLIFFSWEEP_FAULTS", "eval:t:1=hold")
    monkeypatch.setenv("CLIFFSWEEP_FAULTS_DIR", str(tmp_path))
    rc = Cluster(initialize_head=True, head_node_args={"num_cpus": 0, "include_dashboard": False})
    node = rc.add_node(num_cpus=1)
    ray.init(address=rc.address, log_to_driver=False)
    try:
        tracker, store = tracker_of(tmp_path, engine_start_s=4.0)

        def kill_node():
            held = faults.wait_reached("eval:t:1", str(tmp_path), timeout_s=120)  # step 2 sent behind it
            assert held["node"] == node.node_id, held
            rc.remove_node(node, allow_graceful=False)
            rc.add_node(num_cpus=1)

        run_all(tracker, [1, 2, 3, 4], during=kill_node, timeout_s=90)
        assert tracker.counts.failed == 0 and tracker.counts.done == 4, store.read("errors")["message"].tolist()
        assert evaluated(store) == {s: set(TASKS) for s in (1, 2, 3, 4)}
    finally:
        ray.shutdown()
        rc.shutdown()


@pytest.mark.ray
def test_a_dead_evaluator_is_replaced_and_its_calls_sent_again(tmp_path, ray_local):
    """The evaluator is killed for good (no restart) with two calls in flight: they fail
    `ActorDiedError`; the driver starts another evaluator and sends them again, and records that
    it did (`eval_resent` rows). Without it both evaluations failed and every later checkpoint
    of the model went to a dead actor."""
    import ray

    from cliffsweep import faults

    ray_local("eval:t:1=hold")  # step 1's evaluation held where it starts (faults.py `hold`)
    tracker, store = tracker_of(tmp_path, engine_start_s=0.5)

    def kill_it():
        faults.wait_reached("eval:t:1", str(tmp_path), timeout_s=120)  # its engine started, step 2 sent behind it
        ray.kill(tracker.pool.actors("m")[0], no_restart=True)

    run_all(tracker, [1, 2, 3, 4], during=kill_it)
    assert tracker.counts.replaced == 1 and tracker.counts.failed == 0 and tracker.counts.done == 4
    assert evaluated(store) == {s: set(TASKS) for s in (1, 2, 3, 4)}
    resent = store.read("errors").query("kind == 'eval_resent'")
    assert sorted(resent["step"]) == [1, 2], resent
    assert resent["message"].str.startswith("ActorDiedError").all()


@pytest.mark.ray
def test_an_evaluation_that_raises_is_recorded_not_sent_again(tmp_path, ray_local):
    """An error of the evaluation itself would only repeat: recorded once (kind `eval`), the
    checkpoint left for a re-run (storage/ledger.py), the evaluator kept for the others."""
    ray_local("eval:t:2=raise")
    tracker, store = tracker_of(tmp_path, engine_start_s=0.5)
    run_all(tracker, [1, 2, 3])
    assert tracker.counts.failed == 1 and tracker.counts.done == 2 and tracker.sends[("t", 2)] == 1
    assert ("t", 2) in tracker.failed_keys and tracker.counts.replaced == 0
    assert set(evaluated(store)) == {1, 3}
    errors = store.read("errors")
    assert list(errors["kind"]) == ["eval"] and "InjectedFault" in errors["message"].iloc[0]


def test_both_evaluator_bodies_follow_the_written_interface():
    """Issue 50 part 3: the real evaluator and the rehearsal's twin answer the same calls, with the
    same parameters (evaluator/actor.py `EvaluatorActor`), and the request crosses Ray typed."""
    import inspect

    from cliffsweep.evaluator.actor import Evaluator, EvaluatorActor, RehearsalEvaluator
    from cliffsweep.evaluator.request import EvalRequest

    calls = {n for n, v in vars(EvaluatorActor).items() if inspect.isfunction(v) and not n.startswith("_")}
    assert calls == {"ready", "evaluate", "close"}
    def params(fn):  # Ray's tracing adds a keyword of its own to an actor class's methods
        sig = inspect.signature(fn)
        return [(p.name, p.annotation) for p in sig.parameters.values() if not p.name.startswith("_ray")], sig.return_annotation

    for body in (Evaluator, RehearsalEvaluator):
        for name in calls:
            assert params(getattr(body, name)) == params(getattr(EvaluatorActor, name)), (body, name)
    assert inspect.signature(EvaluatorActor.evaluate).parameters["req"].annotation in (EvalRequest, "EvalRequest")
