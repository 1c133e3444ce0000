"""Helpers the tests and the benchmarks share (the benchmarks themselves are in `benchmarks/`)."""
