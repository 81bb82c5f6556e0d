"""Analysis of a sweep's store: regime of each learning-forgetting frontier (cliff paper,
seed 000, Sec. 5.2), confidence, Pareto frontiers, and the report.

Notebook use::

    from cliffsweep.analysis import classify, frontiers, load_store
    data = load_store("results/toy")
    table = frontiers(data.points, data.samples, learn_task=data.learn_task,
                      retain_task=data.retain_task)
    classify(pd.DataFrame({"lr": [0, 1e-5, 3e-5], "L": [.3, .5, .5], "R": [.6, .58, .1]}))
"""

from cliffsweep.analysis.classify import REGIMES, Classification, Thresholds, classify, lr_curve
from cliffsweep.analysis.frontiers import frontiers, model_frontier
from cliffsweep.analysis.pareto import frontier_area, pareto_mask
from cliffsweep.analysis.points import AnalysisInputError, load_store
from cliffsweep.analysis.refinement_gain import refinement_table
from cliffsweep.analysis.safe_lr import SafeLR, max_safe_lr_arrays

__all__ = ["REGIMES", "AnalysisInputError", "Classification", "SafeLR", "Thresholds", "analyze_store", "classify",
           "frontier_area", "frontiers", "load_store", "lr_curve", "max_safe_lr_arrays", "model_frontier",
           "pareto_mask", "refinement_table"]


def analyze_store(store_uri: str, out_dir: str, **options):
    """Analyse the store at ``store_uri`` and write frontiers + report to ``out_dir``; returns
    the frontiers table. Options: see :func:`cliffsweep.analysis.run.analyze_store`.
    (Imported on call so that ``import cliffsweep.analysis`` does not pull in matplotlib.)"""
    from cliffsweep.analysis.run import analyze_store as _analyze

    return _analyze(store_uri, out_dir, **options)
