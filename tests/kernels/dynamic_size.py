"""A plain `@cute.kernel` that takes `cute.size` of a runtime extent, for the test that
gcdsl's wrapper behind `cute.size` leaves its IR, locations included, as the DSL makes
it (`python -m tests.kernels.dynamic_size [--with-gcdsl]`: compiles for sm_90a)."""
import os
import sys

os.environ.setdefault("CUTE_DSL_ARCH", "sm_90a")

import cutlass  # noqa: E402
import cutlass.cute as cute  # noqa: E402

if "--with-gcdsl" in sys.argv:
    import gcdsl.lower.grid_constant  # noqa: F401  (wraps cute.size for tables)


@cute.kernel
def add_one(t: cute.Tensor):
    tidx, _, _ = cute.arch.thread_idx()
    n = cute.size(t, mode=[0])  # a runtime extent: the DSL emits an op, located here
    for i in cutlass.range(tidx, n, 32):
        t[i] = t[i] + cutlass.Float32(1.0)


@cute.jit
def host(t: cute.Tensor):
    add_one(t).launch(grid=(1, 1, 1), block=(32, 1, 1))


if __name__ == "__main__":
    fake = cute.runtime.make_fake_tensor(cutlass.Float32, (cute.sym_int(),), stride=(1,), assumed_align=16)
    cute.compile(host, fake)
