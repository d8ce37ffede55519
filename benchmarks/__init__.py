"""Benchmarks for the disc lazy-tensor device; run with ``python -m benchmarks``."""
