"""The live dashboard's page in headless Chromium, driven by Playwright (issue 41's acceptance),
for tests/test_toy_regimes.py, which runs the README's sweep with `--dashboard`:

- `watch_live`: while the sweep runs, the page's trial counts change and match `cliffsweep
  status`, screenshots at the first counts and at about half the trials done;
- `check_finished`: after it, `cliffsweep dashboard STORE` shows every series with the regime
  `analyze` gives, and clicking a frontier point opens its trial with its training curve and
  generations;
- every request stays on 127.0.0.1 and the console shows no error.

With CLIFFSWEEP_WRITE_DOCS=1 the screenshots become docs/dashboard/*.png (docs/dashboard.md).
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
import time
from pathlib import Path
from urllib.parse import urlparse

from cliffsweep.storage.store import Store

ROOT = Path(__file__).resolve().parents[1]
CHROMIUM = "/usr/bin/chromium"  # scripts/setup_browser.sh, as the report's screenshot test
FLAGS = ["--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run", "--disable-background-networking",
         "--disable-component-update", "--disable-sync"]


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


class Browser:
    """One headless Chromium page, every request and console error it saw recorded."""

    def __init__(self, pw):
        self.browser = pw.chromium.launch(executable_path=CHROMIUM, args=FLAGS)
        self.page = self.browser.new_page(viewport={"width": 1400, "height": 1000})
        self.requests: list[str] = []
        self.problems: list[tuple[float, str]] = []
        self.page.on("request", lambda r: self.requests.append(r.url))
        self.page.on("console", lambda m: self.problems.append((time.time(), m.text)) if m.type == "error" else None)
        self.page.on("pageerror", lambda e: self.problems.append((time.time(), str(e))))

    def open(self, url: str, tries: int = 120) -> None:
        """Open `url` once its server listens (`run --dashboard` prints the address, then binds)."""
        from playwright.sync_api import Error

        for _ in range(tries - 1):
            try:
                self.page.goto(url)
                return
            except Error:
                time.sleep(0.5)
        self.page.goto(url)

    def assert_local_and_quiet(self, stopped_at: float) -> None:
        """No request left 127.0.0.1; no console error but the page's polls refused after the run
        stopped its dashboard (at `stopped_at`)."""
        assert {urlparse(u).hostname for u in self.requests} == {"127.0.0.1"}, sorted(set(self.requests))
        assert not [t for at, t in self.problems if not (at >= stopped_at and "ERR_CONNECTION_REFUSED" in t)], \
            self.problems


def dashboard_address(log: Path, proc: subprocess.Popen, timeout: float = 300) -> str:
    """The "dashboard: URL" line `run --dashboard` prints (its output goes to `log`)."""
    deadline = time.time() + timeout
    while time.time() < deadline:
        for line in log.read_text().splitlines():
            if line.startswith("dashboard: "):
                return line.split(": ", 1)[1].strip()
        assert proc.poll() is None, log.read_text()[-3000:]
        time.sleep(0.2)
    raise AssertionError(f"no dashboard address within {timeout} s: {log.read_text()[-3000:]}")


def watch_live(b: Browser, proc: subprocess.Popen, uri: str, shots: Path) -> float:
    """The page's counts every second while the sweep runs: they change, and at least once they
    equal status's. Returns when the driver said it finished (the run then stops its dashboard)."""
    seen, matched, finished = [], 0, float("inf")
    while proc.poll() is None:
        store = Store(uri)
        if finished == float("inf") and store.exists("live.json") and store.read_json("live.json")["phase"] == "finished":
            finished = time.time()
        counts = page_counts(b.page)
        if counts and (not seen or counts != seen[-1]):
            seen.append(counts)
            # the first counts, and the latest while at most half the trials are done (each
            # full-page screenshot costs CPU)
            if len(seen) == 1 or counts.get("done", 0) <= counts.get("trials", 0) // 2:
                b.page.screenshot(path=str(shots / ("running-first.png" if len(seen) == 1 else "running.png")),
                                  full_page=True)
        if counts and store.exists("trials") and counts == status_counts(uri):
            matched += 1
        time.sleep(1.0)
    b.page.goto("about:blank")
    assert len(seen) >= 2 and matched >= 1, (seen, matched)  # counts changed, and matched status
    return finished


def click_a_point(page, trial_id: str) -> None:
    """Click `trial_id`'s marker in whichever model's frontier plot Plotly drew it."""
    xy = page.evaluate("""(tid) => {
        for (const gd of document.querySelectorAll('.frontier-plot')) {
            for (const tr of gd._fullData) {
                const i = (tr.customdata || []).indexOf(tid);
                if (i < 0) continue;
                gd.scrollIntoView();
                const xa = gd._fullLayout.xaxis, ya = gd._fullLayout.yaxis, box = gd.getBoundingClientRect();
                return [box.left + xa._offset + xa.l2p(tr.x[i]), box.top + ya._offset + ya.l2p(tr.y[i])];
            }
        }
        return null; }""", trial_id)
    assert xy is not None, f"{trial_id} is not drawn"
    page.mouse.move(xy[0], xy[1])
    page.mouse.click(xy[0], xy[1])


def check_finished(b: Browser, uri: str, regimes: dict[tuple[str, str], str], trial: str, shots: Path) -> None:
    """`cliffsweep dashboard STORE` after the sweep: each series' regime is `regimes`' ((model,
    label) -> regime, as analyze read them), and clicking `trial`'s point opens its trial."""
    from cliffsweep.dashboard.cli import free_port

    port = free_port()
    board = subprocess.Popen([sys.executable, "-m", "cliffsweep.cli", "dashboard", uri, "--port", str(port)],
                             stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    try:
        assert "http://127.0.0.1" in board.stdout.readline()
        b.open(f"http://127.0.0.1:{port}/")
        b.page.wait_for_function("document.getElementById('frontier-said').textContent.includes('bootstrap')",
                                 timeout=300_000)
        b.page.wait_for_function("document.body.dataset.drawn === '1'", timeout=60_000)  # every plot drawn
        shown = {(row.get_attribute("data-model"), row.get_attribute("data-label")):
                 row.locator(".regime").inner_text().split(" ")[0] for row in b.page.locator(".series-row").all()}
        assert shown == regimes, shown
        b.page.screenshot(path=str(shots / "final.png"), full_page=True)
        click_a_point(b.page, trial)
        b.page.wait_for_selector("#trial .generation", timeout=30_000)
        assert b.page.locator("#trial h2").inner_text() == trial
        assert b.page.locator("#trial .curve-plot .main-svg").count() >= 1  # the training curve drawn
        assert b.page.locator("#trial .generation").count() >= 1
        b.page.screenshot(path=str(shots / "trial.png"), full_page=True)
    finally:
        board.terminate()
        board.wait(timeout=60)
    if os.environ.get("CLIFFSWEEP_WRITE_DOCS") == "1":
        docs = ROOT / "docs" / "dashboard"
        docs.mkdir(exist_ok=True)
        running = shots / "running.png" if (shots / "running.png").exists() else shots / "running-first.png"
        for source, name in ((running, "running.png"), (shots / "final.png", "final.png"), (shots / "trial.png", "trial.png")):
            shutil.copy(source, docs / name)
