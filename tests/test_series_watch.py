"""The one reader of "series ready" (issue 60 part 3, orchestrator/series.py), without Ray: a
series is in at its latest round once that round's trials are terminal and its base is
evaluated, all in once every trial is; refinement and top-ups read it the same way."""

from __future__ import annotations

from dataclasses import replace

from cliffsweep.orchestrator.series import SeriesWatch
from cliffsweep.orchestrator.specfile import parse_spec
from cliffsweep.sweep.grid import base_trial_id, expand_grid, series_key


class Book:
    def __init__(self):
        self.done: set[str] = set()
        self.terminal_changes = 0

    def terminal(self, tid: str) -> bool:
        return tid in self.done

    def end(self, tid: str) -> None:
        self.done.add(tid)
        self.terminal_changes += 1


class Tracker:
    def __init__(self):
        self.evaluated: set[tuple[str, int]] = set()

    def was_evaluated(self, tid: str, step: int) -> bool:
        return (tid, step) in self.evaluated


def _grid():
    spec = parse_spec({"name": "s", "models": [{"name": "q", "path": "toy:qwen2-tiny"}],
                       "methods": [{"name": "sft"}, {"name": "l2sp"}], "lrs": [1e-5, 1e-4], "epochs": [1],
                       "tasks": {"learn": {"name": "toy_facts"}, "retain": [{"name": "toy_arith"}]}})
    return expand_grid(spec)


def test_a_series_is_in_once_its_latest_round_is_terminal_and_its_base_evaluated():
    grid, book, tracker = _grid(), Book(), Tracker()
    watch = SeriesWatch(grid, book, tracker)
    sft = [t for t in grid if t.method == "sft"]
    for t in sft:
        book.end(t.trial_id)
    assert not any(s.round_in for s in watch.states())  # the base is not evaluated yet
    tracker.evaluated.add((base_trial_id("q"), 0))
    state = {s.key: s for s in watch.states()}
    assert state[series_key(sft[0])].round_in and state[series_key(sft[0])].all_in
    assert not any(s.round_in for k, s in state.items() if k != series_key(sft[0]))
    assert watch.unfinished()

    seen = watch.changes()
    refined = replace(sft[0], trial_id="q-sft-r1", lr=3e-5, round=1)
    grid.append(refined)  # a round adds a trial: the series is out again until it is terminal
    state = {s.key: s for s in watch.states()}
    assert state[series_key(sft[0])].round == 1 and not state[series_key(sft[0])].round_in
    book.end(refined.trial_id)
    assert watch.changes() != seen and {s.key: s for s in watch.states()}[series_key(sft[0])].all_in
    assert watch.size(series_key(sft[0])) == 3


def test_in_at_the_latest_round_is_not_all_in_while_an_earlier_trial_runs():
    grid, book, tracker = _grid(), Book(), Tracker()
    tracker.evaluated.add((base_trial_id("q"), 0))
    sft = [t for t in grid if t.method == "sft"]
    later = replace(sft[0], trial_id="q-sft-r1", lr=3e-5, round=1)
    grid.append(later)
    book.end(later.trial_id)  # the round's one trial is in, a grid trial still runs
    (state,) = [s for s in SeriesWatch(grid, book, tracker).states() if s.key == series_key(sft[0])]
    assert state.round_in and not state.all_in
