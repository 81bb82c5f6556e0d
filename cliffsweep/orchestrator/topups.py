"""Top-ups inside a running sweep (issue 51 part 3): once a series' trials are all terminal (its
last refinement round included), the checkpoints its verdict hinges on and that the stopping
rule scored in part are scored on every item (the policy: analysis/topup.py). It runs on the
driver's tick, as refinement does, so a series' top-ups overlap the other series' training.

A fixpoint (issue 59 part 3): once a series' top-ups have all landed, its verdict is read again
from the store, and the checkpoints the new reading rests on that are still scored in part are
topped up in turn, until a reading asks for nothing new (each round scores at least one more
checkpoint in full, so there are at most as many rounds as the series has checkpoints).

A done trial's checkpoint folders are pruned only once its series has reached that fixpoint and
none of its top-ups is in flight: a folder is kept until its evaluation is final.

Resume needs nothing more: a re-run checks every terminal series again from the store, so a
driver killed between two rounds starts from the rounds already landed; a top-up that was cut
short is asked again and scores only the items not yet scored (evaluator/staged.py).
"""

from __future__ import annotations

import sys
from typing import Callable

from cliffsweep.faults import maybe_fail
from cliffsweep.storage import ledger
from cliffsweep.storage.tablecache import TableCache
from cliffsweep.orchestrator.series import Series, SeriesWatch
from cliffsweep.sweep.grid import Trial, is_base, series_key


class TopUps:
    def __init__(self, tables: TableCache, watch: SeriesWatch, tracker, final_round: Callable[[Series, int], bool],
                 evaluate: Callable[[ledger.CheckpointRecord, int, tuple[str, ...]], None]):
        """`tables`: the store, read again only where its files changed (the driver's, issue 62
        part 2); `watch`: the run's series and whether each is in (series.py); `final_round(series,
        round)`: whether refinement adds no round after `round`; `evaluate(record, at_least,
        tasks)` sends one."""
        self.tables, self.watch, self.tracker = tables, watch, tracker
        self.final_round, self.evaluate = final_round, evaluate
        self.checked: dict[Series, int] = {}  # series -> its trials when checked
        self.sent: dict[str, set[tuple[int, str]]] = {}  # trial -> (step, task) topped up by this run
        self.waiting: dict[Series, set[tuple[str, int]]] = {}  # series -> its last round's top-ups
        self.seen_changes = -1

    def ready(self, last: bool) -> list[Series]:
        """Series whose trials are all terminal in their final round (`last`: the sweep's end,
        where no round comes any more), not checked since."""
        return [s.key for s in self.watch.states() if s.all_in and self.checked.get(s.key) != len(s.trials)
                and (last or self.final_round(s.key, s.round))]

    def landed(self) -> list[Series]:
        """Series whose last round of top-ups has all landed (none in flight or failed): their
        verdict is read again."""
        return [key for key, sent in self.waiting.items()
                if not any(self.tracker.in_flight(t, s) or self.tracker.error_of(t, s) for t, s in sent)]

    def check(self, last: bool = False) -> int:
        """Top up every series that became ready (after a trial reached a terminal status; `last`:
        at the sweep's end, every series not checked yet), and every series whose last round
        landed; how many top-ups it sent."""
        again = self.landed()
        if again:
            maybe_fail("topups_again")  # the tests' kill of a driver between two rounds
        if self.watch.changes() == self.seen_changes and not last and not again:
            return 0
        self.seen_changes = self.watch.changes()
        ready = self.ready(last)
        if not ready and not again:
            return 0
        from cliffsweep.analysis.frontiers import frontiers
        from cliffsweep.analysis.points import AnalysisInputError, points_only
        from cliffsweep.storage.store import SPEC_FILE
        from cliffsweep.analysis.topup import SERIES, top_ups

        for key in ready:
            self.checked[key] = self.watch.size(key)
        due = set(ready) | set(again)
        store, evals = self.tables.store, self.tables.rows("evals")
        try:
            spec = store.read_json(SPEC_FILE) if store.exists(SPEC_FILE) else {}
            data = points_only(evals, self.tables.rows("trials"), spec, store.uri)
        except AnalysisInputError:
            for key in again:
                self.waiting.pop(key)
            return 0  # nothing the analysis can read yet: no verdict hinges on anything
        pts = data.points
        mine = pts[is_base(pts) | pts[SERIES].apply(tuple, axis=1).isin(due)]
        ckpts = {r.key: r for r in ledger.records(self.tables.rows("checkpoints"))}
        # a checkpoint's task is topped up once per run: one a round sent that is still short
        # (another driver's trial, declined) is left to a re-run, so the rounds end
        keys = []
        for k in top_ups(mine, frontiers(mine, n_boot=0), evals,
                         {"L": data.learn_task, "R": data.retain_task}):
            new = sorted(t for t in k.tasks if (k.step, t) not in self.sent.get(k.trial_id, ()))
            if (k.trial_id, k.step) in ckpts and new:
                keys.append(((k.trial_id, k.step), tuple(new)))
        if keys:
            maybe_fail("topups")  # the tests' kill of a driver before a round of top-ups
        for key in due:
            self.waiting.pop(key, None)
        by_trial = {t.trial_id: series_key(t) for t in self.watch.grid}
        for key, tasks in keys:
            self.sent.setdefault(key[0], set()).update((key[1], t) for t in tasks)
            if key[0] in by_trial:
                self.waiting.setdefault(by_trial[key[0]], set()).add(key)
            self.evaluate(ckpts[key], sys.maxsize, tasks)
        return len(keys)

    def final(self, trial: Trial) -> bool:
        """Whether `trial`'s evaluations are final: its series checked, none of its top-ups in
        flight (then its folders may go)."""
        if series_key(trial) not in self.checked or series_key(trial) in self.waiting:
            return False
        # a top-up that failed keeps the folders: a re-run tops it up from them
        return not any(self.tracker.in_flight(trial.trial_id, s) or self.tracker.error_of(trial.trial_id, s)
                       for s, _ in self.sent.get(trial.trial_id, ()))
