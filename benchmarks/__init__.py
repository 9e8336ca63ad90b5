"""gcdsl benchmark suite; the entry point is benchmarks/run.py (see benchmarks/README.md)."""
