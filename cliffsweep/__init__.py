"""cliffsweep: map the learning-forgetting trade-off of SFT, and say whether it is gradual or a cliff.

Public surface; everything else is internal. The CLI (`cliffsweep`) is the entry point.

`import cliffsweep` loads only the sweep's vocabulary (cliffsweep/sweep/) and the store: every Ray
Train worker imports this package when it unpickles its config, so the orchestrator (and what it
imports) loads on first use of `load_spec`, `parse_spec` or `run_sweep`, never in a worker.
"""

from cliffsweep.storage.store import Store
from cliffsweep.sweep.grid import Trial, expand_grid
from cliffsweep.sweep.spec import SpecError, SweepSpec

__version__ = "0.1.0"
__all__ = ["SweepSpec", "SpecError", "load_spec", "parse_spec", "expand_grid", "Trial", "Store",
           "run_sweep", "__version__"]


def load_spec(path):
    """Read and check a sweep file (cliffsweep.orchestrator.specfile.load_spec)."""
    from cliffsweep.orchestrator.specfile import load_spec as _load

    return _load(path)


def parse_spec(data, source: str = "<spec>"):
    """Check a parsed sweep file (cliffsweep.orchestrator.specfile.parse_spec)."""
    from cliffsweep.orchestrator.specfile import parse_spec as _parse

    return _parse(data, source)


def run_sweep(spec, **kwargs):
    """Run a sweep (see cliffsweep.orchestrator.driver.run_sweep)."""
    from cliffsweep.orchestrator.driver import run_sweep as _run

    return _run(spec, **kwargs)
