"""The dashboard's state: the stores it watches, their tables cached (storage/tablecache.py), and the latest
views as JSON, recomputed by one background thread only when a store's files changed.

Invariant: a request never computes anything heavy and never waits on the store; it returns the
last published snapshot (or a trial's view, read from the cached tables). The frontiers come in
two passes: the regimes at once (no bootstrap), then the bootstrap's confidence, the same
computation as `cliffsweep analyze` with its defaults, so the final page says what `analyze` says.
"""

from __future__ import annotations

import json
import threading
import time
from dataclasses import dataclass
from enum import IntEnum
from pathlib import Path

import pandas as pd

from cliffsweep.dashboard import views
from cliffsweep.storage import diskcache
from cliffsweep.storage.tablecache import FIRST_PASS, GRID_PASS, TableCache, TablesRead, open_caches, read_tables
from cliffsweep.storage.parquetfiles import ReaderPool
from cliffsweep.storage.claims import drivers_held
from cliffsweep.storage.store import LIVE_FILE, SPEC_FILE, Store  # LIVE_FILE: the driver's last word, in the store

CONFIDENCE_EVERY_S = 30.0
FIRST_FETCH_WAIT_S = 1.0


class Stage(IntEnum):
    """What the published snapshot holds, in the order a refresh passes through them."""

    STARTING = 0
    """The stores are being read, or only the grid and counts are out: no frontiers yet."""
    REGIMES = 1
    """The frontiers and regimes, without the bootstrap's confidence (it comes once the stores
    are quiet for a turn, or every CONFIDENCE_EVERY_S while they keep changing)."""
    CONFIDENT = 2
    """The frontiers with their confidence, or without, where none was asked (n_boot 0)."""


@dataclass(frozen=True)
class Reading:
    """How the frontiers are read: `cliffsweep analyze`'s defaults unless the command says."""
    n_boot: int = 200
    seed: int = 0
    min_confidence: float | None = None


class Refresher:
    """The dashboard's background refresh: it reads what changed in the stores and publishes the
    page's snapshot, stage by stage (`Stage`); the server hands out the latest (app.py)."""

    def __init__(self, uris: list[str], reading: Reading = Reading(), every_s: float = 2.0,
                 cache_root: Path | None = diskcache.CACHE_DIR, readers: ReaderPool | None = None,
                 first: TablesRead | None = None):
        """`first`: the first read of GRID_PASS, begun (dashboard/cli.py) on caches made as
        `_present` makes them; the first page's grid is drawn from it if the first turn finds the
        same stores, before the other tables are read."""
        self.uris = list(uris)
        self.readers = readers  # processes for a read of thousands of files (a running sweep's first read)
        self.cache_root = cache_root  # where each store's tables are kept between runs (storage/diskcache.py)
        self.reading = reading
        self.every_s = every_s
        self.caches: dict[str, TableCache] = dict(zip(first.uris, first.caches)) if first is not None else {}
        self._first = first
        self.lock = threading.Lock()
        self.version = 0
        # "partial": the page asks again within a moment, not at its usual pace
        self.snapshot: bytes = json.dumps({**self._empty("starting: the stores are being read"), "partial": True}).encode()
        self.stage = Stage.STARTING
        self._by_model: dict[str, tuple] = {}  # reading.regimes_by_model's cache
        self._confident_at = 0.0
        self._last_present: list[TableCache] = []
        self._last_json: tuple | None = None
        self._planned: dict[str, dict] = {}
        self._spec_of: dict[str, dict] = {}
        self._stop = threading.Event()
        self._awaited = 2**62  # the first full snapshot's version, once published (_let_it_be_fetched)
        self._delivered = threading.Event()

    # --- the background thread ---------------------------------------------------------------
    def start(self) -> None:
        threading.Thread(target=self._loop, name="dashboard-refresh", daemon=True).start()

    def stop(self) -> None:
        self._stop.set()
        if self.readers is not None:
            self.readers.close()

    def _loop(self) -> None:
        while not self._stop.is_set():
            try:
                self.refresh()
            except Exception as e:  # a store mid-write or unreachable: said on the page, tried again
                self._publish({**json.loads(self.snapshot), "problem": f"{type(e).__name__}: {e}"[:500]})
            self._stop.wait(self.every_s)

    def refresh(self) -> bool:
        """Read what changed; publish new views if anything did. Returns whether it did. The
        bootstrap (seconds of CPU on a paper-sized store) runs once the stores are quiet for a
        turn, or every CONFIDENCE_EVERY_S while they keep changing."""
        first = self.stage is Stage.STARTING
        if first:
            self._grid_first()
        tables, changed = self._read()
        if changed:
            grid = self._grid_views(tables, n_boot=0)
            if first:  # the grid and counts before the first frontiers
                self._publish(grid)
            self._publish(self._views(tables, n_boot=0, grid=grid))  # the regimes first, at once
            if first:
                self._let_it_be_fetched()
            self.stage = Stage.REGIMES if self.reading.n_boot > 0 else Stage.CONFIDENT
        if self._price(tables["uris"], tables["specs"]) and self.stage is not Stage.REGIMES:
            self._publish(self._views(tables, n_boot=0))
            changed = True
        due = self.stage is Stage.REGIMES and (not changed or time.time() - self._confident_at >= CONFIDENCE_EVERY_S)
        if due:
            samples = [c.read("samples")[0] for c in self._present()]
            self._publish(self._views(tables, n_boot=self.reading.n_boot, samples=samples))
            self.stage, self._confident_at = Stage.CONFIDENT, time.time()
        return changed or due

    def _present(self) -> list[TableCache]:
        self.caches.update(open_caches([u for u in self.uris if u not in self.caches], self.cache_root, self.readers))
        return [self.caches[u] for u in self.uris if u in self.caches]

    def _read(self) -> tuple[dict, bool]:
        caches = self._present()
        tables: dict[str, list[pd.DataFrame]] = {t: [] for t in FIRST_PASS}
        changed = len(caches) != len(self._last_present)
        self._last_present = caches
        for read in read_tables(caches, FIRST_PASS):  # every file in one read: the reader processes share all of it
            for t in FIRST_PASS:
                frame, moved = read[t]
                tables[t].append(frame)
                changed |= moved
        around = self._around(caches)
        changed |= (around["live"], around["specs"], around["drivers"]) != self._last_json
        self._last_json = (around["live"], around["specs"], around["drivers"])
        return {"tables": tables, **around}, changed

    def _around(self, caches: list[TableCache]) -> dict:
        """What a view needs beside the tables: each store's driver state, sweep file and drivers."""
        return {"live": [json.loads(c.store.read_bytes(LIVE_FILE)) if c.store.exists(LIVE_FILE) else None for c in caches],
                "specs": [self._spec(c.store) for c in caches],
                "drivers": [d for c in caches for d in drivers_held(c.store)],  # issue 53: several may work a store
                "uris": [c.store.uri for c in caches]}

    def _grid_first(self) -> None:
        """The first page's grid and counts from GRID_PASS, the read begun before this object
        existed, published before the other tables are read (issue 62 part 3: on a
        100,000-trial store the evaluations and checkpoints were 2-3 s of the 3 s the first page
        may take). The evaluations' counts say "being read" (views.sweep_view)."""
        first, self._first = self._first, None
        caches = self._present()
        if first is None or first.caches != caches:
            return
        try:
            read = first.end()
        except FileNotFoundError:  # a compaction folded a file it listed: the whole read comes next
            return
        tables = {t: [r[t][0] if t in GRID_PASS else None for r in read] for t in FIRST_PASS}
        self._publish(self._grid_views({"tables": tables, **self._around(caches)}, n_boot=0))

    def _spec(self, store: Store) -> dict:
        """The sweep file the store keeps, read once: it does not change during a run."""
        if store.uri not in self._spec_of:
            self._spec_of[store.uri] = store.read_json(SPEC_FILE) if store.exists(SPEC_FILE) else {}
        return self._spec_of[store.uri]

    # --- the views -----------------------------------------------------------------------------
    def _grid_views(self, read: dict, n_boot: int, samples: list[pd.DataFrame] | None = None) -> dict:
        """Everything but the frontiers: the stores, the sweep (grid, counts, cost), what is missing.
        Published alone once, before the first frontiers ("partial": the page asks again soon)."""
        tables, live, specs = read["tables"], read["live"], read["specs"]
        merged = {t: pd.concat(frames, ignore_index=True) if frames and frames[0] is not None else None
                  for t, frames in tables.items()}
        stores = [{"uri": u, "state": "missing"} for u in self.uris if u not in self.caches]
        stores += [{"uri": u, "state": "ok" if len(t) else "empty", "name": s.get("name")}
                   for u, t, s in zip(read["uris"], tables["trials"], specs)]
        confidence = "bootstrap" if n_boot else "computing" if self.reading.n_boot else "off"
        out = {"stores": stores, "generated_at": time.time(), "confidence": confidence}
        if not read["uris"]:
            return {**out, **self._empty("no store here yet: " + ", ".join(self.uris))}
        now = time.time()
        runs = [views.sweep_view(tr, ev, er, lv, sp, self._planned_hours(u, sp), now)
                for u, tr, ev, er, lv, sp in zip(read["uris"], tables["trials"], tables["evals"], tables["errors"], live, specs)]
        out["sweep"] = runs[0] if len(runs) == 1 else views.merge_sweeps(runs)
        out["sweep"]["drivers"] = [{"label": d["label"], "trials": len(d["trials"]), "other": d["other"]}
                                   for d in read.get("drivers", [])]
        out["missing"] = views.missing_parts(merged, live, samples) if merged["evals"] is not None else []
        return {**out, "models": [], "said": "reading the frontiers ...", "partial": True}

    def _views(self, read: dict, n_boot: int, samples: list[pd.DataFrame] | None = None,
               grid: dict | None = None) -> dict:
        """The whole snapshot: `grid` (_grid_views of the same read, if already built) and the frontiers."""
        from cliffsweep.dashboard.reading import frontier_views

        grid = grid if grid is not None else self._grid_views(read, n_boot, samples)
        if not read["uris"]:
            return grid
        return {**grid, **frontier_views(read["tables"], read["specs"], read["uris"], samples, n_boot, self.reading,
                                         self._by_model), "partial": False}

    def _planned_hours(self, uri: str, spec: dict) -> dict:
        return self._planned.get(uri, {"planned_hours": None, "planned_said": "being priced"})

    def _price(self, uris: list[str], specs: list[dict]) -> bool:
        """`plan`'s bill for each store's sweep file, once per store, after the first page (it
        imports torch and reads tokenizers: seconds). Returns whether it priced one now."""
        from cliffsweep.dashboard.reading import planned_hours

        todo = [(u, s) for u, s in zip(uris, specs) if u not in self._planned]
        for uri, spec in todo:
            self._planned[uri] = planned_hours(spec)
        return bool(todo)

    @staticmethod
    def _empty(said: str) -> dict:
        return {"sweep": None, "models": [], "said": said, "missing": []}

    def _publish(self, payload: dict) -> None:
        try:  # the views are clean already (views.records); a stray NaN or numpy value is cleaned
            data = json.dumps(payload, allow_nan=False).encode()
        except (TypeError, ValueError):
            data = json.dumps(views.clean(payload)).encode()
        with self.lock:
            self.version += 1
            self.snapshot = data

    def _let_it_be_fetched(self) -> None:
        """Wait (FIRST_FETCH_WAIT_S at most) until a page has been sent the first snapshot with the
        frontiers, before the seconds of pricing and bootstrap that follow: they would hold the
        GIL the server thread needs to send it (2.8 MB on the paper-sized stores)."""
        with self.lock:
            self._awaited = self.version
        self._delivered.wait(FIRST_FETCH_WAIT_S)

    # --- what a request gets -----------------------------------------------------------------
    def current(self) -> tuple[int, bytes]:
        with self.lock:
            return self.version, self.snapshot

    def delivered(self, version: int) -> None:
        """A page has been sent snapshot `version` (app.py calls it once the response is out)."""
        if version >= self._awaited:
            self._delivered.set()

    def trial(self, tid: str) -> dict | None:
        """One trial's view from the cached tables (its samples read now if never read)."""
        caches = self._present()
        frames = {t: pd.concat([c.read(t)[0] for c in caches], ignore_index=True) for t in (*FIRST_PASS, "samples")} \
            if caches else None
        if frames is None:
            return None
        return views.trial_view(tid, frames["trials"], frames["evals"], frames["errors"], frames["steps"],
                                frames["samples"], frames["checkpoints"])
