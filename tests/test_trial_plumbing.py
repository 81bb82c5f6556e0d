"""The per-trial plumbing that keeps Ray's overhead down (docs/design.md): the lean TorchTrainer
drops exactly the helper actors a sweep trial does not use, and trial reports reach the driver
through the inbox, all of them, in order, before the trial is seen to end."""

from __future__ import annotations

from dataclasses import replace

import pytest


def _callback_names(trainer, parent: bool = False) -> list[str]:
    from ray.train.torch import TorchTrainer

    cbs = TorchTrainer._create_default_callbacks(trainer) if parent else trainer._create_default_callbacks()
    return [type(cb).__name__ for cb in cbs]


def test_lean_trainer_drops_only_the_unused_helper_actors(tmp_path):
    from ray.train import RunConfig, ScalingConfig

    from cliffsweep.trainables.job import UNUSED_ON_LOCAL_CLUSTER, UNUSED_WITHOUT_DATASETS, lean_trainer_cls

    def make(local_cluster: bool):
        return lean_trainer_cls()(lambda cfg: None, scaling_config=ScalingConfig(num_workers=1),
                                  run_config=RunConfig(storage_path=str(tmp_path), name="t"),
                                  local_cluster=local_cluster)

    trainer = make(local_cluster=False)
    full = _callback_names(trainer, parent=True)
    # If Ray renames these, the lean trainer would silently drop nothing: fail here instead.
    assert UNUSED_WITHOUT_DATASETS in full and UNUSED_ON_LOCAL_CLUSTER in full, full

    remote = _callback_names(trainer)
    assert remote == [n for n in full if n != UNUSED_WITHOUT_DATASETS]

    local = _callback_names(make(local_cluster=True))
    assert local == [n for n in full if n not in (UNUSED_WITHOUT_DATASETS, UNUSED_ON_LOCAL_CLUSTER)]
    # what actually runs the trial is untouched
    for needed in ("BackendSetupCallback", "AcceleratorSetupCallback", "UserCallbackHandler"):
        assert needed in local


@pytest.fixture(scope="module")
def ray_local():
    import ray

    ray.init(address="local", num_cpus=1, include_dashboard=False, log_to_driver=False)
    yield
    ray.shutdown()


@pytest.mark.ray
def test_inbox_delivers_every_report_through_the_real_callback(ray_local, tmp_path):
    import ray
    from cliffsweep.orchestrator.inbox import InboxReader, start_inbox
    from cliffsweep.trainables.job import report_callback

    reader = InboxReader(start_inbox("inbox-test"))
    reader.poll()  # leaves a drain in flight, sent before any put

    from cliffsweep.sweep.reports import REPORT_KEY, Begin, EndReport

    @ray.remote(num_cpus=0)
    def controller_side(cb, reports):
        # The callback is pickled into another process, as into a Train controller; each rank
        # reports (a barrier), rank 0's record is the one that goes on.
        for rank0 in reports:
            cb.after_report(None, [{REPORT_KEY: rank0}, {REPORT_KEY: Begin("rank-1")}], None)

    # one job, two trials: a starts and ends at step 2, b starts
    sent = [Begin("a"), EndReport("a", diverged=False, step=2, epoch=1.0, total_steps=2), Begin("b")]
    ray.get(controller_side.remote(report_callback("inbox-test"), sent))
    items = reader.flush()  # must include puts made after the in-flight drain was sent
    assert [(tid, type(r).__name__) for tid, r in items] == [("a", "Begin"), ("a", "EndReport"), ("b", "Begin")]
    assert [replace(r, reported_at=0.0) for _, r in items] == sent  # typed both ways, rank 0's
    assert all(r.reported_at > 0 for _, r in items)
    assert reader.flush() == [] and reader.poll() == []
    # A retried job: the trial that ended is not trained again; the other's attempt counts when
    # it starts (its begin report), not when a job that never reached it did.
    inbox = ray.get_actor("inbox-test")
    assert ray.get(inbox.begin_job.remote(["a", "b"])) == {"b": 2}  # b began once
    assert ray.get(inbox.begin_job.remote(["a", "b"])) == {"b": 2}  # that job never reached b
    assert ray.get(inbox.begin_job.remote(["c"])) == {"c": 1}


def test_evaluators_copy_checkpoints_without_the_training_state(tmp_path):
    import pyarrow.fs as pafs

    from cliffsweep.evaluator.fetch import copy_for_eval
    from cliffsweep.trainables.resume import TRAIN_STATE

    src = tmp_path / "step-000010"
    (src / "sub").mkdir(parents=True)
    (src / "model.safetensors").write_bytes(b"w" * 100)
    (src / "sub" / "adapter_config.json").write_text("{}")
    (src / TRAIN_STATE).write_bytes(b"o" * 300)
    dest = tmp_path / "copy"
    copy_for_eval(pafs.LocalFileSystem(), str(src), str(dest))
    got = sorted(str(p.relative_to(dest)) for p in dest.rglob("*") if p.is_file())
    assert got == ["model.safetensors", "sub/adapter_config.json"]
    assert (dest / "model.safetensors").read_bytes() == b"w" * 100


def test_the_trial_config_crosses_ray_typed_and_frozen(tmp_path):
    """Issue 15 part 5: the driver's JobRun pickles as Ray sends it, stays frozen, carries the
    spec's typed pieces to the worker, and each attempt gets its own copy; the store keeps the
    resolved config without per-attempt fields."""
    import dataclasses
    import json
    import pickle

    from cliffsweep.orchestrator.jobs import job_configs
    from cliffsweep.sweep.grid import expand_grid
    from cliffsweep.sweep.spec import RecipeSpec
    from cliffsweep.orchestrator.specfile import parse_spec

    spec = parse_spec({"name": "t", "models": [{"name": "q", "path": "toy:qwen2-tiny"}],
                       "methods": [{"name": "ewc", "params": {"lam": 10}}], "lrs": [1e-3],
                       "tasks": {"learn": {"name": "toy_facts"}, "retain": [{"name": "toy_arith"}]},
                       "recipe": {"micro_batch_size": 4}, "store": str(tmp_path / "store")})
    t = expand_grid(spec)[0]
    jobs = job_configs(spec, [t], 1, {t.trial_id: "stats.safetensors"}, str(tmp_path / "ckpt"), "inbox", None)
    (job,) = pickle.loads(pickle.dumps(jobs))
    (cfg,) = job.trials
    assert job.trial_ids == (t.trial_id,) and cfg.trial == t and cfg.trial.method_params == {"lam": 10}
    assert isinstance(cfg.recipe, RecipeSpec) and cfg.recipe.micro_batch_size == 4 and cfg.learn.name == "toy_facts"
    assert cfg.stats_uri == "stats.safetensors" and cfg.max_step_rows == spec.tracking.max_step_rows
    with pytest.raises(dataclasses.FrozenInstanceError):
        cfg.attempt = 2
    second = cfg.for_attempt(2, 123.0)
    assert (second.attempt, second.job_started, cfg.attempt) == (2, 123.0, 1)
    stored = json.loads(second.to_json())
    assert stored["trial"]["trial_id"] == t.trial_id and stored["recipe"]["micro_batch_size"] == 4
    assert "attempt" not in stored and "job_started" not in stored
