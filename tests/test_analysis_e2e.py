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
from pathlib import Path

import matplotlib.image as mpimg
import numpy as np
import pandas as pd
import pytest

from cliffsweep.analysis.frontiers import FRONTIER_COLUMNS
from cliffsweep.analysis.synthetic import SyntheticSweep, write_synthetic_store

CHROMIUM = "/usr/bin/chromium"
sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "scripts"))
import example_reports  # noqa: E402 - scripts/ is not a package


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
    from cliffsweep.analysis.figures import regime_text

    for _, row in table.iterrows():  # the terminal says the regime in the report's words (issue 63)
        assert f" {regime_text(row)}" in proc.stdout, (regime_text(row), proc.stdout)
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


def screenshot(html_path: str, png: str, height: int = 2000) -> None:
    assert os.path.exists(CHROMIUM), f"{CHROMIUM} missing: run scripts/setup_browser.sh"
    with tempfile.TemporaryDirectory() as profile:
        proc = subprocess.run([CHROMIUM, "--headless", "--no-sandbox", "--disable-gpu", "--disable-quic",
                               "--no-first-run", "--disable-background-networking", "--disable-component-update",
                               "--disable-sync", f"--user-data-dir={profile}", f"--screenshot={png}",
                               f"--window-size=1400,{height}", f"file://{html_path}"],
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
    # the paper's Fig. 3-4 (SFT by regime), Fig. 6 (ewc: a CL method), Fig. 7 (two epoch counts);
    # per model: frontiers by epochs, vs lr. No SIB, LoRA, known size or spectra: no Fig. 5, 8, 9, 2.
    assert len(images) == 3 + 2 * 2
    assert "No SIB series in the store(s)." in html and "No SIB statistics with a Hessian spectrum" in html
    for img in images:
        assert img.shape[0] > 300 and (img[..., :3] < 0.9).any(axis=-1).mean() > 0.03

    # a small store's figures are laid out as cleanly as a paper-sized one's: one panel, a
    # legend taller than one row, the title within the figure
    from cliffsweep.analysis import figures
    from cliffsweep.analysis.layout import overlapping_texts, texts_outside
    from cliffsweep.analysis.paper_tables import paper_tables
    from cliffsweep.analysis.points import load_store

    data = load_store(store)
    points = data.points.reset_index(drop=True)
    one = table[table["epochs"] == 1]
    paper = paper_tables(points, one, None, [store])
    for fig in (figures.fig_model(points, one, paper["point_spread"], "toy-a", "L", "R"),
                figures.fig_regimes(points, one, paper["point_spread"], "L", "R")):
        assert overlapping_texts(fig) == [] and texts_outside(fig) == []

    shot = str(tmp_path / "report.png")
    screenshot(f"{out}/report.html", shot, 5000)  # the header and the paper's sections come first
    assert mpimg.imread(shot).shape[:2] == (5000, 1400)
    # Control: the same page without its images has (almost) no coloured pixels, so the count
    # below comes from rendered plots.
    bare = str(tmp_path / "bare.html")
    with open(bare, "w") as f:
        f.write(re.sub(r"<img[^>]*>", "", html))
    bare_shot = str(tmp_path / "bare.png")
    screenshot(bare, bare_shot, 5000)
    assert colored_pixels(bare_shot) < 200
    assert colored_pixels(shot) > 5000


def section(md: str, title: str) -> str:
    """The markdown of the report section whose heading is ``title`` (up to the next heading)."""
    m = re.search(rf"^#+ {re.escape(title)}\n(.*?)(?=^#+ |\Z)", md, re.S | re.M)
    assert m, f"no section {title!r}"
    return m.group(1)


@pytest.mark.slow
def test_paper_sized_report_from_three_stores_reads_like_the_paper(tmp_path):
    """Issue 16: the paper grid's shape (7 methods x 3 epochs x 5 models x 3 seeds, in three
    stores as configs/paper*.yaml split it; analysis/synthetic.paper_sized) -> one report with a
    section per paper figure whose data match the ground truth, figures whose text boxes do not
    overlap, and the page rendered in Chromium."""
    from cliffsweep.analysis import figures
    from cliffsweep.analysis.paper_tables import paper_tables
    from cliffsweep.analysis.layout import overlapping_texts, texts_outside
    from cliffsweep.analysis.points import load_stores

    stores = example_reports.paper_stores(tmp_path)  # + SIB's statistics file: Fig. 2's input
    out = tmp_path / "out"
    proc = example_reports.analyze(tmp_path, stores, out)  # as scripts/example_reports.py writes docs/example-report
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert "Warning" not in proc.stderr, proc.stderr[-3000:]
    # the checked-in example is what the code writes (issue 37 part 6: it had lagged the code)
    assert example_reports.same_report((out / "report.md").read_text(), example_reports.DOCS / "report.md") == [], \
        "docs/example-report/report.md is stale: python scripts/example_reports.py"
    stores = [str(tmp_path / s) for s in stores]
    out = str(out)
    table = pd.read_parquet(f"{out}/frontiers.parquet")
    assert len(table) == 5 * 7 * 3
    truth = {"qwen2.5-0.5b": "gradual", "qwen2.5-3b": "gradual", "qwen3-0.6b": "cliff", "llama3.2-1b": "cliff",
             "llama3.2-3b": "cliff"}
    sft = table[table["method"] == "sft"]
    assert (sft["regime"] == sft["model"].map(truth)).all(), sft[["model", "epochs", "regime", "reason"]]
    # family and size from the architectures of the hub ids (archs.PUBLISHED)
    assert table.groupby("model")["family"].first().to_dict() == {
        "llama3.2-1b": "Llama-3", "llama3.2-3b": "Llama-3", "qwen2.5-0.5b": "Qwen2.5", "qwen2.5-3b": "Qwen2.5",
        "qwen3-0.6b": "Qwen3"}
    assert table.groupby("model")["size_b"].first().round(2).to_dict()["qwen2.5-3b"] == 3.09

    md = open(f"{out}/report.md").read()
    # Fig. 5: SIB keeps retention over SFT at matched learning on the gradual models, not at cliffs
    gains = pd.read_parquet(f"{out}/matched_gain.parquet")
    sib = gains[(gains["method"] == "sib") & (gains["epochs"] == 3)].set_index("model")
    assert (sib.loc[["qwen2.5-0.5b", "qwen2.5-3b"], "gain_max_lo"] > 0.1).all(), sib
    assert (sib.loc[["qwen3-0.6b", "llama3.2-1b", "llama3.2-3b"], "gain_max"].abs() < 0.05).all(), sib
    assert "sib e3" in section(md, "Fig. 5: SFT vs SIB")
    # Fig. 6 / conditioned on SFT's regime: CL methods help where SFT is gradual, not at a cliff
    by = pd.read_parquet(f"{out}/by_sft_regime.parquet").set_index(["sft_regime", "method"])
    assert by.loc[("gradual", "ewc"), "mean_gain_max"] > 0.1 > abs(by.loc[("cliff", "ewc"), "mean_gain_max"])
    assert "Method effects by SFT's regime" in section(md, "Fig. 6: continual-learning methods")
    # Fig. 8: LoRA learns less than full finetuning everywhere (synthetic: 0.7x the learning)
    lora = gains[gains["method"] == "lora"]
    assert len(lora) == 5 * 3 and (lora["learning_over_sft"] < -0.05).all()
    # Fig. 7: more epochs act like a larger lr, so the cliff moves to lower lrs (slope < 0)
    eff = pd.read_parquet(f"{out}/epochs_effect.parquet")
    cliffs = eff[(eff["method"] == "sft") & eff["model"].map(truth).eq("cliff")]
    assert (cliffs["critical_lr_slope"] < 0).all(), cliffs
    # Fig. 9: steepness per model; the cliff models are the steep ones
    size = pd.read_parquet(f"{out}/size_effect.parquet").set_index("model")
    assert size.loc["qwen3-0.6b", "steepness"] > 2 * size.loc["qwen2.5-0.5b", "steepness"]
    assert "Llama-3" in section(md, "Fig. 9: model size and family")
    # regime counts, both readings; seeds and eval sizes in the header
    counts = pd.read_parquet(f"{out}/regime_counts.parquet")
    allm = counts[(counts["method"] == "all") & (counts["view"] == "ours")].set_index("regime")["n_series"]
    assert allm.sum() == len(table)
    assert "seeds [0, 1, 2], learn-task eval size(s) [100]" in md
    spread = pd.read_parquet(f"{out}/point_spread.parquet")
    spread = spread[spread["series"] != "base"]
    assert (spread["n_seeds"] == 3).all() and (spread["R_lo"] <= spread["R"]).all() and (spread["R"] <= spread["R_hi"]).all()
    curv = pd.read_parquet(f"{out}/curvature.parquet")
    assert curv["eig_ratio"].round(3).tolist() == [0.5, 0.75, 0.9] and (curv["grad_sq_ratio"] == 0.75).all()
    fig2 = section(md, "Fig. 2: SIB flattens the retain loss")
    assert "| qwen2.5-0.5b | 1 | 40.000 | 20.000 | 50% | 75% |" in fig2 and "paper_fig2_curvature.png" in fig2
    assert "base models" in section(md, "Sec. 3: learning and retention are uncorrelated")
    for png in re.findall(r"\]\(([^)]+\.png)\)", md):
        assert os.path.exists(f"{out}/{png}"), png

    # Layout: every paper figure and a per-model figure, rebuilt as the report builds them, has
    # no overlapping text (lr labels, titles, tick labels, legend), and most lr labels are placed.
    data = load_stores(stores)
    points = data.points.reset_index(drop=True)
    paper = paper_tables(points, table, None, stores)
    made = {"fig34": figures.fig_regimes(points, table, paper["point_spread"], "chem_l3", "gsm8k"),
            "fig6": figures.fig_compare(points, table, paper["point_spread"], paper["matched_gain"], None, "Fig. 6",
                                        "chem_l3", "gsm8k"),
            "fig7": figures.fig_epochs(table, paper["epochs_effect"]), "fig9": figures.fig_size(paper["size_effect"]),
            "model": figures.fig_model(points, table, paper["point_spread"], "qwen2.5-3b", "chem_l3", "gsm8k")}
    for name, fig in made.items():
        assert overlapping_texts(fig) == [] and texts_outside(fig) == [], name
    labels = [t for ax in made["fig34"].axes for t in ax.texts if t.get_text()]
    assert len(labels) >= 5 * 7 * 0.6  # 7 lrs per SFT panel; the crowded top of a cliff may drop some

    shot = str(tmp_path / "report.png")
    screenshot(f"{out}/report.html", shot, 6000)
    assert colored_pixels(shot) > 5000
