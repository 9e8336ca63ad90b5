"""Upstream CuTe DSL examples compiled under `@cute.kernel` and `@gcdsl.kernel`.

`catalogue.EXAMPLES` lists, per example, how to build its kernel object and fake
arguments (the drivers in `drivers/`); `tests/upstream_compat.py` compiles one
example under one decorator in a fresh process and compares the PTX.
The examples are read from `$GCDSL_UPSTREAM_EXAMPLES`, the `examples/python/CuTeDSL`
folder of an NVIDIA/cutlass checkout; nothing of them is kept here.
"""
