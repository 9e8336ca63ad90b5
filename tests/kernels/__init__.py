"""Kernels shared by the test suite, written once and compiled under either decorator.

`GCDSL_TEST_DECORATOR=gcdsl` selects `@gcdsl.kernel`, anything else `@cute.kernel`;
the CuTe DSL recognises its decorators by attribute name, hence `@deco.kernel`.
"""
import types

from gcdsl import config


def _kernel_decorator():
    if config.get().test_decorator == "gcdsl":
        import gcdsl

        return gcdsl.kernel
    import cutlass.cute as cute

    return cute.kernel


deco = types.SimpleNamespace(kernel=_kernel_decorator())
