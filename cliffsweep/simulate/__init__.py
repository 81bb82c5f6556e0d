"""`cliffsweep simulate`: how long a sweep takes on a GPU cluster, and where its GPUs sit idle,
before paying for the cluster (issue 22). engine.py simulates the schedule with the
orchestrator's own policies and plan's prices; report.py prints it and draws the utilisation."""
