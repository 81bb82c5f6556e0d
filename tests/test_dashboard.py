"""The live dashboard (issue 41) without a browser: its table cache reads what the store reads, its
views say what `analyze` says, missing, empty and older stores are named, and off loopback every
request needs the token. The browser test with a real sweep: tests/test_toy_regimes.py (README's sweep
with `--dashboard`, tests/dashboard_page.py)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pandas as pd

from cliffsweep.analysis.synthetic import SyntheticSweep, write_synthetic_store
from cliffsweep.dashboard.refresh import Refresher, Reading
from cliffsweep.storage.tablecache import TableCache
from cliffsweep.storage.store import Store


def aged(folder: Path, seconds: float = 3600) -> None:
    """The files under `folder` dated `seconds` back: written long before a read, as a running
    sweep's older files are (a file younger than tablecache.SETTLE_S is read again every time)."""
    import os
    import time

    for f in folder.rglob("*.parquet"):
        os.utime(f, (time.time() - seconds, time.time() - seconds))


def _sorted(df: pd.DataFrame) -> pd.DataFrame:
    key = [c for c in ("trial_id", "step", "task", "metric", "example_id") if c in df.columns]
    return df.sort_values(key).reset_index(drop=True)


def test_the_table_cache_reads_what_the_store_reads_through_compaction_and_rewrites(tmp_path):
    store = Store(str(tmp_path / "s"))
    rows = lambda tid, v: [{"trial_id": tid, "step": 1, "kind": "k", "message": v}]  # noqa: E731
    for i in range(3):
        store.write("errors", f"u{i}", rows(f"t{i}", "first"))
    aged(tmp_path / "s")
    cache = TableCache(store)
    first, changed = cache.read("errors")
    assert changed and _sorted(first).equals(_sorted(store.read("errors")))
    same, changed = cache.read("errors")
    assert not changed and same is first  # nothing new: nothing read again
    store.compact(("errors",))
    store.write("errors", "u1", rows("t1", "written again"))  # overrides its folded rows
    store.write("errors", "u9", rows("t9", "new"))
    again, changed = cache.read("errors")
    assert changed and _sorted(again).equals(_sorted(store.read("errors")))
    assert set(again["message"]) == {"first", "written again", "new"} and len(again) == 4


def test_tables_kept_on_disk_spare_a_restart_the_files_it_read_and_never_hide_a_change(tmp_path):
    """diskcache.py: a dashboard started again reads only what changed since. Proof that it did
    not read the old files: their bytes are garbled (size and mtime kept) and it still answers."""
    import os

    from cliffsweep.storage import diskcache

    store, disk = Store(str(tmp_path / "s")), tmp_path / "cache"
    rows = lambda tid, v: [{"trial_id": tid, "step": 1, "kind": "k", "message": v}]  # noqa: E731
    for i in range(diskcache.SAVE_AFTER_FILES + 20):
        store.write("errors", f"u{i}", rows(f"t{i}", "first"))
    aged(tmp_path / "s")
    first, _ = TableCache(store, disk).read("errors")  # read all, and kept: as many files as SAVE_AFTER_FILES
    files = sorted((tmp_path / "s" / "errors").glob("u*.parquet"))
    originals = {f: (f.read_bytes(), f.stat()) for f in files}
    for f, (data, st) in originals.items():
        f.write_bytes(bytes(len(data)))
        os.utime(f, ns=(st.st_atime_ns, st.st_mtime_ns))
    again, changed = TableCache(store, disk).read("errors")  # a restart
    assert changed and _sorted(again).equals(_sorted(first))
    for f, (data, st) in originals.items():
        f.write_bytes(data)
        os.utime(f, ns=(st.st_atime_ns, st.st_mtime_ns))
    restarted = TableCache(store, disk)
    store.write("errors", "u5", rows("t5", "written again"))
    store.write("errors", "u999", rows("t999", "new"))
    later, changed = restarted.read("errors")
    assert changed and _sorted(later).equals(_sorted(store.read("errors")))
    assert set(later["message"]) == {"first", "written again", "new"}
    kept = next(disk.glob("*.arrow"))
    kept.write_bytes(kept.read_bytes()[:100])  # a damaged cache file is dropped, not trusted
    fresh, _ = TableCache(store, disk).read("errors")
    assert _sorted(fresh).equals(_sorted(store.read("errors")))


def test_the_views_say_what_analyze_says_and_name_what_an_older_store_lacks(tmp_path):
    from cliffsweep.analysis.run import analyze_store

    sweep = SyntheticSweep(series=(("sft", "sft"),), epochs=(1,), n_learn=60, n_retain=60)
    store = write_synthetic_store(str(tmp_path / "s"), sweep)
    board = Refresher([store.uri], Reading(n_boot=50))
    assert board.refresh()
    snap = json.loads(board.current()[1])
    table = analyze_store(store.uri, str(tmp_path / "out"), n_boot=50, report=False)
    shown = {(m["model"], s["label"], s["epochs"]): (s["regime"], s["confidence"]) for m in snap["models"] for s in m["series"]}
    assert shown == {(r.model, r.label, r.epochs): (r.regime, r.confidence) for r in table.itertuples()}
    assert {"cliff", "gradual"} <= {r for r, _ in shown.values()}  # the synthetic shapes, read as analyze reads them
    assert snap["confidence"] == "bootstrap" and snap["sweep"]["total"] == len(sweep.lrs) * 2
    points = {p["trial_id"] for m in snap["models"] for p in m["points"]}
    assert points == set(store.read("evals")["trial_id"])  # every evaluated checkpoint is drawn
    # the synthetic writer is an "older version": no training curves, no live state, no references
    missing = " ".join(snap["missing"])
    assert "live state" in missing and "reference answers" in missing
    assert not board.refresh()  # nothing changed: nothing recomputed
    assert snap["sweep"]["drivers"] == []
    from cliffsweep.storage.claims import Claims  # issue 53: the drivers working the store, and what each holds

    driver = Claims(store)
    try:
        assert driver.take("trial__t1") and driver.take("base__m")
        assert board.refresh()  # a driver came: the page changes
        drivers = json.loads(board.current()[1])["sweep"]["drivers"]
        assert drivers == [{"label": driver.driver.label, "trials": 1, "other": ["base__m"]}]
    finally:
        driver.close()
    tid = snap["sweep"]["grid"][0]["trial_id"]
    view = board.trial(tid)
    assert view["trial"]["trial_id"] == tid and view["scores"] and view["generations"]
    assert board.trial("no-such-trial") is None


def test_a_missing_store_is_refused_and_an_empty_one_is_said(tmp_path):
    out = subprocess.run([sys.executable, "-m", "cliffsweep.cli", "dashboard", str(tmp_path / "nothing")],
                         capture_output=True, text=True, timeout=120)
    assert out.returncode == 2 and "no cliffsweep store" in out.stderr and "Traceback" not in out.stderr
    board = Refresher([str(tmp_path / "later")], Reading(n_boot=0))  # --wait: said until it appears
    board.refresh()
    assert "no store here yet" in json.loads(board.current()[1])["said"]
    empty = Store(str(tmp_path / "later"))
    empty.write_json("spec.json", {"name": "empty"})
    assert board.refresh()
    snap = json.loads(board.current()[1])
    assert snap["stores"] == [{"uri": empty.uri, "state": "empty", "name": "empty"}]
    assert snap["models"] == [] and snap["said"].startswith("no frontier yet")


def test_off_loopback_every_request_needs_the_token(tmp_path):
    from starlette.testclient import TestClient

    from cliffsweep.dashboard.app import build_app

    store = write_synthetic_store(str(tmp_path / "s"), SyntheticSweep(series=(("sft", "sft"),), epochs=(1,)))
    app = build_app(Refresher([store.uri], Reading(n_boot=0)), token="s3cret")
    client = TestClient(app)
    assert client.get("/api/snapshot").status_code == 401
    assert client.get("/?token=wrong").status_code == 401
    assert client.get("/?token=s3cret").status_code == 200  # and the cookie it sets opens the rest
    assert client.get("/api/snapshot").status_code == 200
    open_app = TestClient(build_app(Refresher([store.uri], Reading(n_boot=0))))
    assert open_app.get("/static/plotly.min.js").status_code == 200  # served from the plotly package
    assert open_app.get("/static/..%2Fapp.py").status_code == 404


def test_the_help_says_what_listening_off_loopback_means():
    out = subprocess.run([sys.executable, "-m", "cliffsweep.cli", "dashboard", "--help"], capture_output=True,
                         text=True, timeout=120).stdout
    out = " ".join(out.split())  # argparse wraps lines
    assert "127.0.0.1" in out and "reachable from other hosts" in out and "token" in out


def test_several_stores_are_shown_as_one(tmp_path):
    """As analyze takes them (the paper grid's three stores): every trial of each, one frontier
    per model, the counts and hours added up."""
    one = SyntheticSweep(models={"toy-a": "cliff"}, series=(("sft", "sft"),), epochs=(1,))
    two = SyntheticSweep(models={"toy-b": "gradual"}, series=(("sft", "sft"),), epochs=(1,))
    a, b = write_synthetic_store(str(tmp_path / "a"), one), write_synthetic_store(str(tmp_path / "b"), two)
    board = Refresher([a.uri, b.uri], Reading(n_boot=0))
    board.refresh()
    snap = json.loads(board.current()[1])
    n = len(one.lrs)
    assert snap["sweep"]["total"] == 2 * n and len(snap["sweep"]["grid"]) == 2 * n
    assert sum(snap["sweep"]["counts"].values()) == 2 * n
    assert [m["model"] for m in snap["models"]] == ["toy-a", "toy-b"]
    assert [s["state"] for s in snap["stores"]] == ["ok", "ok"]


def test_a_port_in_use_is_one_sentence_and_exit_2(tmp_path):
    import socket

    store = write_synthetic_store(str(tmp_path / "s"), SyntheticSweep(series=(("sft", "sft"),), epochs=(1,)))
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        out = subprocess.run([sys.executable, "-m", "cliffsweep.cli", "dashboard", store.uri, "--port",
                              str(taken.getsockname()[1])], capture_output=True, text=True, timeout=120)
    assert out.returncode == 2 and "cannot serve on 127.0.0.1" in out.stderr and "Traceback" not in out.stderr
    assert "http://" not in out.stdout  # no address printed for a page that is not served


def test_a_stopped_dashboard_leaves_nothing_behind_and_its_port_is_free_at_once(tmp_path):
    """SIGTERM (how `run --dashboard` and a service manager stop it): exit 143, its reader
    processes gone, no warning of leaked locks; started again at once on the same port, it serves,
    though the connections its last run closed still wait out TIME_WAIT there."""
    import http.client
    import time

    import psutil

    from cliffsweep.dashboard.cli import free_port

    store = write_synthetic_store(str(tmp_path / "s"), SyntheticSweep(series=(("sft", "sft"),), epochs=(1,)))
    port = free_port()

    started: list[subprocess.Popen] = []  # killed at the end if a check failed before it stopped them

    def start() -> subprocess.Popen:
        proc = subprocess.Popen([sys.executable, "-m", "cliffsweep.cli", "dashboard", store.uri, "--port", str(port),
                                 "--n-boot", "0"], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        started.append(proc)
        assert f"http://127.0.0.1:{port}/" in proc.stdout.readline()
        return proc

    try:
        first = start()
        for _ in range(200):  # the address is printed as the port is bound; uvicorn listens a moment later
            try:
                conn = http.client.HTTPConnection("127.0.0.1", port, timeout=30)
                conn.request("GET", "/api/snapshot")
                assert conn.getresponse().status == 200  # a kept-alive connection the server closes first
                break
            except ConnectionRefusedError:
                time.sleep(0.05)
        readers = psutil.Process(first.pid).children(recursive=True)
        assert readers, "the dashboard started no reader processes"

        def mapped(proc: psutil.Process) -> str:  # the shared libraries a process loaded
            return Path(f"/proc/{proc.pid}/maps").read_text()
        # forked before the dashboard imported pandas, so that they parse while it does (cli.py)
        assert all("pandas/_libs" not in mapped(r) and "/pyarrow/" in mapped(r) for r in readers)
        assert "pandas/_libs" in mapped(psutil.Process(first.pid))
        first.terminate()
        assert first.wait(timeout=60) == 143
        assert "leaked" not in first.stderr.read() and not psutil.wait_procs(readers, timeout=10)[1]
        again = start()
        again.terminate()
        assert again.wait(timeout=60) == 143 and "Traceback" not in again.stderr.read()
    finally:
        for proc in started:
            if proc.poll() is None:
                proc.kill()


def test_regimes_model_by_model_equal_one_pass_and_only_a_changed_model_is_recomputed(tmp_path):
    """The first pass's per-model cache (dashboard/frontier.regimes_by_model) against
    `frontiers` over every model at once; after one model's points change, the other model's
    views are the cached ones and the changed model's equal a fresh computation."""
    from cliffsweep.analysis.frontiers import MIN_CONFIDENCE, frontiers
    from cliffsweep.analysis.points import load_stores
    from cliffsweep.dashboard.reading import regimes_by_model
    from cliffsweep.dashboard.views import model_views

    sweep = SyntheticSweep(series=(("sft", "sft"), ("lora", "lora")), epochs=(1, 2), n_learn=40, n_retain=40,
                           more_retain=(("toy_more", "", 0.5),))
    data = load_stores([write_synthetic_store(str(tmp_path / "s"), sweep).uri])
    points, retain = data.points.reset_index(drop=True), list(data.retain_tasks)
    whole = lambda pts: model_views(pts, frontiers(pts, n_boot=0, models=data.models), retain)  # noqa: E731
    cache: dict = {}
    assert regimes_by_model(points, data.models, retain, MIN_CONFIDENCE, cache) == whole(points)
    assert {m["model"] for m in whole(points)} == {"toy-a", "toy-b"} and len(retain) == 2
    kept = cache["toy-b"][1]
    changed = points.copy()
    mine = changed.index[(changed["model"] == "toy-a") & (changed["series"] != "base")]
    changed.loc[mine[:5], "R"] = 0.0  # some of toy-a's checkpoints forget everything
    again = regimes_by_model(changed, data.models, retain, MIN_CONFIDENCE, cache)
    assert again == whole(changed) and again != whole(points)
    assert cache["toy-b"][1] is kept  # toy-b's views were not computed again


def test_the_cost_counts_evaluations_on_cpus_and_gpus():
    """Device-hours: a trial's seconds times its workers (CPU) or GPUs; an evaluation's seconds
    times its evaluator's GPUs, or one evaluator worker on CPUs (a CPU sweep's evaluations
    once read 0 hours)."""
    from cliffsweep.dashboard.views import cost_view

    trials = pd.DataFrame({"train_seconds": [1800.0, 1800.0], "setup_seconds": [0.0, 0.0]})
    evals = pd.DataFrame({"trial_id": ["a", "a", "b"], "step": [1, 1, 1], "task": ["t", "t", "t"],
                          "eval_seconds": [360.0, 360.0, 360.0]})  # a's two metric rows: one evaluation
    cpu = cost_view(trials, evals, {"resources": {"workers_per_trial": 2}}, {})
    assert cpu["unit"] == "CPU worker" and cpu["train_hours"] == 2.0 and cpu["eval_hours"] == 0.2
    gpu = cost_view(trials, evals, {"resources": {"gpus_per_worker": 1, "workers_per_trial": 2},
                                    "eval": {"gpus_per_evaluator": 0.5}}, {})
    assert gpu["unit"] == "GPU" and gpu["train_hours"] == 2.0 and gpu["eval_hours"] == 0.1
    # like with like (issue 63): plan's GPU-hours stand beside GPU-hours, never beside CPU workers'
    planned = {"planned_hours": 0.037, "planned_said": "H100-SXM-hours, as `cliffsweep plan` prices the sweep file"}
    assert cost_view(trials, evals, {"resources": {"gpus_per_worker": 1}}, planned)["planned_hours"] == 0.037
    cpu = cost_view(trials, evals, {"resources": {"workers_per_trial": 2}}, planned)
    assert cpu["planned_hours"] is None and "not comparable with a CPU sweep's worker-hours" in cpu["planned_said"]


def test_a_trial_shows_each_checkpoint_s_canary_distance_where_its_store_kept_one(tmp_path):
    """The canary distance each evaluation stores (evaluator/results.py) is a column of the trial's
    scores; a store written before it kept none shows none (older files read it as null)."""
    from cliffsweep.dashboard.views import trial_view

    store = write_synthetic_store(str(tmp_path / "s"), SyntheticSweep(series=(("sft", "sft"),), epochs=(1,)))
    frames = {t: store.read(t) for t in ("trials", "evals", "errors", "steps", "samples", "checkpoints")}
    tid = frames["trials"]["trial_id"].iloc[0]
    older = trial_view(tid, *(frames[t] for t in ("trials", "evals", "errors", "steps", "samples", "checkpoints")))
    assert older["scores"] and all("canary distance" not in s["values"] for s in older["scores"])
    evals = frames["evals"]
    steps = sorted(evals.loc[evals["trial_id"] == tid, "step"].unique())
    evals.loc[(evals["trial_id"] == tid) & (evals["step"] == steps[-1]), "canary_distance"] = 0.079
    view = trial_view(tid, frames["trials"], evals, frames["errors"], frames["steps"], frames["samples"],
                      frames["checkpoints"])
    shown = {s["step"]: s["values"].get("canary distance") for s in view["scores"]}
    assert shown[steps[-1]] == 0.079 and all(shown[s] is None for s in steps[:-1])


def test_a_grid_above_its_limit_is_sent_one_cell_per_lr_with_its_trials_counted(monkeypatch):
    """Issue 62 part 3: past views.GRID_TRIALS_MAX trials the grid goes to the page folded, one
    record per (model, series, length, lr) cell: the cell shows its least advanced status (done
    only once every trial of it is), counts its trials by status, and the pending trials' reasons
    are still counted one by one."""
    from cliffsweep.dashboard import views

    rows = [dict(trial_id=f"{m}-{s}-{lr}-{seed}", model=m, method=s, series=s, optimizer="adamw", epochs=1,
                 max_steps=None, lr=lr, seed=seed, round=0, status="done", attempt=1, steps=4, total_steps=4,
                 error=None, started_at=pd.Timestamp("2026-12-07", tz="UTC"), finished_at=None)
            for m in ("a", "b") for s in ("sft", "ewc") for lr in (1e-4, 1e-3, 1e-2) for seed in range(4)]
    trials = pd.DataFrame(rows)
    trials.loc[trials["trial_id"] == "a-sft-0.001-2", "status"] = "pending"
    trials.loc[trials["trial_id"] == "b-ewc-0.01-0", "status"] = "running"
    empty_evals = pd.DataFrame(columns=["trial_id", "step", "series", "metric", "role", "n", "n_scored", "n_items"])
    errors = pd.DataFrame(columns=["trial_id", "step", "kind", "message", "at"])
    live = {"waiting": {"a-sft-0.001-2": "a free GPU"}, "at": "2026-12-07T00:00:00+00:00", "phase": "running"}
    full = views.sweep_view(trials, empty_evals, errors, live, None, {}, 0.0)
    monkeypatch.setattr(views, "GRID_TRIALS_MAX", 10)
    folded = views.sweep_view(trials, empty_evals, errors, live, None, {}, 0.0)
    assert len(full["grid"]) == 48 and len(folded["grid"]) == 12
    cells = {(c["model"], c["series"], c["lr"]): c for c in folded["grid"]}
    assert cells[("a", "sft", 1e-3)]["status"] == "pending"
    assert cells[("a", "sft", 1e-3)]["folded"] == {"n": 4, "by_status": {"done": 3, "pending": 1}}
    assert cells[("b", "ewc", 1e-2)]["status"] == "running"
    assert cells[("a", "ewc", 1e-4)]["status"] == "done" and cells[("a", "ewc", 1e-4)]["folded"]["n"] == 4
    assert folded["waits"] == full["waits"] == {"a free GPU": 1}
    assert folded["counts"] == full["counts"] and folded["total"] == 48
