"""Faults injected into real local runs (issue 10), each followed by the invariant check
(tests/invariant.py): every checkpoint a trial reports is evaluated exactly once on every task,
every grid point ends `done`, nothing is duplicated. Faults fire at named points of the real
code (cliffsweep/faults.py), so each test hits the same spot every time."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time

import pytest
import yaml

from cliffsweep.sweep.grid import expand_grid
from cliffsweep.orchestrator.specfile import parse_spec
from cliffsweep.storage.store import Store
from invariant import assert_invariant, checkpoint_folders

pytestmark = [pytest.mark.ray, pytest.mark.cluster]


def sweep(store, lrs=(1e-3, 3e-3), **over) -> dict:
    """Trials of 4 steps (32 examples, batch 16, 2 epochs), checkpoints at steps 2 and 4."""
    data = {
        "name": "faults", "models": [{"name": "q", "path": "toy:qwen2-tiny"}],
        "methods": [{"name": "sft"}], "lrs": list(lrs), "epochs": [2],
        "tasks": {"learn": {"name": "toy_facts", "params": {"n_eval": 20, "n_train": 32}},
                  "retain": [{"name": "toy_arith", "params": {"n_eval": 20}}]},
        "recipe": {"batch_size": 16, "max_seq_len": 128},
        "eval": {"points_per_trial": 2, "backend": "hf", "cpus_per_evaluator": 0.5},
        "resources": {"max_concurrent_trials": 1, "max_retries": 1},
        "store": str(store),
    }
    data.update(over)
    return data


def ids(data: dict) -> list[str]:
    return [t.trial_id for t in expand_grid(parse_spec(data))]


def cli(yaml_path, env=None, **kw) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "cliffsweep.cli", "run", str(yaml_path)],
                          capture_output=True, text=True, env={**os.environ, **(env or {})}, **kw)


def run_with_faults(data: dict, faults: str, tmp_path, monkeypatch, num_cpus: int = 3):
    """`data`'s sweep run in this process with CLIFFSWEEP_FAULTS set (cliffsweep/faults.py; the
    kill markers go to `tmp_path`); its store."""
    import ray

    from cliffsweep.orchestrator.driver import run_sweep

    monkeypatch.setenv("CLIFFSWEEP_FAULTS", faults)
    monkeypatch.setenv("CLIFFSWEEP_FAULTS_DIR", str(tmp_path))
    try:
        return run_sweep(parse_spec(data), num_cpus=num_cpus)
    finally:
        ray.shutdown()


def interrupt_at_a_checkpoint(cmd: list[str], store: Store, sig: int, checkpoints: int) -> str:
    """Start `cmd`, send `sig` once `checkpoints` checkpoints are recorded; its output."""
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    deadline = time.time() + 900  # a first trial's start can take minutes on a loaded 2-core machine
    while len(store.read("checkpoints")) < checkpoints:
        if time.time() > deadline or proc.poll() is not None:
            proc.kill()
            pytest.fail(f"no checkpoint {checkpoints} within 900 s: " + (proc.stdout.read() or "")[-2000:])
        time.sleep(0.3)
    os.kill(proc.pid, sig)
    out, _ = proc.communicate(timeout=300)
    assert proc.returncode == 130, out[-3000:]  # outcome.Exit.INTERRUPTED
    return out


def test_sigterm_a_killed_driver_and_a_worker_killed_while_uploading_then_rerun(tmp_path):
    """Three interruptions of one sweep of four trials A-D, one point per Train job, each followed
    by the same command (issue 38 merged the Ctrl-C and the driver-kill sweeps).
    (1) SIGTERM (kill, timeout, Kubernetes, Slurm) once the third checkpoint is recorded
    (deterministic: trials are still to come, one at a time): the interrupted trials go back to
    pending, none is left 'running', the command says how to resume and exits 130 with no signal
    dump. SIGTERM is handed to whatever handles Ctrl-C (driver.stop_on_sigterm, checked in
    test_policies), so this is Ctrl-C's path too: a Ctrl-C run of its own was cut (CI's time,
    docs/testing.md).
    (2) The driver is SIGKILLed the moment trial C's final checkpoint reaches it (its evaluation
    not yet sent): the next run evaluates it from the ledger, and C is done only then.
    (3) In that run, trial D's Train worker is SIGKILLed by its checkpoint writer while D's final
    checkpoint uploads (its files there, its meta file not: trainables/checkpoints.py), with the
    default `resume_every_s` (D is far shorter: no training state was saved). The retried attempt
    trains D again from step 0; step 2's folder, complete and already evaluated, is reported
    again and not rewritten (an evaluator may have been reading it); step 4's cut-short folder is
    written anew. Every checkpoint is evaluated once; nothing is duplicated."""
    # one point per Train job: a job runs on until Tune stops it, and 4-step toy trials can all
    # finish inside that moment, which would leave nothing to interrupt
    data = sweep(tmp_path / "store", lrs=(1e-3, 3e-3, 1e-2, 3e-2), keep_checkpoints="all",
                 resources={"max_concurrent_trials": 1, "max_retries": 1, "trials_per_job": 1})
    _, _, c, d = ids(data)
    path = tmp_path / "sweep.yaml"
    path.write_text(yaml.safe_dump(data))
    cmd = [sys.executable, "-m", "cliffsweep.cli", "run", str(path)]
    store = Store(str(tmp_path / "store"))
    out = interrupt_at_a_checkpoint(cmd, store, signal.SIGTERM, 3)  # of 8 (4 trials x 2)
    trials = store.read("trials")
    assert "Interrupted" in out and "Run the same command again to resume" in out, out[-3000:]
    assert "core dumped" not in out and "SIGTERM received" not in out, out[-3000:]
    assert not (trials["status"] == "running").any(), trials[["trial_id", "status"]]
    assert (trials["status"] == "pending").sum() >= 1, trials[["trial_id", "status"]]
    faults = {"CLIFFSWEEP_FAULTS": f"driver_report:{c}:4=kill;uploading:{d}:4=kill",
              "CLIFFSWEEP_FAULTS_DIR": str(tmp_path)}
    killed = cli(path, faults, timeout=600)
    assert killed.returncode == -signal.SIGKILL, killed.stdout[-2000:] + killed.stderr[-2000:]
    assert store.read("trials").set_index("trial_id").loc[c, "status"] == "running"  # it never heard C end
    assert not (tmp_path / f"uploading_{d}_4").exists()
    again = cli(path, faults, timeout=600)
    assert again.returncode == 0, again.stdout[-3000:] + again.stderr[-3000:]
    assert_invariant(store, parse_spec(data))
    marker = tmp_path / f"uploading_{d}_4"
    assert marker.exists()  # the second fault fired, mid-upload
    row = store.read("trials").set_index("trial_id").loc[d]
    assert row["attempt"] == 2 and row["resumed_from_step"] == 0 and row["steps"] == 4, row
    assert row["checkpoint_bytes"] > 0 and row["checkpoint_seconds"] >= 0, row
    folders = tmp_path / "store" / "checkpoints" / d
    # step 2 was written by the first attempt only (before the kill); step 4 by the second
    assert (folders / "step-000002" / "model.safetensors").stat().st_mtime < marker.stat().st_mtime
    assert (folders / "step-000004" / "model.safetensors").stat().st_mtime > marker.stat().st_mtime
    assert not list(folders.rglob("train_state.pt"))  # a 4-step trial never reaches resume_every_s


def test_a_driver_killed_between_two_stages_of_a_checkpoint_scores_no_item_twice(tmp_path):
    """Issue 51 part 4: evaluated in stages (eval.adaptive: 16, 32, 64, ... items), trial A's
    first checkpoint is held by its evaluator once the first stage of its retain task is in the
    store (faults.py `hold`), and the driver is SIGKILLed there. The same command then finishes
    the sweep: that stage is read back, not scored again (scoring it raises in the re-run), every item is stored at most once, the rows count exactly the items stored, and every
    checkpoint is evaluated on every task (tests/invariant.py). That run is SIGKILLed in its turn
    once every trial is done, before its top-ups; `cliffsweep analyze --top-up` then scores the
    checkpoints the verdicts hinge on in full (issue 51 part 3). The same sweep run uninterrupted in
    a store of its own then reads the same verdicts (regimes, brackets, highest safe lr)."""
    from cliffsweep.analysis.frontiers import frontiers
    from cliffsweep.analysis.points import load_store
    from cliffsweep.analysis.topup import short_tasks, top_ups
    from cliffsweep.evals.tasks import task_label
    from cliffsweep.faults import wait_reached

    data = sweep(tmp_path / "store", lrs=(1e-3, 3e-2), eval={"points_per_trial": 2, "backend": "hf",
                                                               "cpus_per_evaluator": 0.5,
                                                               "adaptive": {"first": 16, "growth": 2.0}},
                 tasks={"learn": {"name": "toy_facts", "params": {"n_eval": 60, "n_train": 32}},
                        "retain": [{"name": "toy_arith", "params": {"n_eval": 120}}]})
    a = ids(data)[0]
    retain = task_label("toy_arith", {"n_eval": 120})
    point = f"stage:{a}:2:{retain}:0"
    path = tmp_path / "sweep.yaml"
    path.write_text(yaml.safe_dump(data))
    env = {**os.environ, "CLIFFSWEEP_FAULTS": f"{point}=hold", "CLIFFSWEEP_FAULTS_DIR": str(tmp_path)}
    proc = subprocess.Popen([sys.executable, "-m", "cliffsweep.cli", "run", str(path)], stdout=subprocess.PIPE,
                            stderr=subprocess.STDOUT, text=True, env=env)
    try:
        wait_reached(point, str(tmp_path), timeout_s=900)
    finally:
        proc.kill()  # SIGKILL: no handler runs
    out, _ = proc.communicate(timeout=120)
    store = Store(str(tmp_path / "store"))
    stage0 = tmp_path / "store" / "samples" / f"{a}__00000002__{retain}__from000000.parquet"
    assert stage0.exists() and not (tmp_path / "store" / "evals" / f"{a}__00000002__{retain}.parquet").exists(), out
    # the point fires only where a stage is scored, not where it is read back: scored again, the
    # stage would raise here, its evaluation would fail, and the invariant below with it. This run
    # is killed in its turn once every trial is done, before its top-ups (orchestrator/topups.py)
    no_rescoring = {**env, "CLIFFSWEEP_FAULTS": f"{point}=raise"}
    again = cli(path, {**no_rescoring, "CLIFFSWEEP_FAULTS": f"{point}=raise;topups=kill"}, timeout=900)
    assert again.returncode == -signal.SIGKILL, again.stdout[-3000:] + again.stderr[-3000:]
    assert (store.read("trials")["status"] == "done").all()
    data_now = load_store(str(tmp_path / "store"))
    hinging = top_ups(data_now.points, frontiers(data_now.points, n_boot=0), store.read("evals"),
                      {"L": data_now.learn_task, "R": data_now.retain_task})
    assert hinging  # what the killed run left to top up
    # `analyze --top-up` finishes them: the store's sweep again, nothing trained. Its first run is
    # SIGKILLed between two rounds (issue 59: the verdict read again once a round has landed), the
    # second resumes from the rounds landed
    top_up = [sys.executable, "-m", "cliffsweep.cli", "analyze", str(tmp_path / "store"), "--out",
              str(tmp_path / "report"), "--top-up", "--n-boot", "0"]
    between = subprocess.run(top_up, capture_output=True, text=True, timeout=900,
                             env={**no_rescoring, "CLIFFSWEEP_FAULTS": f"{point}=raise;topups_again=kill"})
    assert between.returncode == -signal.SIGKILL, between.stdout[-3000:] + between.stderr[-3000:]
    analyzed = subprocess.run(top_up, capture_output=True, text=True, env=no_rescoring, timeout=900)
    assert analyzed.returncode == 0, analyzed.stdout[-3000:] + analyzed.stderr[-3000:]
    assert store.read("errors").empty, store.read("errors")[["kind", "message"]]
    short = short_tasks(store.read("evals"))
    assert not [k for k in hinging if k.tasks & short.get(k[:2], frozenset())]  # each scored on every item now
    row = store.read("evals").set_index(["trial_id", "step", "task", "metric"]).loc[(a, 2, retain, "accuracy")]
    assert row["n_scored"] > 16 and row["n_items"] == 120, row  # it went on past the stage stored
    assert_invariant(store, parse_spec(data))
    # the same sweep uninterrupted, in a store of its own, reads the same verdicts
    whole = {**data, "store": str(tmp_path / "whole")}
    (tmp_path / "whole.yaml").write_text(yaml.safe_dump(whole))
    ran = cli(tmp_path / "whole.yaml", {"CLIFFSWEEP_FAULTS": ""}, timeout=900)
    assert ran.returncode == 0, ran.stdout[-3000:] + ran.stderr[-3000:]
    verdict = ["series", "regime", "regime_paper", "critical_lr_low", "critical_lr_high", "max_safe_lr"]
    read = [frontiers(load_store(str(tmp_path / s)).points, n_boot=0)[verdict] for s in ("store", "whole")]
    assert read[0].equals(read[1]), read


def test_worker_killed_after_its_final_report_and_evaluator_killed_with_queued_work(tmp_path, monkeypatch):
    """Two faults in one run, trials A and B in one Train job (A first). (1) The job's worker is
    SIGKILLed right after reporting A's final checkpoint, before recording it or reporting A's
    end: the retried job resumes A from its newest complete checkpoint (the final one), records
    it, ends A, then trains B (attempt 1: B never started before); A's final checkpoint is
    recorded and evaluated once. (2) The evaluator actor is SIGKILLed in the middle of trial B's
    first checkpoint, once the first stage of its retain task is written and before the next
    (eval.adaptive, first stage 8 of 20 items: issue 51 part 4), with more evaluations queued
    behind it: Ray restarts it and the calls are redone, none lost; the redone call reads that
    stage back and scores only the items after it (0 duplicate samples: tests/invariant.py). Two more retain tasks, lm-eval's and a loss task (issue 30): their
    evaluations too, once (a loss task's primary row is its `loss`). (3) Trial C's worker, in a
    job of its own, is SIGKILLed after C's first checkpoint is complete (meta file written,
    training state saved: resume_every_s 0) and before it is recorded or reported (a CI run once
    hit this by chance). The retried attempt resumes from that very checkpoint, so it never
    trains that step again: it must record and report it itself, or the checkpoint is resumed
    from and never evaluated."""
    # resume_every_s 0: every checkpoint saves the training state, so the retry resumes at step 4
    from cliffsweep.evals.tasks import task_label
    from cliffsweep.faults import marker

    lm_eval = {"name": "lm_eval", "params": {"task": "toy_arith_lm", "include_path": "toy", "apply_chat_template": True,
                                             "limit": 20}}
    data = sweep(tmp_path / "store", lrs=(1e-3, 3e-3, 1e-2),
                 resources={"max_concurrent_trials": 1, "max_retries": 1, "trials_per_job": 2}, resume_every_s=0,
                 eval={"points_per_trial": 2, "backend": "hf", "cpus_per_evaluator": 0.5, "adaptive": {"first": 8}})
    data["tasks"]["retain"] += [lm_eval, {"name": "loss", "params": {"of": {"name": "toy_arith"}, "split": "train",
                                                                     "n_eval": 20}}]
    a, b, c = ids(data)
    retain = task_label("toy_arith", {"n_eval": 20})
    mid_stage = f"stage:{b}:2:{retain}:0"
    store = run_with_faults(data, f"reported:{a}:4=kill;{mid_stage}=kill;written:{c}:2=kill", tmp_path, monkeypatch)
    assert sorted(p.name for p in tmp_path.iterdir() if p.name.startswith(("reported", "stage", "written"))) == [
        f"reported_{a}_4", marker(mid_stage, str(tmp_path)).rsplit("/", 1)[1], f"written_{c}_2"]  # the faults fired
    # the stage written before the kill was kept and read back: the redone call began after it
    stages = store.read("samples").query("trial_id == @b and step == 2 and task == @retain")
    assert sorted(stages["stage"].unique())[:1] == [0] and (stages.query("stage == 0")["example_id"].size == 8), stages
    row = store.read("trials").set_index("trial_id").loc[a]
    assert row["attempt"] == 2 and row["resumed_from_step"] == 4 and row["steps"] == 4, row
    assert store.read("trials").set_index("trial_id").loc[b, "attempt"] == 1
    row = store.read("trials").set_index("trial_id").loc[c]
    assert row["attempt"] == 2 and row["resumed_from_step"] == 2 and row["steps"] == 4, row
    assert store.read("errors").query("kind == 'eval'").empty  # the killed evaluation was redone
    assert_invariant(store, parse_spec(data))
    ev = store.read("evals").query("task == 'lm_eval:toy_arith_lm'")
    assert set(ev["metric"]) == {"accuracy", "exact_match,strict-match"} and (ev["n"] == 20).all()
    loss = store.read("evals").query("task == 'loss:toy_arith:train'")
    assert set(loss["metric"]) == {"loss", "likelihood", "perplexity", "tokens"} and (loss["n"] == 20).all()
    assert store.read("samples").query("task == 'loss:toy_arith:train'")["score"].gt(0).all()
    # done trials keep only their final checkpoint, without training state (keep_checkpoints: final)
    assert checkpoint_folders(parse_spec(data)) == {(a, 4), (b, 4), (c, 4)}
    assert not list((tmp_path / "store" / "checkpoints").rglob("train_state.pt"))


def release_when_live(store: Store, steps: list[tuple[str, str]], faults_dir, stop, seen: list[str],
                      timeout_s: float = 600) -> None:
    """For each (held point, live.json counter) in turn: once the driver's live state shows the
    counter at 1 or more, the point is released (faults.py `hold`) and the counter named in
    `seen`. Past `timeout_s` the point is released all the same, unseen: the sweep ends and the
    test says what never happened, instead of waiting for the hold's own limit."""
    import json

    from cliffsweep import faults

    for point, counter in steps:
        end = time.time() + timeout_s
        while time.time() < end and not stop.is_set():
            live = json.loads(store.read_bytes("live.json")) if store.exists("live.json") else {}
            if live.get(counter, 0) >= 1:
                seen.append(counter)
                break
            stop.wait(0.5)
        faults.release(point, str(faults_dir))


def test_a_backlog_gets_an_extra_evaluator_that_stops_when_idle(tmp_path, monkeypatch):
    """Issue 22: evaluators follow the load. The first checkpoint's evaluation is held
    (faults.py `hold`) while four trials train in one job, so evaluations wait in the driver:
    with eval.max_evaluators_per_model 2 and free CPUs, a second evaluator starts and takes them.
    The held evaluation is released once the driver's live state shows that extra evaluator.
    The last trial's final evaluation is then held until the live state shows an evaluator
    stopped when idle: the sweep is still running when one evaluator has nothing left, by
    construction, since that evaluation is not done. Every checkpoint is still evaluated exactly
    once. Nothing here is ordered by a sleep (issue 50 part 6: slowed by 20 and 8 s, later 20
    and 23 s, CI saw both evaluators finish their last call together and the sweep end before
    either was idle)."""
    import json
    import threading

    import ray

    from cliffsweep.orchestrator.driver import run_sweep

    data = sweep(tmp_path / "store", lrs=(1e-3, 2e-3, 3e-3, 4e-3),
                 eval={"points_per_trial": 2, "backend": "hf", "cpus_per_evaluator": 0.5, "max_evaluators_per_model": 2})
    first, last = f"eval:{ids(data)[0]}:2", f"eval:{ids(data)[-1]}:4"
    monkeypatch.setenv("CLIFFSWEEP_FAULTS", f"{first}=hold;{last}=hold")
    monkeypatch.setenv("CLIFFSWEEP_FAULTS_DIR", str(tmp_path))
    stop, seen = threading.Event(), []
    watcher = threading.Thread(target=release_when_live, args=(
        Store(data["store"]), [(first, "extra_evaluators_started"), (last, "evaluators_stopped")], tmp_path, stop, seen))
    watcher.start()
    try:
        store = run_sweep(parse_spec(data), num_cpus=4)
    finally:
        stop.set()
        watcher.join()
        ray.shutdown()
    from cliffsweep.faults import marker

    assert all(os.path.exists(marker(p, str(tmp_path)) + ".reached") for p in (first, last))  # both were held
    assert seen == ["extra_evaluators_started", "evaluators_stopped"], seen
    live = json.loads(store.read_bytes("live.json"))
    assert live["extra_evaluators_started"] >= 1, live
    assert live["evaluators"] == {"q": 1} and live["evaluators_stopped"] >= 1, live  # one stopped once idle
    assert store.read("errors").empty
    assert_invariant(store, parse_spec(data))
