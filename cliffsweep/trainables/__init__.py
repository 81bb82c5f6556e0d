"""The worker side: what a Ray Train worker runs for each grid point (loop.py), the methods and
optimizers it trains with, checkpoints and resume, once-per-model statistics."""
