"""The end-of-run summary: per model x series, learn and retain accuracy at each lr (final
checkpoint of each trial), with the base model as the lr = 0 row."""

from __future__ import annotations

import pandas as pd

from cliffsweep.storage.store import PRIMARY_METRICS, Store
from cliffsweep.sweep.grid import SERIES_KEY, is_base
from cliffsweep.sweep.status import TrialStatus


def final_points(store: Store) -> pd.DataFrame:
    """One row per (trial, role) with the primary accuracy of its last evaluated step; base
    rows are repeated for every series of their model."""
    ev = store.read("evals")
    ev = ev[ev["metric"].isin(PRIMARY_METRICS)]  # a loss task's is its loss (lower is better)
    if ev.empty:
        return pd.DataFrame(columns=["model", "series", "epochs", "lr", "trial_id", "step", "learn", "retain"])
    # first task of each role = primary (the learn task; the first retain task)
    primary = ev.groupby("role")["task"].first()
    ev = ev[ev.apply(lambda r: r["task"] == primary[r["role"]], axis=1)]
    wide = ev.pivot_table(index=[*SERIES_KEY, "lr", "trial_id", "step"],
                          columns="role", values="value").reset_index()
    wide.columns.name = None
    wide = wide.merge(items_scored(ev), on=["trial_id", "step"], how="left")
    # the last step of each trial with every role evaluated (a checkpoint still being scored
    # has only some of its tasks in the store)
    complete = wide.dropna(subset=[c for c in ("learn", "retain") if c in wide.columns])
    wide = complete.loc[complete.groupby("trial_id")["step"].idxmax()]
    base = wide[is_base(wide)]
    rest = wide[~is_base(wide)]
    rows = [rest]
    for (model, series, epochs), _ in rest.groupby(SERIES_KEY):
        b = base[base["model"] == model].copy()
        b["series"], b["epochs"] = series, epochs
        rows.append(b)
    out = pd.concat(rows, ignore_index=True) if rows else wide
    return out.sort_values([*SERIES_KEY, "lr"]).reset_index(drop=True)


def items_scored(ev: pd.DataFrame) -> pd.DataFrame:
    """(trial, step) -> the items its primary rows were read on and the tasks' items: a staged
    evaluation (eval.adaptive, issue 51) scores fewer than all; older rows count as every item."""
    n = ev["n_scored"].fillna(ev["n"]) if "n_scored" in ev else ev["n"]
    of = ev["n_items"].fillna(n) if "n_items" in ev else n
    return pd.DataFrame({"trial_id": ev["trial_id"], "step": ev["step"], "scored": n, "items": of}) \
        .groupby(["trial_id", "step"], as_index=False)[["scored", "items"]].sum()


def items_line(evals: pd.DataFrame) -> list[str]:
    """What the stopping rule scored and saved, over every checkpoint (the base aside: it is
    scored in full); nothing when every checkpoint was scored on every item."""
    ev = evals[evals["metric"].isin(PRIMARY_METRICS) & ~is_base(evals)]
    if ev.empty or "n_items" not in ev or not (ev["n_scored"] < ev["n_items"]).any():
        return []
    got = items_scored(ev)
    scored, items = int(got["scored"].sum()), int(got["items"].sum())
    short = int((got["scored"] < got["items"]).sum())
    return [f"items scored: {scored:,} of {items:,} ({scored / items:.0%}) under eval.adaptive; {short} of "
            f"{len(got)} checkpoint(s) stopped before their last item, {items - scored:,} items not generated"]


def summary_text(store: Store) -> str:
    pts = final_points(store)
    trials = store.read("trials")
    lines = []
    if pts.empty:
        return "no evaluations in the store yet"
    staged = bool((pts["scored"] < pts["items"]).any())  # the column only where the rule stopped early
    for (model, series, epochs), g in pts.groupby(SERIES_KEY, sort=True):
        lines.append(f"\n{model} / {series} / " + (f"{epochs} epoch(s)" if epochs else "a step budget"))
        lines.append(f"  {'lr':>10}  {'learn':>7}  {'retain':>7}  {'status':>9}" + (f"  {'items':>11}" if staged else ""))
        for _, r in g.iterrows():
            st = "base" if r["lr"] == 0 else trials.set_index("trial_id")["status"].get(r["trial_id"], "?")
            learn = "" if pd.isna(r.get("learn")) else f"{r['learn']:.3f}"
            retain = "" if pd.isna(r.get("retain")) else f"{r['retain']:.3f}"
            items = f"  {int(r['scored']):>5}/{int(r['items']):<5}" if staged else ""
            lines.append(f"  {r['lr']:>10.3g}  {learn:>7}  {retain:>7}  {st:>9}{items}")
    return "\n".join(lines + [""] + items_line(store.read("evals")) if staged else lines)


def status_text(store: Store) -> str:
    trials = store.read("trials")
    evals = store.read("evals")
    errors = store.read("errors")
    counts = trials["status"].value_counts().to_dict() if not trials.empty else {}
    n_points = evals[["trial_id", "step"]].drop_duplicates().shape[0] if not evals.empty else 0
    lines = [f"store: {store.uri}",
             f"trials: {len(trials)} (" + ", ".join(f"{k} {v}" for k, v in sorted(counts.items())) + ")",
             f"evaluated checkpoints: {n_points} ({len(evals)} metric rows)",
             f"recorded errors: {len(errors)}", *items_line(evals)]
    for _, t in trials[trials["status"] == TrialStatus.RUNNING].iterrows():
        steps = "?" if pd.isna(t["steps"]) else int(t["steps"])
        total = "?" if pd.isna(t["total_steps"]) else int(t["total_steps"])
        lines.append(f"  running {t['trial_id']}: step {steps}/{total} (at its latest checkpoint)")
    trained = trials[trials["status"] == TrialStatus.TRAINED]
    if not trained.empty:
        lines.append(f"  {len(trained)} trial(s) trained, awaiting evaluation of their checkpoints "
                     "(they count as done once evaluated)")
    lines += driver_lines(store, trials)
    lines += waiting_lines(store, trials)
    lines += tracking_lines(store, trials, evals, errors)
    lines += error_lines(errors)
    return "\n".join(lines)


def driver_lines(store: Store, trials: pd.DataFrame) -> list[str]:
    """The drivers working the store now and what each holds (issue 53: several `run --join`),
    and how many trials each driver that ever wrote one trained."""
    from cliffsweep.storage.claims import drivers_held

    drivers = drivers_held(store)
    lines = []
    for d in drivers:
        ts, rest = d["trials"], d["other"]
        lines.append(f"  driver {d['label']}: holds {len(ts)} trial(s)"
                     + (f" ({', '.join(ts[:3])}{', ...' if len(ts) > 3 else ''})" if ts else "")
                     + (f" and {', '.join(rest)}" if rest else ""))
    if "driver" in trials and trials["driver"].notna().any():
        done = trials[trials["status"] == TrialStatus.DONE].groupby("driver").size()
        if len(done) > 1 or drivers:
            lines.append("  trials done per driver: " + ", ".join(f"{k} {v}" for k, v in done.items()))
    return (["drivers: " + (f"{len(drivers)} working the store now" if drivers else "none working the store now")]
            + lines) if lines or drivers else []


def error_lines(errors: pd.DataFrame, show: int = 5) -> list[str]:
    """The latest errors, one line per kind and root cause (orchestrator/failures.py) however
    many trials it stopped: a full disk is said once, not once per trial."""
    from cliffsweep.orchestrator.failures import root_cause

    groups: dict[tuple[str, str], tuple[str, list[str]]] = {}
    for _, e in errors.sort_values("at").iterrows() if not errors.empty else ():
        key, sentence = root_cause(str(e["message"]))
        _, tids = groups.pop((e["kind"], key), (sentence, []))
        groups[(e["kind"], key)] = (sentence, tids + [f"{e['trial_id']} step {e['step']}"])
    lines = []
    for (kind, key), (sentence, tids) in list(groups.items())[-show:]:
        who = tids[0] if len(tids) == 1 else f"{len(tids)} times ({tids[0]}, ...)"
        said = sentence if key == sentence else f"{key}: {sentence}"  # the OS's words first
        lines.append(f"  {kind} {who}: {said[:240]}")
    return lines


def waiting_lines(store: Store, trials: pd.DataFrame, show: int = 3) -> list[str]:
    """Why the pending trials wait, from the driver's live state (orchestrator/sweeprun.py
    `write_live`), grouped by reason; or that no driver is writing it."""
    import json
    from datetime import datetime, timezone

    from cliffsweep.orchestrator.policies import LIVE_EVERY_S
    from cliffsweep.storage.store import LIVE_FILE

    pending = set(trials.loc[trials["status"] == TrialStatus.PENDING, "trial_id"]) if not trials.empty else set()
    if not store.exists(LIVE_FILE):
        return [f"  {len(pending)} pending; no driver has written its live state here"] if pending else []
    live = json.loads(store.read_bytes(LIVE_FILE))
    age = (datetime.now(timezone.utc) - datetime.fromisoformat(live["at"])).total_seconds()
    if live["phase"] == "finished":
        head = f"last run finished at {live['at'][:19]}"
    elif age > 6 * LIVE_EVERY_S:
        head = (f"the driver (pid {live['pid']}) last wrote its state {age:.0f} s ago, in phase "
                f"{live['phase']!r}: it has probably stopped (re-run the sweep to resume)")
    else:
        head = (f"driver pid {live['pid']}, phase {live['phase']!r}, {len(live['running_jobs'])} job(s) running of "
                f"{live['concurrency']}, {live['queued_jobs']} queued ({age:.0f} s ago)")
    lines = [f"live: {head}"]
    if live.get("evaluators"):  # older live files lack it
        extra, stopped = live.get("extra_evaluators_started", 0), live.get("evaluators_stopped", 0)
        lines.append("  evaluators: " + ", ".join(f"{m} {n}" for m, n in live["evaluators"].items())
                     + (f" ({extra} started for backlogs, {stopped} stopped when idle)" if extra or stopped else ""))
    by_reason: dict[str, list[str]] = {}
    for tid in sorted(pending):
        by_reason.setdefault(live["waiting"].get(tid, "not in the driver's last state"), []).append(tid)
    for reason, tids in sorted(by_reason.items(), key=lambda kv: -len(kv[1])):
        more = f" and {len(tids) - show} more" if len(tids) > show else ""
        lines.append(f"  {len(tids)} pending wait for {reason}: {', '.join(tids[:show])}{more}")
    return lines


def tracking_lines(store: Store, trials: pd.DataFrame, evals: pd.DataFrame, errors: pd.DataFrame) -> list[str]:
    """Per tracker of the sweep file: up to date with the store, or how many runs are behind
    and its last error (a tracker outage never stops the sweep; the store has everything)."""
    from cliffsweep.tracking.sync import behind, tracked_spec

    spec = tracked_spec(store)
    if spec is None:
        return []
    lines = []
    for name, n in behind(spec, store, trials, evals).items():
        if n == 0:
            lines.append(f"tracking {name}: up to date with the store")
            continue
        err = errors[(errors["kind"] == "tracking") & (errors["message"].str.startswith(f"{name}:"))]
        last = "" if err.empty else f"; last error {err['at'].max():%Y-%m-%d %H:%M:%S}: " + \
            str(err.sort_values("at")["message"].iloc[-1]).strip().splitlines()[0][:200]
        lines.append(f"tracking {name}: {n} run(s) behind the store{last} (a re-run, or "
                     f"`cliffsweep export-tracking {store.uri}`, sends the rest)")
    return lines
