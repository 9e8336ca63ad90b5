"""Decorator stacks around @gcdsl.kernel: which are refused, and at which line."""
import functools

import cutlass.cute as cute

import gcdsl


def traced(fn):
    """A user decorator that keeps a call count."""

    @functools.wraps(fn)
    def wrapper(*args, **kwargs):
        wrapper.calls += 1
        return fn(*args, **kwargs)

    wrapper.calls = 0
    return wrapper


def cute_kernel_above():
    @cute.kernel
    @gcdsl.kernel
    def k(x: cute.Tensor):
        pass

    return k


def gcdsl_above_cute_jit():
    @gcdsl.kernel
    @cute.jit
    def k(x: cute.Tensor):
        pass

    return k


def user_decorator_below():
    @gcdsl.kernel
    @traced
    def k(x: cute.Tensor):
        pass

    return k


def user_decorator_above():
    @traced
    @gcdsl.kernel
    def k(x: cute.Tensor):
        pass

    return k


class Holder:
    @staticmethod
    @gcdsl.kernel
    def static_kernel(x: cute.Tensor):
        pass


class Scaler:
    """Kernels as methods, bound the way `cute.kernel` binds them."""

    @gcdsl.kernel
    def kernel(self, x: cute.Tensor):
        pass

    @gcdsl.kernel
    @staticmethod
    def static_below(x: cute.Tensor):
        pass

    @gcdsl.kernel
    @classmethod
    def class_below(cls, x: cute.Tensor):
        pass
