"""The dashboard on the paper-sized synthetic stores (issue 41 part 4): how soon the first page is
usable, and what a refresh costs the server's CPU.

    .venv/bin/python bench/bench_dashboard.py [--out /tmp/dash-bench] [--seconds 30]

The three synthetic stores of `python -m cliffsweep.analysis.synthetic --paper` (2,205 trials,
6,620 evaluated checkpoints, 1.3 M per-item samples) are written once, then copied compacted, as
`cliffsweep run` leaves a finished sweep's store (`Store.compact`). For each of the two (as
written: one file per trial and table; compacted), `cliffsweep dashboard` is started on the three
stores and Chromium opens the page; then once more on the stores as written, with the tables the
run before kept on disk (storage/diskcache.py: a dashboard restarted during a sweep):

    grid shown   from the command's start to the page showing the grid of trials and the counts
                 (the first snapshot, published before the frontiers are read)
    regimes      from the command's start to the page showing every series' regime (the
                 frontiers' first pass; the bootstrap's confidence fills in later)
    plots drawn  from the command's start to every model's two plots drawn (Plotly is loaded
                 after the first snapshot is on the page, and draws one plot per task)
    confidence   from the command's start to the bootstrap's confidence on the page
    refresh      the server process's CPU seconds per refresh while the stores do not change
                 (its background listing every 2 s, the page polling every 3 s: a 304)
    changed      CPU seconds of one refresh after one trial's new files land in a store (the
                 regimes recomputed at once; the bootstrap waits 30 s or for a quiet turn)
    its bootstrap  CPU seconds of the confidence pass that follows (the next quiet turn, at most
                 one per CONFIDENCE_EVERY_S while the stores keep changing)

Printed as a table; docs/benchmarks.md records it with this command.
"""

from __future__ import annotations

import argparse
import os
import shutil
import socket
import subprocess
import sys
import time
from pathlib import Path

import psutil

FLAGS = ["--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run", "--disable-background-networking",
         "--disable-component-update", "--disable-sync"]


def stores(out: Path) -> tuple[list[str], list[str]]:
    from cliffsweep.analysis.synthetic import paper_sized, write_synthetic_store
    from cliffsweep.storage.store import Store

    raw, packed = out / "as-written", out / "compacted"
    if not (raw / "paper_lora").exists():
        shutil.rmtree(out, ignore_errors=True)
        for name, sweep in paper_sized().items():
            write_synthetic_store(str(raw / name), sweep)
        shutil.copytree(raw, packed)
        for name in ("paper", "paper_fsdp", "paper_lora"):
            Store(str(packed / name)).compact()
    for left in out.glob("*/*/*/bench-*.parquet"):  # a trial an interrupted run added (one_changed_trial)
        left.unlink()
    names = ("paper", "paper_fsdp", "paper_lora")
    return [str(raw / n) for n in names], [str(packed / n) for n in names]


def measure(uris: list[str], port: int, seconds: float, cache: Path) -> dict[str, float]:
    from playwright.sync_api import sync_playwright

    with sync_playwright() as pw:
        # the browser is open before the command starts, as a user's is
        browser = pw.chromium.launch(executable_path="/usr/bin/chromium", args=FLAGS)
        page = browser.new_page(viewport={"width": 1400, "height": 1000})
        quiet()  # open and idle, as a user's browser is: not still starting (2 cores' worth for 0.5 s)
        t0 = time.time()
        proc = subprocess.Popen([sys.executable, "-m", "cliffsweep.cli", "dashboard", *uris, "--port", str(port)],
                                stdout=subprocess.DEVNULL, stderr=subprocess.STDOUT,
                                env={**os.environ, "CLIFFSWEEP_DASHBOARD_CACHE": str(cache)})
        server = psutil.Process(proc.pid)
        try:
            open_when_listening(page, port)
            page.wait_for_selector("#grid td.cell", timeout=300_000)
            page.wait_for_selector(".series-row .regime", timeout=300_000)
            page.wait_for_function("document.body.dataset.drawn === '1'", timeout=300_000)
            # when the page did each (its performance marks), not when Playwright's polling, at
            # most every 500 ms and held off while the page draws, saw it
            grid, first, plots = (marked(page, name) - t0 for name in ("grid", "regimes", "drawn"))
            page.wait_for_function("document.getElementById('frontier-said').textContent.includes('bootstrap')",
                                   timeout=600_000)
            confident = time.time() - t0
            time.sleep(5)  # the plan's pricing and any late pass done
            cpu0, w0 = sum(server.cpu_times()[:2]), time.time()
            time.sleep(seconds)
            idle = (sum(server.cpu_times()[:2]) - cpu0) / ((time.time() - w0) / 2.0)  # per 2-s refresh
            changed, boot = one_changed_trial(uris[2], server, port)
        finally:
            proc.terminate()
            proc.wait()
            browser.close()
    return {"grid shown s": grid, "regimes shown s": first, "plots drawn s": plots, "confidence s": confident, "refresh CPU s (unchanged)": idle,
            "refresh CPU s (one trial landed)": changed, "then its bootstrap pass CPU s": boot}


def open_when_listening(page, port: int) -> None:
    """Open the dashboard once its port answers, as a user opens the address the command prints:
    a navigation retried every 50 ms would cost Chromium's CPU an error page each."""
    while True:
        try:
            socket.create_connection(("127.0.0.1", port), timeout=0.05).close()
            break
        except OSError:
            time.sleep(0.01)
    page.goto(f"http://127.0.0.1:{port}/")


def marked(page, name: str) -> float:
    """When the page set its performance mark `cliffsweep:<name>` (epoch seconds)."""
    return page.evaluate("(n) => performance.timeOrigin + performance.getEntriesByName(n)[0].startTime",
                         f"cliffsweep:{name}") / 1000


def quiet(window: float = 0.25, busy: float = 0.02, limit: float = 10.0) -> None:
    """Wait until this process's children (Chromium, Playwright's driver) use under `busy` CPU
    seconds in a `window`: a browser just launched spends about 0.65 s of CPU in its first 0.5 s,
    on the 2 cores the dashboard's start needs (the rounds before 2026-11-28's fifth timed that too)."""
    me, deadline = psutil.Process(), time.time() + limit

    def used() -> float:
        total = 0.0
        for child in me.children(recursive=True):
            try:
                total += sum(child.cpu_times()[:2])
            except psutil.Error:
                pass
        return total

    while time.time() < deadline:
        before = used()
        time.sleep(window)
        if used() - before < busy:
            return


def one_changed_trial(uri: str, server: psutil.Process, port: int) -> tuple[float, float]:
    """One more trial (a copy of one trial's evals and trials rows under a new id, in new unit
    files). Returns the server's CPU seconds until it publishes the regimes recomputed with it,
    then those of the bootstrap's pass that follows. Read by polling the snapshot's ETag every
    0.1 s (a 304 each: ~1 ms of the server's CPU), not through the page, whose 3-s poll could
    see the first publish only after the bootstrap had started."""
    import json
    import urllib.error
    import urllib.request

    import pyarrow as pa
    import pyarrow.compute as pc
    import pyarrow.parquet as pq

    def poll(etag: str) -> tuple[str, dict | None]:
        req = urllib.request.Request(f"http://127.0.0.1:{port}/api/snapshot", headers={"If-None-Match": etag})
        try:
            with urllib.request.urlopen(req) as r:
                return r.headers["ETag"], json.loads(r.read())
        except urllib.error.HTTPError as e:
            if e.code == 304:
                return etag, None
            raise

    etag, _ = poll("")
    cpu0 = sum(server.cpu_times()[:2])
    new_id = f"bench-{time.time_ns()}"
    for table in ("evals", "trials"):
        rows = pq.read_table(next(p for p in sorted((Path(uri) / table).glob("*.parquet"))
                                  if not p.name.startswith("_") and "base" not in p.name))
        if "_unit" in rows.column_names:  # a compacted file: one unit's rows
            rows = rows.filter(pc.equal(rows["_unit"], rows["_unit"][0])).drop_columns(["_unit"])
        first = rows["trial_id"][0]
        rows = rows.filter(pc.equal(rows["trial_id"], first))
        rows = rows.set_column(rows.column_names.index("trial_id"), "trial_id", pa.array([new_id] * len(rows)))
        pq.write_table(rows, str(Path(uri) / table / f"{new_id}.parquet"))
    changed = None
    deadline = time.time() + 600
    try:
        while time.time() < deadline:
            etag, snap = poll(etag)
            if snap is not None and changed is None and snap.get("confidence") == "pending":
                changed = sum(server.cpu_times()[:2]) - cpu0
            if snap is not None and changed is not None and snap.get("confidence") == "bootstrap":
                return changed, sum(server.cpu_times()[:2]) - cpu0 - changed
            time.sleep(0.1)
        raise TimeoutError("the dashboard did not publish the changed store")
    finally:  # the next run measures the same stores
        for table in ("evals", "trials"):
            (Path(uri) / table / f"{new_id}.parquet").unlink(missing_ok=True)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--out", default="/tmp/cliffsweep-dashboard-bench")
    ap.add_argument("--seconds", type=float, default=30.0, help="how long the unchanged refreshes are measured")
    args = ap.parse_args()
    raw, packed = stores(Path(args.out))
    rows, cache = {}, Path(args.out) / "dashboard-cache"
    shutil.rmtree(cache, ignore_errors=True)  # the first two start with nothing kept on disk
    for name, uris, port in (("compacted (a finished sweep)", packed, 8871), ("as written (one file per trial)", raw, 8872),
                             ("as written, restarted", raw, 8873)):  # the tables the run before kept (diskcache.py)
        rows[name] = measure(uris, port, args.seconds, cache)
        print(name, {k: round(v, 2) for k, v in rows[name].items()}, flush=True)
    keys = list(next(iter(rows.values())))
    print(f"\n{'measure':<34}" + "".join(f"{name:>33}" for name in rows))
    for k in keys:
        print(f"{k:<34}" + "".join(f"{r[k]:>33.2f}" for r in rows.values()))
    print(f"\nmachine: {os.cpu_count()} CPUs; 3 stores, 2,205 trials, 6,620 checkpoints")
    return 0


if __name__ == "__main__":
    sys.exit(main())
