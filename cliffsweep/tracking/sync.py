"""Store -> experiment trackers: what each tracker has not been sent yet, and the thread that
sends it (issue 17).

The store is the source of truth; a tracker is a mirror. Pure functions (`deltas`) compare the
store's tables with the `tracking` table (what each tracker has been sent, one row per
(tracker, run)) and give, per run, the rows still to send. `Syncer` runs them in a thread of
the driver, every `tracking.interval_s`:

- never on the training or evaluation path: a slow or dead tracker delays only its own mirror;
- a failure is caught, recorded (`errors` table, kind `tracking`: what `cliffsweep status`
  shows), and the tracker is retried with backoff; the others go on;
- after each run's rows are sent, its `tracking` row is rewritten, so a re-run (or
  `cliffsweep export-tracking STORE`) sends only what is missing, into the same run;
- between a send and its `tracking` row a crash can repeat that one send: points carry the
  store's timestamps, and MLflow drops an identical repeat.
"""

from __future__ import annotations

import json
import math
import sys
import threading
import time
from datetime import datetime, timezone
from typing import Any

import pandas as pd

from cliffsweep.storage import ledger
from cliffsweep.storage.store import SPEC_FILE, Store, clip_message
from cliffsweep.sweep.status import TERMINAL, TrialStatus
from cliffsweep.tracking.base import EvalPoint, RunDelta, StepPoint, Tracker, sweep_run_id
from cliffsweep.sweep.grid import BASE

BACKOFF = (5.0, 10.0, 30.0, 60.0)


def _now() -> datetime:
    return datetime.now(timezone.utc)


# --- what to send (pure) ------------------------------------------------------------------------
def trial_params(row: dict[str, Any], spec) -> dict[str, Any]:
    """A trial run's params: the grid point, the method's params, and how it ran."""
    method_params = json.loads(row["method_params"]) if row.get("method_params") else {}
    r = spec.resources
    out = {"model": row["model"], "model_path": row["model_path"], "method": row["method"],
           "series": row["series"], "optimizer": row["optimizer"], "lr": row["lr"], "epochs": row["epochs"],
           "seed": row["seed"], "round": 0 if pd.isna(row.get("round")) else int(row["round"]),
           "workers_per_trial": r.workers_per_trial, "cpus_per_worker": r.cpus_per_worker,
           "gpus_per_worker": r.gpus_per_worker, "strategy": r.strategy,
           "batch_size": spec.recipe.batch_size, "max_seq_len": spec.recipe.max_seq_len}
    out.update({f"method.{k}": v for k, v in sorted(method_params.items())})
    return out


def sweep_params(spec) -> dict[str, Any]:
    return {"sweep": spec.name, "models": ",".join(m.name for m in spec.models),
            "methods": ",".join(m.name for m in spec.methods), "lrs": ",".join(f"{x:g}" for x in spec.lrs),
            "epochs": ",".join(map(str, spec.epochs)), "seeds": ",".join(map(str, spec.seeds)),
            "learn_task": spec.tasks.learn.name, "retain_tasks": ",".join(t.name for t in spec.tasks.retain)}


def step_points(rows: pd.DataFrame) -> list[StepPoint]:
    out = []
    for r in rows.sort_values("step").itertuples(index=False):
        values = {"train/loss": float(r.loss), "train/lr": float(r.lr), "train/tokens": float(r.tokens),
                  "train/epoch": float(r.epoch), "train/seconds": float(r.seconds)}
        if r.grad_norm is not None and not math.isnan(r.grad_norm):
            values["train/grad_norm"] = float(r.grad_norm)
        values.update({f"train/{k}": float(v) for k, v in json.loads(r.terms or "{}").items()})
        out.append(StepPoint(int(r.step), values, r.logged_at.to_pydatetime()))
    return out


def eval_points(rows: pd.DataFrame, prefix) -> list[EvalPoint]:
    """One point per checkpoint step, every task and metric of it; `prefix(row)` names the key."""
    out = []
    for step, g in rows.groupby("step", sort=True):
        values = {f"{prefix(r)}/{r.task}/{r.metric}": float(r.value) for r in g.itertuples(index=False)}
        out.append(EvalPoint(int(step), values, g["evaluated_at"].max().to_pydatetime()))
    return out


def _unsent(rows: pd.DataFrame, sent: set[str]) -> pd.DataFrame:
    """The evaluation rows whose unit is not in `sent`."""
    keep = [_label(r) not in sent for r in rows.itertuples(index=False)]
    return rows.loc[pd.Series(keep, index=rows.index, dtype=bool)]


def _label(r) -> str:
    """An evaluation unit (trial, step, task), as the `tracking` table lists those sent."""
    return f"{r.trial_id}/{int(r.step)}/{r.task}"


def deltas(spec, trials: pd.DataFrame, steps: pd.DataFrame, evals: pd.DataFrame,
           marks: dict[str, dict[str, Any]]) -> list[RunDelta]:
    """Per run, what the tracker whose `marks` these are (trial id -> its `tracking` row) has
    not been sent: training points after its last step, evaluations it lacks, a new status. The
    sweep's own run first (base evaluations); trials that have nothing yet (pending, no rows)
    get no run."""
    out = []
    sweep_id = sweep_run_id(spec.name)
    base = evals[evals["method"] == BASE]
    mark = marks.get(sweep_id, {})
    sent = set(json.loads(mark.get("evals") or "[]"))
    new_base = _unsent(base, sent)
    if not mark or not new_base.empty:
        out.append(RunDelta(sweep_id, spec.name, sweep_params(spec), parent=True,
                            evals=eval_points(new_base, lambda r: f"base/{r.model}"),
                            eval_labels={_label(r) for r in new_base.itertuples(index=False)}))
    steps_by = dict(list(steps.groupby("trial_id"))) if not steps.empty else {}
    evals_by = dict(list(evals[evals["method"] != BASE].groupby("trial_id"))) if not evals.empty else {}
    for row in trials.sort_values("trial_id").to_dict("records"):
        tid = row["trial_id"]
        mark = marks.get(tid, {})
        st = steps_by.get(tid, steps.iloc[:0])
        # one row per step: a resumed stretch rewrites its rows (trainables/steplog.py)
        st = st[st["step"] > (mark.get("steps_to") if mark.get("steps_to") is not None else 0)]
        ev = evals_by.get(tid, evals.iloc[:0])
        sent = set(json.loads(mark.get("evals") or "[]"))
        ev = _unsent(ev, sent)
        status = row["status"] if row["status"] != mark.get("status") else None
        if not mark and row["status"] == TrialStatus.PENDING and st.empty and ev.empty:
            continue
        if st.empty and ev.empty and status is None:
            continue
        out.append(RunDelta(tid, tid, trial_params(row, spec), steps=step_points(st),
                            evals=eval_points(ev, lambda r: "eval"), status=status,
                            eval_labels={_label(r) for r in ev.itertuples(index=False)}))
    return out


def marks_of(tracking: pd.DataFrame, tracker: str) -> dict[str, dict[str, Any]]:
    rows = tracking[tracking["tracker"] == tracker]
    return {r["trial_id"]: r for r in rows.to_dict("records")}


def behind(spec, store: Store, trials: pd.DataFrame, evals: pd.DataFrame) -> dict[str, int]:
    """Per configured tracker, how many runs have something the tracker was not sent (what
    `cliffsweep status` reports; it passes the trials and evals it has read already)."""
    steps, tracking = store.read("steps"), store.read("tracking")
    return {name: len(deltas(spec, trials, steps, evals, marks_of(tracking, name)))
            for name in spec.tracking.enabled}


# --- sending -----------------------------------------------------------------------------------
class _State:
    def __init__(self, tracker: Tracker):
        self.tracker = tracker
        self.marks: dict[str, dict[str, Any]] = {}
        self.open: dict[str, str] = {}  # trial id -> run id, runs open in this process
        self.down_until = 0.0
        self.failures = 0
        self.last_error: str | None = None


class Syncer:
    """Mirrors the store at `store_uri` to the trackers of `spec.tracking`. `start()` runs it
    in a daemon thread every `interval_s`; `sync_once()` is one round (export-tracking)."""

    def __init__(self, spec, store_uri: str, stream=None):
        from cliffsweep.tracking import build_tracker

        self.spec, self.store = spec, Store(store_uri)
        cfg = spec.tracking
        self.states = {n: _State(build_tracker(n, getattr(cfg, n), spec.name)) for n in cfg.enabled}
        tracking = self.store.read("tracking")
        for name, s in self.states.items():
            s.marks = marks_of(tracking, name)
        self.stream = stream or sys.stderr
        self._wake = threading.Event()
        self._stop = False
        self._thread: threading.Thread | None = None
        self._last_said: str | None = None

    # --- the thread ---
    def start(self) -> "Syncer":
        self._thread = threading.Thread(target=self._loop, name="cliffsweep-tracking", daemon=True)
        self._thread.start()
        return self

    def _loop(self) -> None:
        while not self._stop:
            self._round_safely()
            self._wake.wait(self.spec.tracking.interval_s)
            self._wake.clear()
        self._round_safely(final=True)

    def _round_safely(self, final: bool = False) -> None:
        try:
            self.sync_once(final)
        except Exception as exc:  # noqa: BLE001 - reading the store failed: try again next round
            text = f"tracking: could not read the store ({type(exc).__name__}: {exc}); trying again"
            if text != self._last_said:
                self._say(text)

    def close(self) -> dict[str, str | None]:
        """A last round (bounded by `close_timeout_s`), then every open run is finished.
        Returns each tracker's last error (None: up to date)."""
        if self._thread is not None:
            self._stop = True
            self._wake.set()
            self._thread.join(self.spec.tracking.close_timeout_s)
            if self._thread.is_alive():
                self._say(f"tracking: the trackers did not catch up within {self.spec.tracking.close_timeout_s:g} s; "
                          "a re-run or `cliffsweep export-tracking STORE` sends the rest")
                return {n: s.last_error or "did not finish" for n, s in self.states.items()}
        for s in self.states.values():
            try:
                s.tracker.close()
            except Exception as exc:  # noqa: BLE001
                s.last_error = f"{type(exc).__name__}: {exc}"
        return {n: s.last_error for n, s in self.states.items()}

    # --- one round ---
    def sync_once(self, final: bool = False) -> None:
        tables = {t: self.store.read(t) for t in ("trials", "steps", "evals")}
        for name, s in self.states.items():
            if time.time() < s.down_until and not final:
                continue
            self._sync_tracker(name, s, tables)

    def _sync_tracker(self, name: str, s: _State, tables: dict[str, pd.DataFrame]) -> None:
        for d in deltas(self.spec, tables["trials"], tables["steps"], tables["evals"], s.marks):
            try:
                run_id = s.open.get(d.trial_id)
                if run_id is None:
                    run_id = s.tracker.open(d, s.marks.get(d.trial_id, {}).get("run_id"))
                    s.open[d.trial_id] = run_id
                s.tracker.send(run_id, d)
                if d.status in TERMINAL:
                    s.tracker.finish(run_id, d.status)
                    s.open.pop(d.trial_id, None)
            except Exception as exc:  # noqa: BLE001 - a tracker never fails the sweep
                self._failed(name, s, d, exc)
                return
            self._mark(name, s, d, run_id)
        if s.failures:
            self._say(f"tracking: {name} reachable again; caught up with the store")
        s.failures, s.down_until, s.last_error = 0, 0.0, None

    def _mark(self, name: str, s: _State, d: RunDelta, run_id: str) -> None:
        old = s.marks.get(d.trial_id, {})
        sent = set(json.loads(old.get("evals") or "[]")) | d.eval_labels
        steps_to = max([p.step for p in d.steps] + [old.get("steps_to") or 0])
        row = {"tracker": name, "trial_id": d.trial_id, "run_id": run_id, "steps_to": steps_to,
               "evals": json.dumps(sorted(sent)), "status": d.status or old.get("status"), "synced_at": _now()}
        self.store.write("tracking", f"{name}__{d.trial_id}", [row])
        s.marks[d.trial_id] = row

    def _failed(self, name: str, s: _State, d: RunDelta, exc: Exception) -> None:
        delay = BACKOFF[min(s.failures, len(BACKOFF) - 1)]
        s.failures += 1
        s.down_until = time.time() + delay
        s.open.pop(d.trial_id, None)  # reopened (same run) once the tracker is back
        s.last_error = clip_message(f"{type(exc).__name__}: {exc}", 1000)
        if s.failures == 1:
            self._say(f"tracking: {name} failed ({s.last_error.splitlines()[0][:200]}); the sweep goes on and "
                      f"the store keeps everything; retrying every {BACKOFF[0]:g}-{BACKOFF[-1]:g} s")
        try:
            ledger.record_error(self.store, f"tracking__{name}", "tracking", d.trial_id, f"{name}: {s.last_error}")
        except OSError:
            pass  # the store itself is away: its own retries said so; the next round tries again

    def _say(self, text: str) -> None:
        self._last_said = text
        say(text, self.stream)


def say(text: str, stream=None) -> None:
    print(f"cliffsweep: {text}", file=stream or sys.stderr, flush=True)


def start_syncer(spec, store_uri: str) -> Syncer | None:
    """The driver's syncer, running; None when the sweep file configures no tracker."""
    if not spec.tracking.enabled:
        return None
    return Syncer(spec, store_uri).start()


def stored_spec(store: Store):
    """The resolved sweep spec the store was written with (spec.json), or None."""
    from cliffsweep.sweep.spec import SweepSpec

    return SweepSpec.model_validate(store.read_json(SPEC_FILE)) if store.exists(SPEC_FILE) else None


def tracked_spec(store: Store):
    """The store's spec when it names a tracker, else None: a store written before the tracking
    section, or without one (also a synthetic store whose spec.json holds a few fields only),
    has nothing to mirror and is not validated further here."""
    from cliffsweep.sweep.tracking import TrackingSpec

    if not store.exists(SPEC_FILE):
        return None
    section = store.read_json(SPEC_FILE).get("tracking") or {}
    return stored_spec(store) if TrackingSpec.model_validate(section).enabled else None


def log_analysis(store_uri: str, table: pd.DataFrame, out_dir: str, stream=None) -> dict[str, str | None]:
    """After `cliffsweep analyze`: each trial run gets its series' regime and max safe lr as
    tags, and the sweep's run the report and frontiers.parquet as artifacts. A tracker that
    fails is reported (returned and printed), never fatal: the report is written already."""
    import os

    store = Store(store_uri)
    spec = tracked_spec(store)
    if spec is None:
        return {}
    trials = store.read("trials")
    by_series = {(r["model"], r["series"], int(r["epochs"])): r for r in table.to_dict("records")}
    files = [os.path.join(out_dir, f) for f in sorted(os.listdir(out_dir))]
    errors: dict[str, str | None] = {}
    syncer = Syncer(spec, store_uri, stream=stream)
    for name, s in syncer.states.items():
        try:
            parent = RunDelta(sweep_run_id(spec.name), spec.name, sweep_params(spec), parent=True)
            pid = s.tracker.open(parent, s.marks.get(parent.trial_id, {}).get("run_id"))
            s.tracker.attach(pid, files)
            s.tracker.finish(pid, None)
            for row in trials.to_dict("records"):
                mark = s.marks.get(row["trial_id"])
                series = by_series.get((row["model"], row["series"], int(row["epochs"])))
                if mark is None or series is None:
                    continue  # never sent to this tracker, or not analysed (no evaluation yet)
                tags = {"regime": str(series["regime"]), "confidence": f"{series['confidence']:.3g}",
                        "max_safe_lr": f"{series['max_safe_lr']:.3g}"}
                delta = RunDelta(row["trial_id"], row["trial_id"], trial_params(row, spec))
                s.tracker.annotate(mark["run_id"], delta, tags)
            s.tracker.close()
            errors[name] = None
        except Exception as exc:  # noqa: BLE001 - the analysis is written; the tracker is told later
            errors[name] = f"{type(exc).__name__}: {exc}"
            say(f"tracking: {name} did not take the analysis ({errors[name][:300]}); "
                "`cliffsweep analyze` again sends it", stream)
    return errors


def export(store_uri: str, tracking=None, stream=None) -> dict[str, str | None]:
    """`cliffsweep export-tracking STORE`: one full round from the store, every run finished.
    `tracking`: a TrackingSpec to send to instead of the sweep file's own section (a sweep run
    without trackers, replayed into one). Returns each tracker's error (None: up to date)."""
    store = Store(store_uri)
    spec = stored_spec(store)
    if spec is None:
        raise ValueError(f"{store_uri}: no {SPEC_FILE} (not a cliffsweep store?)")
    if tracking is not None:
        spec = spec.model_copy(update={"tracking": tracking})
    if not spec.tracking.enabled:
        raise ValueError(f"{store_uri}: its sweep file has no tracking section (docs/tracking.md)")
    syncer = Syncer(spec, store_uri, stream=stream)
    syncer.sync_once(final=True)
    return syncer.close()
