"""Turn every `@cute.kernel` into `@gcdsl.kernel` without editing the example.

`cutlass.cute.kernel` is replaced for as long as the example is imported and
compiled (some examples define kernels inside functions they call). gcdsl itself
hands the desugared kernel to `cute.kernel` while it builds a kernel: that inner
call must reach the DSL's decorator, not come back to gcdsl.
"""
from __future__ import annotations

import contextlib
import functools


@contextlib.contextmanager
def kernel_decorator(decorator: str):
    """`decorator` is "cute" (nothing changes) or "gcdsl"."""
    if decorator == "cute":
        yield
        return
    import cutlass.cute as cute
    import gcdsl

    original = cute.kernel
    building = []  # non-empty while gcdsl builds a kernel

    def as_gcdsl(make_kernel):
        def call(*args, **kwargs):
            if building:
                return original(*args, **kwargs)
            building.append(True)
            try:
                result = make_kernel(*args, **kwargs)
            finally:
                building.pop()
            # `@cute.kernel(...)` with arguments: gcdsl returns the decorator to apply next.
            if not isinstance(result, gcdsl.Kernel) and callable(result):
                return as_gcdsl(result)
            return result

        return call

    # gcdsl tells its own decorator from the DSL's by its module and name: the
    # switched `cute.kernel` must pass for `gcdsl.kernel`, as the text `@gcdsl.kernel` would.
    switched = functools.wraps(gcdsl.kernel)(as_gcdsl(gcdsl.kernel))
    cute.kernel = switched
    try:
        yield
    finally:
        cute.kernel = original
