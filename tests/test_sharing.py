"""Many drivers on one store, decided without Ray (issue 60 part 2, orchestrator/sharing.py):
what a driver adopts from the store's statuses and the live claims, which held claims it gives
back, and the claim keys storage/claims.py alone spells."""

from __future__ import annotations

from cliffsweep.orchestrator.policies import Every
from cliffsweep.orchestrator.sharing import adoption, releasable, round_of
from cliffsweep.storage.claims import base_key, round_key, trial_key, trial_of
from cliffsweep.sweep.grid import expand_grid
from cliffsweep.sweep.status import TrialStatus
from cliffsweep.orchestrator.specfile import parse_spec


def test_claim_keys_round_trip_and_name_their_kind():
    assert trial_of(trial_key("q__sft__lr1e-05")) == "q__sft__lr1e-05"
    assert trial_of(base_key("q")) is None
    assert trial_of(round_key(False, "q", "sft", 1, None, 1)) is None
    assert round_key(True, "q", "sft", 1, None, 1) != round_key(False, "q", "sft", 1, None, 1)


def test_adoption_observes_settles_and_adopts_only_what_its_holder_left():
    latest = {"a": "done", "b": "running", "c": "pending", "d": "failed", "mine": "running", "stranger": "done"}
    got = adoption(latest, known={"a", "b", "c", "d", "mine"}, mine={trial_key("mine")},
                   others={trial_key("b"), base_key("m2")}, elsewhere={"a", "b", "c"},
                   bases_elsewhere={"m1", "m2", "m3"}, bases_evaluated={"m1"})
    # another driver's statuses are observed, this driver's own and unknown trials' are not
    assert got.observe == {"a": "done", "b": "running", "c": "pending", "d": "failed"}
    assert got.settled == {"a"}  # terminal: no longer waited for
    assert got.orphans == ("c",)  # b's holder is alive; c's claim lapsed
    assert got.bases_done == {"m1"}
    assert got.bases_orphaned == ("m3",)  # m2's holder is alive


def test_a_running_trial_whose_holder_is_gone_is_adopted_and_a_terminal_one_never():
    got = adoption({"x": "running", "y": "diverged"}, {"x", "y"}, set(), set(), {"x", "y"}, set(), set())
    assert got.orphans == ("x",) and got.settled == {"y"}


def test_releasable_gives_back_only_given_up_trials_whose_checkpoints_are_all_evaluated():
    held = [trial_key("f"), trial_key("g"), trial_key("r"), trial_key("h"), base_key("m")]
    status = {"f": TrialStatus.FAILED, "g": TrialStatus.DIVERGED, "r": TrialStatus.RUNNING, "h": TrialStatus.FAILED}
    assert releasable(held, status.get, evaluated=lambda tid: tid != "h") == [trial_key("f"), trial_key("g")]


def test_a_verification_run_and_a_refinement_round_are_claimed_apart():
    spec = parse_spec({"name": "s", "models": [{"name": "q", "path": "toy:qwen2-tiny"}], "methods": [{"name": "sft"}],
                       "lrs": [1e-5, 1e-4], "epochs": [1], "tasks": {"learn": {"name": "toy_facts"},
                                                                     "retain": [{"name": "toy_arith"}]}})
    t = expand_grid(spec)[0]
    assert round_of(t, [t.seed]) != round_of(t, [t.seed + 1])
    assert round_of(t, [t.seed]).startswith("round__") and round_of(t, []).startswith("verify__")


def test_every_runs_a_chore_at_most_once_per_period():
    every = Every(live=5.0)
    assert every.due("live", 100.0)
    assert not every.due("live", 104.9)
    assert every.due("live", 105.0)
