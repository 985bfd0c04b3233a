"""Benchmarks (pytest-benchmark) and the sweep entry point (`python -m bench.sweep`)."""
