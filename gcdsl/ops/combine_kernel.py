"""The last step of an MoE expert layer in one kernel (`WeightedCombine`): each token's k
rows, weighed and summed.

    out[t, :] = sum_j topk_weights[t, j] * y[row_of[t k + j], :]

`y` (T k, H) holds the down GEMM's rows in expert order; `row_of` (T k,) int32 the row
that holds slot t k + j (the routing writes it). One read of each row of `y`, one write
of each row of `out`, nothing in between: a thread takes 16 bytes of `y` columns, loads
its k rows at once (k is a compile-time constant), sums them in fp32 in slot order (the
same result on every run) and stores them in `out`'s type. Grid: (T, column chunks).
"""
from __future__ import annotations

from typing import Tuple

import cuda.bindings.driver as cuda

import cutlass
import cutlass.cute as cute

import gcdsl

THREADS = 128


class WeightedCombine:
    """The kernel for rows of `hidden` columns, `top_k` slots a token, and the given types
    (y: 16- or 32-bit float; weights: fp32, bf16 or fp16; out: 16- or 32-bit float).

    `__call__` is the host function to `cute.compile`:
        (y, row_of, weights, out, tokens, stream)
    pointers all but `tokens`; every tensor contiguous, `y` and `out` 16-byte aligned."""

    def __init__(self, y_dtype, weight_dtype, out_dtype, hidden: int, top_k: int) -> None:
        self.vector = 128 // y_dtype.width  # one 16-byte load of y a row
        if hidden % self.vector:
            raise ValueError(f"H = {hidden}: the combine reads rows in {self.vector}-column vectors")
        self.y_dtype, self.weight_dtype, self.out_dtype = y_dtype, weight_dtype, out_dtype
        self.hidden, self.top_k = hidden, top_k
        self.chunks = -(-hidden // (THREADS * self.vector))  # CTAs a token

    def trace_args(self) -> Tuple:
        def ptr(dtype, align):
            return cute.runtime.make_ptr(dtype, 0, cute.AddressSpace.gmem, assumed_align=align)

        return (ptr(self.y_dtype, 16), ptr(cutlass.Int32, 4), ptr(self.weight_dtype, self.weight_dtype.width // 8),
                ptr(self.out_dtype, 16), cutlass.Int32(1), cute.runtime.make_fake_stream())

    @cute.jit
    def __call__(self, y_ptr: cute.Pointer, row_ptr: cute.Pointer, weight_ptr: cute.Pointer, out_ptr: cute.Pointer,
                 tokens: cutlass.Int32, stream: cuda.CUstream):
        k, hidden, vector = self.top_k, self.hidden, self.vector
        # rows as (vector, H / vector): a thread's 16 bytes are one column of mode 1
        rows = cute.make_layout((tokens * k, (vector, hidden // vector)), stride=(hidden, (1, vector)))
        y = cute.make_tensor(y_ptr, rows)
        out = cute.make_tensor(out_ptr, cute.make_layout((tokens, (vector, hidden // vector)),
                                                         stride=(hidden, (1, vector))))
        row_of = cute.make_tensor(row_ptr, cute.make_layout(tokens * k))
        weights = cute.make_tensor(weight_ptr, cute.make_layout(tokens * k))
        self.kernel(y, row_of, weights, out).launch(grid=(tokens, self.chunks, 1), block=(THREADS, 1, 1),
                                                    stream=stream)

    @gcdsl.kernel
    def kernel(self, y: cute.Tensor, row_of: cute.Tensor, weights: cute.Tensor, out: cute.Tensor):
        tidx, _, _ = cute.arch.thread_idx()
        token, chunk, _ = cute.arch.block_idx()
        k, vector = self.top_k, self.vector
        column = chunk * THREADS + tidx  # in vectors
        if column < self.hidden // vector:
            weigh_and_sum(y, row_of, weights, out, token, column, k, vector)


@cute.jit
def weigh_and_sum(y: cute.Tensor, row_of: cute.Tensor, weights: cute.Tensor, out: cute.Tensor,
                  token: cutlass.Int32, column: cutlass.Int32, top_k: int, vector: int):
    """out[token, vector `column`] = sum_j weights[s] * y[row_of[s], vector `column`], s = token
    top_k + j: each of the token's rows read once (every load in flight before the sum),
    summed in fp32 in slot order, stored in out's type. `y` and `out` as (rows, (vector,
    vectors)) views; also the one-kernel layer's combine (`Epilogue.finish_tokens`)."""
    loaded = []
    for j in cutlass.range_constexpr(top_k):
        slot = token * top_k + j
        loaded.append((cutlass.Float32(weights[slot]), y[(row_of[slot], (None, column))].load()))
    total = cute.make_rmem_tensor((vector,), cutlass.Float32)
    total.fill(0.0)
    for weight, values in loaded:
        total.store(total.load() + weight * values.to(cutlass.Float32))
    out[(token, (None, column))].store(total.load().to(out.element_type))
