"""The trial book's counters (orchestrator/trialbook.py): a trial is counted once, in one status,
whatever retries happen."""

from __future__ import annotations

from cliffsweep.sweep.status import TrialStatus
from cliffsweep.orchestrator.progress import Progress
from cliffsweep.orchestrator.specfile import parse_spec
from cliffsweep.orchestrator.trialbook import TrialBook
from cliffsweep.storage.store import Store
from cliffsweep.sweep.grid import expand_grid


def one_trial_book(tmp_path):
    """One toy trial, its book (store under tmp_path) and the progress counters it moves."""
    spec = parse_spec({"name": "b", "models": [{"name": "q", "path": "toy:qwen2-tiny"}],
                       "methods": [{"name": "sft"}], "lrs": [1e-3], "epochs": [1], "store": str(tmp_path),
                       "tasks": {"learn": {"name": "toy_facts"}, "retain": [{"name": "toy_arith"}]}})
    (t,) = expand_grid(spec)
    progress = Progress(1, 1, stream=open("/dev/null", "w"))
    return t, TrialBook(Store(str(tmp_path)), {t.trial_id: t}, lambda t: "{}", progress), progress


def test_a_trial_retried_before_its_first_report_is_counted_running_once(tmp_path):
    """A worker killed before the trial's first checkpoint reached the driver: the retry must not
    leave a phantom `running` behind (a CI log once read 'trials 1/1 (running 1, done 1)')."""
    t, book, progress = one_trial_book(tmp_path)
    book.show()
    book.begin(t.trial_id)
    assert progress.status["running"] == 1
    book.retry(t.trial_id, "worker died")
    assert progress.status["running"] == 0 and t.trial_id not in progress.running
    book.begin(t.trial_id)
    book.finish(t.trial_id, TrialStatus.TRAINED)
    assert progress.status["running"] == 0 and progress.status["trained"] == 1
    assert "running 0" in progress.line()
    rows = Store(str(tmp_path)).read("trials")
    assert rows.set_index("trial_id").loc[t.trial_id, "attempt"] == 2


def test_a_retry_before_the_first_report_is_still_an_errors_row(tmp_path):
    """A node killed while its Train job starts: Tune retries the job before the trial's first
    report reached the driver. The failed attempt is still recorded (a retry the terminal names
    is never missing from the store: the rehearsal's node kills found it missing)."""
    t, book, progress = one_trial_book(tmp_path)
    book.retry(t.trial_id, "WorkerGroupError: the node died")
    errors = Store(str(tmp_path)).read("errors")
    assert list(errors["kind"]) == ["trial_retry"] and list(errors["trial_id"]) == [t.trial_id]
    assert progress.status["running"] == 0
