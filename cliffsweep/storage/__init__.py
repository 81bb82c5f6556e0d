"""What the driver, the trials and the evaluators all read and write, below all of them: the
Parquet store (store.py) and the checkpoint ledger (ledger.py). Nothing here imports the
orchestrator, the trainables or the evaluators."""
