"""The sweep's vocabulary, below every part that uses it: the sweep file's types (spec.py, with
its tracking section: tracking.py), the grid of trials they expand to (grid.py), and the typed
records a Train worker reports back to the driver (reports.py). Nothing here imports the
orchestrator, the trainables, analysis or tracking (tests/test_layering.py)."""
