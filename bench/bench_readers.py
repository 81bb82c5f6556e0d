"""The store's readers on a very large store (issue 62 part 3): `status`, the dashboard's first
page and `analyze` on a synthetic store of --models x 2,000 trials (50: 100,000), written as a
finished sweep leaves it (analysis/synthetic_large.py: compacted, 3 evaluated checkpoints per
trial, a learn and a retain task of --items items each).

    .venv/bin/python bench/bench_readers.py [--models 50] [--items 100] [--out /tmp/readers-bench] [--skip analyze]

Prints, per reader, its wall seconds from the command's start and its peak memory (RSS of the
process and its children):

    status          `cliffsweep status STORE` to its exit
    dashboard grid  `cliffsweep dashboard STORE` started, Chromium open on its address: to the page
                    showing the grid of trials and counts (the page's own performance mark)
    dashboard regimes  to the page showing every series' regime (the frontiers' first pass)
    analyze         `cliffsweep analyze STORE --out DIR` to its exit (frontiers, bootstrap, report)

docs/benchmarks.md records the numbers with this command.
"""

from __future__ import annotations

import argparse
import os
import resource
import subprocess
import sys
import time
from pathlib import Path

import psutil

sys.path.insert(0, str(Path(__file__).resolve().parent))
from bench_dashboard import FLAGS, marked, open_when_listening, quiet  # noqa: E402


def store_of(out: Path, models: int, items: int) -> str:
    from cliffsweep.analysis.synthetic_large import LargeGrid, write_large_store

    uri = out / f"store-{models}x{items}"
    if not (uri / "samples" / "_compaction.json").exists():
        t = time.time()
        write_large_store(str(uri), LargeGrid(models=models, items=items))
        print(f"wrote {uri} in {time.time() - t:.0f} s", flush=True)
    return str(uri)


def timed(cmd: list[str]) -> tuple[float, float, str]:
    """(wall s, peak RSS GB of the command, its output's tail)."""
    t = time.time()
    proc = subprocess.run(cmd, capture_output=True, text=True)
    wall = time.time() - t
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-2000:]
    peak = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss / 1e6  # the largest child so far
    return wall, peak, (proc.stdout + proc.stderr)[-600:]


def dashboard(uri: str, port: int, limit: float) -> dict[str, float]:
    from playwright.sync_api import sync_playwright

    with sync_playwright() as pw:
        browser = pw.chromium.launch(executable_path="/usr/bin/chromium", args=FLAGS)
        page = browser.new_page(viewport={"width": 1400, "height": 1000})
        quiet()
        t0 = time.time()
        proc = subprocess.Popen([sys.executable, "-m", "cliffsweep.cli", "dashboard", uri, "--port", str(port)],
                                stdout=subprocess.DEVNULL, stderr=subprocess.STDOUT)
        server, peak = psutil.Process(proc.pid), 0.0
        try:
            open_when_listening(page, port)
            page.wait_for_selector("#grid td.cell", timeout=limit * 1000)
            page.wait_for_selector(".series-row .regime", timeout=limit * 1000)
            grid, regimes = (marked(page, name) - t0 for name in ("grid", "regimes"))
            peak = server.memory_info().rss / 1e9
        finally:
            proc.terminate()
            proc.wait()
            browser.close()
    return {"grid shown s": grid, "regimes shown s": regimes, "server RSS GB then": peak}


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--models", type=int, default=50)
    ap.add_argument("--items", type=int, default=100)
    ap.add_argument("--out", default="/tmp/readers-bench")
    ap.add_argument("--skip", nargs="*", default=[], choices=["status", "dashboard", "analyze"])
    args = ap.parse_args()
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    uri = store_of(out, args.models, args.items)
    cli = [sys.executable, "-m", "cliffsweep.cli"]
    print(f"store: {args.models * 2000:,} trials, {args.items} items per evaluation, {os.cpu_count()} CPUs")
    if "status" not in args.skip:
        wall, peak, said = timed(cli + ["status", uri])
        print(f"status: {wall:.2f} s, peak RSS {peak:.2f} GB\n{said}", flush=True)
    if "dashboard" not in args.skip:
        print("dashboard: " + ", ".join(f"{k} {v:.2f}" for k, v in dashboard(uri, 8879, 900).items()), flush=True)
    if "analyze" not in args.skip:
        wall, peak, said = timed(cli + ["analyze", uri, "--out", str(out / "report")])
        print(f"analyze: {wall:.1f} s, peak RSS {peak:.2f} GB (the largest child so far)\n{said}", flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
