"""Benchmarks: graphopt against its peers, run in one process (``python -m benchmarks.run``)."""
