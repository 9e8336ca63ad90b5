"""The table of upstream examples: where each lives, its target, and how to build it.

A driver is a function `build(module) -> Compile` written against the example's
public names (its kernel class, its `@cute.jit` host function). Drivers import the
DSL lazily, so that listing the catalogue costs nothing where the DSL is absent.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Callable, Dict, Optional, Tuple

SM90 = "sm_90a"
SM100 = "sm_100a"
SM103 = "sm_103a"
SM120 = "sm_120a"


@dataclass
class Compile:
    """What `cute.compile` receives: the function (or callable kernel object) and its arguments."""

    fn: Any
    args: Tuple[Any, ...] = ()
    kwargs: Dict[str, Any] = field(default_factory=dict)


@dataclass(frozen=True)
class Example:
    name: str                       # e.g. "hopper/dense_gemm", or "hopper/dense_gemm[fp8]" for a variant
    path: str                       # relative to the examples root
    arch: str
    build: Optional[Callable[[Any], Compile]]
    skip: Optional[str] = None      # why it cannot compile under @cute.kernel here (DSL 4.8.1, no GPU)


EXAMPLES: Dict[str, Example] = {}


def example(name: str, path: str, arch: str = SM90, *, skip: Optional[str] = None):
    """Register the decorated driver as example `name`."""

    def register(build: Callable[[Any], Compile]) -> Callable[[Any], Compile]:
        _add(Example(name, path, arch, build, skip))
        return build

    return register


def skipped(name: str, path: str, arch: str, reason: str) -> None:
    """An example with a `@cute.kernel` that cannot be compiled here at all."""
    _add(Example(name, path, arch, None, reason))


def _add(ex: Example) -> None:
    if ex.name in EXAMPLES:
        raise ValueError(f"example {ex.name!r} registered twice")
    EXAMPLES[ex.name] = ex


def load_all() -> Dict[str, Example]:
    from . import drivers  # noqa: F401  (registers every driver module)

    return EXAMPLES
