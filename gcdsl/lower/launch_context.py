"""What the host knows about one launch of a gcdsl kernel, for the code traced in it.

`Kernel.__call__` runs on the host while the `@cute.jit` function is traced: it sees
the Python objects the caller passed (atoms with the ops that built them, lists of
tensors). The kernel body is traced later, in `launch()`, where those are already
kernel parameters. What the body needs from the host side travels in a
`LaunchContext`, current for the duration of the trace.
"""
from __future__ import annotations

import contextlib
import contextvars
from typing import Dict, Iterator, Optional, Set

from ..diagnostics import GcdslError


class LaunchContext:
    def __init__(self, kernel: str, descriptor_verdicts: Dict[str, Optional[GcdslError]]) -> None:
        self.kernel = kernel
        self._descriptor_verdicts = descriptor_verdicts
        self.guessed: Set[str] = set()  # lists lowered on the analysis's guess, not yet confirmed
        self.runtime_indexed: Set[str] = set()  # lowered lists a runtime index reached in this trace

    def saw_runtime_index(self, param: Optional[str]) -> None:
        if param is not None:
            self.runtime_indexed.add(param)

    def descriptor_verdict(self, param: Optional[str]) -> Optional[GcdslError]:
        """The error a runtime pick from descriptor list `param` raises, or None."""
        if param not in self._descriptor_verdicts:
            raise TypeError(f"gcdsl internal error: no host-side check of descriptor list {param!r} "
                            f"in kernel `{self.kernel}`")
        return self._descriptor_verdicts[param]


class NeedsLowering(Exception):
    """A runtime index reached list `param` while it is in the DSL's own form.

    Raised while tracing; the launch abandons the trace, lowers `param` (a tensor list
    to its table, a descriptor list to its packed blob) and traces again.
    """

    def __init__(self, param: str) -> None:
        super().__init__(f"gcdsl: `{param}` is indexed at runtime and must be lowered")
        self.param = param


class LoweredInVain(Exception):
    """The trace reached its end and no runtime index reached lists `params`, lowered up
    front on the analysis's guess. The launch abandons the trace and traces again with
    them in the DSL's form (which gives the DSL's PTX)."""

    def __init__(self, params: Set[str]) -> None:
        super().__init__(f"gcdsl: {sorted(params)} met no runtime index and keep the DSL's form")
        self.params = set(params)


def end_of_trace() -> None:
    """The last statement of a kernel with guessed lowerings (see `LoweredInVain`)."""
    launch = current_launch()
    idle = launch.guessed - launch.runtime_indexed
    if idle:
        raise LoweredInVain(idle)


_CURRENT: contextvars.ContextVar = contextvars.ContextVar("gcdsl_launch", default=None)


def current_launch() -> LaunchContext:
    launch = _CURRENT.get()
    if launch is None:
        raise TypeError("gcdsl internal error: desugared kernel code traced outside a gcdsl launch")
    return launch


@contextlib.contextmanager
def launching(context: LaunchContext) -> Iterator[None]:
    token = _CURRENT.set(context)
    try:
        yield
    finally:
        _CURRENT.reset(token)
