"""The pieces of `benchmarks/report.py`: number formats, one module per group of workloads, ncu text.

Standard library only; each `region_*` function takes the loaded results and returns the
text of one marked region.
"""
