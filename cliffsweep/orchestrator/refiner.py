"""Refinement inside a running sweep (issue 11, part 3): trials handed to Tune one at a time,
so that a series adds its next round's lrs as soon as its own points are in.

The policy (which lrs) is `analysis/next_lrs.py`; this module is the glue to the driver:

- Tune's queue of Train jobs lives in orchestrator/jobqueue.py; it answers "nothing yet" while
  refinement may still add trials (`Refiner.more_may_come`) and "finished" once no series can.
- `Refiner.check()` runs on the driver's tick whenever a trial settled or ended: a series
  whose current round is all terminal (done / diverged / failed, so every checkpoint is
  evaluated), and whose model's base evaluation landed, gets `next_lrs` from the store's points;
  its new trials are recorded `pending` and queued. A series is asked once per round.

Resume needs nothing more: refined trials are ordinary trials rows with a `round`; the driver
rebuilds them from the store (`stored_refined_trials`), their pending ones are queued again,
and the same stored points give the same next lrs.
"""

from __future__ import annotations

from typing import Callable

from cliffsweep.sweep.grid import Trial, base_trial_id, expand_grid, refined_trials, series_key
from cliffsweep.sweep.status import TERMINAL



def stored_refined_trials(spec, grid: list[Trial], stored: list[dict]) -> list[Trial]:
    """Refined trials of earlier runs, rebuilt from their trials rows (same ids)."""
    like = {(*series_key(t), t.seed): t for t in grid}
    out = []
    for row in stored:
        rnd = row.get("round")
        if rnd is None or rnd != rnd or int(rnd) < 1:
            continue
        base = like.get((row["model"], row["series"], int(row["epochs"]), int(row["seed"])))
        if base is None:
            continue  # a series this spec no longer has
        (t,) = [x for x in refined_trials(spec, base, [float(row["lr"])], int(rnd)) if x.seed == int(row["seed"])]
        if t.trial_id == row["trial_id"]:
            out.append(t)
    return out


class Refiner:
    def __init__(self, spec, store, book, tracker, grid: list[Trial], queue_configs: Callable[[list[Trial]], None]):
        """`grid`: the run's trials, the very list the run extends as trials are added (refined
        ones included); `book`: their statuses (trialbook.TrialBook); `queue_configs` records and
        queues the trials a round adds."""
        self.spec, self.store, self.book, self.tracker, self.grid = spec, store, book, tracker, grid
        self.queue_configs = queue_configs
        self.cfg = spec.refine
        self.asked: dict[tuple, int] = {}  # series -> the round whose next lrs were computed
        self.seen_changes = -1  # the trial book's terminal changes when last checked (-1: never)

    @property
    def dirty(self) -> bool:
        """A trial reached a terminal status since the last check (or none was made)."""
        return self.book.terminal_changes != self.seen_changes

    @property
    def on(self) -> bool:
        return self.cfg is not None and self.cfg.rounds > 0

    def check(self) -> list[Trial]:
        """Add the next round of every series that is ready; returns the new trials."""
        if not self.on or not self.dirty:
            return []
        self.seen_changes = self.book.terminal_changes
        spec = self.spec
        series: dict[tuple, list[Trial]] = {}
        for t in self.grid:
            series.setdefault(series_key(t), []).append(t)
        ready = []
        for key, trials in series.items():
            rnd = max(t.round for t in trials)
            if rnd >= self.cfg.rounds or self.asked.get(key) == rnd:
                continue
            if any(self.book.status.get(t.trial_id) not in TERMINAL for t in trials if t.round == rnd):
                continue
            if not self.tracker.was_evaluated(base_trial_id(key[0]), 0):
                continue
            ready.append((key, trials, rnd))
        if not ready:
            return []
        from cliffsweep.analysis.learnsuite import with_learn_suite
        from cliffsweep.analysis.next_lrs import next_lrs, series_curve
        from cliffsweep.analysis.points import points_from_evals, scores_of
        from cliffsweep.evals.tasks import task_label

        learn = task_label(spec.tasks.learn.name, spec.tasks.learn.params)
        # every retain task: several are a suite, refined on their aggregate as `analyze` reads them;
        # a learn suite likewise on its mean
        retain = [task_label(t.name, t.params) for t in spec.tasks.retain]
        evals = scores_of(self.store.read("evals"))
        if spec.tasks.learn_suite:
            evals, _, learn = with_learn_suite(evals, evals.iloc[:0], [task_label(t.name, t.params)
                                                                        for t in spec.tasks.learn_suite])
        points, _ = points_from_evals(evals, self.store.read("trials"), learn, retain)
        added: list[Trial] = []
        for key, trials, rnd in ready:
            self.asked[key] = rnd
            lrs = next_lrs(series_curve(points, *key), self.cfg, rnd + 1, known_lrs=[t.lr for t in trials])
            added += refined_trials(spec, trials[0], lrs, rnd + 1)
        if added:
            self.queue_configs(added)
        return added

    def final_round(self, series, rnd: int) -> bool:
        """Whether refinement adds no round to `series` after round `rnd`."""
        return not self.on or rnd >= self.cfg.rounds

    def more_may_come(self) -> bool:
        """Whether a trial not yet terminal (or not yet checked) could still start a round."""
        if not self.on:
            return False
        self.check()
        return self.dirty or any(self.book.status.get(t.trial_id) not in TERMINAL for t in self.grid)


def max_refine_trials(spec) -> int:
    """The most trials refinement can add to ``spec``: rounds x points_per_round new lrs per
    series (model x series x epochs), each run with every seed (for `validate` / `plan`)."""
    if spec.refine is None:
        return 0
    n_series = len({series_key(t) for t in expand_grid(spec)})
    return n_series * len(spec.seeds) * spec.refine.rounds * spec.refine.points_per_round

