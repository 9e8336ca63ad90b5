"""The front end: source capture, analysis, rewriting and rendering.

It never imports `cutlass`, so it can be used and tested on its own:
`desugar_function(fn)` gives the desugared text of a kernel without compiling it.
"""
from .analysis import KernelAnalysis, ParamKind, analyze
from .dump import render
from .rewrite import Desugared, desugar
from .source import KernelSource, capture


def desugar_function(func) -> str:
    """The desugared source of `func`, exactly as `@gcdsl.kernel` would run it."""
    return render(desugar(analyze(capture(func))))


__all__ = [
    "KernelAnalysis",
    "KernelSource",
    "Desugared",
    "ParamKind",
    "analyze",
    "capture",
    "desugar",
    "desugar_function",
    "render",
]
