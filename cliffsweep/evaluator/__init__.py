"""The worker side of evaluation, beside trainables/ (the worker side of training): the
evaluator actor's body, the request it is sent, the local copy of a checkpoint it serves, and
the rows a task's result becomes in the store. The driver starts, scales and routes these actors
(orchestrator/pool.py, orchestrator/evaltracker.py) and never builds their rows.

Data flows down: evals (tasks, backends, scoring) -> evaluator -> storage."""
