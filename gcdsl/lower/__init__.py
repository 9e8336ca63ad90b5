"""The lowering: what desugared kernels call, and the checks that run before them."""
