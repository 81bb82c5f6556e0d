"""The whole bill (cliffsweep/planner/bill.py, issue 21 part 4): which checkpoints save the training
state, what the training loop waits on, and `plan`'s figures for the paper grid."""

from __future__ import annotations

import pytest
import yaml

from cliffsweep.planner import bill


def loaded(path: str) -> list:
    """[(path, spec)] as `cliffsweep plan PATH` reads it."""
    from cliffsweep.orchestrator.specfile import load_spec

    return [(path, load_spec(path))]


def test_the_training_state_is_saved_every_resume_every_s_of_training():
    assert bill.state_points(4, 1000.0, 0.0) == [True] * 4  # 0: with every checkpoint
    assert bill.state_points(4, 1000.0, 300.0) == [False, True, False, True]  # at 500 s and 1000 s
    assert bill.state_points(3, 60.0, 300.0) == [False] * 3  # a short trial saves none


def test_blocked_seconds_synchronous_vs_asynchronous():
    sizes = [6e9, 6e9, 6e9]
    sync = bill.blocked_seconds(120.0, sizes, bandwidth=1e9, asynchronous=False)
    assert sync == pytest.approx(18.0)  # every write in full
    # a writer faster than training: only the host copies, plus the last write (drained at the end)
    fast = bill.blocked_seconds(120.0, sizes, bandwidth=1e9, asynchronous=True, host_copy=10e9)
    assert fast == pytest.approx(3 * 0.6 + 6.0)
    # a writer far slower than training: the queue fills, training waits for it
    slow = bill.blocked_seconds(3.0, sizes, bandwidth=1e9, asynchronous=True, host_copy=10e9)
    assert fast < slow <= sync + 3 * 0.6 + 1e-9


def test_paper_grid_writes_under_13_tb_with_the_defaults_and_prices_the_whole_bill(tmp_path):
    from cliffsweep.orchestrator.specfile import load_spec
    from cliffsweep.planner.plan import plan_spec
    from cliffsweep.planner.text import plan_text

    after = plan_spec(load_spec("cliffsweep/configs/paper.yaml"))
    assert sum(p.ckpt_written for p in after) <= 13e12
    data = yaml.safe_load(open("cliffsweep/configs/paper.yaml"))
    data.update(resume_every_s=0, async_checkpoints=False)  # the path before issue 21
    (tmp_path / "before.yaml").write_text(yaml.safe_dump(data))
    before = plan_spec(load_spec(tmp_path / "before.yaml"))
    assert sum(p.ckpt_written for p in before) == pytest.approx(52.2e12, rel=0.01)  # the figure
    assert sum(p.ckpt_blocked_s for p in after) < 0.2 * sum(p.ckpt_blocked_s for p in before)
    assert all(p.eval_s > 0 and p.setup_s > 0 and p.prompt_tokens > 0 for p in after)
    text = plan_text(loaded("cliffsweep/configs/paper.yaml"))
    assert "The whole bill, H100-hours" in text and "train share" in text and "ckpt wait h" in text
