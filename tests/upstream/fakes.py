"""Fake arguments for `cute.compile` without a GPU: tensors, streams, pointers.

Tensors have a static or a dynamic (symbolic) shape; dynamic shapes mirror the
examples, which mark their torch tensors' layouts dynamic. Symbolic extents get
the divisibility of 16 bytes so that TMA and vectorised copies still see aligned
strides, as they would with the examples' own shapes.
"""
from __future__ import annotations

from typing import Sequence, Tuple, Union

Extent = Union[int, str]  # an int is static; "?" is a symbolic extent


def stream():
    import cutlass.cute as cute

    return cute.runtime.make_fake_stream()


def tensor(dtype, shape: Sequence[Extent], *, order: Sequence[int] = None, align: int = 16, dynamic: bool = False,
           memspace=None):
    """A compact fake tensor; `order[i]` ranks mode i's stride (0 = contiguous), row-major by default.

    `dynamic=True` makes every extent other than 1 symbolic.
    """
    import cutlass.cute as cute

    rank = len(shape)
    order = tuple(order) if order is not None else tuple(range(rank - 1, -1, -1))
    extents = tuple(_extent(dtype, e, dynamic) for e in shape)
    kwargs = {"memspace": memspace} if memspace is not None else {}
    return cute.runtime.make_fake_compact_tensor(dtype, extents, stride_order=order, assumed_align=align, **kwargs)


def _extent(dtype, extent: Extent, dynamic: bool):
    import cutlass.cute as cute

    if extent == "?" or (dynamic and extent != 1):
        return cute.sym_int(divisibility=max(1, 128 // dtype.width))
    return extent


def gemm_operand(dtype, rows: int, cols: int, batch: int, *, major: str, dynamic: bool = True):
    """A (rows, cols, batch) GEMM operand; `major` names the contiguous mode: "rows" or "cols"."""
    order = (0, 1, 2) if major == "rows" else (1, 0, 2)
    return tensor(dtype, (rows, cols, batch), order=order, dynamic=dynamic)


def abc(mnkl: Tuple[int, int, int, int], a_dtype, b_dtype, c_dtype, *, a_major="k", b_major="k", c_major="n",
        dynamic: bool = True):
    """The A (m,k,l), B (n,k,l) and C (m,n,l) of a GEMM, with the majors the examples name."""
    m, n, k, l = mnkl
    a = gemm_operand(a_dtype, m, k, l, major="rows" if a_major == "m" else "cols", dynamic=dynamic)
    b = gemm_operand(b_dtype, n, k, l, major="rows" if b_major == "n" else "cols", dynamic=dynamic)
    c = gemm_operand(c_dtype, m, n, l, major="rows" if c_major == "m" else "cols", dynamic=dynamic)
    return a, b, c


def bmm_operands(mnkl: Tuple[int, int, int, int], ab_dtype, c_dtype, *, dynamic: bool = True):
    """torch.bmm's convention, as the examples' `bmm` wrappers take it: a (l, m, k) k-major,
    b (l, k, n) k-major, c (l, m, n) n-major."""
    m, n, k, l = mnkl
    a = tensor(ab_dtype, (l, m, k), order=(2, 1, 0), dynamic=dynamic)
    b = tensor(ab_dtype, (l, k, n), order=(2, 0, 1), dynamic=dynamic)
    c = tensor(c_dtype, (l, m, n), order=(2, 1, 0), dynamic=dynamic)
    return a, b, c


def pointer(dtype, align: int = 16, memspace=None):
    """A fake global-memory pointer (its address is never read at compile time)."""
    import cutlass.cute as cute

    return cute.runtime.make_ptr(dtype, 0, memspace or cute.AddressSpace.gmem, assumed_align=align)


def scale_factors(dtype, mn: int, k: int, l: int, sf_vec_size: int, *, dynamic: bool = True):
    """Block-scale factors in the tcgen05 atom layout the block-scaled GEMMs take:
    logical (32, 4, mn/128, 4, sf_k/4, l) over storage (l, mn/128, sf_k/4, 32, 4, 4)."""
    sf_k = -(-k // sf_vec_size)
    shape = (32, 4, -(-mn // 128), 4, -(-sf_k // 4), l)
    return tensor(dtype, shape, order=(2, 1, 4, 0, 3, 5), dynamic=dynamic)


class _Captured(Exception):
    pass


def captured_compile(helper, *args, **kwargs):
    """The `cute.compile` call that an example's own compile helper makes with its own fake
    arguments (the experimental primitives have one each), taken instead of run."""
    import cutlass.cute as cute

    from .catalogue import Compile

    calls = []

    class Capture:
        def __call__(self, fn, *fn_args, **fn_kwargs):
            calls.append(Compile(fn, fn_args, fn_kwargs))
            raise _Captured

        def __getitem__(self, _options):  # cute.compile[...] with compile options
            return self

    original, cute.compile = cute.compile, Capture()
    try:
        getattr(helper, "__wrapped__", helper)(*args, **kwargs)  # past any lru_cache
    except _Captured:
        pass
    finally:
        cute.compile = original
    if not calls:
        raise RuntimeError(f"{helper.__name__} did not call cute.compile")
    return calls[0]
