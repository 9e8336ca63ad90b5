"""`gcdsl.ops.grouped_mm`: the 2D x 3D case of `torch._grouped_mm` on Hopper.

    out = gcdsl.ops.grouped_mm(a, b, offs)         # out_dtype=None: a's dtype

a     (M, K) bf16 or fp16, row-major; rows offs[g-1]:offs[g] belong to group g
b     (G, K, N), the same dtype, stored K-major as torch keeps expert weights:
      `w.transpose(-2, -1)` of a contiguous (G, N, K) tensor
offs  (G,) int32 cumulative row ends; groups of 0 rows are allowed
out   (M, N) in out_dtype (bf16, fp16 or fp32); rows past offs[-1] are not
      written (torch leaves them undefined too)

The kernel (`hopper_grouped_gemm.py`) stores each group's rows through its own
TMA descriptor, encoded on the host from `offs`, so the host needs the values
of `offs`: a CUDA `offs` is copied to the host (`.cpu()`, which waits for the
work queued before it); pass a CPU `offs` to avoid that wait.

Per (dtypes, G, N, K, tile) two kernels are compiled together, once: CTAs alone
and CTAs in pairs (a 2x1 cluster: two M-tiles of a group share each B tile by TMA
multicast). The total M and `offs` are runtime values, so new offsets or new data
never recompile. Registered as the custom op `gcdsl::grouped_mm` (with a fake
implementation), so it composes with `torch.compile`.

Heuristics. Tile (from N only): 128x256, unless N <= 128 or the last 256-wide tile
would be at most half full (N mod 256 in 1..128): 128x128. Cluster (from `offs`,
per call, both compiled): pairs when at most 5% of the paired M-tiles would be idle
(a group with an odd number of M-tiles leaves one CTA of its last pair idle) and
N mod tile is 0 or more than half a tile (each CTA's half of the last B tile starts
inside B), else single CTAs.
"""
from __future__ import annotations

import functools
import inspect
import os
from typing import Any, Dict, List, Optional, Tuple

import numpy as np
import torch
import torch.utils._python_dispatch

from ..abi import DESCRIPTOR_BYTES, PARAM_LIMIT
from ..diagnostics import Diag, GcdslError, SourceLocation

# What the kernel's parameters hold besides the two tables, as the DSL lays them out:
# three TMA atoms (A, B, the store template) and two runtime extents. The CPU
# compile test checks this figure against the PTX.
FIXED_PARAM_BYTES = 640
SCHED_ROW_BYTES = 12  # (tile_end, row_start, rows) Int32


def param_bytes(groups: int) -> int:
    """Kernel parameter bytes for G groups: fixed part, G store descriptors, the scheduler table."""
    sched = -(-SCHED_ROW_BYTES * groups // 16) * 16
    return FIXED_PARAM_BYTES + DESCRIPTOR_BYTES * groups + sched


MAX_GROUPS = max(g for g in range(1, 400) if param_bytes(g) <= PARAM_LIMIT)

_AB_DTYPES = (torch.bfloat16, torch.float16)
_OUT_DTYPES = (torch.bfloat16, torch.float16, torch.float32)


def grouped_mm(a: torch.Tensor, b: torch.Tensor, offs: torch.Tensor,
               out_dtype: Optional[torch.dtype] = None) -> torch.Tensor:
    """`torch._grouped_mm(a, b, offs=offs, out_dtype=out_dtype)` for 2-D `a`, 3-D `b`."""
    if _plain_eager_call(a, b, offs):
        # The same code as the op's, without the dispatcher's cost (tens of microseconds).
        return _grouped_mm_impl(a, b, offs, out_dtype)
    return torch.ops.gcdsl.grouped_mm(a, b, offs, out_dtype)


def _plain_eager_call(a: Any, b: Any, offs: Any) -> bool:
    """Plain tensors, no tracing (torch.compile, make_fx, fake tensors), no autograd."""
    in_mode = getattr(torch.utils._python_dispatch, "is_in_torch_dispatch_mode", None)
    return (not torch.compiler.is_compiling() and in_mode is not None and not in_mode()
            and all(type(t) is torch.Tensor for t in (a, b, offs))
            and not (a.requires_grad or b.requires_grad))


@torch.library.custom_op("gcdsl::grouped_mm", mutates_args=())
def _grouped_mm_op(a: torch.Tensor, b: torch.Tensor, offs: torch.Tensor,
                   out_dtype: Optional[torch.dtype] = None) -> torch.Tensor:
    return _grouped_mm_impl(a, b, offs, out_dtype)


@_grouped_mm_op.register_fake
def _grouped_mm_fake(a, b, offs, out_dtype=None):
    out_dtype = check_inputs(a, b, offs, out_dtype, addresses=False)  # fake tensors have none
    return a.new_empty((a.shape[0], b.shape[2]), dtype=out_dtype)


def _grouped_mm_impl(a, b, offs, out_dtype):
    out_dtype = check_inputs(a, b, offs, out_dtype)
    out = torch.empty((a.shape[0], b.shape[2]), dtype=out_dtype, device=a.device)
    grouped_mm_into(a, b, offs, out, checked=True)
    return out


def grouped_mm_into(a: torch.Tensor, b: torch.Tensor, offs: torch.Tensor, out: torch.Tensor,
                    *, checked: bool = False, tile_n: Optional[int] = None,
                    cluster_m: Optional[int] = None) -> torch.Tensor:
    """Like `grouped_mm`, into a given (M, N) row-major `out` (tests poison it first).

    `tile_n` (128 or 256) and `cluster_m` (1 or 2) override the heuristics; the tests
    and the benchmark use them to run every variant.
    """
    if not checked:
        check_inputs(a, b, offs, out.dtype)
        if out.shape != (a.shape[0], b.shape[2]) or not _strides_match(out, (b.shape[2], 1)) \
                or out.device != a.device:
            _fail(f"`out` is {tuple(out.shape)} with strides {out.stride()} on {out.device}; expected a "
                  f"contiguous {(a.shape[0], b.shape[2])} tensor on {a.device}", param="out")
    ends = _host_offsets(offs, a.shape[0])
    if a.shape[0] == 0 or ends[-1] == 0:
        return out  # nothing to compute
    with torch.cuda.device(a.device):  # compile, load and launch in a's device context
        plan = _plan_for(a.dtype, out.dtype, b.shape[0], b.shape[2], b.shape[1], a.device, tile_n)
        plan.launch(a, b, ends, out, cluster_m)
    return out


# ---------------------------------------------------------------------------------------
# Checks: every refusal is a GcdslError at the caller's line
# ---------------------------------------------------------------------------------------
def check_inputs(a: Any, b: Any, offs: Any, out_dtype: Optional[torch.dtype], *,
                 addresses: bool = True) -> torch.dtype:
    """Shapes, dtypes, devices, layouts and alignment (not the values of `offs`); the output dtype.

    `addresses=False` skips the base-address alignment check (for fake tensors).
    """
    for name, t in (("a", a), ("b", b), ("offs", offs)):
        if not isinstance(t, torch.Tensor):
            _fail(f"`{name}` is {type(t).__name__}, not a torch.Tensor", param=name)
    if a.dim() != 2 or b.dim() != 3 or offs.dim() != 1:
        _fail(f"expected a (M, K), b (G, K, N) and offs (G,); got a {tuple(a.shape)}, b {tuple(b.shape)}, "
              f"offs {tuple(offs.shape)}", hint="this is the 2D x 3D case of torch._grouped_mm")
    m, k = a.shape
    groups, k_b, n = b.shape
    if a.dtype not in _AB_DTYPES or b.dtype != a.dtype:
        _fail(f"a is {a.dtype} and b is {b.dtype}; both must be torch.bfloat16 or both torch.float16",
              param="a")
    out_dtype = a.dtype if out_dtype is None else out_dtype
    if out_dtype not in _OUT_DTYPES:
        _fail(f"out_dtype {out_dtype} is not supported", param="out_dtype",
              hint="use torch.bfloat16, torch.float16 or torch.float32 (accumulation is fp32 always)")
    if offs.dtype != torch.int32:
        _fail(f"offs is {offs.dtype}; it must be torch.int32 cumulative row ends", param="offs")
    if k_b != k or offs.shape[0] != groups:
        _fail(f"a is {tuple(a.shape)}, b is {tuple(b.shape)} and offs has {offs.shape[0]} entries: "
              "K (a.shape[1], b.shape[1]) and G (b.shape[0], offs.shape[0]) must agree", param="b")
    if groups < 1 or groups > MAX_GROUPS:
        _fail(f"{groups} groups; this kernel supports 1 to {MAX_GROUPS}", param="b",
              hint=f"each group's output descriptor (128 B) and scheduler row live in the kernel's "
              f"{PARAM_LIMIT}-byte parameter space; split larger problems into several calls")
    if not _strides_match(a, (k, 1)):
        _fail(f"a has strides {a.stride()}; it must be row-major (contiguous)", param="a",
              hint="pass a.contiguous()")
    if not _strides_match(b, (n * k, 1, k)):
        _fail(f"b has strides {b.stride()}; expected {(n * k, 1, k)}, the transpose of a contiguous "
              f"(G, N, K) tensor", param="b",
              hint="keep expert weights as a contiguous (G, N, K) tensor w and pass w.transpose(-2, -1)")
    out_bytes = out_dtype.itemsize
    if k % 8 or (n * out_bytes) % 16:
        _fail(f"K = {k} and N = {n}: TMA needs rows of 16-byte multiples (K a multiple of 8, "
              f"N x {out_bytes} bytes a multiple of 16)", param="b")
    if addresses and (a.data_ptr() % 16 or b.data_ptr() % 16):
        _fail("a and b must start at 16-byte aligned addresses", param="a",
              hint="pass tensors that start at their allocation, or .clone() them")
    if n * k >= 2**31:
        _fail(f"N x K = {n * k} elements per group; this kernel needs fewer than 2**31", param="b")
    if a.device.type != "cuda" or b.device != a.device:
        _fail(f"a is on {a.device} and b on {b.device}; both must be on the same CUDA device", param="b")
    if offs.device.type != "cpu" and offs.device != a.device:
        _fail(f"offs is on {offs.device}; keep it on the CPU or on a's device ({a.device})", param="offs")
    return out_dtype


def _strides_match(t: torch.Tensor, expected: Tuple[int, ...]) -> bool:
    """The strides TMA will be told, ignoring modes of extent 1 (any stride serves them)."""
    return all(size == 1 or stride == want for size, stride, want in zip(t.shape, t.stride(), expected))


def _host_offsets(offs: torch.Tensor, m: int) -> List[int]:
    """The values of `offs`, checked: non-decreasing, from 0 up to at most M."""
    ends = offs.tolist()  # a CUDA offs is copied to the host here (a synchronising copy)
    previous = 0
    for g, end in enumerate(ends):
        if end < previous:
            _fail(f"offs[{g}] = {end} is below offs[{g - 1}] = {previous}" if g else f"offs[0] = {end} < 0",
                  param="offs", hint="offs holds cumulative row ends: non-decreasing, starting at >= 0")
        previous = end
    if previous > m:
        _fail(f"offs[-1] = {previous} exceeds the {m} rows of a", param="offs")
    return ends


def _fail(message: str, *, param: Optional[str] = None, hint: Optional[str] = None) -> None:
    raise GcdslError(Diag.BAD_OP_INPUT, message, location=_caller(), param=param, hint=hint)


def _caller() -> Optional[SourceLocation]:
    """The innermost frame outside gcdsl and torch: the line that called grouped_mm."""
    here = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    torch_dir = os.path.dirname(os.path.abspath(torch.__file__))
    frame = inspect.currentframe()
    while frame is not None:
        name = frame.f_code.co_filename
        generated = name.startswith("<")  # exec'd or generated code (torch.fx graphs, ...)
        if not generated and not os.path.abspath(name).startswith((here + os.sep, torch_dir + os.sep)):
            return SourceLocation(name, frame.f_lineno)
        frame = frame.f_back
    return None


# ---------------------------------------------------------------------------------------
# Compiled kernels and their tables, one per configuration
# ---------------------------------------------------------------------------------------
def pick_tile_n(n: int) -> int:
    """128x256 tiles unless a 256-wide last tile would be at most half full."""
    return 128 if n <= 128 or 0 < n % 256 <= 128 else 256


def pick_cluster_m(rows: List[int], n: int, tile_n: int) -> int:
    """2 (pairs of CTAs on two M-tiles of a group, sharing each B tile by multicast) when
    at most 5% of the pairs' M-tiles would be idle (groups of an odd number of M-tiles
    leave one idle) and N suits pairs (`pairs_fit`); else 1. Both kernels are compiled
    together: no recompile either way.
    """
    from .hopper_grouped_gemm import pairs_fit

    m_tiles = [-(-r // 128) for r in rows]
    slots = sum(2 * -(-t // 2) for t in m_tiles)
    return 2 if slots and sum(m_tiles) >= 0.95 * slots and pairs_fit(n, tile_n) else 1


@functools.lru_cache(maxsize=None)
def _max_active_clusters(device_index: int, cluster_m: int) -> int:
    """Clusters of `cluster_m` CTAs of one CTA per SM that fit on the device at once."""
    import cutlass.utils

    return max(1, cutlass.utils.HardwareInfo(device_index).get_max_active_clusters(cluster_m))


class _Kernel:
    """One compiled cluster size of a configuration, with its scheduler table."""

    def __init__(self, plan: "_Plan", cluster_m: int, hgg: Any) -> None:
        import cutlass
        import cutlass.cute as cute

        import gcdsl
        import gcdsl.launch

        self.cluster_m = cluster_m
        self.gemm = hgg.HopperGroupedGemm(plan.ab, plan.c, plan.groups, plan.n, plan.k, plan.tile_n, cluster_m)
        self.sched = gcdsl.grid_constant(np.zeros((plan.groups, hgg.SCHED_COLUMNS), dtype=np.int32))
        self.max_clusters = _max_active_clusters(plan.device.index or 0, cluster_m)
        self.last_ends: Optional[Tuple] = None
        self.total = 0  # cluster tiles
        # Through TVM-FFI: called with plain ints (addresses, extents, the stream
        # handle) and the two tables, converted in C rather than by the DSL's Python
        # marshalling (host cost of a call: W3 and W5 in benchmarks/RESULTS.md).
        self.compiled = gcdsl.launch.compile_tvm_ffi(
            self.gemm, plan.ptr(plan.ab, 0), plan.ptr(plan.ab, 0), plan.ptr(plan.c, 0), cutlass.Int32(1),
            plan.table, self.sched, cutlass.Int32(cluster_m), cute.runtime.make_fake_stream(),
        )

    def update(self, ends: Tuple[int, ...], tile_n: int, n: int) -> None:
        if ends != self.last_ends:
            table = schedule(list(ends), n, tile_n, self.cluster_m)
            self.sched.update(table)
            self.total = int(table[-1, 0])
            self.last_ends = ends

    @property
    def num_ctas(self) -> int:
        return self.cluster_m * min(self.total, self.max_clusters)


class _Plan:
    """A configuration: its compiled kernels (cluster sizes 1 and 2) and its descriptor table.

    Tables are updated in place between launches (same shape: no recompile); when `offs`
    and the output's address are unchanged from the last call, nothing is re-encoded.
    """

    def __init__(self, ab_dtype: torch.dtype, out_dtype: torch.dtype, groups: int, n: int, k: int,
                 device: torch.device, tile_n: int) -> None:
        import cutlass
        import cutlass.cute as cute

        import gcdsl
        from . import hopper_grouped_gemm as hgg

        to_dsl = {torch.bfloat16: cutlass.BFloat16, torch.float16: cutlass.Float16, torch.float32: cutlass.Float32}
        self.ab, self.c = to_dsl[ab_dtype], to_dsl[out_dtype]
        self.groups, self.n, self.k, self.tile_n, self.device = groups, n, k, tile_n, device
        self._cute = cute
        self.descs = gcdsl.TensorMapTable(box=hgg.EPI_TILE, swizzle=hgg.output_swizzle(self.c))
        self.table = self.descs.placeholder(groups, self.c)
        self._last: Optional[Tuple] = None
        self._pairs_fit = hgg.pairs_fit(n, tile_n)
        self.kernels = {m: _Kernel(self, m, hgg) for m in ((1, 2) if self._pairs_fit else (1,))}

    def ptr(self, dtype: Any, address: int) -> Any:
        return self._cute.runtime.make_ptr(dtype, address, self._cute.AddressSpace.gmem, assumed_align=16)

    def launch(self, a: torch.Tensor, b: torch.Tensor, ends: List[int], out: torch.Tensor,
               cluster_m: Optional[int] = None) -> None:
        key = (out.data_ptr(), tuple(ends))
        if key != self._last:
            self.table = self.descs.encode(output_views(ends, out))
            # The table would hold the views (and so the output) until the next encode;
            # `key` already says when to re-encode, so let the output go with its caller.
            self.descs.invalidate()
            starts = [0] + list(ends[:-1])
            self._cluster = pick_cluster_m([e - s for s, e in zip(starts, ends)], self.n, self.tile_n)
            self._last = key
        if cluster_m == 2 and not self._pairs_fit:
            raise ValueError(f"pairs need N mod {self.tile_n} to be 0 or above {self.tile_n // 2}; N = {self.n}")
        kernel = self.kernels[cluster_m or self._cluster]
        kernel.update(key[1], self.tile_n, self.n)
        if kernel.total == 0:
            return
        kernel.compiled(a.data_ptr(), b.data_ptr(), out.data_ptr(), a.shape[0], self.table, kernel.sched,
                        kernel.num_ctas, torch.cuda.current_stream(a.device).cuda_stream)


def schedule(ends: List[int], n: int, tile_n: int, cluster_m: int = 1) -> np.ndarray:
    """The scheduler table: (tile_end, row_start, rows) per group, Int32.

    Tiles are cluster tiles: `cluster_m` M-tiles of 128 rows by one `tile_n` column tile;
    `tile_end` counts them cumulatively. A group of 0 rows gets none.
    """
    from .hopper_grouped_gemm import TILE_M

    ends_np = np.asarray(ends, dtype=np.int64)
    starts = np.concatenate(([0], ends_np[:-1]))
    rows = ends_np - starts
    tiles = -(-rows // (TILE_M * cluster_m)) * -(-n // tile_n)
    return np.stack([np.cumsum(tiles), starts, rows], axis=1).astype(np.int32)


def output_views(ends: List[int], out: torch.Tensor) -> List[torch.Tensor]:
    """Each group's rows of `out`: what its store descriptor describes.

    A group of 0 rows gets a one-row view: a descriptor cannot describe no rows, and
    the kernel never uses it (the group has no tiles).
    """
    starts = [0] + list(ends[:-1])
    return [out[s:e] if e > s else out[:1] for s, e in zip(starts, ends)]


_PLANS: Dict[Tuple, _Plan] = {}


def _plan_for(ab_dtype, out_dtype, groups, n, k, device, tile_n=None) -> _Plan:
    tile_n = tile_n or pick_tile_n(n)
    key = (ab_dtype, out_dtype, groups, n, k, tile_n, device.index)
    if key not in _PLANS:
        _PLANS[key] = _Plan(ab_dtype, out_dtype, groups, n, k, device, tile_n)
    return _PLANS[key]


def compiled_count() -> int:
    """Kernels compiled so far in this process (tests check that offs never adds one)."""
    return sum(len(plan.kernels) for plan in _PLANS.values())
