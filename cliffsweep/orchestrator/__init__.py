"""The driver side of a sweep: the spec checked against the registries, Tune's queue of Train jobs,
the evaluator pool, the trial book and the store's ledger kept up to date (driver.py maps the steps)."""
