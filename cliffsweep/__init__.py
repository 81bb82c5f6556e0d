"""cliffsweep: map the learning-forgetting trade-off of SFT, and say whether it is gradual or a cliff.

Public surface; everything else is internal. The CLI (`cliffsweep`) is the entry point.
"""

from cliffsweep.orchestrator.grid import Trial, expand_grid
from cliffsweep.orchestrator.spec import SpecError, SweepSpec, load_spec, parse_spec
from cliffsweep.storage.store import Store

__version__ = "0.1.0"
__all__ = ["SweepSpec", "SpecError", "load_spec", "parse_spec", "expand_grid", "Trial", "Store",
           "run_sweep", "__version__"]


def run_sweep(spec, **kwargs):
    """Run a sweep (see cliffsweep.orchestrator.driver.run_sweep)."""
    from cliffsweep.orchestrator.driver import run_sweep as _run

    return _run(spec, **kwargs)
