"""The packaged toy world shows the cliff paper's two regimes (issue 25, docs/toy.md).

The README's main command (`cliffsweep run`, the default sweep) and then `cliffsweep analyze`:
qwen2-tiny / LoRA is a cliff in both readings, at least 90 % confident, having learned at least
0.8 at its highest safe lr; llama-tiny's series are gradual, at least 90 % confident. Any change
to the toy models, their tasks, the default sweep file, the recipe or the classifier that loses
the phenomenon fails here. Slow stage: the default sweep (about 2 minutes) and its analysis.

The sweep runs with `--dashboard` and is watched in headless Chromium (issue 41's browser test,
tests/dashboard_page.py): the live page's counts change and match `status`, and afterwards
`cliffsweep dashboard` shows each series with the regime `analyze` gives here (issue 38 folded
the browser test's own 3-trial sweep into this one). The same sweep with `verify:` then runs on
the finished store: verification runs at the cliffs' brackets and the close calls only
(issues 52, 59).
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pandas as pd
import pytest

from cliffsweep.storage.store import Store

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "scripts"))
import example_reports  # noqa: E402 - scripts/ is not a package

CLIFF = ("qwen2-tiny", "lora(rank=16)")
GRADUAL = (("llama-tiny", "sft"), ("llama-tiny", "lora(rank=16)"))


def analyzed(cwd: Path, store: str, out: Path) -> pd.DataFrame:
    """`cliffsweep analyze` on `store`, as a new user runs it in `cwd`; the frontiers table
    indexed by (model, series)."""
    proc = example_reports.analyze(cwd, [store], out, None)
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert "Warning" not in proc.stderr, proc.stderr[-3000:]
    table = pd.read_parquet(out / "frontiers.parquet").set_index(["model", "series"])
    print(table[["regime", "regime_paper", "confidence", "max_safe_lr", "base_L", "learn_at_max_safe_lr",
                 "drop_at_cliff", "reason"]].to_string())
    return table


def paper_cliff(row: pd.Series) -> bool:
    """The issue's cliff: ours >= 90 % confident, the paper's reading a cliff too, and learn
    accuracy at the highest safe lr >= 0.8."""
    return (row.regime == "cliff" and row.regime_paper == "cliff" and row.confidence >= 0.9
            and row.base_L + row.learn_at_max_safe_lr >= 0.8)


@pytest.mark.slow
def test_the_default_sweep_shows_a_cliff_and_a_gradual_series(tmp_path):
    from playwright.sync_api import sync_playwright

    from dashboard_page import Browser, check_finished, dashboard_address, watch_live

    # training beside a slowed base evaluation (issue 39 part 4) is checked by the faster failures
    # sweep (tests/test_sweep_failures.py): this one runs as the README's command does, watched in
    # the dashboard it starts (its output to a file: a pipe nobody reads could fill and stall it)
    uri, shots, log = str(tmp_path / "results" / "toy"), tmp_path / "shots", tmp_path / "run.log"
    shots.mkdir()
    with open(log, "w") as out, sync_playwright() as pw:
        run = subprocess.Popen([sys.executable, "-m", "cliffsweep.cli", "run", "--store", "results/toy", "--dashboard"],
                               stdout=out, stderr=subprocess.STDOUT, text=True, cwd=tmp_path)
        try:
            b = Browser(pw)
            b.open(dashboard_address(log, run))
            stopped = watch_live(b, run, uri, shots)
            assert run.wait(timeout=900) == 0, log.read_text()[-3000:]
            said = log.read_text()
            # the terminal says cliffsweep's words only (issue 37 part 4); Tune's and Ray's go to the log
            for tune_or_ray in ("Configuration for experiment", "View detailed results", "tensorboard --logdir",
                                "Started a local Ray instance", "authentication"):
                assert tune_or_ray not in said, tune_or_ray
            table = analyzed(tmp_path, "results/toy", tmp_path / "report")
            trial = Store(uri).read("trials").sort_values("lr")["trial_id"].iloc[-1]
            check_finished(b, uri, {(m, r.label): r.regime for (m, _), r in table.iterrows()}, trial, shots)
            b.assert_local_and_quiet(stopped)
        finally:
            if run.poll() is None:
                run.kill()
    # the packaged base models, as the sweep's vLLM evaluators score them: they know arithmetic,
    # not the learn facts (the toy world's premise; this was a vLLM run of its own in test_toy.py)
    from test_toy import LEARN_MAX, RETAIN_MIN

    ev = Store(str(tmp_path / "results" / "toy")).read("evals")
    base = ev[ev["trial_id"].str.endswith("-base") & (ev["metric"] == "accuracy")].pivot_table(
        index="trial_id", columns="task", values="value")
    assert len(base) == 2 and (base["toy_arith"] >= RETAIN_MIN).all() and (base["toy_facts"] <= LEARN_MAX).all(), base
    # docs/example-report/toy is what the code writes, numbers aside (scripts/example_reports.py --toy)
    assert example_reports.same_report((tmp_path / "report" / "report.md").read_text(),
                                       example_reports.DOCS / "toy" / "report.md", numbers=False) == [], \
        "docs/example-report/toy/report.md is stale: python scripts/example_reports.py --toy"
    assert paper_cliff(table.loc[CLIFF]), table.loc[CLIFF]
    for key in GRADUAL:
        assert table.loc[key, "regime"] == "gradual" and table.loc[key, "confidence"] >= 0.9, table.loc[key]
    # qwen2-tiny / SFT collapses too (its bootstrap confidence sits near 90 %, docs/toy.md).
    assert table.loc[("qwen2-tiny", "sft"), "regime_point_estimate"] == "cliff"
    # issue 51: the README's sweep evaluates under the stopping rule (eval.adaptive, the default);
    # the regimes above are the ones the full evaluation gives (docs/benchmarks.md: the rule on and
    # off side by side), its collapsed checkpoints stopped early, and every item scored is stored once
    stopped_early_once(Store(str(tmp_path / "results" / "toy")), table)
    verified_at_the_brackets(tmp_path, table)


def verified_at_the_brackets(cwd: Path, table: pd.DataFrame) -> None:
    """Issue 52 part 1, issue 59 part 4: the same sweep with `verify: {seeds: 1}`, run on the
    finished store, adds runs with seed 1 at exactly the lrs analysis/verify.py asks of the
    table: a cliff's bracket (qwen2-tiny: 1e-3 and 3e-3), a close call's pair (a gradual series
    whose closest pair falls short of a collapse by at most 1 standard error of its drop, run
    noise included: llama-tiny / SFT on the toy store), and nowhere else; every verdict keeps its
    regime, its confidence now over runs and items where it was verified. Evaluated by
    transformers: an engine start is not what this checks, and the two engines agree item for
    item (tests/test_evals_backends.py)."""
    import yaml

    from cliffsweep.analysis.classify import Thresholds
    from cliffsweep.analysis.verify import verify_lrs
    from cliffsweep.orchestrator.specfile import default_spec_path

    data = yaml.safe_load(Path(default_spec_path()).read_text())
    (cwd / "verify.yaml").write_text(yaml.safe_dump({**data, "store": "results/toy", "verify": {"seeds": 1}}))
    asked = {key: sorted(verify_lrs(row, Thresholds(), 1.0)) for key, row in table.iterrows()}
    assert asked[CLIFF], table.loc[CLIFF]  # the cliff's bracket, whatever the close calls are
    run = subprocess.run([sys.executable, "-m", "cliffsweep.cli", "run", "verify.yaml", "--eval-backend", "hf"],
                         capture_output=True, text=True, cwd=cwd, timeout=900)
    assert run.returncode == 0, run.stdout[-3000:] + run.stderr[-3000:]
    after = analyzed(cwd, "results/toy", cwd / "verified")
    trials = Store(str(cwd / "results" / "toy")).read("trials")
    added = trials[trials["seed"] > 0]
    assert set(added["seed"]) == {1} and (added["status"] == "done").all(), added
    got = {key: sorted(rows["lr"]) for key, rows in added.groupby(["model", "series"])}
    assert got == {key: sorted(lrs) for key, lrs in asked.items() if lrs}, (got, asked)
    for key, lrs in asked.items():
        was, now = table.loc[key], after.loc[key]
        assert now.regime_point_estimate == was.regime_point_estimate, (was, now)
        assert now.confidence_over == ("runs and items" if lrs else "items"), now
    assert after.loc[CLIFF, "regime"] == "cliff" and after.loc[CLIFF, "runs_at_bracket"] == 2, after.loc[CLIFF]
    for key in GRADUAL:
        assert after.loc[key, "regime"] == "gradual", after.loc[key]


def stopped_early_once(store: Store, table: pd.DataFrame) -> None:
    ev, samples = store.read("evals"), store.read("samples")
    acc = ev[(ev["metric"] == "accuracy") & (ev["series"] != "base")]
    assert not samples.duplicated(["trial_id", "step", "task", "example_id"]).any()
    retain = acc[acc["role"] == "retain"]
    collapsed = retain[retain["value"] == 0]
    # a collapse far from every cut stops early; those a verdict rests on (its bracket, issue 59's
    # deciding lrs) are then topped up to every item, so some, not all, stay short
    assert len(collapsed) and (collapsed["n_scored"] < collapsed["n_items"]).any(), collapsed
    assert acc["n_scored"].sum() < acc["n_items"].sum()
    # the checkpoints the verdicts are read at were scored on every item (the top-ups)
    bracket = acc[(acc["model"] == CLIFF[0]) & (acc["series"] == CLIFF[1])
                  & acc["lr"].isin([table.loc[CLIFF, "critical_lr_low"], table.loc[CLIFF, "critical_lr_high"]])]
    final = bracket[bracket["step"] == bracket.groupby("trial_id")["step"].transform("max")]
    assert len(final) and (final["n_scored"] == final["n_items"]).all(), final
