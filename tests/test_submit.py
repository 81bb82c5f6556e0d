"""`cliffsweep submit` / `logs` against a real Ray head started with `ray start --head` (token
authentication on), as a laptop talks to a cluster: the job runs a 1-trial toy sweep that joins
the head (`ray_address: auto`), a credential passed by name reaches the job, and its value is
nowhere in the store or the job's logs. The pure checks (what submit refuses) need no cluster."""

from __future__ import annotations

import io
import secrets
from pathlib import Path

import pytest
import yaml

from cliffsweep.orchestrator.specfile import load_spec
from cliffsweep.submit import SPEC_NAME, SubmitError, entrypoint, env_problems, plan_job, spec_problems

SECRET_NAME, SECRET_VALUE = "CLIFFSWEEP_TEST_SECRET", "s3cr3t-value-" + secrets.token_hex(6)


def toy_sweep(store: str, **over) -> dict:
    spec = {
        "name": "submitted", "models": [{"name": "q", "path": "toy:qwen2-tiny"}],
        "methods": [{"name": "sft"}], "lrs": [1e-3], "epochs": [1],
        "tasks": {"learn": {"name": "toy_facts", "params": {"n_eval": 20, "n_train": 32}},
                  "retain": [{"name": "toy_arith", "params": {"n_eval": 20}}]},
        "recipe": {"batch_size": 16, "max_seq_len": 128},
        "eval": {"points_per_trial": 1, "backend": "hf", "cpus_per_evaluator": 0.5},
        "resources": {"workers_per_trial": 1, "cpus_per_worker": 1, "max_retries": 0},
        "store": store, "ray_address": "auto",
    }
    spec.update(over)
    return spec


def write(tmp_path: Path, spec: dict) -> str:
    path = tmp_path / "sweep.yaml"
    path.write_text(yaml.safe_dump(spec))
    return str(path)


# --- what submit refuses, before anything leaves the machine ----------------------------------

def test_submit_refuses_a_sweep_that_cannot_run_as_a_job(tmp_path):
    bad = write(tmp_path, toy_sweep("results/x", ray_address=None, checkpoints="s3://key:secret@bucket/c"))
    with pytest.raises(SubmitError) as e:
        plan_job(bad, tmp_path, ["NOT_SET_ANYWHERE_42", "A=b", "TOKENIZERS_PARALLELISM"], "local",
                 environ={"TOKENIZERS_PARALLELISM": "false"})
    text = str(e.value)
    # every problem at once, each named
    for needle in ("ray_address", "store: 'results/x' is relative", "checkpoints: the URI holds credentials",
                   "NOT_SET_ANYWHERE_42: not set", "pass a variable's NAME only", "TOKENIZERS_PARALLELISM: set by"):
        assert needle in text, text
    assert "=b" not in text  # a value typed on the command line is not echoed


def test_plan_keeps_values_out_of_the_command_and_repr(tmp_path):
    spec = write(tmp_path, toy_sweep(str(tmp_path / "store")))
    staging = tmp_path / "staging"
    staging.mkdir()
    plan = plan_job(spec, staging, [SECRET_NAME], "local", environ={SECRET_NAME: SECRET_VALUE})
    assert (staging / SPEC_NAME).read_text() == Path(spec).read_text()
    assert plan.runtime_env()["env_vars"] == {SECRET_NAME: SECRET_VALUE}
    assert SECRET_VALUE not in plan.entrypoint and SECRET_VALUE not in repr(plan)
    assert plan.entrypoint.endswith(f"exec cliffsweep run {SPEC_NAME}")
    assert Path(plan.py_modules[0]).name == "cliffsweep"
    assert not spec_problems(load_spec(spec))
    assert env_problems(["OK_NAME"], {"OK_NAME": ""}) == []  # set but empty still counts as set
    assert plan_job(spec, staging, [], "installed", environ={}).py_modules == ()  # the image's package
    assert entrypoint([]) == f"exec cliffsweep run {SPEC_NAME}"


# --- the real thing: a head, a job, a sweep -------------------------------------------------

@pytest.fixture(scope="module")
def head():
    from raycluster import start_head, stop_head

    token = secrets.token_hex(16)
    h = start_head(num_cpus=3, extra_env={"RAY_AUTH_MODE": "token", "RAY_AUTH_TOKEN": token})
    yield h, token
    left = stop_head(h)
    assert not left, f"processes of the test's Ray head still alive: {[p.pid for p in left]}"


@pytest.mark.cluster
@pytest.mark.slow
@pytest.mark.timeout(600)
def test_submit_runs_a_sweep_on_a_running_cluster(head, tmp_path, monkeypatch, capsys):
    head, token = head
    from cliffsweep.cli import main
    from cliffsweep.storage.store import Store
    from cliffsweep.submit import client, wait

    store_dir = tmp_path / "store"
    spec = write(tmp_path, toy_sweep(str(store_dir)))
    monkeypatch.setenv(SECRET_NAME, SECRET_VALUE)
    monkeypatch.setenv("TEST_RAY_TOKEN", token)

    # token authentication is on: a client without the token is turned away
    with pytest.raises(Exception, match="401|403|Unauthorized|Forbidden|uthentication"):
        client(head.dashboard).list_jobs()

    assert main(["submit", spec, "--address", head.dashboard, "--env", SECRET_NAME,
                 "--token-env", "TEST_RAY_TOKEN"]) == 0
    job_id = capsys.readouterr().out.strip().splitlines()[-1]
    status = wait(job_id, head.dashboard, "TEST_RAY_TOKEN", timeout_s=480)

    out = io.StringIO()
    from cliffsweep.submit import logs

    assert logs(job_id, head.dashboard, "TEST_RAY_TOKEN", out=out) == status
    text = out.getvalue()
    assert status == "SUCCEEDED", text[-4000:]
    assert f"cliffsweep job: {SECRET_NAME} is set" in text
    assert "trials: 1 (done 1)" in text  # the sweep's own summary, printed by `cliffsweep run`

    # the CLI's `logs` prints the same output and exits 0 for a succeeded job
    assert main(["logs", job_id, "--address", head.dashboard, "--token-env", "TEST_RAY_TOKEN"]) == 0
    assert "trials: 1 (done 1)" in capsys.readouterr().out

    store = Store(str(store_dir))
    trials = store.read("trials")
    assert list(trials["status"]) == ["done"]
    evals = store.read("evals")
    assert set(evals.loc[evals["trial_id"] == trials["trial_id"][0], "role"]) == {"learn", "retain"}

    # the credential's value is nowhere in what the sweep wrote or the job printed
    assert SECRET_VALUE not in text and token not in text
    for f in store_dir.rglob("*"):
        if f.is_file():
            data = f.read_bytes()
            assert SECRET_VALUE.encode() not in data and token.encode() not in data, f
