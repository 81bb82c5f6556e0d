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

Verification (issue 52, `verify:`; the policy is analysis/verify.py) runs on the same tick: a
series whose last round is all terminal, and whose verdict is a cliff or a close call, gets runs
with new seeds at the two lrs that decided it, once. That verdict is read from the sweep's own
runs only (its seeds), never from verification runs, so a re-run computes the same trials: where
the averaged runs then move the bracket, the report says so (`runs_at_bracket`, "cliff (one
run)"). Its trials are ordinary trials rows too, seeds the grid lacks:
`stored_verification_trials` rebuilds them on resume, and a finished store re-run (`run --store
S`) verifies what it lacks.
"""

from __future__ import annotations

from typing import Callable

from cliffsweep.orchestrator.series import SeriesWatch
from cliffsweep.storage.tablecache import TableCache
from cliffsweep.sweep.grid import Trial, expand_grid, is_base, refined_trials, series_key, verification_trials


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


def stored_verification_trials(spec, grid: list[Trial], stored: list[dict]) -> list[Trial]:
    """Verification trials of earlier runs (seeds the grid lacks), rebuilt from their rows."""
    if spec.verify is None:
        return []
    like = {series_key(t): t for t in grid}
    out = []
    for row in stored:
        base = like.get((row["model"], row["series"], int(row["epochs"])))
        if base is None or int(row["seed"]) in spec.seeds:
            continue
        rnd = row.get("round")
        (t,) = verification_trials(base, [float(row["lr"])], [int(row["seed"])], 0 if rnd is None or rnd != rnd else int(rnd))
        if t.trial_id == row["trial_id"]:
            out.append(t)
    return out


class Refiner:
    def __init__(self, spec, tables: TableCache, watch: SeriesWatch, queue_configs: Callable[[list[Trial]], None]):
        """`tables`: the store, read again only where its files changed (issue 62 part 2);
        `watch`: the run's series and whether each is in (series.py: its grid is the very
        list the run extends as trials are added, refined ones included); `queue_configs`
        records and queues the trials a round adds."""
        self.spec, self.tables, self.watch = spec, tables, watch
        self.queue_configs = queue_configs
        self.cfg = spec.refine
        self.asked: dict[tuple, int] = {}  # series -> the round whose next lrs were computed
        self.verified: set[tuple] = set()  # series whose verification was asked
        self.seen_changes = -1  # the trial book's terminal changes when last checked (-1: never)

    @property
    def dirty(self) -> bool:
        """A trial reached a terminal status since the last check (or none was made)."""
        return self.watch.changes() != self.seen_changes

    @property
    def on(self) -> bool:
        return self.cfg is not None and self.cfg.rounds > 0

    @property
    def active(self) -> bool:
        """Refinement or verification may add trials."""
        return self.on or self.spec.verify is not None

    def check(self) -> list[Trial]:
        """Add the next round of every series that is ready, and the verification runs of every
        series whose last round is in; returns the new trials."""
        if not self.active or not self.dirty:
            return []
        self.seen_changes = self.watch.changes()
        ready, verify = [], []
        for s in self.watch.states():
            if not s.round_in:
                continue
            if self.on and s.round < self.cfg.rounds and self.asked.get(s.key) != s.round:
                ready.append((s.key, s.trials, s.round))
            elif self.final_round(s.key, s.round) and self.spec.verify is not None and s.key not in self.verified \
                    and s.all_in:
                verify.append((s.key, s.trials))
        if not ready and not verify:
            return []
        points = self.points()
        added = self.next_rounds(points, ready) + self.verification(points, verify)
        if added:
            self.queue_configs(added)
        return added

    def points(self):
        """The store's points as `analyze` reads them (every retain task: several are a suite,
        read on their aggregate; a learn suite on its mean)."""
        from cliffsweep.analysis.learnsuite import with_learn_suite
        from cliffsweep.analysis.points import points_from_evals, scores_of
        from cliffsweep.evals.tasks import task_label

        spec = self.spec
        learn = task_label(spec.tasks.learn.name, spec.tasks.learn.params)
        retain = [task_label(t.name, t.params) for t in spec.tasks.retain]
        evals = scores_of(self.tables.rows("evals"))
        if spec.tasks.learn_suite:
            evals, _, learn = with_learn_suite(evals, evals.iloc[:0], [task_label(t.name, t.params)
                                                                        for t in spec.tasks.learn_suite])
        return points_from_evals(evals, self.tables.rows("trials"), learn, retain)[0]

    def next_rounds(self, points, ready: list[tuple]) -> list[Trial]:
        from cliffsweep.analysis.next_lrs import next_lrs, series_curve

        added: list[Trial] = []
        for key, trials, rnd in ready:
            self.asked[key] = rnd
            lrs = next_lrs(series_curve(points, *key), self.cfg, rnd + 1, known_lrs=[t.lr for t in trials])
            added += refined_trials(self.spec, trials[0], lrs, rnd + 1)
        return added

    def verification(self, points, ready: list[tuple]) -> list[Trial]:
        """Runs with new seeds at the lrs each ready series' verdict rests on (analysis/verify.py)."""
        from cliffsweep.analysis.classify import Thresholds
        from cliffsweep.analysis.frontiers import frontiers
        from cliffsweep.analysis.next_lrs import series_curve
        from cliffsweep.analysis.verify import verify_lrs, verify_seeds

        th, cfg = Thresholds(), self.spec.verify
        seeds = verify_seeds(self.spec.seeds, cfg.seeds)
        known = {t.trial_id for t in self.watch.grid}
        added: list[Trial] = []
        for key, trials in ready:
            self.verified.add(key)
            curve = series_curve(points, *key)
            # the verdict of the sweep's own runs (grid and refinement seeds) decides where the
            # verification runs go: a pure function of those, so a re-run asks for the same ones
            curve = curve[is_base(curve) | curve["seed"].isin(self.spec.seeds)]
            table = frontiers(curve, thresholds=th, n_boot=0)
            if table.empty or is_base(curve).all():  # no trained point
                continue
            for lr in verify_lrs(table.iloc[0], th, cfg.margin):
                rnd = min((t.round for t in trials if abs(t.lr - lr) <= 1e-12 * lr), default=0)
                added += [t for t in verification_trials(trials[0], [lr], seeds, rnd) if t.trial_id not in known]
        return added

    def final_round(self, series, rnd: int) -> bool:
        """Whether refinement adds no round to `series` after round `rnd`."""
        return not self.on or rnd >= self.cfg.rounds

    def more_may_come(self) -> bool:
        """Whether a trial not yet terminal (or not yet checked) could still start a round or a
        verification."""
        if not self.active:
            return False
        self.check()
        return self.dirty or self.watch.unfinished()


def max_refine_trials(spec) -> int:
    """The most trials refinement can add to ``spec``: rounds x points_per_round new lrs per
    series (model x series x epochs), each run with every seed (for `validate` / `plan`)."""
    if spec.refine is None:
        return 0
    n_series = len({series_key(t) for t in expand_grid(spec)})
    return n_series * len(spec.seeds) * spec.refine.rounds * spec.refine.points_per_round


def max_verify_trials(spec) -> int:
    """The most trials verification can add to ``spec``: verify.seeds runs at the two lrs of
    each series' verdict, asked once per series."""
    if spec.verify is None:
        return 0
    return len({series_key(t) for t in expand_grid(spec)}) * 2 * spec.verify.seeds
