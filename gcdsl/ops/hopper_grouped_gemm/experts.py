"""Both GEMMs of an MoE expert layer in one persistent kernel (`MoeExperts`).

    act[rows of e] = silu(x[token[rows of e]] @ gate_e^T) * (x[token[rows of e]] @ up_e^T)    the gate-up GEMM
    y[rows of e]   = act[rows of e] @ w2_e^T                                                  the down GEMM
    out[t]         = sum_j weights[t k + j] * y[row_of[t k + j]]                              the combine

The M rows are the token slots sorted by expert, grouped through `offs` (G = E); `x`
(T, H) holds the tokens and `token` (M,) the token of each sorted slot: the gate-up
tiles gather their A rows from x by TMA, a box per row (`Producer.produce`, `a_rows`),
with no permuted copy of x. `w1` is (E, 2I, H), gate rows first, `w2` (E, H, I);
`act` (M, I) and `y` (M, H) are the kernel's scratch, `out` (T, H) its result: the
down tile that brings the last of a token's k rows of a column tile sums them there
(`Epilogue.finish_tokens`; `weights` fp32 and `row_of`, the sorted row of each slot,
as the routing left them), so no kernel of its own combines them. Each GEMM is the
grouped GEMM of this package, configured as `grouped_mm_swiglu` and `grouped_mm` would
be, with the same tile shape so that both run through one shared-memory ring and one
pipeline.

Roles: warp 0 loads (`Producer.produce`), the two consumer warpgroups run each tile's
WGMMAs (`Consumers.consume`) and store the gate-up tiles, and warps 1 to 3, once the
schedule is built, store the down tiles and combine their tokens
(`Epilogue.store_handed_tiles`) from the sub-tile buffers the consumers hand them
(`Epilogue.hand_over_tile`), while the consumers go on to the next tile.

Every CTA takes its tiles of the gate-up GEMM, then its tiles of the down GEMM. The
gate-up tiles are dealt round the CTAs as the grouped GEMM deals them (CTA c: tiles c,
c + CTAs, ...), so the last, partial round leaves some CTAs a tile short: the light
ones. The down tiles are dealt so as to even out the weight bytes each CTA streams
(`DownDeal`): the first `down_lead` rounds of them round the light CTAs alone, a
gate-up tile reading about as many bytes as H / (I / K splits) down tiles; the rest
round all the CTAs, on from where that deal ended, so that the light CTAs also take
what is left over after the last whole round. A down
tile of expert e reads e's rows of `act`, which gate-up tiles of other CTAs store: the
storing thread of each gate-up tile adds one to `done[e]` once the tile is written
(release, GPU scope), and the producer warp waits before a down tile's loads until
`done[e]` counts every gate-up tile of e (acquire, then a proxy fence before its TMA
loads). `done` must hold zeros at the launch.

The kernel is launched with programmatic stream serialization: it starts while the
kernel before it in the stream (the routing, which writes `offs`, `token` and `row_of`
and zeroes `done`) runs, and each thread waits for that grid's end before it reads any
of them (`griddepcontrol.wait`, after the barriers' setup and the descriptors' prefetch).

No CTA waits on anything in its gate-up tiles, and every gate-up tile is dealt before
any down tile of the same CTA, so the waits end as long as every CTA of the grid runs
at once: the host launches at most as many CTAs as fit on the GPU together, and the
kernel must not share the GPU with work that could keep some of them from starting.
Should that happen, a wait of 20 s traps with a message (`Producer.wait_for_group`).

Counters, in `done` (Int32, zeroed at the launch): E per expert (the gate-up tiles
stored), then T x the down GEMM's N-tiles per token and column tile (its rows stored).

Descriptors: seven (x's rows, w1, act stored, act loaded in whole tiles and in short
boxes for partial M-tiles, w2, y), each in grid-constant parameter space, none
depending on `offs` or on the routing.

Phase stamps (`trace=True`, for `fused_moe.megakernel_phases`): each CTA writes the
global timer (ns) at each of `PHASES` into eight Int64 after the counters in `done`'s
buffer (from the first 8-byte boundary after them), CTA c's at 8 c. Without it the
kernel has no such code.
"""
from __future__ import annotations

from typing import Tuple

import cuda.bindings.driver as cuda

import cutlass
import cutlass.cute as cute
import cutlass.pipeline as pipeline
from cutlass.cute.nvgpu import cpasync
from cutlass.memory import SmemAllocator, get_smem_capacity_in_bytes

import gcdsl

from . import HopperGroupedGemm
from .config import (CONSUMER_REGS, FIRST_STORE_WARP, HEADER_ALIGN, MAX_STAGES, PHASES, PRODUCER_REGS, SCHEDULE_WARP,
                     STAMP_SLOTS, THREADS, TILE_M, GemmConfig, groups_per_lane)


def stamps_offset(counters):
    """Int32 elements of `done`'s buffer before the phase stamps: the counters, to 8 bytes."""
    return (counters + 1) // 2 * 2


class DownDeal:
    """Which down work items a CTA takes (the module docstring): first `first`, then each
    `next` of the one before. Of `ctas` CTAs, those dealt a gate-up item fewer than the
    others (the light ones, `ctas - gate_up_items % ctas` of them) take the first `lead`
    rounds of down items among themselves, light CTA l items l, l + light CTAs, ...; the
    items after those go round all the CTAs, the light ones first. With `lead` 0 the down
    items are dealt round on from where the gate-up deal ended. Plain arithmetic: traced
    on the kernel's values, or run on ints."""

    def __init__(self, cta, ctas, gate_up_items, lead: int) -> None:
        self.ctas, self.lead = ctas, lead
        self.first = (cta + ctas - gate_up_items % ctas) % ctas
        if lead:  # a heavy CTA's first item comes after the light CTAs' lead
            self.heavy = gate_up_items % ctas  # CTAs 0 to heavy - 1 have a gate-up item more
            self.shared = (ctas - self.heavy) * lead
            self.first += self.shared * _below(cta, self.heavy)

    def next(self, item):
        if not self.lead:
            return item + self.ctas
        # (a light CTA's last item of the lead, l + (lead - 1) light, steps to lead light + l:
        # its first of the items dealt round all)
        return item + self.ctas - self.heavy * _below(item, self.shared)


def _below(a, b):
    """1 where a < b, else 0 (a branch-free compare on ints or traced Int32)."""
    return cutlass.min(cutlass.max(b - a, 0), 1)


class MoeExperts:
    """The two GEMMs of an expert layer (see the module docstring) for E experts, hidden
    size H and intermediate size I, in 16-bit type `ab_dtype`, tiles 128 x `tile_n`
    (cooperative schedule). With `split_k` > 1 each down tile is that many work items,
    each over its range of I, adding its fp32 product into `y` (fp32, zeroed before the
    launch) by TMA reduce-add stores: more CTAs streaming w2 where the down GEMM has
    few tiles (decode). With `stagger_k` each tile of either GEMM reads its k-tiles
    from a different one on (`Producer.produce`). `down_lead`: the rounds of down
    tiles dealt among the CTAs a gate-up tile short before the rest (`DownDeal`). With
    `trace` each CTA stamps its phases (the module docstring).

    `__call__` is the host function to `cute.compile`:
        (x, token, row_of, weights, w1, act_store, act, w2, y_store, y, out, offs, done, tokens,
         total, num_ctas, stream)
    pointers all, but `tokens` (T), `total` (M) and `num_ctas`; `token` Int64, `row_of`
    Int32, `weights` fp32 (T k,); `act_store` and `y_store` are `act` and `y` moved back by
    M rows (the base of the grouped GEMM's ragged store descriptor).
    """

    def __init__(self, ab_dtype, experts: int, hidden: int, inter: int, top_k: int, tile_n: int = 128,
                 split_k: int = 1, stagger_k: bool = False, trace: bool = False, down_lead: int = 0) -> None:
        up = GemmConfig(ab_dtype, ab_dtype, experts, 2 * inter, hidden, tile_n, activation="swiglu")
        # With K splits the down tiles add fp32 products into a zeroed fp32 `y`.
        down = GemmConfig(ab_dtype, ab_dtype if split_k == 1 else cutlass.Float32, experts, hidden, inter, tile_n,
                          split_k=split_k)
        self.top_k = top_k  # slots a token: the combine's rows
        self.experts, self.tile_n, self.split_k, self.stagger_k = experts, tile_n, split_k, stagger_k
        self.trace, self.down_lead = trace, down_lead
        self.table = 32 * groups_per_lane(experts)
        # the ring's and the hand-off's mbarriers (one pair a down sub-tile buffer), two tile tables
        # (one per GEMM), the shared row table and the tokens a down tile finishes
        barriers = (MAX_STAGES + down.epi_stages) * 2 * 8
        self.header_bytes = -(-(barriers + 4 * (3 * self.table + 1 + TILE_M + 1)) // HEADER_ALIGN) * HEADER_ALIGN
        sizes = HopperGroupedGemm(up), HopperGroupedGemm(down)
        self.epi_bytes = max(g.epi_bytes for g in sizes)  # one sub-tile area, each GEMM its own buffers in it
        budget = get_smem_capacity_in_bytes("sm_90") - self.epi_bytes - self.header_bytes
        self.stages = min(MAX_STAGES, budget // sizes[0].stage_bytes)
        self.up, self.down = HopperGroupedGemm(up, self.stages), HopperGroupedGemm(down, self.stages)
        assert self.up.tile_mnk == self.down.tile_mnk and self.up.stage_bytes == self.down.stage_bytes

    @property
    def smem_bytes(self) -> int:
        return self.header_bytes + self.stages * self.up.stage_bytes + self.epi_bytes

    def counters(self, tokens: int) -> int:
        """Int32 counters the kernel keeps in `done` for `tokens` tokens (the module
        docstring): E per expert, then one per token and column tile of the down GEMM."""
        return self.experts + tokens * self.down.n_tiles

    def tile_bound(self, total: int) -> int:
        """The most tiles either GEMM can have over `total` rows, whatever `offs` holds."""
        tile_m = self.up.tile_m
        m_steps = (total + min(self.experts, total) * (tile_m - 1)) // tile_m
        return m_steps * max(self.up.n_tiles, self.down.n_tiles * self.split_k)

    def trace_args(self) -> Tuple:
        """Arguments to compile `__call__` with: their types are what matters (see
        `HopperGroupedGemm.trace_args`)."""
        def ptr(dtype, align=16):
            return cute.runtime.make_ptr(dtype, 0, cute.AddressSpace.gmem, assumed_align=align)

        ab = self.up.ab_dtype
        return (ptr(ab), ptr(cutlass.Int64, 8), ptr(cutlass.Int32, 4), ptr(cutlass.Float32, 4), ptr(ab), ptr(ab),
                ptr(ab), ptr(ab), ptr(self.down.c_dtype), ptr(self.down.c_dtype), ptr(ab), ptr(cutlass.Int32, 4),
                ptr(cutlass.Int32, 4), cutlass.Int32(1), cutlass.Int32(1), cutlass.Int32(1),
                cute.runtime.make_fake_stream())

    @cute.jit
    def __call__(self, x_ptr: cute.Pointer, token_ptr: cute.Pointer, row_ptr: cute.Pointer, weight_ptr: cute.Pointer,
                 w1_ptr: cute.Pointer, act_store_ptr: cute.Pointer, act_ptr: cute.Pointer, w2_ptr: cute.Pointer,
                 y_store_ptr: cute.Pointer, y_ptr: cute.Pointer, out_ptr: cute.Pointer, offs_ptr: cute.Pointer,
                 done_ptr: cute.Pointer, tokens: cutlass.Int32, total: cutlass.Int32, num_ctas: cutlass.Int32,
                 stream: cuda.CUstream):
        up, down = self.up, self.down
        _, b0, c0 = up.operands(None, w1_ptr, act_store_ptr, total)  # (A gathered from x: no A view)
        a1, b1, c1 = down.operands(act_ptr, w2_ptr, y_store_ptr, total)
        x = cute.make_tensor(x_ptr, cute.make_layout((tokens, up.k), stride=(up.k, 1)))
        token = cute.make_tensor(token_ptr, cute.make_layout(total))
        offs = cute.make_tensor(offs_ptr, cute.make_layout(self.experts))
        done = cute.make_tensor(done_ptr, cute.make_layout(self.experts))
        # the combine's operands: rows of y and out as 16-byte vectors of columns (`finish_tokens`)
        hidden, vector = up.k, 128 // down.c_dtype.width
        y = cute.make_tensor(y_ptr, cute.make_layout((total, (vector, hidden // vector)), stride=(hidden, (1, vector))))
        out = cute.make_tensor(out_ptr, cute.make_layout((tokens, (vector, hidden // vector)),
                                                         stride=(hidden, (1, vector))))
        row_of = cute.make_tensor(row_ptr, cute.make_layout(total))
        weights = cute.make_tensor(weight_ptr, cute.make_layout(total))
        counts = cute.make_tensor(done_ptr + self.experts, cute.make_layout(tokens * down.n_tiles))

        # One MMA and one ring for both (same tile, K-major operands); each GEMM its own sub-tile buffers.
        tiled_mma, a_smem, b_smem, c_smem_up = up.mma_and_smem_layouts()
        c_smem_down = down.mma_and_smem_layouts()[3]
        _, _, tma_b0, mB0, tma_c0, mC0 = up.tma_atoms(None, b0, c0, a_smem, b_smem, c_smem_up)
        tma_a1, mA1, tma_b1, mB1, tma_c1, mC1 = down.tma_atoms(a1, b1, c1, a_smem, b_smem, c_smem_down)
        tma_x = up.tma_atom_a_rows(x, a_smem)  # the gate-up tiles' A, a row at a time
        tma_a1_short, mA1_short = down.tma_atom_a_short(a1)  # partial M-tiles' A rows (`Producer.produce`)

        table = self.table
        # one sub-tile area in the gate-up GEMM's output type, as many bytes as either GEMM's buffers
        epi_elements = max(cute.cosize(c_smem_up),
                           cute.cosize(c_smem_down) * self.down.c_dtype.width // self.up.c_dtype.width)

        @cute.struct
        class SharedStorage:
            mainloop_barriers: cute.struct.MemRange[cutlass.Int64, self.stages * 2]
            hand_off_barriers: cute.struct.MemRange[cutlass.Int64, self.down.epi_stages * 2]
            tile_end_up: cute.struct.MemRange[cutlass.Int32, table]
            tile_end_down: cute.struct.MemRange[cutlass.Int32, table]
            row_end: cute.struct.MemRange[cutlass.Int32, table + 1]
            finished: cute.struct.MemRange[cutlass.Int32, TILE_M + 1]  # the tokens a down tile completes
            sA: cute.struct.Align[cute.struct.MemRange[up.ab_dtype, cute.cosize(a_smem)], HEADER_ALIGN]
            sB: cute.struct.Align[cute.struct.MemRange[up.ab_dtype, cute.cosize(b_smem)], 1024]
            sC: cute.struct.Align[cute.struct.MemRange[up.c_dtype, epi_elements], 1024]

        self.shared_storage = SharedStorage
        self.kernel(tiled_mma, tma_x, tma_b0, mB0, tma_c0, mC0, tma_a1, mA1, tma_b1, mB1, tma_c1, mC1,
                    tma_a1_short, mA1_short, token, row_of, weights, y, out, counts, offs, done, total, a_smem,
                    b_smem, c_smem_up, c_smem_down).launch(
            grid=(num_ctas, 1, 1), block=(THREADS, 1, 1), cluster=(1, 1, 1), min_blocks_per_mp=1, stream=stream,
            use_pdl=True)  # (starts while the routing kernel before it runs: see the wait in `kernel`)

    @gcdsl.kernel
    def kernel(self, tiled_mma: cute.TiledMma,
               tma_x: cute.CopyAtom, tma_b0: cute.CopyAtom, mB0: cute.Tensor,
               tma_c0: cute.CopyAtom, mC0: cute.Tensor,
               tma_a1: cute.CopyAtom, mA1: cute.Tensor, tma_b1: cute.CopyAtom, mB1: cute.Tensor,
               tma_c1: cute.CopyAtom, mC1: cute.Tensor,
               tma_a1_short: cute.CopyAtom, mA1_short: cute.Tensor, token: cute.Tensor, row_of: cute.Tensor,
               weights: cute.Tensor, y: cute.Tensor, out: cute.Tensor, counts: cute.Tensor,
               offs: cute.Tensor, done: cute.Tensor, total: cutlass.Int32,
               a_smem: cute.ComposedLayout, b_smem: cute.ComposedLayout,
               c_smem_up: cute.ComposedLayout, c_smem_down: cute.ComposedLayout):
        tidx, _, _ = cute.arch.thread_idx()
        bidx, _, _ = cute.arch.block_idx()
        stamps = None
        if cutlass.const_expr(self.trace):
            # (the stamps start at an 8-byte boundary: whole 64-bit stores)
            first = (done.iterator + stamps_offset(self.experts + cute.size(counts))).toint() + bidx * (STAMP_SLOTS * 8)
            stamps = cute.make_tensor(cute.make_ptr(cutlass.Int64, first, cute.AddressSpace.gmem, assumed_align=8),
                                      cute.make_layout(STAMP_SLOTS))
            self.stamp(stamps, "start", tidx == 0)
        num_ctas, _, _ = cute.arch.grid_dim()
        warp = cute.arch.make_warp_uniform(cute.arch.warp_idx())
        warpgroup_idx = cute.arch.make_warp_uniform(tidx // 128)
        tile_m = self.up.tile_mnk[0]
        rank = cutlass.Int32(0)

        if warp == 0:
            for atom in (tma_x, tma_b0, tma_c0, tma_a1, tma_b1, tma_c1, tma_a1_short):
                cpasync.prefetch_descriptor(atom)

        smem = SmemAllocator()
        storage = smem.allocate(self.shared_storage)
        mainloop = self.up.make_mainloop(storage.mainloop_barriers.data_ptr())  # the ring both GEMMs share
        hand_off = self.down.make_hand_off(storage.hand_off_barriers.data_ptr())  # the down tiles' sub-tiles
        pipeline.pipeline_init_arrive(cluster_shape_mn=(1, 1), is_relaxed=True)

        # Launched with programmatic stream serialization, the grid starts while the kernel
        # before it (the routing, which writes offs, token and row_of and zeroes done) still
        # runs: everything above reads none of its outputs, and every thread waits here for
        # that grid to end, its writes visible, before anything below reads them.
        cute.arch.griddepcontrol_wait()
        table = self.table
        tile_end_up = storage.tile_end_up.get_tensor(cute.make_layout(table))
        tile_end_down = storage.tile_end_down.get_tensor(cute.make_layout(table))
        row_end = storage.row_end.get_tensor(cute.make_layout(table + 1))
        finished = storage.finished.get_tensor(cute.make_layout(tile_m + 1))
        if tidx == 128:
            finished[tile_m] = cutlass.Int32(0)  # (the consumers' barriers order it before the first down tile's use)
        if warp == SCHEDULE_WARP:
            self.up.build_schedule(offs, total, tile_end_up, row_end)
            self.down.build_schedule(offs, total, tile_end_down, row_end)  # the same row ends again

        sA = storage.sA.get_tensor(a_smem.outer, swizzle=a_smem.inner)
        sB = storage.sB.get_tensor(b_smem.outer, swizzle=b_smem.inner)
        sC_up = storage.sC.get_tensor(c_smem_up.outer, swizzle=c_smem_up.inner)
        if cutlass.const_expr(self.down.c_dtype == self.up.c_dtype):
            sC_down = storage.sC.get_tensor(c_smem_down.outer, swizzle=c_smem_down.inner)
        else:  # the down tiles' fp32 sums (K splits) in the same bytes
            sC_down = cute.make_tensor(cute.recast_ptr(storage.sC.data_ptr(), c_smem_down.inner,
                                                       dtype=self.down.c_dtype), c_smem_down.outer)

        tBsB0, tBgB0 = self.up.b_boxes(tma_b0, mB0, sB, rank)
        tBsB1, tBgB1 = self.down.b_boxes(tma_b1, mB1, sB, rank)
        pipeline.pipeline_init_wait(cluster_shape_mn=(1, 1))
        tiles_up, tiles_down = tile_end_up[table - 1], tile_end_down[table - 1]
        deal = DownDeal(bidx, num_ctas, tiles_up, self.down_lead)
        self.stamp(stamps, "schedule built", tidx == 0)

        if warpgroup_idx == 0:
            cute.arch.setmaxregister_decrease(PRODUCER_REGS)
            if warp == 0:
                state = self.up.produce(mainloop, None, None, tma_b0, mB0, tBgB0, tBsB0, sA, sB, tile_end_up,
                                        row_end, total, tiles_up, bidx, num_ctas, rank, finish=False,
                                        stagger_k=self.stagger_k, a_rows=(tma_x, token))
                self.stamp(stamps, "gate-up loads issued", tidx == 0)
                self.down.produce(mainloop, tma_a1, mA1, tma_b1, mB1, tBgB1, tBsB1, sA, sB, tile_end_down, row_end,
                                  total, tiles_down, deal.first, num_ctas, rank, state=state, deal=deal,
                                  wait_on=(done, self.up.n_tiles),
                                  stagger_k=self.stagger_k, stamp=stamps, a_short=(tma_a1_short, mA1_short))
                self.stamp(stamps, "down loads issued", tidx == 0)
            elif warp >= FIRST_STORE_WARP:  # the down tiles' stores and combine
                self.down.store_handed_tiles(hand_off, tma_c1, mC1, total, sC_down, tile_end_down, row_end,
                                             tiles_down, deal.first, num_ctas, warp,
                                             (token, row_of, weights, y, out, counts, finished, self.top_k), deal=deal)
                self.stamp(stamps, "down tiles done", tidx == 32 * FIRST_STORE_WARP)
        else:
            cute.arch.setmaxregister_increase(CONSUMER_REGS)
            # No wait at the end of the gate-up tiles (finish=False) before the down tiles
            # reuse the sub-tile buffers: each gate-up tile's signal has already waited for
            # all of its stores to be written, and the down GEMM's consumers wait for it.
            states = self.up.consume(mainloop, tiled_mma, tma_c0, mC0, total, sA, sB, sC_up, tile_end_up, row_end,
                                     tiles_up, bidx, num_ctas, rank, tidx, warp, warpgroup_idx, finish=False,
                                     signal=done)
            self.stamp(stamps, "gate-up tiles stored", tidx == 128)
            self.down.consume(mainloop, tiled_mma, tma_c1, mC1, total, sA, sB, sC_down, tile_end_down, row_end,
                              tiles_down, deal.first, num_ctas, rank, tidx, warp, warpgroup_idx, states=states,
                              hand_off=hand_off, deal=deal)

    @cute.jit
    def stamp(self, stamps, phase: str, here: cutlass.Boolean):
        """With `trace`, the global timer into the slot of `phase` (`PHASES`) of the CTA's
        stamps, by the thread for which `here` holds; nothing otherwise."""
        if cutlass.const_expr(stamps is not None):
            if here:
                stamps[PHASES.index(phase)] = cute.arch.globaltimer()
