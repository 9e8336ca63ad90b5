"""DSL-side helpers shared by the workloads: wrapping torch tensors, streams, compiled kernels.

Imports the CuTe DSL: import this only after `run.py` has set the `CUTE_DSL_*` variables.
"""
from __future__ import annotations

import time
from typing import Any, Callable, Dict, Tuple

import cuda.bindings.driver as cuda
import cutlass
import cutlass.cute as cute
from cutlass.cute.runtime import from_dlpack

_COMPILED: Dict[Any, Tuple[Any, float]] = {}


def stream() -> cuda.CUstream:
    """torch's current stream as a CUstream: launches join torch's order (and graph capture)."""
    import torch

    return cuda.CUstream(torch.cuda.current_stream().cuda_stream)


def wrap(t, align: int = 16):
    return from_dlpack(t, assumed_align=align)


def wrap_dynamic(t, align: int = 16):
    """A 1-D tensor whose length is a runtime value: one compiled kernel serves every size."""
    return from_dlpack(t, assumed_align=align).mark_layout_dynamic()


def compile_once(key: Any, fn: Callable, *args: Any) -> Any:
    """`cute.compile(fn, *args)`, cached by `key` for the whole run (W3 reuses W1's kernels)."""
    if key not in _COMPILED:
        t0 = time.perf_counter()
        compiled = cute.compile(fn, *args)
        _COMPILED[key] = (compiled, time.perf_counter() - t0)
    return _COMPILED[key][0]


def compile_seconds(key: Any) -> float:
    return _COMPILED[key][1]


def i32(value: int):
    return cutlass.Int32(value)


def count_tma(ptx: str) -> int:
    """`cp.async.bulk.tensor` instructions in a PTX text (TMA call sites after compilation)."""
    return sum(1 for line in ptx.splitlines() if "cp.async.bulk.tensor" in line and not line.lstrip().startswith("//"))


def code_bytes(ptx: str) -> int:
    """PTX size without parameter declarations and loads (their names are long: ~250 B per parameter)."""
    return sum(len(line) + 1 for line in ptx.splitlines() if ".param" not in line and "_param_" not in line)


def descriptor_params(ptx: str) -> int:
    """Kernel parameters that are 128-byte descriptors (`.param .align 64 .b8 name[128]`)."""
    return sum(1 for line in ptx.splitlines() if ".param .align 64 .b8" in line and line.rstrip(",) ").endswith("[128]"))


def short_error(exc: BaseException, limit: int = 300) -> str:
    text = f"{type(exc).__name__}: {exc}".strip().replace("\n", " ")
    return text if len(text) <= limit else text[: limit - 3] + "..."
