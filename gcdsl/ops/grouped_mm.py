"""`gcdsl.ops.grouped_mm`: `torch._grouped_mm` on Hopper, every case, with autograd.

    out = gcdsl.ops.grouped_mm(a, b, offs)         # out_dtype=None: a's dtype

The cases (`grouped_cases.py` checks them and maps each onto the kernel):
    a (T, K)     x b (G, K, N)  -> (T, N)     rows offs[g-1]:offs[g] of a are group g
    a (G, M, K)  x b (K, T)     -> (M, T)     columns of b grouped; the result is column-major
    a (M, T)     x b (T, N)     -> (G, M, N)  the reduction grouped (a weight gradient)
    a (G, M, K)  x b (G, K, N)  -> (G, M, N)  a batch, offs=None
bf16 or fp16 in; bf16, fp16 or fp32 out (fp32 accumulation); each operand row- or
column-major as it lies; where T is the contiguous mode of a 2-D operand, groups
start (in the grouped reduction, start and end) at multiples of 8 along T
(`grouped_cases.py` says why). Groups may be empty: rows or columns of an empty group in the first two
cases are not written (as past offs[-1]; torch leaves them undefined too), and an
empty group of the grouped reduction gets zeros.

`offs` may live on the GPU, where an MoE router makes it: the kernel reads it
from global memory and its persistent scheduler derives each group's tiles from
it on the device (`hopper_grouped_gemm/`). A call never copies `offs` to the
host or waits for the GPU, and can be captured in a CUDA graph: a replay reads
whatever `offs` holds then. A CUDA `offs` is not checked (that would need its
values on the host): the kernel clamps each end to [previous end, T], so a bad
`offs` computes wrong values but never writes outside the result. A CPU `offs` is
checked on the host (non-decreasing, at most T; a GcdslError otherwise) and then
copied to a's device, a host-to-device copy of 4 G bytes before the launch.

The TMA descriptors (three, four with A K-major and ragged M) depend on the tensors' addresses and extents only,
never on `offs`. They live in the kernel's grid-constant parameter space; nothing
is written to a descriptor on the device.

Autograd: the gradients are grouped products of the other cases (`_backward`), on
the same kernel. Registered as the custom op `gcdsl::grouped_mm` with a fake
implementation and an autograd formula, so it composes with `torch.compile`.

Per configuration (case, layouts, dtypes, G and the fixed extents, tile) the kernels
are compiled once: with ragged rows, CTAs alone and CTAs in pairs (a 2x1 cluster:
two M-tiles of a group share each B tile by TMA multicast). T and `offs` are runtime
values, so new offsets or new data never recompile.

Which schedule, tile, cluster and tile order a call runs is decided from shapes alone
(never `offs`): `grouped_mm_rules.py`, each rule beside the measurements that set it.
"""
from __future__ import annotations

import contextlib
import dataclasses
import functools
from typing import Any, Dict, Iterator, NamedTuple, Optional, Tuple

import torch
import torch.utils._python_dispatch

from .grouped_cases import MAX_GROUPS, Problem, check_host_offsets, describe, fail, require_hopper, strides_match
from .grouped_mm_rules import (cluster_tile_bound, default_cluster_m, fixed_m_tiles, pick_claimed_tiles,
                               pick_mma_without_rows, pick_tile_order, pick_tiles)


def grouped_mm(a: torch.Tensor, b: torch.Tensor, offs: Optional[torch.Tensor] = None,
               out_dtype: Optional[torch.dtype] = None) -> torch.Tensor:
    """`torch._grouped_mm(a, b, offs=offs, out_dtype=out_dtype)` on Hopper, every case, differentiable.

        a (T, K)     x b (G, K, N)  -> (T, N)     rows offs[g-1]:offs[g] of a are group g
        a (G, M, K)  x b (K, T)     -> (M, T)     columns of b grouped
        a (M, T)     x b (T, N)     -> (G, M, N)  the reduction grouped (a weight gradient)
        a (G, M, K)  x b (G, K, N)  -> (G, M, N)  a batch, offs=None

    `a` and `b` both bf16 or both fp16, each row- or column-major in its last two modes;
    `offs` (G,) int32 cumulative ends, on a's GPU (never read on the host: a call can be
    captured in a CUDA graph) or on the CPU (checked, then copied); up to `MAX_GROUPS`
    groups; `out_dtype` bf16, fp16 or fp32 (default a's dtype). Anything it cannot serve
    is a `GcdslError` at the caller's line naming the argument. `docs/grouped_mm.md` has
    the rules in full."""
    if plain_eager_call(a, b, offs):
        # The same code as the op's, without the dispatcher's cost (tens of microseconds).
        return _grouped_mm_impl(a, b, offs, out_dtype)
    return torch.ops.gcdsl.grouped_mm(a, b, offs, out_dtype)


def grouped_mm_swiglu(a: torch.Tensor, b: torch.Tensor, offs: torch.Tensor,
                      out_dtype: Optional[torch.dtype] = None) -> torch.Tensor:
    """`silu(gate) * up` of each group's rows, with `h = torch._grouped_mm(a, b, offs=offs)`
    split as `gate, up = h.chunk(2, dim=-1)`: an MoE's gate-up GEMM and its activation in
    one kernel (the epilogue applies it), (T, N / 2) out, no (T, N) intermediate.

    `a` (T, K) grouped by `offs`; `b` (G, K, N) K-major, as `w13.transpose(-2, -1)` of the
    weights (G, N, K) with the gate rows first. Differentiable: the backward computes the
    pre-activation again and runs the gradients through `grouped_mm`'s cases."""
    if plain_eager_call(a, b, offs):
        return _grouped_mm_impl(a, b, offs, out_dtype, activation="swiglu")
    return torch.ops.gcdsl.grouped_mm_swiglu(a, b, offs, out_dtype)


# (absent from a torch without it: then every call goes through the dispatcher)
_in_dispatch_mode = getattr(torch.utils._python_dispatch, "is_in_torch_dispatch_mode", None)


def plain_eager_call(*tensors: Any) -> bool:
    """Plain tensors (None allowed), no tracing (torch.compile, make_fx, fake tensors), no
    autograd: an op's own code may run without the dispatcher's cost (tens of microseconds).
    On every eager call, so a loop without generators."""
    if _in_dispatch_mode is None or _in_dispatch_mode() or torch.compiler.is_compiling():
        return False
    for t in tensors:
        if t is not None and (type(t) is not torch.Tensor or t.requires_grad):
            return False
    return True


@torch.library.custom_op("gcdsl::grouped_mm", mutates_args=())
def _grouped_mm_op(a: torch.Tensor, b: torch.Tensor, offs: Optional[torch.Tensor] = None,
                   out_dtype: Optional[torch.dtype] = None) -> torch.Tensor:
    return _grouped_mm_impl(a, b, offs, out_dtype)


@_grouped_mm_op.register_fake
def _grouped_mm_fake(a, b, offs=None, out_dtype=None):
    problem = describe(a, b, offs, out_dtype, addresses=False)  # fake tensors have no addresses
    out = a.new_empty(problem.kernel_out_shape, dtype=problem.out_dtype)
    return out.t() if problem.swapped else out


@torch.library.custom_op("gcdsl::grouped_mm_swiglu", mutates_args=())
def _grouped_mm_swiglu_op(a: torch.Tensor, b: torch.Tensor, offs: torch.Tensor,
                          out_dtype: Optional[torch.dtype] = None) -> torch.Tensor:
    return _grouped_mm_impl(a, b, offs, out_dtype, activation="swiglu")


@_grouped_mm_swiglu_op.register_fake
def _grouped_mm_swiglu_fake(a, b, offs, out_dtype=None):
    problem = describe(a, b, offs, out_dtype, addresses=False, activation="swiglu")
    return a.new_empty(problem.out_shape, dtype=problem.out_dtype)


def _setup_context(ctx, inputs, output) -> None:
    a, b, offs, _ = inputs
    ctx.save_for_backward(a, b, offs)


def _backward(ctx, grad):
    """Each gradient is a grouped product of another case, on the same kernel and `offs`:

        forward   da = dy @ b^T       db = a^T @ dy
        2D x 3D   2D x 3D             2D x 2D (grouped reduction)
        3D x 2D   2D x 2D             3D x 2D
        2D x 2D   3D x 2D             2D x 3D
        3D x 3D   3D x 3D             3D x 3D

    `dy` is cast to the inputs' dtype (the kernel reads 16-bit operands).
    """
    a, b, offs = ctx.saved_tensors
    dy = _readable(grad.to(a.dtype))
    grad_a = _product(dy, b.transpose(-2, -1), offs, like=a) if ctx.needs_input_grad[0] else None
    grad_b = _product(a.transpose(-2, -1), dy, offs, like=b) if ctx.needs_input_grad[1] else None
    return grad_a, grad_b, None, None


torch.library.register_autograd("gcdsl::grouped_mm", _backward, setup_context=_setup_context)


def _swiglu_backward(ctx, grad):
    """The pre-activation h = a @ b is computed again (a plain grouped product, not kept
    from the forward: (T, N) would double the activation memory the fusion saves), then

        dgate = d * up * silu'(gate),  dup = d * silu(gate),  dh = [dgate, dup]
        da = dh @ b^T  (2D x 3D),      db = a^T @ dh  (the grouped reduction)

    in float32 for the elementwise part, dh in the inputs' dtype for the products."""
    a, b, offs = ctx.saved_tensors
    gate, up = grouped_mm(a, b, offs, torch.float32).chunk(2, dim=-1)
    sig = torch.sigmoid(gate)
    d = grad.float()
    dh = torch.cat([d * up * sig * (1 + gate * (1 - sig)), d * gate * sig], dim=-1).to(a.dtype)
    grad_a = _product(dh, b.transpose(-2, -1), offs, like=a) if ctx.needs_input_grad[0] else None
    grad_b = _product(a.transpose(-2, -1), dh, offs, like=b) if ctx.needs_input_grad[1] else None
    return grad_a, grad_b, None, None


torch.library.register_autograd("gcdsl::grouped_mm_swiglu", _swiglu_backward, setup_context=_setup_context)


def _product(x: torch.Tensor, y: torch.Tensor, offs, like: torch.Tensor) -> torch.Tensor:
    """x @ y per group, laid out as `like` (the input it is the gradient of) where computing
    (y^T @ x^T)^T instead gives that layout: then the optimizer's update of a weight kept
    as (G, N, K) reads its gradient without a transposed copy.

    The results of 3D x 2D are column-major and of the other cases row-major. The 2-D
    operands are made T strided (in a grouped reduction both, in either orientation; in
    the other grouped cases with K contiguous): with T contiguous their groups would have
    to start (and in a reduction end) at multiples of 8, which nothing here knows of
    `offs`. Operands of another layout (a row-major `dy` of 3D x 2D, a column-major `a`)
    are copied once.
    """
    if x.dim() == 2 and y.dim() == 2:
        x, y = _column_major(x), _row_major(y)
    elif x.dim() == 2:
        x = _row_major(x)  # the grouped rows' K contiguous: groups may start anywhere
    elif y.dim() == 2:
        y = _column_major(y)  # likewise for the grouped columns of 3D x 2D
    plain_is_column_major = (x.dim(), y.dim()) == (3, 2)
    like_is_column_major = like.stride(-2) == 1 and like.shape[-1] > 1
    if plain_is_column_major != like_is_column_major:
        return grouped_mm(y.transpose(-2, -1), x.transpose(-2, -1), offs, like.dtype).transpose(-2, -1)
    return grouped_mm(x, y, offs, like.dtype)


def _readable(t: torch.Tensor) -> torch.Tensor:
    """`t` itself when its last two modes are packed row- or column-major (and 16-byte
    aligned), else a contiguous copy (an expanded or sliced incoming gradient)."""
    rows, cols = t.shape[-2:]
    batch = (rows * cols,) if t.dim() == 3 else ()
    packed = strides_match(t, (*batch, cols, 1)) or strides_match(t, (*batch, 1, rows))
    aligned = t.storage_offset() * t.element_size() % 16 == 0  # (traced tensors have no address)
    return t if packed and aligned else t.contiguous()


def _row_major(t: torch.Tensor) -> torch.Tensor:
    return t if strides_match(t, (t.shape[1], 1)) else t.contiguous()


def _column_major(t: torch.Tensor) -> torch.Tensor:
    return t if strides_match(t, (1, t.shape[0])) else t.t().contiguous().t()


def _grouped_mm_impl(a, b, offs, out_dtype, activation="none"):
    launch = _launch_for(a, b, offs, out_dtype, activation, _FORCED.get(activation, NOTHING_FORCED))
    return launch(a, b, offs, launch.problem.make_output(a.device))


class Choices(NamedTuple):
    """The kernel's choices: the consumer schedule, tile width, CTAs per cluster and tile
    order, the L2 policy of its loads and stores, whether warpgroups without rows run
    their WGMMAs (`GemmConfig.mma_without_rows`) and whether clusters claim their tiles
    (`GemmConfig.claimed_tiles`). What a call forces (`forcing`,
    `grouped_mm_into`'s arguments) has None wherever the heuristics pick; what a plan is
    compiled for (`_plan_for`) has them all but the cluster size, since a plan holds every
    size."""
    schedule: Optional[str] = None
    tile_n: Optional[int] = None
    cluster_m: Optional[int] = None
    tile_order: Optional[str] = None
    load_policy: Optional[str] = None
    store_policy: Optional[str] = None
    mma_without_rows: Optional[bool] = None
    claimed_tiles: Optional[bool] = None


NOTHING_FORCED = Choices()  # (made once: a call looks it up on every eager launch)
# What `forcing` holds, per activation; empty otherwise.
_FORCED: Dict[str, Choices] = {}


@contextlib.contextmanager
def forcing(activation: str, schedule: Optional[str] = None, tile_n: Optional[int] = None,
            cluster_m: Optional[int] = None, tile_order: Optional[str] = None,
            mma_without_rows: Optional[bool] = None, claimed_tiles: Optional[bool] = None) -> Iterator[None]:
    """Within the block, `grouped_mm` (activation "none") or `grouped_mm_swiglu` ("swiglu")
    runs `schedule`, `tile_n`, `cluster_m`, `tile_order`, `mma_without_rows` and
    `claimed_tiles` where the heuristics would pick them (None: the heuristic's; a tile
    order and warpgroups running their WGMMAs without rows, products with ragged rows only;
    claimed tiles, those of them the cooperative schedule runs): how the
    benchmarks time each configuration inside a layer whose calls they do not make
    (`fused_moe`, the W6 layer). For measurement: not thread-safe, and a CUDA graph keeps
    what was forced at capture."""
    before = _FORCED.get(activation)
    _FORCED[activation] = Choices(schedule, tile_n, cluster_m, tile_order, mma_without_rows=mma_without_rows,
                                  claimed_tiles=claimed_tiles)
    try:
        yield
    finally:
        if before is None:
            del _FORCED[activation]
        else:
            _FORCED[activation] = before


class Configuration(NamedTuple):
    """What a call runs: the consumer schedule, the tile, the CTAs per cluster (2: pairs
    sharing B by multicast), the tile order, whether warpgroups without rows in a tile
    run their WGMMAs and whether clusters claim their tiles (`hopper_grouped_gemm`)."""
    schedule: str
    tile_m: int
    tile_n: int
    cluster_m: int
    tile_order: str
    mma_without_rows: bool = False
    claimed_tiles: bool = False

    def __str__(self) -> str:
        pairs = "pairs" if self.cluster_m == 2 else "single CTAs"
        every = ", WGMMAs without rows" if self.mma_without_rows else ""
        claimed = ", claimed tiles" if self.claimed_tiles else ""
        return f"{self.schedule} {self.tile_m} x {self.tile_n}, {pairs}, {self.tile_order}-order{every}{claimed}"


def configuration(a: torch.Tensor, b: torch.Tensor, offs: Optional[torch.Tensor] = None,
                  out_dtype: Optional[torch.dtype] = None, activation: str = "none") -> Optional[Configuration]:
    """The configuration `grouped_mm` (activation "none") or `grouped_mm_swiglu` ("swiglu")
    runs for these inputs, as its heuristics and any `forcing` pick it; None where the
    call has nothing to compute. Compiles the kernel where no call has yet."""
    return _launch_for(a, b, offs, out_dtype, activation, _FORCED.get(activation, NOTHING_FORCED)).configuration


def grouped_mm_into(a: torch.Tensor, b: torch.Tensor, offs: Optional[torch.Tensor], out: torch.Tensor,
                    *, tile_n: Optional[int] = None, cluster_m: Optional[int] = None,
                    schedule: Optional[str] = None, activation: str = "none",
                    tile_order: Optional[str] = None, load_policy: Optional[str] = None,
                    store_policy: Optional[str] = None, mma_without_rows: Optional[bool] = None,
                    claimed_tiles: Optional[bool] = None) -> torch.Tensor:
    """Like `grouped_mm`, into a given `out` laid out as `grouped_mm`'s result (tests poison it first).

    `tile_n` (64, 128 or 256 cooperative; 64, 128 or 192 ping-pong), `cluster_m` (1 or 2,
    where N suits pairs: `hopper_grouped_gemm.pairs_fit`), `schedule` ("cooperative" or
    "pingpong": `hopper_grouped_gemm`'s SCHEDULES) and `tile_order` ("m", "n",
    "m_partial_last" or "m_blocks", ragged rows: `TILE_ORDERS`) override the heuristics,
    and `load_policy` and `store_policy` (`L2_POLICIES`) the L2 policy of the kernel's loads of
    A and B and of its stores of the output, and `mma_without_rows` (ragged rows) whether a
    warpgroup none of whose rows of a tile lie in its group runs its WGMMAs anyway (None:
    `pick_mma_without_rows`), and `claimed_tiles` (ragged rows, cooperative schedule) whether
    clusters claim their tiles from a counter (None: `pick_claimed_tiles`); the tests and the
    benchmarks use them to run every variant.
    `activation="swiglu"` is `grouped_mm_swiglu`'s product.
    """
    from .hopper_grouped_gemm import L2_POLICIES, SCHEDULES, TILE_ORDERS

    for name, policy in (("load_policy", load_policy), ("store_policy", store_policy)):
        if policy is not None and policy not in L2_POLICIES:
            fail(f"{name} {policy!r} is not one of {tuple(L2_POLICIES)}", param=name)
    if schedule is not None and schedule not in SCHEDULES:
        fail(f"schedule {schedule!r} is not one of {SCHEDULES}", param="schedule")
    if tile_order is not None and tile_order not in TILE_ORDERS:
        fail(f"tile_order {tile_order!r} is not one of {TILE_ORDERS}", param="tile_order")
    dims = (a.dim(), b.dim()) if isinstance(a, torch.Tensor) and isinstance(b, torch.Tensor) else None
    # what a product without ragged rows (2D x 3D, 3D x 2D) has instead, where it has none
    no_ragged_rows = {(2, 2): "reduction is ragged", (3, 3): "groups are a batch"}.get(dims)
    if mma_without_rows is not None and not isinstance(mma_without_rows, bool):
        fail(f"mma_without_rows {mma_without_rows!r} is not a bool", param="mma_without_rows")
    if mma_without_rows and no_ragged_rows:
        fail("mma_without_rows concerns the tiles of a product with ragged rows (2D x 3D, 3D x 2D); this one's "
             f"{no_ragged_rows}", param="mma_without_rows", hint="leave mma_without_rows out (None)")
    if claimed_tiles is not None and not isinstance(claimed_tiles, bool):
        fail(f"claimed_tiles {claimed_tiles!r} is not a bool", param="claimed_tiles")
    if claimed_tiles and (no_ragged_rows or schedule == "pingpong"):
        fail("claimed_tiles concerns the cooperative schedule of a product with ragged rows (2D x 3D, 3D x 2D); "
             f"this one's {no_ragged_rows or 'schedule is ping-pong'}", param="claimed_tiles",
             hint="leave claimed_tiles out (None), or pass schedule='cooperative'")
    if tile_order not in (None, "m") and no_ragged_rows:
        fail(f"tile_order {tile_order!r} orders the tiles of a product with ragged rows (2D x 3D, 3D x 2D); "
             f"this one's {no_ragged_rows} and has one order",
             param="tile_order", hint="leave tile_order to the heuristic (None), or pass 'm'")
    launch = _launch_for(a, b, offs, out.dtype, activation,
                         Choices(schedule, tile_n, cluster_m, tile_order, load_policy, store_policy, mma_without_rows,
                                 claimed_tiles))
    problem = launch.problem
    if claimed_tiles and problem.launchable and not launch.claimed_tiles:
        fail(f"claimed_tiles concerns the cooperative schedule; the heuristics picked "
             f"{launch.configuration.schedule} for this call", param="claimed_tiles",
             hint="pass schedule='cooperative' with it")
    kernel_out = out.t() if problem.swapped else out
    rows, cols = problem.kernel_out_shape[-2:]
    expected = ((rows * cols,) if len(problem.kernel_out_shape) == 3 else ()) + (cols, 1)
    if tuple(kernel_out.shape) != problem.kernel_out_shape or not strides_match(kernel_out, expected) \
            or out.device != a.device or out.data_ptr() % 16:
        layout = "the transpose of a contiguous" if problem.swapped else "a contiguous"
        fail(f"`out` is {tuple(out.shape)} with strides {out.stride()} on {out.device}; expected "
             f"{layout} {problem.out_shape} tensor on {a.device}, 16-byte aligned", param="out")
    return launch(a, b, offs, out)


# ---------------------------------------------------------------------------------------
# The call path: everything that depends only on the inputs' signature is done once
# ---------------------------------------------------------------------------------------
class _Launch:
    """One input signature, checked, with its compiled kernel and launch configuration.

    A call then reads nothing but the tensors' addresses (and, for a CPU `offs`, its values).
    """

    def __init__(self, a, b, offs, out_dtype, activation: str = "none", forced: Choices = NOTHING_FORCED) -> None:
        self.problem = problem = describe(a, b, offs, out_dtype, activation=activation)
        require_hopper(a.device, "a", "grouped_mm")
        self.host_offs = offs is not None and offs.device.type == "cpu"
        self.device = a.device
        self.configuration: Optional[Configuration] = None
        self.claimed_tiles = False
        if not problem.launchable:
            return  # nothing to compute, nothing to compile
        schedule, tile_n = pick_tiles(problem, forced.schedule, forced.tile_n, forced.cluster_m,
                                      _sm_count(a.device.index))
        # (a tile order or WGMMAs without rows forced by `forcing` concern ragged rows only)
        tile_order = forced.tile_order if problem.ragged == "m" and forced.tile_order else pick_tile_order(problem)
        mma_without_rows = problem.ragged == "m" and (pick_mma_without_rows(problem) if forced.mma_without_rows is None
                                                      else forced.mma_without_rows)
        # (claimed tiles, forced or picked, where the cooperative schedule runs ragged rows)
        self.claimed_tiles = problem.ragged == "m" and schedule == "cooperative" and (
            pick_claimed_tiles(problem) if forced.claimed_tiles is None else forced.claimed_tiles)
        plan = _plan_for(problem, a.dtype, a.device, Choices(schedule, tile_n, None, tile_order,
                                                            forced.load_policy or "default",
                                                            forced.store_policy or "default", mma_without_rows,
                                                            self.claimed_tiles))
        cluster_m = forced.cluster_m or default_cluster_m(problem, schedule, plan.tile_m, plan.tile_n)
        self.configuration = Configuration(schedule, plan.tile_m, plan.tile_n, cluster_m, tile_order,
                                           mma_without_rows, self.claimed_tiles)
        with torch.cuda.device(a.device):  # compile and load in a's device context
            self.kernel = plan.kernel(cluster_m)
        if problem.ragged == "m":
            bound = cluster_tile_bound(problem.total, problem.groups, problem.n, plan.tile_n, cluster_m, plan.tile_m)
        else:  # every group has the same M-tiles (in pairs, an even number)
            bound = fixed_m_tiles(problem, plan.tile_m) // cluster_m * -(-problem.n // plan.tile_n)
        clusters = min(bound, plan.max_clusters[cluster_m])
        self.ctas = clusters * cluster_m
        # The ragged view of the output starts before it (hopper_grouped_gemm's docstring).
        # Device addresses lie far above any one tensor's size.
        self.c_back = problem.c_back * problem.out_dtype.itemsize

    def __call__(self, a, b, offs, out):
        problem = self.problem
        if self.host_offs:
            if torch.cuda.is_current_stream_capturing():
                fail("offs is on the CPU while a CUDA graph is being captured: its copy to the GPU "
                     "cannot be replayed with new values", param="offs",
                     hint="keep offs on the GPU (as the router makes it); a replay then reads whatever it holds")
            check_host_offsets(offs, problem)
            offs = offs.to(self.device, non_blocking=True)  # a staged copy: no wait for the GPU
        if not problem.launchable:
            return out.zero_() if problem.empty_result_is_zero() else out
        index = self.device.index
        if index != torch.cuda.current_device():
            with torch.cuda.device(index):
                return self._launch(a, b, offs, out, index)
        return self._launch(a, b, offs, out, index)

    def _launch(self, a, b, offs, out, index):
        """The kernel on a's device, now current; `offs` is on it too (a batch has none: the
        kernel never reads that pointer)."""
        first, second = (b, a) if self.problem.swapped else (a, b)
        claims = ()
        if self.claimed_tiles:  # a zeroed counter of the call's own (hopper_grouped_gemm/claims.py)
            counter = torch.zeros(1, dtype=torch.int32, device=a.device)  # (alive until the launch)
            claims = (counter.data_ptr(),)
        self.kernel(first.data_ptr(), second.data_ptr(), out.data_ptr() - self.c_back,
                    (offs if offs is not None else a).data_ptr(), self.problem.total, self.ctas,
                    _current_stream(index), *claims)
        return out


def _make_context_current(index: int) -> None:
    """The device's primary context, current on this thread. The backward runs on
    autograd's own threads, where torch's device guard need not have made a context
    current; the DSL's module loading and occupancy queries use the driver API, which
    needs one (CUDA_ERROR_INVALID_CONTEXT otherwise)."""
    from cuda.bindings import runtime

    (err,) = runtime.cudaSetDevice(index)  # since CUDA 12: initializes the primary context, makes it current
    if err != runtime.cudaError_t.cudaSuccess:
        raise RuntimeError(f"cudaSetDevice({index}) failed: {err}")


def _current_stream(index: int) -> int:
    return torch._C._cuda_getCurrentRawStream(index)  # torch.cuda.current_stream(), without the Python object


_LAUNCHES: Dict[Tuple, _Launch] = {}
_MAX_LAUNCHES = 4096  # distinct signatures kept (T varies with the batch); then start afresh


def _signature(t: Any) -> Tuple:
    if t is None:
        return (None,)
    return (t.shape, t.stride(), t.dtype, t.device, t.data_ptr() % 16)


def _launch_for(a, b, offs, out_dtype, activation: str = "none", forced: Choices = NOTHING_FORCED) -> _Launch:
    """The checked launch for these inputs' signature (shapes, strides, dtypes, devices,
    alignment) and what is `forced`."""
    try:
        key = (_signature(a), _signature(b), _signature(offs), out_dtype, activation, forced)
    except (AttributeError, TypeError):
        key = None  # not a tensor: describe() says which
    launch = _LAUNCHES.get(key) if key is not None else None
    if launch is None:
        launch = _Launch(a, b, offs, out_dtype, activation, forced)
        if len(_LAUNCHES) >= _MAX_LAUNCHES:
            _LAUNCHES.clear()
        _LAUNCHES[key] = launch
    return launch


# ---------------------------------------------------------------------------------------
# Compiled kernels and their tables, one per configuration
# ---------------------------------------------------------------------------------------
@functools.lru_cache(maxsize=None)
def _sm_count(device_index: int) -> int:
    return torch.cuda.get_device_properties(device_index).multi_processor_count


@functools.lru_cache(maxsize=None)
def _max_active_clusters(device_index: int, cluster_m: int) -> int:
    """Clusters of `cluster_m` CTAs of one CTA per SM that fit on the device at once."""
    import cutlass.utils

    return max(1, cutlass.utils.HardwareInfo(device_index).get_max_active_clusters(cluster_m))


class _Plan:
    """A configuration: its compiled kernels, cluster sizes 1 and, where the configuration
    has pairs (`GemmConfig`'s check), 2; each compiled when first asked for.

    Nothing depends on `offs`: the compiled host code makes the descriptors from
    the addresses and T at each call, and the kernel reads `offs` itself.
    """

    def __init__(self, problem: Problem, ab_dtype: torch.dtype, device: torch.device, picked: Choices) -> None:
        import cutlass

        from . import hopper_grouped_gemm as hgg

        to_dsl = {torch.bfloat16: cutlass.BFloat16, torch.float16: cutlass.Float16, torch.float32: cutlass.Float32}
        ab, c = to_dsl[ab_dtype], to_dsl[problem.out_dtype]
        self.groups, self.n, self.tile_n = problem.groups, problem.n, picked.tile_n
        single = hgg.GemmConfig(ab, c, problem.groups, problem.n, problem.k, picked.tile_n, 1, ragged=problem.ragged,
                                a_major=problem.a_major, b_major=problem.b_major, m=problem.m,
                                schedule=picked.schedule, activation=problem.activation, tile_order=picked.tile_order,
                                load_policy=picked.load_policy, store_policy=picked.store_policy,
                                mma_without_rows=picked.mma_without_rows, claimed_tiles=picked.claimed_tiles)
        self.single = single  # cluster size 1; `kernel` derives the others from it
        self.tile_m = single.tile_m  # the schedule's
        self.device_index = device.index or 0
        self.kernels, self.max_clusters = {}, {}

    def kernel(self, cluster_m: int) -> Any:
        """The compiled kernel of `cluster_m` CTAs per cluster, compiled on the first call;
        a size the configuration lacks is a gcdsl error at the caller's line that says why."""
        import gcdsl.launch
        from . import hopper_grouped_gemm as hgg

        if cluster_m not in self.kernels:
            try:
                config = dataclasses.replace(self.single, cluster_m=cluster_m)
            except ValueError as exc:  # the configuration's own reason
                fail(f"cluster_m = {cluster_m}: {str(exc).split(': ', 1)[-1]}", param="cluster_m",
                     hint="leave cluster_m to the heuristic (None), or pass 1")
            _make_context_current(self.device_index)
            # Through TVM-FFI: called with plain ints (addresses, extents, the stream
            # handle), converted in C rather than by the DSL's Python marshalling.
            gemm = hgg.HopperGroupedGemm(config)
            self.kernels[cluster_m] = gcdsl.launch.compile_tvm_ffi(gemm, *gemm.trace_args())
            self.max_clusters[cluster_m] = _max_active_clusters(self.device_index, cluster_m)
        return self.kernels[cluster_m]


_PLANS: Dict[Tuple, _Plan] = {}


def _plan_for(problem: Problem, ab_dtype: torch.dtype, device: torch.device, picked: Choices) -> _Plan:
    """The plan of `picked`'s choices (its cluster size aside: a plan holds every size)
    for `problem`'s kernel."""
    key = (problem.ragged, problem.a_major, problem.b_major, ab_dtype, problem.out_dtype, problem.groups,
           problem.m, problem.n, problem.k, problem.activation, picked, device.index)
    plan = _PLANS.get(key)
    if plan is None:
        plan = _PLANS[key] = _Plan(problem, ab_dtype, device, picked)
    return plan


def compiled_count() -> int:
    """Kernels compiled so far in this process (tests check that offs never adds one)."""
    return sum(len(plan.kernels) for plan in _PLANS.values())
