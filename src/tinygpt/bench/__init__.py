"""Benchmarks: whole programs (ours and nanoGPT's, in rounds and side by side), micro-benchmarks (one
training step, attention, generation) and the report in docs/benchmarks.md. Above ``train``."""
