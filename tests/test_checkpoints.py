"""Rank 0's checkpoint writer (trainables/checkpoints.py, issue 21): what it writes is the
snapshot taken when training handed it over, not the weights training has changed since; the
folder is complete (meta file written) before its typed report reaches the inbox; a write that
fails is raised on the training thread, never dropped."""

from __future__ import annotations

import json

import pytest
import torch

from cliffsweep.storage.ledger import META, TRAIN_STATE, checkpoint_uri
from cliffsweep.sweep.reports import CheckpointReport
from cliffsweep.evals.canary import canary_record
from cliffsweep.trainables.checkpoints import Checkpointer, Snapshot, host_copy


def _model_and_tok(tmp_path):
    from transformers import AutoModelForCausalLM, AutoTokenizer

    from cliffsweep.toy.models import random_model

    folder = random_model("qwen2-tiny", str(tmp_path / "base"))
    return AutoModelForCausalLM.from_pretrained(folder), AutoTokenizer.from_pretrained(folder)


def _snapshot(model, tok, root: str, step: int, state: bool) -> Snapshot:
    rec = CheckpointReport(trial_id="t", step=step, epoch=1.0, loss=0.5, total_steps=step, train_seconds=1.0,
                           checkpoint_uri=checkpoint_uri(root, "t", step), checkpoint_kind="full",
                           loop_started_at=0.0, resumed_from_step=0)
    memo: dict = {}
    return Snapshot(step=step, epoch=1.0, loss=0.5, kind="full", export=model,
                    weights=host_copy(model.state_dict(), memo), canary=canary_record(model, tok),
                    state=host_copy({"step": step, "model": model.state_dict()}, memo) if state else None, report=rec)


@pytest.mark.ray
def test_the_writer_saves_the_snapshot_then_reports_a_complete_folder(tmp_path):
    import ray
    from safetensors.torch import load_file

    from cliffsweep.orchestrator.inbox import start_inbox

    model, tok = _model_and_tok(tmp_path)
    root = str(tmp_path / "checkpoints")
    before = {k: v.clone() for k, v in model.state_dict().items()}
    ray.init(address="local", num_cpus=1, include_dashboard=False, log_to_driver=False)
    try:
        inbox = start_inbox("ckpt-test")
        ck = Checkpointer(str(tmp_path / "store"), root, "t", "ckpt-test", tok, blocking=False, keep_state=[])
        snap = _snapshot(model, tok, root, 2, state=True)
        with torch.no_grad():  # training goes on after the snapshot: what is written must not see it
            for p in model.parameters():
                p.add_(1.0)
        ck.save(snap, started=0.0)
        ck.close()
        items = ray.get(inbox.drain.remote())
    finally:
        ray.shutdown()
    folder = tmp_path / "checkpoints" / "t" / "step-000002"
    written = load_file(folder / "model.safetensors")
    assert all(torch.equal(written[k], before[k]) for k in written)
    assert (folder / TRAIN_STATE).is_file() and json.loads((folder / META).read_text())["step"] == 2
    ((tid, rep),) = items
    assert tid == "t" and isinstance(rep, CheckpointReport) and rep.step == 2 and rep.reported_at > 0
    assert rep.checkpoint_bytes == ck.bytes > (folder / "model.safetensors").stat().st_size


def test_a_write_that_fails_is_raised_on_the_training_thread(tmp_path):
    model, tok = _model_and_tok(tmp_path)
    blocker = tmp_path / "not-a-folder"
    blocker.write_text("a file where the checkpoints should go")
    root = str(blocker)
    ck = Checkpointer(str(tmp_path / "store"), root, "t", "no-inbox", tok, blocking=False, keep_state=[])
    ck.save(_snapshot(model, tok, root, 2, state=False), started=0.0)
    with pytest.raises(RuntimeError, match="checkpoint of t could not be written") as err:
        ck.drain()
    assert isinstance(err.value.__cause__, OSError)
