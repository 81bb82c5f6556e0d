"""One reader of "series ready" (issue 60 part 3): the run's series (model x series x epochs,
sweep/grid.SERIES_KEY), how far each has come, and whether anything changed since a reader last
looked. Refinement, verification (refiner.py) and top-ups (topups.py) ask this one view instead
of each grouping the grid and counting terminal trials its own way.

A series is *in* at its latest round when every trial of that round is terminal (done,
diverged, failed: every checkpoint it reported is evaluated) and its model's base evaluation has
landed; *all in* when every trial of every round is.
"""

from __future__ import annotations

from dataclasses import dataclass

from cliffsweep.sweep.grid import Trial, base_trial_id, series_key

Series = tuple[str, str, int]


@dataclass(frozen=True)
class SeriesState:
    key: Series
    trials: list[Trial]
    round: int
    """Its latest round (0: the grid's lrs only)."""
    round_in: bool
    """Every trial of its latest round terminal, and its base evaluated."""
    all_in: bool
    """Every trial terminal, and its base evaluated."""


class SeriesWatch:
    """The series of `grid` (the run's list, extended in place as rounds add trials), read from
    the trial book's statuses and the tracker's evaluations."""

    def __init__(self, grid: list[Trial], book, tracker):
        self.grid, self.book, self.tracker = grid, book, tracker

    def changes(self) -> int:
        """A counter that moves whenever a trial reaches a terminal status (a reader keeps the
        value it last acted on; an unchanged one means nothing became ready)."""
        return self.book.terminal_changes

    def states(self) -> list[SeriesState]:
        by_key: dict[Series, list[Trial]] = {}
        for t in self.grid:
            by_key.setdefault(series_key(t), []).append(t)
        out = []
        for key, trials in by_key.items():
            rnd = max(t.round for t in trials)
            base = self.tracker.was_evaluated(base_trial_id(key[0]), 0)
            latest = all(self.book.terminal(t.trial_id) for t in trials if t.round == rnd)
            every = latest and all(self.book.terminal(t.trial_id) for t in trials)
            out.append(SeriesState(key, trials, rnd, base and latest, base and every))
        return out

    def size(self, key: Series) -> int:
        return sum(series_key(t) == key for t in self.grid)

    def unfinished(self) -> bool:
        """Whether any trial of the run is not yet terminal."""
        return any(not self.book.terminal(t.trial_id) for t in self.grid)
