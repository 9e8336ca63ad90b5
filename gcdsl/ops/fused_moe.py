"""`fused_moe`: an MoE expert layer after the router, with the interface inference engines use.

    out = gcdsl.ops.fused_moe(x, w1, w2, topk_weights, topk_ids)

`x` (T, H); `w1` (E, 2I, H), the gate rows then the up rows; `w2` (E, H, I);
`topk_weights` (T, k) floating point and `topk_ids` (T, k) integers, all on one GPU.
The result (T, H), in x's dtype, is

    out[t] = sum_j topk_weights[t, j] * (silu(x[t] @ gate_e^T) * (x[t] @ up_e^T)) @ w2_e^T,  e = topk_ids[t, j]

with fp32 accumulation. A token may name an expert twice (each slot counts). The steps,
each on the device, none reading the routing back on the host (so a call can be
captured in a CUDA graph and replayed after `topk_ids` and `topk_weights` change):

    route     the token slots (t, j) sorted by expert, stably: where each slot lands,
              each sorted slot's token, and the groups' ends `offs`; one CTA of counts
              in shared memory up to 1024 slots (`route_kernel`), torch's sort and a
              scatter-add above;
    experts   both GEMMs in one persistent kernel (`hopper_grouped_gemm.experts`): the
              gate-up tiles, their A rows gathered from x by TMA (a box per token row,
              no permuted copy of x), with SwiGLU in their epilogue, silu(gate) * up
              into a (T k, I) scratch, then the down tiles into (T k, H), each down
              tile starting once its expert's gate-up tiles are stored, and the
              weighted combine in their epilogue: the down tile that stores the last
              of a token's k rows of its columns sums them, in fp32 in slot order
              (the same sum on every run). It starts while the route kernel runs
              (programmatic stream serialization) and waits for that grid's end
              before it reads the routing.

The two-GEMM form gathers x's rows in expert order first and combines in a kernel of
its own (`combine_kernel`), reading each row once where it lies.

The one kernel reads contiguous weights, and runs up to `ONE_KERNEL_MAX_SLOTS` slots;
for other weights and above, `fused_moe_pair` (x's rows gathered in expert order, then
two grouped GEMMs, `grouped_mm_swiglu` and `grouped_mm`) does the work. W8
(`docs/fused_moe.md`) measures both, and the one kernel at each tile width
(`megakernel_tile_n` picks one).

For inference: the op has no autograd formula (a training step differentiates through
`grouped_mm_swiglu` and `grouped_mm`, which have one).

The values of `topk_ids` are not read on the host: an id outside [0, E) is found by
torch's own device-side bounds check, which ends the CUDA context. `validate=True`
reads them first (one synchronisation) and says which is wrong, at the caller's line.
"""
from __future__ import annotations

import functools
from typing import Any, Callable, Dict, Optional, Tuple

import torch

from . import grid_barrier
from .grouped_cases import fail, require_hopper
from .grouped_mm import grouped_mm, grouped_mm_swiglu, plain_eager_call


def fused_moe(x: torch.Tensor, w1: torch.Tensor, w2: torch.Tensor, topk_weights: torch.Tensor,
              topk_ids: torch.Tensor, *, validate: bool = False) -> torch.Tensor:
    """An MoE expert layer after the router, with the interface inference engines use:

        out[t] = sum_j topk_weights[t, j] * (silu(x[t] @ gate_e^T) * (x[t] @ up_e^T)) @ w2_e^T,  e = topk_ids[t, j]

    `x` (T, H) bf16 or fp16; `w1` (E, 2I, H), each expert's gate rows then its up rows;
    `w2` (E, H, I); `topk_weights` (T, k) floating point; `topk_ids` (T, k) integers; all
    on one GPU. Returns (T, H) in x's dtype, fp32 accumulation. H must be a multiple of 8
    and I of 64. Nothing reads the routing on the host, so a call can be captured in a
    CUDA graph and replayed after the ids and weights change; an id outside [0, E)
    traps on the device, or, with `validate=True` (one synchronisation), is a
    `GcdslError` at the caller's line. For inference: no autograd formula. The module
    docstring and `docs/fused_moe.md` say which kernels run."""
    _check(x, w1, w2, topk_weights, topk_ids)
    if validate:
        _check_ids(topk_ids, w1.shape[0])
    if plain_eager_call(x, w1, w2, topk_weights, topk_ids):
        return _fused_moe_impl(x, w1, w2, topk_weights, topk_ids)  # the op's code, without the dispatcher
    return torch.ops.gcdsl.fused_moe(x, w1, w2, topk_weights, topk_ids)


def route_slots(topk_ids: torch.Tensor, experts: int) -> Tuple[torch.Tensor, torch.Tensor]:
    """(order, offs): the token slots (flat indices t k + j) sorted by expert, stably, and
    the int32 cumulative slot count of each expert, on topk_ids' device, without a sync."""
    flat = topk_ids.reshape(-1)
    order = flat.argsort(stable=True)
    counts = torch.zeros(experts, dtype=torch.int32, device=flat.device)
    counts.scatter_add_(0, flat.long(), torch.ones_like(flat, dtype=torch.int32))
    return order, counts.cumsum(0, dtype=torch.int32)


@torch.library.custom_op("gcdsl::fused_moe", mutates_args=())
def _fused_moe_op(x: torch.Tensor, w1: torch.Tensor, w2: torch.Tensor, topk_weights: torch.Tensor,
                  topk_ids: torch.Tensor) -> torch.Tensor:
    return _fused_moe_impl(x, w1, w2, topk_weights, topk_ids)


# Up to this many token slots (T k) `fused_moe` runs the one kernel, above it the pair. W8
# (graph replays, every shape): the one kernel ahead at 1, 8 and 64 tokens (up to 512
# slots); at 512 and 4,096 tokens (1,024 slots and more) the pair, and by far the one
# kernel's forced configurations there, whose full 128-row tiles gather A row by row.
ONE_KERNEL_MAX_SLOTS = 512


# `fused_moe` runs the decode kernel (`decode_kernel`: both GEMMs as GEMVs on CUDA
# cores) where H and I allow it (`decode_applies`), up to DECODE_MAX_SLOTS token slots,
# and where the experts those slots can reach hold at most DECODE_MAX_WEIGHT_BYTES
# (min(E, T k) experts' w1 and w2): there the layer is short, and the one tensor-core
# kernel's setup and sparse tiles weigh most. W8's side run (`W8_decode.json`, graph
# replays): Qwen3's experts at 1 and 2 tokens (75 and 151 MB) faster by the decode
# kernel; DeepSeek-V3's and Mixtral's at 1 and 2 tokens (705 MB and more) faster by the
# one kernel, which streams large weights closer to the HBM bandwidth. The line lies
# between those sizes; none between them was timed.
DECODE_MAX_SLOTS = 16
DECODE_MAX_WEIGHT_BYTES = 256 * 2**20


def _fused_moe_impl(x, w1, w2, topk_weights, topk_ids) -> torch.Tensor:
    # (the one kernel reads the weights by their addresses: contiguous ones only)
    if w1.is_contiguous() and w2.is_contiguous():
        experts, hidden, inter = w1.shape[0], x.shape[1], w2.shape[2]
        slots = topk_ids.numel()
        reachable = min(experts, slots) * 3 * hidden * inter * x.element_size()
        if slots <= DECODE_MAX_SLOTS and reachable <= DECODE_MAX_WEIGHT_BYTES \
                and decode_applies(experts, hidden, inter, slots):
            return _decode(x, w1, w2, topk_weights, topk_ids)
        if slots <= ONE_KERNEL_MAX_SLOTS:
            return _one_kernel(x, w1, w2, topk_weights, topk_ids)
    return _pair(x, w1, w2, topk_weights, topk_ids)


def decode_applies(experts: int, hidden: int, inter: int, slots: int) -> bool:
    """Whether the decode kernel takes a layer of these sizes and `slots` T k token slots:
    1 to `decode_kernel.MAX_SLOTS` slots, H and I multiples of 256 (a warp's 16-byte
    vectors of a row in whole steps), any E."""
    from .decode_kernel import MAX_SLOTS

    return 0 < slots <= MAX_SLOTS and hidden % 256 == 0 and inter % 256 == 0


def fused_moe_decode(x: torch.Tensor, w1: torch.Tensor, w2: torch.Tensor, topk_weights: torch.Tensor,
                     topk_ids: torch.Tensor, *, early_prefetch: bool = False,
                     staged_experts: Optional[int] = None, streamed: bool = False) -> torch.Tensor:
    """`fused_moe` by the decode kernel (`decode_kernel`), whatever the slot count: both
    GEMMs as GEMVs on CUDA cores, the whole layer in one kernel. w1 and w2 contiguous;
    H and I multiples of 256; at most `decode_kernel.MAX_SLOTS` slots (T k).
    `early_prefetch=True`: each CTA asks L2 for its down rows before its gate-up GEMVs,
    not at the barrier; `staged_experts`: at most so many active experts' down rows
    staged in each CTA's shared memory beside the gate-up GEMVs, the rest read through L2
    (None: every active expert's where shared memory holds them all, else none; W8 times
    0 too); `streamed=True`: every weight row through a ring of shared-memory buffers
    filled by bulk copies (`decode_ring`), with neither of those two options."""
    _check_decode(x, w1, w2, topk_weights, topk_ids, staged_experts, early_prefetch, streamed)
    return _decode(x, w1, w2, topk_weights, topk_ids, early_prefetch, staged_experts, streamed=streamed)


def _check_decode(x, w1, w2, topk_weights, topk_ids, staged_experts, early_prefetch=False, streamed=False) -> None:
    from .decode_kernel import MAX_SLOTS

    _check(x, w1, w2, topk_weights, topk_ids)
    for name, w in (("w1", w1), ("w2", w2)):
        if not w.is_contiguous():
            fail(f"{name} has strides {w.stride()}; the decode kernel reads contiguous weights", param=name,
                 hint="call gcdsl.ops.fused_moe, which takes fused_moe_pair for such weights")
    experts, hidden, inter = w1.shape[0], x.shape[1], w2.shape[2]
    if not 0 < topk_ids.numel() <= MAX_SLOTS:
        fail(f"topk_ids holds {topk_ids.numel()} slots (T k); the decode kernel takes 1 to {MAX_SLOTS}",
             param="topk_ids", hint="call gcdsl.ops.fused_moe, which picks the kernel for the slot count")
    if not decode_applies(experts, hidden, inter, topk_ids.numel()):  # (H or I)
        fail(f"H = {hidden} and I = {inter}: the decode kernel reads rows in steps of 256 columns", param="w1",
             hint="call gcdsl.ops.fused_moe, which takes the tensor-core kernels for these sizes")
    if staged_experts is not None and (not isinstance(staged_experts, int) or staged_experts < 0):
        fail(f"staged_experts = {staged_experts!r}: a count of experts, 0 or more (None: the kernel's rule)",
             param="staged_experts", hint="pass 0 to stage none, None for the kernel's rule")
    if not isinstance(streamed, bool):
        fail(f"streamed = {streamed!r}; it is True or False", param="streamed")
    if streamed and (early_prefetch or staged_experts):
        fail("streamed=True reads every weight row through the kernel's ring: nothing is staged or asked of L2 "
             f"first (early_prefetch={early_prefetch!r}, staged_experts={staged_experts!r})", param="streamed",
             hint="leave early_prefetch and staged_experts at their defaults")


def decode_phases(x: torch.Tensor, w1: torch.Tensor, w2: torch.Tensor, topk_weights: torch.Tensor,
                  topk_ids: torch.Tensor, *, early_prefetch: bool = False, staged_experts: Optional[int] = None,
                  streamed: bool = False) -> Tuple[torch.Tensor, Dict[str, torch.Tensor]]:
    """`fused_moe_decode`'s result, and where its decode kernel spends its time: for each
    phase of `decode_kernel.PHASES`, the microseconds at which each CTA reached it, from
    the first CTA's start (NaN where a CTA never did: one without down rows). Its kernel
    is a build of its own, with the stamps compiled in; one synchronisation."""
    from .decode_kernel import PHASES

    _check_decode(x, w1, w2, topk_weights, topk_ids, staged_experts, early_prefetch, streamed)
    out, stamps = _decode(x, w1, w2, topk_weights, topk_ids, early_prefetch, staged_experts, trace=True,
                          streamed=streamed)
    return out, _microseconds(stamps, PHASES)


def _microseconds(stamps: torch.Tensor, phases: Tuple[str, ...]) -> Dict[str, torch.Tensor]:
    """The stamps (CTAs, slots) in ns of each of `phases` (in slot order), as microseconds
    from the first CTA's start; NaN where a CTA never stamped (its slot zeroed before the
    launch)."""
    ns = stamps.cpu().double()[:, :len(phases)]
    ns[ns == 0] = float("nan")
    us = (ns - ns[:, 0].min()) / 1e3  # every CTA stamps its start
    return {phase: us[:, i] for i, phase in enumerate(phases)}


def _decode(x, w1, w2, topk_weights, topk_ids, early_prefetch: bool = False,
            staged_experts: Optional[int] = None, trace: bool = False, streamed: bool = False):
    """The decode kernel, the whole layer: it checks the ids and sorts the slots itself, and
    its barrier's counter comes from `grid_barrier` with its low 31 bits zero (zeroed here
    only where that has none to give). With `trace`, (result, the CTAs' phase stamps
    (CTAs, STAMP_SLOTS) int64 ns)."""
    require_hopper(x.device, "x", "fused_moe")
    import cutlass

    from .decode_kernel import STAMP_SLOTS, MoeDecode

    experts, hidden, inter = w1.shape[0], x.shape[1], w2.shape[2]
    (tokens, top_k), total = topk_ids.shape, topk_ids.numel()
    index = x.device.index
    sms = _ctas_at_once(index)
    if min(experts, total) > sms:
        fail(f"topk_ids holds {total} slots; the decode kernel gives each expert with a slot a CTA of its own, "
             f"and this GPU runs {sms} at once", param="topk_ids",
             hint="call gcdsl.ops.fused_moe, which picks the kernel for the slot count")
    ids = topk_ids.reshape(-1)
    ids = (ids if ids.dtype in (torch.int32, torch.int64) else ids.long()).contiguous()
    ab = {torch.bfloat16: cutlass.BFloat16, torch.float16: cutlass.Float16}[x.dtype]
    id_dtype = {torch.int32: cutlass.Int32, torch.int64: cutlass.Int64}[ids.dtype]
    decode, kernel = _compiled(("decode", x.dtype, experts, hidden, inter, top_k, total, ids.dtype, sms,
                                early_prefetch, staged_experts, trace, streamed, index),
                               lambda: MoeDecode(ab, experts, hidden, inter, top_k, total, id_dtype, sms,
                                                 early_prefetch, staged_experts, trace, streamed),
                               index)
    if trace:  # the counter, an Int32 unused, then each CTA's Int64 stamps (two Int32 each), zeroed
        counter = torch.zeros(2 + 2 * STAMP_SLOTS * decode.ctas, dtype=torch.int32, device=x.device)
    else:
        counter = grid_barrier.counter(x.device)
        if counter is None:
            counter = torch.zeros(1, dtype=torch.int32, device=x.device)
    x, weights = _by_address(x, topk_weights)
    act = _scratch(total, inter, x)
    out = _scratch(tokens, hidden, x)
    _on_device(index, kernel, x.data_ptr(), ids.data_ptr(), weights.data_ptr(), w1.data_ptr(), w2.data_ptr(),
               act.data_ptr(), counter.data_ptr(), out.data_ptr())
    if trace:
        return out, counter[2:].view(torch.int64).view(decode.ctas, STAMP_SLOTS)
    return out


def fused_moe_pair(x: torch.Tensor, w1: torch.Tensor, w2: torch.Tensor, topk_weights: torch.Tensor,
                   topk_ids: torch.Tensor) -> torch.Tensor:
    """`fused_moe` as two grouped GEMMs, `grouped_mm_swiglu` then `grouped_mm`, for weights
    of any strides: `fused_moe` takes it where w1 or w2 is not contiguous."""
    _check(x, w1, w2, topk_weights, topk_ids)
    return _pair(x, w1, w2, topk_weights, topk_ids)


def _pair(x, w1, w2, topk_weights, topk_ids) -> torch.Tensor:
    require_hopper(x.device, "x", "fused_moe")
    row_of, token, offs = route(topk_ids, w1.shape[0], one_kernel=False)
    act = grouped_mm_swiglu(x[token], w1.transpose(-2, -1), offs)  # (T k, I)
    y = grouped_mm(act, w2.transpose(-2, -1), offs)  # (T k, H), expert order
    return combine(y, row_of, topk_weights, x.dtype)


def route(topk_ids: torch.Tensor, experts: int, one_kernel: bool = True,
          zeros: Optional[torch.Tensor] = None) -> Tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """(row_of, token, offs): where each slot lands once the slots are sorted as
    `route_slots` sorts them (int32: row_of[order[p]] = p), the token of each sorted slot,
    and `route_slots`' offs; in one kernel up to `route_kernel.MAX_SLOTS` slots (decode;
    an id outside [0, E) traps in it), by torch's kernels above or with `one_kernel=False`.
    `zeros`, int32 counters (E of them or more), come back zeroed (by that kernel where it runs)."""
    from .route_kernel import MAX_SLOTS, RouteSlots

    flat = topk_ids.reshape(-1)
    if one_kernel and flat.is_cuda and 0 < flat.numel() <= MAX_SLOTS and experts <= MAX_SLOTS \
            and flat.dtype in (torch.int32, torch.int64):
        import cutlass

        flat, index = flat.contiguous(), flat.device.index
        row_of = torch.empty(flat.numel(), dtype=torch.int32, device=flat.device)
        token = torch.empty(flat.numel(), dtype=torch.int64, device=flat.device)
        offs = torch.empty(experts, dtype=torch.int32, device=flat.device)
        zeros = torch.empty_like(offs) if zeros is None else zeros
        id_dtype = {torch.int32: cutlass.Int32, torch.int64: cutlass.Int64}[flat.dtype]
        _, kernel = _compiled(("route", experts, flat.dtype, index), lambda: RouteSlots(experts, id_dtype), index)
        _on_device(index, kernel, flat.data_ptr(), row_of.data_ptr(), token.data_ptr(), offs.data_ptr(),
                   zeros.data_ptr(), flat.numel(), topk_ids.shape[1], zeros.numel())
        return row_of, token, offs
    if zeros is not None:
        zeros.zero_()
    order, offs = route_slots(topk_ids, experts)
    row_of = torch.empty(order.numel(), dtype=torch.int32, device=order.device)
    row_of[order] = torch.arange(order.numel(), dtype=torch.int32, device=order.device)
    return row_of, order // topk_ids.shape[1], offs


def fused_moe_megakernel(x: torch.Tensor, w1: torch.Tensor, w2: torch.Tensor, topk_weights: torch.Tensor,
                         topk_ids: torch.Tensor, *, tile_n: Optional[int] = None, split_k: Optional[int] = None,
                         stagger_k: Optional[bool] = None, down_lead: Optional[int] = None,
                         route_kernel: bool = True) -> torch.Tensor:
    """`fused_moe`'s one-kernel form, with its choices open: the tile width `tile_n` (64,
    128 or 256, both GEMMs; by default `megakernel_tile_n`'s), the down tiles' K splits
    `split_k` (each down tile that many work items over ranges of I, their fp32 sums
    added in the output: for decode, where the down GEMM has fewer tiles than there
    are SMs; at most I / 64; by default `megakernel_split_k`'s), whether each tile reads
    its k-tiles from a different one on (`stagger_k`, by default `megakernel_stagger_k`'s),
    the rounds of down tiles dealt first among the CTAs a gate-up tile short (`down_lead`,
    0 or more; by default `megakernel_down_lead`'s) and the routing in one kernel
    (`route`; `route_kernel=False`: torch's kernels, as `fused_moe_pair`'s). w1 and w2
    contiguous."""
    _check_megakernel(x, w1, w2, topk_weights, topk_ids, tile_n, split_k, stagger_k, down_lead)
    return _one_kernel(x, w1, w2, topk_weights, topk_ids, tile_n, route_kernel, split_k, stagger_k, down_lead)


def _check_megakernel(x, w1, w2, topk_weights, topk_ids, tile_n, split_k, stagger_k, down_lead=None) -> None:
    _check(x, w1, w2, topk_weights, topk_ids)
    for name, w in (("w1", w1), ("w2", w2)):
        if not w.is_contiguous():
            fail(f"{name} has strides {w.stride()}; the one-kernel layer reads contiguous weights", param=name,
                 hint="call gcdsl.ops.fused_moe, which takes fused_moe_pair for such weights")
    if tile_n not in (None, 64, 128, 256):
        fail(f"tile_n = {tile_n}; the kernel's tiles are 64, 128 or 256 wide", param="tile_n")
    if split_k is not None and (not isinstance(split_k, int) or not 1 <= split_k <= w2.shape[2] // 64):
        fail(f"split_k = {split_k!r}; the down tiles split I = {w2.shape[2]} into 1 to {w2.shape[2] // 64} ranges "
             "of 64-column k-tiles", param="split_k")
    if stagger_k not in (None, True, False):
        fail(f"stagger_k = {stagger_k!r}; it is True, False or None (fused_moe's rule)", param="stagger_k")
    if down_lead is not None and (not isinstance(down_lead, int) or isinstance(down_lead, bool) or down_lead < 0):
        fail(f"down_lead = {down_lead!r}; it is an integer of 0 or more, or None (fused_moe's rule)",
             param="down_lead")


def megakernel_tile_n(experts: int, hidden: int, inter: int, slots: int, sms: int) -> int:
    """The one kernel's tile width: 128 where I does not split into 128-wide SwiGLU halves,
    or where 256-wide gate-up tiles (of at most min(E, slots) experts with a slot) fill
    fewer than three waves of the `sms` SMs while the down tiles take no K split at that
    width; else 256. The last wave of a GEMM runs on part of the SMs, a larger part of
    its time the fewer waves there are; 128-wide tiles double the waves. W8's forced
    widths (`W8_configs.json`, graph replays): Qwen3's experts at 8 tokens (at most 384
    tiles of 256) 1.03x faster at 128, at one token (48) 1.18x; DeepSeek-V3's at one
    token (128) within 1%; from about four waves on (DeepSeek-V3's and Mixtral's at 8
    and 64 tokens, Qwen3's at 64) 256 is even or faster (up to 1.26x), and so at
    Mixtral's one token (1.09x), where its down tiles run in K splits. 64-wide tiles
    were slower than this rule's width wherever they were timed (RESULTS.md, W8)."""
    if inter % 128:
        return 128
    gate_up_tiles = min(experts, slots) * (2 * inter // 256)
    if gate_up_tiles < 3 * sms and megakernel_split_k(experts, hidden, inter, slots, sms, 256) == 1:
        return 128
    return 256


def megakernel_split_k(experts: int, hidden: int, inter: int, slots: int, sms: int, tile_n: int) -> int:
    """The one kernel's K splits of its down tiles: 1, unless the down GEMM's tiles (at
    most, over any routing of `slots` slots) would leave three quarters of the `sms` SMs
    idle and I is long; then 4 (the work items up to the SMs), or fewer so that each
    split keeps at least 32 k-tiles of I. Mixtral's experts at one token (2 experts x 16
    tiles of 256 columns, I = 14,336) take 4: W8 measured 1.22x the unsplit kernel
    there (2 splits: 1.11x). Where the down tiles fill a quarter of the SMs or more, or
    I is short (Qwen3's at one token: 128 tiles, I = 768, 2 splits 0.93x), W8 saw splits
    lose or stay within its noise."""
    m_steps = (slots + min(experts, slots) * 127) // 128
    tiles = m_steps * -(-hidden // tile_n)
    if 4 * tiles > sms:
        return 1
    return max(1, min(4, inter // 64 // 32))


def megakernel_stagger_k(slots: int) -> bool:
    """Whether the one kernel's tiles read their k-tiles each from a different one on:
    up to 64 slots. There the CTAs stream weights alone, in step, each reading the same
    128-byte column of its weight rows at the same time (rows whose stride is a multiple
    of 2 KiB); read from different columns, W8 measured the layer 3% to 9% faster at 1 and
    8 tokens on all three shapes. At 64 tokens it was even or slower (Mixtral's: 0.97x),
    and at 512 and 4,096 slower (0.87x to 0.99x), where tiles that share A rows gain from
    reading the same k-tile of them together. The gains below 64 slots are within the
    spread between graph captures of one call (`benchmarks/w8_instances.py`), so that
    side of the rule is yet to be confirmed over many captures."""
    return slots <= 64


def megakernel_down_lead(experts: int, hidden: int, inter: int, slots: int, sms: int, tile_n: int,
                         split_k: int) -> int:
    """The rounds of the one kernel's down tiles dealt first among the CTAs a gate-up tile
    short (`experts.DownDeal`): as many down tiles as weigh about one gate-up tile, whose
    k-tiles are H against a down tile's I / `split_k` (rounded down, so as never to
    overload the light CTAs), where the gate-up tiles (at most, over any routing of
    `slots` slots) fill two rounds of the `sms` SMs or more; else 0. W8 timed leads 0, 2
    and 3 (`W8_lead.json`, graph replays): the lead 1.3% faster than none at Qwen3's 8 and
    64 tokens (lead 2) and DeepSeek-V3's 8 (lead 3), 0.5% slower at DeepSeek-V3's 64;
    below two rounds (DeepSeek-V3's one token, Mixtral's) none was fastest, and where H
    is below I (Mixtral's 8 and 64 tokens) any lead was far slower."""
    m_steps = (slots + min(experts, slots) * 127) // 128
    if m_steps * (2 * inter // tile_n) < 2 * sms:
        return 0
    return hidden * split_k // inter


def megakernel_phases(x: torch.Tensor, w1: torch.Tensor, w2: torch.Tensor, topk_weights: torch.Tensor,
                      topk_ids: torch.Tensor, *, tile_n: Optional[int] = None, split_k: Optional[int] = None,
                      stagger_k: Optional[bool] = None, down_lead: Optional[int] = None,
                      route_kernel: bool = True) -> Tuple[torch.Tensor, Dict[str, torch.Tensor]]:
    """`fused_moe_megakernel`'s result, and where its one kernel spends its time: for each
    phase of `hopper_grouped_gemm.PHASES`, the microseconds at which each CTA reached it,
    from the first CTA's start (NaN where a CTA never did: one without down tiles, say).
    Its kernel is a build of its own, with the stamps compiled in; one synchronisation."""
    from .hopper_grouped_gemm import PHASES

    _check_megakernel(x, w1, w2, topk_weights, topk_ids, tile_n, split_k, stagger_k, down_lead)
    out, stamps = _one_kernel(x, w1, w2, topk_weights, topk_ids, tile_n, route_kernel, split_k, stagger_k,
                              down_lead, trace=True)
    return out, _microseconds(stamps, PHASES)


def _one_kernel(x, w1, w2, topk_weights, topk_ids, tile_n: Optional[int] = None,
                route_kernel: bool = True, split_k: Optional[int] = None,
                stagger_k: Optional[bool] = None, down_lead: Optional[int] = None, trace: bool = False):
    """Both GEMMs in one persistent kernel (`hopper_grouped_gemm.experts`): each CTA's
    gate-up tiles, then its down tiles, a down tile waiting on a per-expert count of its
    expert's stored gate-up tiles, the gate-up tiles reading x's rows through `token`, the
    down tiles combining each token's rows once all are stored. The route as in
    `fused_moe_pair`. With `trace`, (result, the CTAs' phase stamps (CTAs, STAMP_SLOTS)
    int64 ns)."""
    require_hopper(x.device, "x", "fused_moe")
    import cutlass

    from .hopper_grouped_gemm import STAMP_SLOTS
    from .hopper_grouped_gemm.experts import MoeExperts, stamps_offset

    experts, hidden, inter = w1.shape[0], x.shape[1], w2.shape[2]
    (tokens, top_k), total = topk_ids.shape, topk_ids.numel()
    index = x.device.index
    sms = _ctas_at_once(index)
    if not total:  # no tokens: nothing to launch
        out = x.new_empty(x.shape)
        return (out, torch.empty(0, STAMP_SLOTS, dtype=torch.int64, device=x.device)) if trace else out
    tile_n = tile_n or megakernel_tile_n(experts, hidden, inter, total, sms)
    split_k = split_k or megakernel_split_k(experts, hidden, inter, total, sms, tile_n)
    stagger_k = megakernel_stagger_k(total) if stagger_k is None else stagger_k
    if down_lead is None:
        down_lead = megakernel_down_lead(experts, hidden, inter, total, sms, tile_n, split_k)
    ab = {torch.bfloat16: cutlass.BFloat16, torch.float16: cutlass.Float16}[x.dtype]
    gemms, kernel = _compiled(
        ("experts", x.dtype, experts, hidden, inter, top_k, tile_n, split_k, stagger_k, trace, down_lead, index),
        lambda: MoeExperts(ab, experts, hidden, inter, top_k, tile_n, split_k, stagger_k, trace, down_lead), index)
    counters = gemms.counters(tokens)
    if trace:  # ... then each CTA's Int64 stamps (two Int32 each), zeroed
        done = torch.zeros(stamps_offset(counters) + 2 * STAMP_SLOTS * sms, dtype=torch.int32, device=x.device)
    else:
        done = _scratch(1, counters, x, torch.int32)[0]  # zeroed by `route`
    row_of, token, offs = route(topk_ids, experts, one_kernel=route_kernel, zeros=done[:counters])
    x, weights = _by_address(x, topk_weights)
    size = x.element_size()
    act = _scratch(total, inter, x)
    # the down tiles' output: with K splits, fp32 sums added into zeros
    y = _scratch(total, hidden, x) if split_k == 1 else torch.zeros(total, hidden, device=x.device)
    out = _scratch(tokens, hidden, x)
    # Every CTA at once: a down tile's wait ends only if the CTAs it waits on run.
    ctas = max(1, min(gemms.tile_bound(total), sms))
    # (the ragged store descriptors' bases lie M rows before each output)
    _on_device(index, kernel, x.data_ptr(), token.data_ptr(), row_of.data_ptr(), weights.data_ptr(), w1.data_ptr(),
               act.data_ptr() - total * inter * size, act.data_ptr(), w2.data_ptr(),
               y.data_ptr() - total * hidden * y.element_size(), y.data_ptr(), out.data_ptr(), offs.data_ptr(),
               done.data_ptr(), tokens, total, ctas)
    if trace:
        return out, done[stamps_offset(counters):].view(torch.int64).view(sms, STAMP_SLOTS)[:ctas]
    return out


def _by_address(x: torch.Tensor, topk_weights: torch.Tensor) -> Tuple[torch.Tensor, torch.Tensor]:
    """x and the flat fp32 weights as the expert kernels read them, by address: x's rows
    contiguous from a 16-byte boundary (TMA boxes, 16-byte vectors; a copy otherwise)."""
    if not x.is_contiguous() or x.data_ptr() % 16:
        x = x.contiguous() if not x.is_contiguous() else x.clone()
    return x, topk_weights.reshape(-1).to(torch.float32).contiguous()


def _scratch(rows: int, columns: int, x: torch.Tensor, dtype: Optional[torch.dtype] = None) -> torch.Tensor:
    """A kernel's output of (rows, columns) in `dtype` (x's by default) on x's device: the
    expert kernel's intermediate and rows and its counters, the combine's result, each
    element written before it is read (the tests fill them with NaN, the counters with a
    count past any wait, to show that)."""
    return torch.empty(rows, columns, dtype=dtype or x.dtype, device=x.device)


# The layer's own kernels, compiled through TVM-FFI (called with plain ints) once per key.
_COMPILED: Dict[Tuple, Tuple[Any, Any]] = {}


def _compiled(key: Tuple, make: Callable[[], Any], index: int) -> Tuple[Any, Any]:
    """(kernel object, compiled function) for `key`: `make()`'s object, compiled in device
    `index`'s context the first time."""
    if key not in _COMPILED:
        import gcdsl.launch
        from .grouped_mm import _make_context_current

        _make_context_current(index)
        kernel = make()
        _COMPILED[key] = kernel, gcdsl.launch.compile_tvm_ffi(kernel, *kernel.trace_args())
    return _COMPILED[key]


def _on_device(index: int, kernel: Any, *args: Any) -> None:
    """`kernel(*args, stream)` on device `index`'s current stream, in its context (a launch
    goes to the current device's)."""
    from .grouped_mm import _current_stream

    if index != torch.cuda.current_device():
        with torch.cuda.device(index):
            return kernel(*args, _current_stream(index))
    return kernel(*args, _current_stream(index))


@functools.lru_cache(maxsize=None)
def _ctas_at_once(index: int) -> int:
    """CTAs of one SM each that device `index` runs at once."""
    from .grouped_mm import _max_active_clusters

    return _max_active_clusters(index, 1)


def combine(y: torch.Tensor, row_of: torch.Tensor, topk_weights: torch.Tensor,
            out_dtype: Optional[torch.dtype] = None) -> torch.Tensor:
    """(T, H) in `out_dtype` (y's by default): out[t] = sum_j topk_weights[t, j] * y[row_of[t k + j]],
    summed in fp32 in slot order. On the GPU one kernel (`combine_kernel`, 32-bit offsets:
    y under 2^31 elements) reads each row of y once; elsewhere torch's gather and sum."""
    from .combine_kernel import WeightedCombine

    tokens, top_k = topk_weights.shape
    hidden, out_dtype = y.shape[1], out_dtype or y.dtype
    if not (y.is_cuda and tokens and y.is_contiguous() and y.data_ptr() % 16 == 0 and y.numel() < 2**31):
        by_token = y[row_of.long()].view(tokens, top_k, hidden).float()
        return (topk_weights.float().unsqueeze(-1) * by_token).sum(1).to(out_dtype)
    import cutlass

    types = {torch.bfloat16: cutlass.BFloat16, torch.float16: cutlass.Float16, torch.float32: cutlass.Float32}
    weights = topk_weights if topk_weights.dtype in types else topk_weights.float()
    weights, row_of = weights.contiguous(), row_of.to(torch.int32).contiguous()
    out = _scratch(tokens, hidden, y, out_dtype)
    index = y.device.index
    dtypes = (types[y.dtype], types[weights.dtype], types[out_dtype])
    _, kernel = _compiled(("combine", *dtypes, hidden, top_k, index),
                          lambda: WeightedCombine(*dtypes, hidden, top_k), index)
    _on_device(index, kernel, y.data_ptr(), row_of.data_ptr(), weights.data_ptr(), out.data_ptr(), tokens)
    return out


@_fused_moe_op.register_fake
def _fused_moe_fake(x, w1, w2, topk_weights, topk_ids):
    _check(x, w1, w2, topk_weights, topk_ids)
    return x.new_empty(x.shape)


def _check(x, w1, w2, topk_weights, topk_ids) -> None:
    for name, t in (("x", x), ("w1", w1), ("w2", w2), ("topk_weights", topk_weights), ("topk_ids", topk_ids)):
        if not isinstance(t, torch.Tensor):
            fail(f"`{name}` is {type(t).__name__}, not a torch.Tensor", param=name)
    if x.dim() != 2 or w1.dim() != 3 or w2.dim() != 3:
        fail(f"x is {tuple(x.shape)}, w1 {tuple(w1.shape)} and w2 {tuple(w2.shape)}: expected (T, H), "
             "(E, 2I, H) and (E, H, I)", param="x" if x.dim() != 2 else "w1" if w1.dim() != 3 else "w2")
    (tokens, hidden), (experts, two_i, _) = x.shape, w1.shape
    if w1.shape[2] != hidden or tuple(w2.shape) != (experts, hidden, two_i // 2) or two_i % 2:
        fail(f"x is {tuple(x.shape)}, w1 {tuple(w1.shape)} and w2 {tuple(w2.shape)}: with H = {hidden} and "
             f"E = {experts}, w1 must be (E, 2I, H) and w2 (E, H, I)", param="w2" if w1.shape[2] == hidden else "w1",
             hint="w1 holds each expert's gate rows, then its up rows; w2 its down projection")
    if two_i % 128 or hidden % 8:
        fail(f"H = {hidden} and I = {two_i // 2}: the kernels need H a multiple of 8 (16-byte rows) and I a "
             "multiple of 64 (SwiGLU's tiles)", param="w1" if two_i % 128 else "x",
             hint="pad the intermediate (or hidden) size with zero rows and columns")
    if x.dtype not in (torch.bfloat16, torch.float16) or w1.dtype != x.dtype or w2.dtype != x.dtype:
        fail(f"x is {x.dtype}, w1 {w1.dtype} and w2 {w2.dtype}; all must be torch.bfloat16 or all torch.float16",
             param="x" if x.dtype not in (torch.bfloat16, torch.float16) else "w1" if w1.dtype != x.dtype else "w2")
    if topk_ids.dim() != 2 or topk_ids.shape[0] != tokens or tuple(topk_weights.shape) != tuple(topk_ids.shape):
        fail(f"topk_ids is {tuple(topk_ids.shape)} and topk_weights {tuple(topk_weights.shape)}; x has {tokens} "
             "tokens: both must be (T, k)", param="topk_ids" if topk_ids.dim() != 2 or topk_ids.shape[0] != tokens
             else "topk_weights")
    if topk_ids.dtype.is_floating_point or topk_ids.dtype == torch.bool or topk_ids.is_complex():
        fail(f"topk_ids is {topk_ids.dtype}; expected integers (the router's top-k indices)", param="topk_ids")
    if not topk_weights.dtype.is_floating_point:
        fail(f"topk_weights is {topk_weights.dtype}; expected a floating-point type", param="topk_weights")
    if topk_ids.shape[1] > experts:
        fail(f"k = {topk_ids.shape[1]} experts a token, more than the E = {experts} there are", param="topk_ids")
    for name, t in (("w1", w1), ("w2", w2), ("topk_weights", topk_weights), ("topk_ids", topk_ids)):
        if t.device != x.device:
            fail(f"{name} is on {t.device} and x on {x.device}; everything must be on x's GPU", param=name)
    if x.device.type != "cuda":
        fail(f"x is on {x.device}; fused_moe runs on a CUDA GPU", param="x")


def _check_ids(topk_ids: torch.Tensor, experts: int) -> None:
    """The values of `topk_ids` within [0, E), read on the host (`validate=True`)."""
    bad = ((topk_ids < 0) | (topk_ids >= experts)).nonzero()
    if bad.numel():
        t, j = bad[0].tolist()
        fail(f"topk_ids[{t}, {j}] = {int(topk_ids[t, j])} is not an expert: there are E = {experts}, "
             f"ids 0 to {experts - 1} ({bad.shape[0]} such slots)", param="topk_ids")
