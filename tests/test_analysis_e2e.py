"""End to end: a toy sweep's store -> `cliffsweep analyze` -> frontiers + report, and the report
rendered in headless Chromium shows the plots (checked on the screenshot's pixels).

The store here is synthetic with known regimes (cliffsweep.analysis.synthetic); a real toy
sweep's store can be checked the same way with ``analyze_and_check(store, out)``. Chromium comes
from scripts/setup_browser.sh; without it this test fails, on purpose.
"""

import base64
import io
import os
import re
import subprocess
import sys
import tempfile

import matplotlib.image as mpimg
import numpy as np
import pandas as pd

from cliffsweep.analysis.frontiers import FRONTIER_COLUMNS
from cliffsweep.analysis.synthetic import SyntheticSweep, write_synthetic_store

CHROMIUM = "/usr/bin/chromium"


def analyze_and_check(store: str, out: str, n_boot: int = 100) -> pd.DataFrame:
    """Run the analyze command on ``store`` and check every output file; returns the table."""
    cmd = [sys.executable, "-m", "cliffsweep.cli", "analyze", store, "--out", out, "--n-boot", str(n_boot)]
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr
    table = pd.read_parquet(f"{out}/frontiers.parquet")
    assert list(table.columns) == FRONTIER_COLUMNS and len(table)
    csv = pd.read_csv(f"{out}/frontiers.csv")
    assert len(csv) == len(table) and list(csv.columns) == FRONTIER_COLUMNS
    assert set(table["regime"]) <= {"cliff", "gradual", "no_forgetting", "inconclusive"}
    assert table["confidence"].between(0, 1).all()
    for model in table["model"].unique():
        for name in ("frontier", "vs_lr"):
            assert mpimg.imread(f"{out}/{name}_{model}.png").shape[0] > 300
    md = open(f"{out}/report.md").read()
    for png in re.findall(r"\]\(([^)]+\.png)\)", md):
        assert os.path.exists(f"{out}/{png}")
    return table


def embedded_images(html: str) -> list[np.ndarray]:
    """Decode every <img> of the HTML; the report must embed them all as base64 PNG."""
    srcs = re.findall(r"<img[^>]*src='([^']*)'", html)
    assert srcs and all(s.startswith("data:image/png;base64,") for s in srcs)
    return [mpimg.imread(io.BytesIO(base64.b64decode(s.split(",", 1)[1])), format="png") for s in srcs]


def colored_pixels(png: str) -> int:
    """Pixels whose RGB channels differ by > 0.3: plot lines and markers (text and tables are grey)."""
    img = mpimg.imread(png)[..., :3]
    return int(((img.max(-1) - img.min(-1)) > 0.3).sum())


def screenshot(html_path: str, png: str) -> None:
    assert os.path.exists(CHROMIUM), f"{CHROMIUM} missing: run scripts/setup_browser.sh"
    with tempfile.TemporaryDirectory() as profile:
        proc = subprocess.run([CHROMIUM, "--headless", "--no-sandbox", "--disable-gpu", "--disable-quic",
                               "--no-first-run", "--disable-background-networking", "--disable-component-update",
                               "--disable-sync", f"--user-data-dir={profile}", f"--screenshot={png}",
                               "--window-size=1400,2000", f"file://{html_path}"],
                              capture_output=True, text=True, timeout=180)
    assert proc.returncode == 0 and os.path.exists(png), proc.stderr[-2000:]


def test_toy_store_to_report_in_browser(tmp_path):
    store, out = str(tmp_path / "store"), str(tmp_path / "out")
    write_synthetic_store(store, SyntheticSweep(models={"toy-a": "cliff", "toy-b": "gradual"},
                                                series=(("sft", "sft"), ("ewc", "ewc(lam=10)")),
                                                lrs=(1e-5, 3e-5, 1e-4, 3e-4, 1e-3), epochs=(1, 2),
                                                n_learn=100, n_retain=100))
    table = analyze_and_check(store, out)
    assert len(table) == 2 * 2 * 2
    truth = {"toy-a": "cliff", "toy-b": "gradual"}
    assert (table["regime"] == table["model"].map(truth)).all(), table[["model", "label", "regime", "reason"]]
    html = open(f"{out}/report.html").read()
    assert not re.search(r"(src|href)=['\"]?https?:", html)  # self-contained: opens offline
    images = embedded_images(html)
    assert len(images) == 2 * 3  # per model: frontier, vs lr, epochs
    for img in images:
        assert img.shape[0] > 300 and (img[..., :3] < 0.9).any(axis=-1).mean() > 0.03

    shot = str(tmp_path / "report.png")
    screenshot(f"{out}/report.html", shot)
    assert mpimg.imread(shot).shape[:2] == (2000, 1400)
    # Control: the same page without its images has (almost) no coloured pixels, so the count
    # below comes from rendered plots.
    bare = str(tmp_path / "bare.html")
    with open(bare, "w") as f:
        f.write(re.sub(r"<img[^>]*>", "", html))
    bare_shot = str(tmp_path / "bare.png")
    screenshot(bare, bare_shot)
    assert colored_pixels(bare_shot) < 200
    assert colored_pixels(shot) > 5000
