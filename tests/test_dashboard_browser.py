"""The live dashboard in headless Chromium (issue 41's acceptance), driven by Playwright: a small
real toy sweep runs with `cliffsweep run --dashboard`; while it runs the page's trial counts change
and match `cliffsweep status`; after it, `cliffsweep dashboard STORE` shows each series with the
regime `analyze` gives, and clicking a frontier point opens its trial with its training curve and
generations. No request leaves 127.0.0.1 and the console shows no error. Screenshots at three
moments go to the test's folder; with CLIFFSWEEP_WRITE_DOCS=1 the last one becomes
docs/dashboard/final.png (docs/dashboard.md)."""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
import time
from pathlib import Path
from urllib.parse import urlparse

import pytest
import yaml

from cliffsweep.storage.store import Store

pytestmark = [pytest.mark.slow, pytest.mark.ray]

ROOT = Path(__file__).resolve().parents[1]
CHROMIUM = "/usr/bin/chromium"  # scripts/setup_browser.sh, as the report's screenshot test
FLAGS = ["--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run", "--disable-background-networking",
         "--disable-component-update", "--disable-sync"]


def sweep_file(tmp_path: Path) -> Path:
    data = {"name": "dashboard", "models": [{"name": "qwen2-tiny", "path": "toy:qwen2-tiny"}],
            "methods": [{"name": "sft"}], "lrs": [1e-4, 1e-3, 1e-2], "epochs": [2],
            "tasks": {"learn": {"name": "toy_facts", "params": {"n_eval": 40, "n_train": 64}},
                      "retain": [{"name": "toy_arith", "params": {"n_eval": 40}}]},
            "recipe": {"batch_size": 16, "max_seq_len": 128},
            "eval": {"points_per_trial": 2, "backend": "hf", "cpus_per_evaluator": 0.5},
            "resources": {"max_concurrent_trials": 1, "trials_per_job": 1}, "store": str(tmp_path / "store")}
    path = tmp_path / "sweep.yaml"
    path.write_text(yaml.safe_dump(data))
    return path


def page_counts(page) -> dict[str, int]:
    out = {}
    for text in page.locator("#counts span").all_inner_texts():
        name, n = text.rsplit(" ", 1)
        out[name] = int(n)
    return out


def status_counts(uri: str) -> dict[str, int]:
    """`cliffsweep status`'s "trials: N (done a, pending b)" line, as numbers."""
    from cliffsweep.orchestrator.summary import status_text

    line = next(l for l in status_text(Store(uri)).splitlines() if l.startswith("trials:"))
    total, rest = re.match(r"trials: (\d+) \((.*)\)", line).groups()
    return {"trials": int(total), **{k: int(v) for k, v in (p.rsplit(" ", 1) for p in rest.split(", ") if p)}}


def watch(page, proc, uri: str, shots: Path) -> tuple[list[dict], int, float]:
    """The page's counts every second while the sweep runs, how often they equalled status's, and
    when the driver said it finished (the run stops its dashboard after that)."""
    seen, matched, finished = [], 0, float("inf")
    while proc.poll() is None:
        store = Store(uri)
        if finished == float("inf") and store.exists("live.json") and store.read_json("live.json")["phase"] == "finished":
            finished = time.time()
        counts = page_counts(page)
        if counts and (not seen or counts != seen[-1]):
            seen.append(counts)
            page.screenshot(path=str(shots / f"running-{len(seen)}.png"), full_page=True)
        if counts and Store(uri).exists("trials") and counts == status_counts(uri):
            matched += 1
        time.sleep(1.0)
    return seen, matched, finished


def click_a_point(page, trial_id: str) -> None:
    """Click the frontier plot's marker of `trial_id` where Plotly drew it."""
    xy = page.evaluate("""(tid) => {
        const gd = document.querySelector('.frontier-plot');
        for (const tr of gd._fullData) {
            const i = (tr.customdata || []).indexOf(tid);
            if (i < 0) continue;
            const xa = gd._fullLayout.xaxis, ya = gd._fullLayout.yaxis, box = gd.getBoundingClientRect();
            return [box.left + xa._offset + xa.l2p(tr.x[i]), box.top + ya._offset + ya.l2p(tr.y[i])];
        }
        return null; }""", trial_id)
    assert xy is not None, f"{trial_id} is not drawn"
    page.mouse.move(xy[0], xy[1])
    page.mouse.click(xy[0], xy[1])


def open_page(page, url: str, tries: int = 120) -> None:
    """Open `url` once its server listens (it prints its address, then binds)."""
    from playwright.sync_api import Error

    for _ in range(tries - 1):
        try:
            page.goto(url)
            return
        except Error:
            time.sleep(0.5)
    page.goto(url)


def test_a_live_sweep_in_the_dashboard(tmp_path):
    from playwright.sync_api import sync_playwright

    from cliffsweep.analysis.run import analyze_store
    from cliffsweep.dashboard.cli import free_port

    spec, uri, shots = sweep_file(tmp_path), str(tmp_path / "store"), tmp_path / "shots"
    shots.mkdir()
    run = subprocess.Popen([sys.executable, "-m", "cliffsweep.cli", "run", str(spec), "--dashboard", "--num-cpus", "3"],
                           stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    address = next(line.split(": ", 1)[1].strip() for line in run.stdout if line.startswith("dashboard: "))
    requests, problems = [], []
    with sync_playwright() as pw:
        browser = pw.chromium.launch(executable_path=CHROMIUM, args=FLAGS)
        page = browser.new_page(viewport={"width": 1400, "height": 1000})
        page.on("request", lambda r: requests.append(r.url))
        page.on("console", lambda m: problems.append((time.time(), m.text)) if m.type == "error" else None)
        page.on("pageerror", lambda e: problems.append((time.time(), str(e))))
        open_page(page, address)  # the dashboard's process starts beside the sweep's
        seen, matched, finished = watch(page, run, uri, shots)
        page.goto("about:blank")
        rest = run.stdout.read()
        assert run.wait() == 0, rest
        assert len(seen) >= 2 and matched >= 1, (seen, matched)  # counts changed, and matched status
        # after the sweep: the dashboard on its own, against what analyze reads
        port = free_port()
        board = subprocess.Popen([sys.executable, "-m", "cliffsweep.cli", "dashboard", uri, "--port", str(port)],
                                 stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
        try:
            assert "http://127.0.0.1" in board.stdout.readline()
            open_page(page, f"http://127.0.0.1:{port}/")
            page.wait_for_function("document.getElementById('frontier-said').textContent.includes('bootstrap')",
                                   timeout=120_000)
            table = analyze_store(uri, str(tmp_path / "analysis"), report=False)
            shown = {row.get_attribute("data-label"): row.locator(".regime").inner_text().split(" ")[0]
                     for row in page.locator(".series-row").all()}
            assert shown == {r.label: r.regime for r in table.itertuples()}, shown
            page.screenshot(path=str(shots / "final.png"), full_page=True)
            trial = Store(uri).read("trials").sort_values("lr")["trial_id"].iloc[-1]
            click_a_point(page, trial)
            page.wait_for_selector("#trial .generation", timeout=30_000)
            assert page.locator("#trial h2").inner_text() == trial
            assert page.locator("#trial .curve-plot .main-svg").count() >= 1  # the training curve drawn
            assert page.locator("#trial .generation").count() >= 1
            page.screenshot(path=str(shots / "trial.png"), full_page=True)
        finally:
            board.terminate()
            browser.close()
    assert {urlparse(u).hostname for u in requests} == {"127.0.0.1"}, sorted(set(requests))
    # the page polls on after the run stopped its dashboard: only those refusals are expected
    assert not [text for at, text in problems if not (at >= finished and "ERR_CONNECTION_REFUSED" in text)], problems
    if os.environ.get("CLIFFSWEEP_WRITE_DOCS"):
        (ROOT / "docs/dashboard").mkdir(exist_ok=True)
        for name in ("running-2.png", "final.png", "trial.png"):
            shutil.copy(shots / name, ROOT / "docs/dashboard" / name)
