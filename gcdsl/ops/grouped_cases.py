"""The four cases of `torch._grouped_mm`, checked, each mapped onto one kernel configuration.

    a            b            offs   result      grouped            the kernel (hopper_grouped_gemm)
    (T, K)       (G, K, N)    (G,)   (T, N)      rows of a          ragged M
    (G, M, K)    (K, T)       (G,)   (M, T)      columns of b       ragged M, of the transpose
    (M, T)       (T, N)       (G,)   (G, M, N)   the reduction      ragged K
    (G, M, K)    (G, K, N)    -      (G, M, N)   nothing: a batch   batch

`offs` holds cumulative ends along the grouped mode T. Every operand may be
row-major or column-major in its last two modes (packed: the transpose of a
contiguous tensor is column-major), read as it lies: no copy is made. Where T is
the contiguous mode of a 2-D operand (`a` of 2D x 3D column-major, `b` of 3D x 2D
row-major: the kernel's A M-major; in the grouped reduction `a` row-major or `b`
column-major), every group that has rows must start at a multiple of 16 bytes
along T, 8 rows, since TMA reads a box only from such a start along the contiguous
mode (`torch._grouped_mm` asks the same); in the grouped reduction it must end
there too, its k-tiles being aligned to its end. With T strided (`x.t()` and `dy`
of a weight gradient) groups start and end anywhere. A CPU `offs` is checked here;
with a CUDA `offs` the kernel checks as it reads it and traps, with a message, at
a group that starts (or ends) elsewhere.

The 3D x 2D case runs as its transpose, result^T (T, M) = b^T @ a^T per group, so
its result is column-major (strides (1, M)), as a transposed view.
"""
from __future__ import annotations

import dataclasses
import functools
import os
from typing import Any, Optional, Tuple

import torch

from ..diagnostics import Diag, GcdslError, caller_location

# Groups per call with `offs`: the scheduler's table of 8 bytes a group sits in each CTA's
# shared memory next to the pipeline (from 353 groups on it costs the 128x256 tile one of
# its four stages), and one warp of 32 lanes reads offs at G / 32 values a lane.
MAX_GROUPS = 1024

AB_DTYPES = (torch.bfloat16, torch.float16)
OUT_DTYPES = (torch.bfloat16, torch.float16, torch.float32)
CASES = ("2d3d", "3d2d", "2d2d", "3d3d")


def t_contiguous_reduction(ragged: str, a_major: str, b_major: str) -> bool:
    """A grouped reduction (ragged K) with T, its K, contiguous in A or B (K-major): the
    kernel reads such an operand through its plain view, each group's k-tiles end at the
    group's end, and the consumers zero what a first k-tile holds from before the group."""
    return ragged == "k" and "k" in (a_major, b_major)


@dataclasses.dataclass(frozen=True)
class Problem:
    """One call's case, as the kernel sees it. Depends on shapes and layouts, never on `offs`."""

    case: str
    ragged: str  # the kernel's: "m", "k" or "batch"
    a_major: str  # of the kernel's A (M, K): "k" or "m"
    b_major: str  # of the kernel's B (N, K): "k" or "n"
    groups: int
    m: int  # the kernel's compile-time extents (m for ragged K only, k for the others)
    n: int
    k: int
    total: int  # the runtime extent: T, or M of a batch
    out_dtype: torch.dtype
    out_shape: Tuple[int, ...]  # what the caller gets
    swapped: bool  # the kernel's A is the caller's b (3D x 2D)
    c_back: int  # elements the output pointer starts before the output (ragged M view)
    activation: str = "none"  # "swiglu": the epilogue stores silu(gate) * up, N / 2 columns

    @property
    def kernel_out_shape(self) -> Tuple[int, ...]:
        """The contiguous tensor the kernel writes (the transpose of the result for 3D x 2D)."""
        return tuple(reversed(self.out_shape)) if self.swapped else self.out_shape

    @property
    def offs_extent(self) -> int:
        """What the ends in `offs` may reach: the grouped mode's extent."""
        return self.total

    @property
    def group_alignment(self) -> int:
        """Where a group with rows may start along T: a multiple of this many rows (16
        bytes where T is the contiguous mode of the kernel's A, or of A or B in a grouped
        reduction, else anywhere)."""
        return 8 if self.ragged == "m" and self.a_major == "m" or self.ends_aligned else 1

    @property
    def ends_aligned(self) -> bool:
        """Whether a group with rows must end on `group_alignment` too: in a grouped
        reduction with T contiguous in an operand, whose k-tiles end at the group's end."""
        return t_contiguous_reduction(self.ragged, self.a_major, self.b_major)

    @property
    def t_contiguous_operand(self) -> str:
        """The caller's operand whose grouped mode T is contiguous ("a" where both are)."""
        if self.ragged == "k":
            return "a" if self.a_major == "k" else "b"
        return "b" if self.swapped else "a"

    @property
    def launchable(self) -> bool:
        """False when the result is empty or all zeros (an empty reduction): nothing to compile."""
        fixed = (self.m if self.ragged == "k" else self.k)
        return self.total > 0 and self.n > 0 and fixed > 0

    def empty_result_is_zero(self) -> bool:
        """An unlaunched call whose result has elements: every one of them sums nothing."""
        return not self.launchable and all(self.out_shape)

    def make_output(self, device: torch.device) -> torch.Tensor:
        out = torch.empty(self.kernel_out_shape, dtype=self.out_dtype, device=device)
        return out.t() if self.swapped else out


def describe(a: Any, b: Any, offs: Any, out_dtype: Optional[torch.dtype], *, addresses: bool = True,
             activation: str = "none") -> Problem:
    """Every check of shapes, dtypes, devices, layouts and alignment (not of `offs`'s values).

    `addresses=False` skips the base-address checks (fake tensors have none);
    `activation="swiglu"` describes `grouped_mm_swiglu`'s product.
    """
    for name, t in (("a", a), ("b", b)):
        if not isinstance(t, torch.Tensor):
            fail(f"`{name}` is {type(t).__name__}, not a torch.Tensor", param=name)
    if offs is not None and not isinstance(offs, torch.Tensor):
        fail(f"`offs` is {type(offs).__name__}, not a torch.Tensor or None", param="offs")
    case = f"{a.dim()}d{b.dim()}d"
    if case not in CASES:
        fail(f"a is {tuple(a.shape)} and b {tuple(b.shape)}; each must be 2-D or 3-D",
             param="a" if a.dim() not in (2, 3) else "b",
             hint="the cases: (T, K) x (G, K, N), (G, M, K) x (K, T), (M, T) x (T, N) and (G, M, K) x (G, K, N)")
    if a.dtype not in AB_DTYPES or b.dtype != a.dtype:
        fail(f"a is {a.dtype} and b is {b.dtype}; both must be torch.bfloat16 or both torch.float16", param="a")
    out_dtype = a.dtype if out_dtype is None else out_dtype
    if out_dtype not in OUT_DTYPES:
        fail(f"out_dtype {out_dtype} is not supported", param="out_dtype",
             hint="use torch.bfloat16, torch.float16 or torch.float32 (accumulation is fp32 always)")
    _check_offs(case, offs, a)
    if a.shape[-1] != b.shape[-2 if case != "2d2d" else 0]:
        fail(f"a is {tuple(a.shape)} and b is {tuple(b.shape)}: the reduction modes "
             f"(a's last, b's {'first' if case == '2d2d' else 'second to last'}) must agree", param="b")
    groups = offs.shape[0] if offs is not None else a.shape[0]
    if case == "3d3d" and b.shape[0] != groups or case == "2d3d" and b.shape[0] != groups \
            or case == "3d2d" and a.shape[0] != groups:
        fail(f"a is {tuple(a.shape)}, b is {tuple(b.shape)} and offs has "
             f"{offs.shape[0] if offs is not None else 'no'} entries: the group counts must agree", param="b")
    if offs is not None and not 1 <= groups <= MAX_GROUPS:
        fail(f"{groups} groups; this kernel supports 1 to {MAX_GROUPS}", param="offs",
             hint="each CTA keeps an 8-byte scheduler row per group in shared memory; "
             "split larger problems into several calls")
    a_layout, b_layout = _layout(a, "a"), _layout(b, "b")

    if case == "2d3d":
        (t, k), (_, _, n) = a.shape, b.shape
        problem = dict(ragged="m", a_major="k" if a_layout == "row" else "m",
                       b_major="n" if b_layout == "row" else "k", m=0, n=n, k=k, total=t,
                       out_shape=(t, n), swapped=False, c_back=t * n)
    elif case == "3d2d":
        (_, m, k), (_, t) = a.shape, b.shape
        # result^T (T, M) = b^T (T, K) @ a[g]^T: the kernel's A is b^T, its B is a
        problem = dict(ragged="m", a_major="k" if b_layout == "col" else "m",
                       b_major="k" if a_layout == "row" else "n", m=0, n=m, k=k, total=t,
                       out_shape=(m, t), swapped=True, c_back=t * m)
    elif case == "2d2d":
        (m, t), (_, n) = a.shape, b.shape
        problem = dict(ragged="k", a_major="m" if a_layout == "col" else "k",
                       b_major="n" if b_layout == "row" else "k", m=m, n=n, k=0, total=t,
                       out_shape=(groups, m, n), swapped=False, c_back=0)
    else:
        (_, m, k), (_, _, n) = a.shape, b.shape
        problem = dict(ragged="batch", a_major="k" if a_layout == "row" else "m",
                       b_major="n" if b_layout == "row" else "k", m=0, n=n, k=k, total=m,
                       out_shape=(groups, m, n), swapped=False, c_back=0)
        if m * max(k, n) >= 2**31:
            fail(f"M x max(K, N) = {m * max(k, n)} elements per batch entry; this kernel needs fewer than 2**31",
                 param="a")
    if activation == "swiglu":
        problem = _swiglu(case, problem)
    problem = Problem(case=case, groups=groups, out_dtype=out_dtype, activation=activation, **problem)

    row_bytes = problem.kernel_out_shape[-1] * out_dtype.itemsize
    if row_bytes % 16:
        fail(f"the result is {problem.out_shape}: its rows of {problem.kernel_out_shape[-1]} x "
             f"{out_dtype.itemsize} bytes must be 16-byte multiples for TMA", param="b")
    if problem.n * max(problem.k, problem.m) >= 2**31:
        fail(f"{problem.n} x {max(problem.k, problem.m)} elements per group; this kernel needs fewer than 2**31",
             param="b")
    if addresses:
        for name, t in (("a", a), ("b", b)):
            if t.data_ptr() % 16:
                fail(f"{name} must start at a 16-byte aligned address", param=name,
                     hint="pass tensors that start at their allocation, or .clone() them")
        if offs is not None and offs.stride(0) != 1 and offs.shape[0] > 1:
            fail(f"offs has stride {offs.stride(0)}; it must be contiguous", param="offs",
                 hint="pass offs.contiguous()")
    if a.device.type != "cuda":
        fail(f"a is on {a.device}; grouped_mm runs on a CUDA GPU", param="a")
    if b.device != a.device:
        fail(f"b is on {b.device} and a on {a.device}; both must be on the same GPU", param="b")
    return problem


def _swiglu(case: str, problem: dict) -> dict:
    """The SwiGLU product's problem: b's last mode holds the gate, then the up projection."""
    if case != "2d3d":
        fail(f"grouped_mm_swiglu takes the 2D x 3D case (a (T, K), b (G, K, N)), not {case[:2].upper()} x "
             f"{case[2:].upper()}", param="b")
    n = problem["n"]
    if problem["b_major"] != "k":
        fail("b has its N mode contiguous; grouped_mm_swiglu reads b K-major", param="b",
             hint="pass the weights as models store them, w13 (G, N, K), transposed: w13.transpose(-2, -1)")
    if n % 128:
        fail(f"b has N = {n} columns: gate and up halves of {n / 2:g}; each half must be a multiple of 64",
             param="b", hint="pad the intermediate size to a multiple of 64")
    t = problem["total"]
    return {**problem, "out_shape": (t, n // 2), "c_back": t * (n // 2)}


def _check_offs(case: str, offs: Any, a: torch.Tensor) -> None:
    if case == "3d3d":
        if offs is not None:
            fail("offs is given for a 3D x 3D (batched) product, which has no groups to delimit", param="offs",
                 hint="pass offs=None")
        return
    if offs is None:
        fail(f"the {case[:2].upper()} x {case[2:].upper()} case needs offs, the groups' cumulative ends",
             param="offs")
    if offs.dim() != 1 or offs.dtype != torch.int32:
        fail(f"offs is {offs.dtype} of shape {tuple(offs.shape)}; it must be a 1-D torch.int32 tensor of "
             "cumulative ends", param="offs")
    if offs.device.type != "cpu" and offs.device != a.device:
        fail(f"offs is on {offs.device}; keep it on a's device ({a.device}) or on the CPU", param="offs")


def _layout(t: torch.Tensor, name: str) -> str:
    """"row" or "col": which of the last two modes is contiguous, the other packed and a
    16-byte multiple apart (a 3-D tensor's matrices packed one after the other)."""
    rows, cols = t.shape[-2:]
    for layout, strides, lead in (("row", (cols, 1), cols), ("col", (1, rows), rows)):
        full = (rows * cols, *strides) if t.dim() == 3 else strides
        if strides_match(t, full):
            if (lead * t.element_size()) % 16:
                fail(f"{name} is {tuple(t.shape)}, {layout}-major: its rows of {lead} elements must be "
                     "16-byte multiples for TMA (a multiple of 8 for 16-bit types)", param=name)
            return layout
    fail(f"{name} has strides {t.stride()} for shape {tuple(t.shape)}; expected row-major or column-major "
         "(the transpose of a contiguous tensor) last two modes, packed", param=name,
         hint=f"pass {name}.contiguous(), or keep the tensor whose transpose you pass contiguous")


def strides_match(t: torch.Tensor, expected: Tuple[int, ...]) -> bool:
    """The strides TMA will be told, ignoring modes of extent 1 (any stride serves them)."""
    return all(size == 1 or stride == want for size, stride, want in zip(t.shape, t.stride(), expected))


def check_host_offsets(offs: torch.Tensor, problem: Problem) -> None:
    """A CPU `offs`, checked as the kernel would need it: non-decreasing, from 0 up to at most
    the grouped mode's extent, each group with rows starting (and, where
    `problem.ends_aligned`, ending) at a multiple of `problem.group_alignment`. (A CUDA
    `offs` is not read on the host; the kernel clamps it, and traps at such a group.)"""
    ends = offs.tolist()
    previous, align = 0, problem.group_alignment
    for g, end in enumerate(ends):
        if end < previous:
            fail(f"offs[{g}] = {end} is below offs[{g - 1}] = {previous}" if g else f"offs[0] = {end} < 0",
                 param="offs", hint="offs holds cumulative ends: non-decreasing, starting at >= 0")
        unaligned = previous % align or problem.ends_aligned and end % align
        if end > previous and unaligned:
            operand = problem.t_contiguous_operand
            where = (f"starts at {previous}" if previous % align else f"ends at {end}")
            fail(f"group {g} {where}, not a multiple of {align}: `{operand}` has the grouped mode T "
                 f"contiguous, and TMA reads it only from 16-byte aligned starts", param="offs",
                 hint=_t_contiguous_hint(problem, align))
        previous = end
    if previous > problem.offs_extent:
        fail(f"offs[-1] = {previous} exceeds the grouped mode's extent {problem.offs_extent}", param="offs")


def _t_contiguous_hint(problem: Problem, align: int) -> str:
    if problem.ragged == "k":
        return (f"make every group's size a multiple of {align}, or pass a column-major `a` and a row-major `b` "
                "(T strided: x.t() of a contiguous x, and a contiguous dy)")
    return (f"make every group's size a multiple of {align}, or pass {problem.t_contiguous_operand} with K "
            "contiguous (.contiguous())")


HOPPER = (9, 0)  # the compute capability the ops' kernels are built for (sm_90a)


def require_hopper(device: torch.device, param: str, op: str) -> None:
    """The GPU of `device` is a Hopper: every kernel of `gcdsl.ops` uses its WGMMA, TMA,
    clusters or bulk copies and is compiled for sm_90a, which no other generation runs
    (Blackwell's sm_100 included). Checked before anything is compiled for the device."""
    capability = _capability(device.index)
    if capability != HOPPER:
        fail(f"{param} is on {device}, {torch.cuda.get_device_name(device.index)} (sm_{capability[0]}{capability[1]}); "
             f"{op}'s kernels are built for Hopper GPUs (sm_90: H100, H200, GH200)", param=param,
             hint="on other GPUs, use torch._grouped_mm (or torch's own MoE layer)")


@functools.lru_cache(maxsize=None)
def _capability(index: int) -> Tuple[int, int]:
    return torch.cuda.get_device_capability(index)


_TORCH_DIR = os.path.dirname(os.path.abspath(torch.__file__)) + os.sep


def fail(message: str, *, param: Optional[str] = None, hint: Optional[str] = None) -> None:
    """A gcdsl error at the user's call of the op: the innermost frame outside gcdsl, torch
    (the custom op's dispatch, autograd) and generated code (torch.fx graphs)."""
    raise GcdslError(Diag.BAD_OP_INPUT, message, param=param, hint=hint,
                     location=caller_location(also_skip=(_TORCH_DIR,), skip_generated=True))
