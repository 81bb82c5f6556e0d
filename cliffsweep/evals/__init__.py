"""Evaluation: tasks (GSM8K, ChemL3 and their toy twins), scoring, and the backends (vLLM, HF)
that generate from a checkpoint; the evaluator actors that run them live in cliffsweep/evaluator/."""
