"""`gcdsl.ops.grouped_mm`: the 2D x 3D case of `torch._grouped_mm` on Hopper.

    out = gcdsl.ops.grouped_mm(a, b, offs)         # out_dtype=None: a's dtype

a     (M, K) bf16 or fp16, row-major; rows offs[g-1]:offs[g] belong to group g
b     (G, K, N), the same dtype, stored K-major as torch keeps expert weights:
      `w.transpose(-2, -1)` of a contiguous (G, N, K) tensor
offs  (G,) int32 cumulative row ends; groups of 0 rows are allowed
out   (M, N) in out_dtype (bf16, fp16 or fp32); rows past offs[-1] are not
      written (torch leaves them undefined too)

`offs` may live on the GPU, where an MoE router makes it: the kernel reads it
from global memory and its persistent scheduler derives each group's tiles from
it on the device (`hopper_grouped_gemm.py`). A call never copies `offs` to the
host or waits for the GPU, and can be captured in a CUDA graph: a replay reads
whatever `offs` holds then. A CUDA `offs` is not checked (that would need its
values on the host): the kernel clamps each end to [previous end, M], so a bad
`offs` computes wrong rows but never writes outside `out[:M]`. A CPU `offs` is
checked on the host (non-decreasing, at most M; a GcdslError otherwise) and then
copied to a's device, a host-to-device copy of 4 G bytes before the launch.

The three TMA descriptors (A, B and one ragged descriptor that clips every
group's store at its own last row) depend on the tensors' addresses and extents
only, never on `offs`. They live in the kernel's grid-constant parameter space;
nothing is written to a descriptor on the device.

Per (dtypes, G, N, K, tile) two kernels are compiled together, once: CTAs alone
and CTAs in pairs (a 2x1 cluster: two M-tiles of a group share each B tile by TMA
multicast). The total M and `offs` are runtime values, so new offsets or new data
never recompile. Registered as the custom op `gcdsl::grouped_mm` (with a fake
implementation), so it composes with `torch.compile`.

Heuristics, from shapes alone (never `offs`). Tile: 128x256, unless N <= 128, the
last 256-wide tile would be at most half full (N mod 256 in 1..128), or the groups
that can have rows (at most min(G, M)) make no more 256-wide tiles than half the SMs
(decode: 128-wide tiles put twice the CTAs to streaming B): 128x128. Cluster (from M
and G): pairs when a group averages at least `PAIR_ROWS_PER_GROUP` rows (a group
whose M-tile count is odd leaves one CTA of its last pair idle: with about half the
groups odd, that is one paired M-tile in 17 at most) and N mod tile is 0 or more than
half a tile (each CTA's half of the last B tile starts inside B), else single CTAs.
"""
from __future__ import annotations

import dataclasses
import functools
import inspect
import os
from typing import Any, Dict, Optional, Tuple

import torch
import torch.utils._python_dispatch

from ..diagnostics import Diag, GcdslError, SourceLocation

# Groups per call: the scheduler's table of 8 bytes a group sits in each CTA's shared
# memory next to the pipeline (from 353 groups on it costs the 128x256 tile one of
# its four stages), and one warp of 32 lanes reads offs at G / 32 values a lane.
MAX_GROUPS = 1024
# Pairs of CTAs when a group averages at least this many rows, 8 M-tiles of 128: with
# about half the groups' last pair idle at one CTA, one paired M-tile in 17 idles, which
# pairs make up for by halving B's traffic from L2 (W5's forced configurations show both).
PAIR_ROWS_PER_GROUP = 1024

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
    launch = _launch_for(a, b, offs, out_dtype)
    out = torch.empty(launch.out_shape, dtype=launch.out_dtype, device=a.device)
    return launch(a, b, offs, out)


def grouped_mm_into(a: torch.Tensor, b: torch.Tensor, offs: torch.Tensor, out: torch.Tensor,
                    *, tile_n: Optional[int] = None, cluster_m: Optional[int] = None) -> torch.Tensor:
    """Like `grouped_mm`, into a given (M, N) row-major `out` (tests poison it first).

    `tile_n` (128 or 256) and `cluster_m` (1 or 2) override the heuristics; the tests
    and the benchmark use them to run every variant.
    """
    launch = _launch_for(a, b, offs, out.dtype, tile_n, cluster_m)
    if out.shape != launch.out_shape or not _strides_match(out, (launch.out_shape[1], 1)) \
            or out.device != a.device or out.data_ptr() % 16:
        _fail(f"`out` is {tuple(out.shape)} with strides {out.stride()} on {out.device}; expected a "
              f"contiguous {launch.out_shape} tensor on {a.device}, 16-byte aligned", param="out")
    return launch(a, b, offs, out)


# ---------------------------------------------------------------------------------------
# The call path: everything that depends only on the inputs' signature is done once
# ---------------------------------------------------------------------------------------
class _Launch:
    """One input signature, checked, with its compiled kernel and launch configuration.

    A call then reads nothing but the tensors' addresses (and, for a CPU `offs`, its values).
    """

    def __init__(self, a, b, offs, out_dtype, tile_n, cluster_m) -> None:
        self.out_dtype = check_inputs(a, b, offs, out_dtype)
        self.m, n = a.shape[0], b.shape[2]
        self.out_shape = (self.m, n)
        self.host_offs = offs.device.type == "cpu"
        self.device = a.device
        if self.m == 0:
            return  # nothing to compute, nothing to compile
        tile_n = tile_n or pick_tile_n(n, self.m, b.shape[0], _sm_count(a.device.index))
        with torch.cuda.device(a.device):  # compile and load in a's device context
            plan = _plan_for(a.dtype, self.out_dtype, b.shape[0], n, b.shape[1], a.device, tile_n)
        cluster_m = cluster_m or pick_cluster_m(self.m, plan.groups, n, plan.tile_n)
        self.kernel = plan.kernel(cluster_m)
        clusters = min(cluster_tile_bound(self.m, plan.groups, n, plan.tile_n, cluster_m),
                       plan.max_clusters[cluster_m])
        self.ctas = clusters * cluster_m
        # The ragged store descriptor's base lies M rows before the output (hopper_grouped_gemm's
        # docstring). Device addresses lie far above any one tensor's size.
        self.c_back = self.m * n * self.out_dtype.itemsize

    def __call__(self, a, b, offs, out):
        if self.host_offs:
            if torch.cuda.is_current_stream_capturing():
                _fail("offs is on the CPU while a CUDA graph is being captured: its copy to the GPU "
                      "cannot be replayed with new values", param="offs",
                      hint="keep offs on the GPU (as the router makes it); a replay then reads whatever it holds")
            _check_host_offsets(offs, self.m)
            offs = offs.to(self.device, non_blocking=True)  # a staged copy: no wait for the GPU
        if self.m == 0:
            return out
        index = self.device.index
        if index != torch.cuda.current_device():
            with torch.cuda.device(index):
                return self._launch(a, b, offs, out, index)
        return self._launch(a, b, offs, out, index)

    def _launch(self, a, b, offs, out, index):
        """The kernel on a's device, now current; `offs` is on it too."""
        self.kernel(a.data_ptr(), b.data_ptr(), out.data_ptr() - self.c_back, offs.data_ptr(), self.m, self.ctas,
                    _current_stream(index))
        return out


def _current_stream(index: int) -> int:
    return torch._C._cuda_getCurrentRawStream(index)  # torch.cuda.current_stream(), without the Python object


_LAUNCHES: Dict[Tuple, _Launch] = {}
_MAX_LAUNCHES = 4096  # distinct signatures kept (M varies with the batch); then start afresh


def _launch_for(a, b, offs, out_dtype, tile_n=None, cluster_m=None) -> _Launch:
    """The checked launch for these inputs' signature: shapes, strides, dtypes, devices, alignment."""
    try:
        key = (a.shape, a.stride(), a.dtype, a.device, a.data_ptr() % 16, b.shape, b.stride(), b.dtype, b.device,
               b.data_ptr() % 16, offs.shape, offs.stride(), offs.dtype, offs.device, out_dtype, tile_n, cluster_m)
    except (AttributeError, TypeError):
        key = None  # not a tensor: check_inputs says which
    launch = _LAUNCHES.get(key) if key is not None else None
    if launch is None:
        launch = _Launch(a, b, offs, out_dtype, tile_n, cluster_m)
        if len(_LAUNCHES) >= _MAX_LAUNCHES:
            _LAUNCHES.clear()
        _LAUNCHES[key] = launch
    return launch


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
              hint="each CTA keeps an 8-byte scheduler row per group in shared memory; "
              "split larger problems into several calls")
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
        _fail(f"offs is on {offs.device}; keep it on a's device ({a.device}) or on the CPU", param="offs")
    if addresses and offs.stride(0) != 1 and groups > 1:
        _fail(f"offs has stride {offs.stride(0)}; it must be contiguous", param="offs", hint="pass offs.contiguous()")
    return out_dtype


def _strides_match(t: torch.Tensor, expected: Tuple[int, ...]) -> bool:
    """The strides TMA will be told, ignoring modes of extent 1 (any stride serves them)."""
    return all(size == 1 or stride == want for size, stride, want in zip(t.shape, t.stride(), expected))


def _check_host_offsets(offs: torch.Tensor, m: int) -> None:
    """A CPU `offs`, checked as the kernel would need it: non-decreasing, from 0 up to at most M.

    (A CUDA `offs` is not read on the host; the kernel clamps it instead.)
    """
    ends = offs.tolist()
    previous = 0
    for g, end in enumerate(ends):
        if end < previous:
            _fail(f"offs[{g}] = {end} is below offs[{g - 1}] = {previous}" if g else f"offs[0] = {end} < 0",
                  param="offs", hint="offs holds cumulative row ends: non-decreasing, starting at >= 0")
        previous = end
    if previous > m:
        _fail(f"offs[-1] = {previous} exceeds the {m} rows of a", param="offs")


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
def pick_tile_n(n: int, m: Optional[int] = None, groups: Optional[int] = None, sms: int = 132) -> int:
    """128x256 tiles unless a 256-wide last tile would be at most half full, or (given M
    and G) the groups that can have rows, at most min(G, M), make no more 256-wide tiles
    than half the SMs: at decode, 128-wide tiles put twice the CTAs to streaming B."""
    if n <= 128 or 0 < n % 256 <= 128:
        return 128
    if m is not None and groups is not None and min(groups, m) * -(-n // 256) <= sms // 2:
        return 128
    return 256


def pick_cluster_m(m: int, groups: int, n: int, tile_n: int) -> int:
    """2 (pairs of CTAs on two M-tiles of a group, sharing each B tile by multicast) when
    groups average at least PAIR_ROWS_PER_GROUP rows and N suits pairs (`pairs_fit`); else 1.
    From shapes alone: `offs` may be on the device. Both kernels are compiled together.
    """
    from .hopper_grouped_gemm import pairs_fit

    return 2 if m >= PAIR_ROWS_PER_GROUP * groups and pairs_fit(n, tile_n) else 1


def cluster_tile_bound(m: int, groups: int, n: int, tile_n: int, cluster_m: int) -> int:
    """The most cluster tiles any `offs` can make: each group of rows r takes ceil(r / T)
    M-steps of T = 128 x cluster_m rows, at most (M + min(G, M) (T - 1)) / T in all."""
    from .hopper_grouped_gemm import TILE_M

    step = TILE_M * cluster_m
    return (m + min(groups, m) * (step - 1)) // step * -(-n // tile_n)


@functools.lru_cache(maxsize=None)
def _sm_count(device_index: int) -> int:
    return torch.cuda.get_device_properties(device_index).multi_processor_count


@functools.lru_cache(maxsize=None)
def _max_active_clusters(device_index: int, cluster_m: int) -> int:
    """Clusters of `cluster_m` CTAs of one CTA per SM that fit on the device at once."""
    import cutlass.utils

    return max(1, cutlass.utils.HardwareInfo(device_index).get_max_active_clusters(cluster_m))


class _Plan:
    """A configuration: its compiled kernels, cluster sizes 1 and 2 (where N suits pairs).

    Nothing depends on `offs`: the compiled host code makes the three descriptors from
    the addresses and M at each call, and the kernel reads `offs` itself.
    """

    def __init__(self, ab_dtype: torch.dtype, out_dtype: torch.dtype, groups: int, n: int, k: int,
                 device: torch.device, tile_n: int) -> None:
        import cutlass
        import cutlass.cute as cute

        import gcdsl.launch
        from . import hopper_grouped_gemm as hgg

        to_dsl = {torch.bfloat16: cutlass.BFloat16, torch.float16: cutlass.Float16, torch.float32: cutlass.Float32}
        ab, c = to_dsl[ab_dtype], to_dsl[out_dtype]
        self.groups, self.n, self.tile_n = groups, n, tile_n
        single = hgg.GemmConfig(ab, c, groups, n, k, tile_n, 1)
        self.configs = {1: single}
        if single.pairs_fit:
            self.configs[2] = dataclasses.replace(single, cluster_m=2)
        self.kernels, self.max_clusters = {}, {}

        def ptr(dtype, align=16):
            return cute.runtime.make_ptr(dtype, 0, cute.AddressSpace.gmem, assumed_align=align)

        for cluster_m, config in self.configs.items():
            # Through TVM-FFI: called with plain ints (addresses, extents, the stream
            # handle), converted in C rather than by the DSL's Python marshalling.
            self.kernels[cluster_m] = gcdsl.launch.compile_tvm_ffi(
                hgg.HopperGroupedGemm(config), ptr(ab), ptr(ab), ptr(c), ptr(cutlass.Int32, 4), cutlass.Int32(1),
                cutlass.Int32(cluster_m), cute.runtime.make_fake_stream(),
            )
            self.max_clusters[cluster_m] = _max_active_clusters(device.index or 0, cluster_m)

    def kernel(self, cluster_m: int) -> Any:
        """The compiled kernel of `cluster_m` CTAs per cluster; a size it lacks says why."""
        if cluster_m not in self.kernels:
            dataclasses.replace(self.configs[1], cluster_m=cluster_m)  # raises the configuration's reason
        return self.kernels[cluster_m]


_PLANS: Dict[Tuple, _Plan] = {}


def _plan_for(ab_dtype, out_dtype, groups, n, k, device, tile_n) -> _Plan:
    key = (ab_dtype, out_dtype, groups, n, k, tile_n, device.index)
    plan = _PLANS.get(key)
    if plan is None:
        plan = _PLANS[key] = _Plan(ab_dtype, out_dtype, groups, n, k, device, tile_n)
    return plan


def compiled_count() -> int:
    """Kernels compiled so far in this process (tests check that offs never adds one)."""
    return sum(len(plan.kernels) for plan in _PLANS.values())
