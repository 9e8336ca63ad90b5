"""A kernel made inside a function: a closure variable and a computed default."""
import cutlass
import cutlass.cute as cute

import gcdsl


def make_fill(value):
    @gcdsl.kernel
    def fill(out: cute.Tensor, offset: cutlass.Constexpr = value * 2):
        tidx, _, _ = cute.arch.thread_idx()
        out[tidx] = cutlass.Float32(value + offset)

    @cute.jit
    def host(out: cute.Tensor):
        fill(out).launch(grid=(1, 1, 1), block=(32, 1, 1))

    return fill, host
