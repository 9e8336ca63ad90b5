"""gcdsl: runtime-indexed TMA descriptors in grid-constant parameter space, for CuTe DSL.

    import gcdsl

    @gcdsl.kernel                       # where @cute.kernel was
    def copy_kernel(loads: List[cute.CopyAtom], ...):
        g = group_id()                  # a runtime value
        cute.copy(loads[g], src, dst, tma_bar_ptr=mbar)

A `List[cute.CopyAtom]` parameter indexed by a runtime value keeps its N
descriptors as N consecutive 128-byte grid-constant kernel parameters; the
indexed atom becomes the list's first atom (the compile-time template) bound to
the descriptor at `cvta.param(first) + index * 128`. `Kernel.desugared_source`
shows the code that runs; `GCDSL_DUMP=1` prints it and `GCDSL_DUMP_DIR=dir`
writes it when the kernel is first traced.
"""
from . import config, ptx  # neither imports the DSL
from .diagnostics import Diag, GcdslError, SourceLocation
from .frontend import desugar_function
from .markers import GridConstant

__version__ = "0.1.0"

__all__ = [
    "Diag",
    "GcdslError",
    "GridConstant",
    "GridConstantTensor",
    "Kernel",
    "SourceLocation",
    "TensorMapTable",
    "config",
    "desugar_function",
    "grid_constant",
    "kernel",
    "ptx",
    "tma_desc_ptr",
]

_LAZY = {  # these pull in the DSL; the front end and diagnostics work without it
    "kernel": "decorator",
    "Kernel": "decorator",
    "grid_constant": "lower.grid_constant",
    "GridConstantTensor": "lower.grid_constant",
    "TensorMapTable": "lower.tensor_maps",
    "tma_desc_ptr": "lower.tensor_maps",
}


def __getattr__(name):
    if name == "ops":  # operators: imports torch and the DSL, so only when asked for
        import importlib

        return importlib.import_module(".ops", __name__)
    if name in _LAZY:
        import importlib

        return getattr(importlib.import_module(f".{_LAZY[name]}", __name__), name)
    raise AttributeError(f"module 'gcdsl' has no attribute {name!r}")


def __dir__():  # the lazy names too, for dir() and completion
    return sorted(set(globals()) | set(_LAZY) | {"ops"})
