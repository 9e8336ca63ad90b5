"""The epilogue: accumulators to the output type (SwiGLU applied where asked), through
shared-memory sub-tiles, one TMA store each; stored by the consumers themselves
(`store_tile`), or handed to store warps that store them and run the expert layer's
combine (`hand_over_tile`, `store_handed_tiles`)."""
from __future__ import annotations

from typing import Any, Optional, Tuple

import cutlass
import cutlass.cute as cute
import cutlass.pipeline as pipeline
import cutlass.utils.hopper_helpers as sm90
from cutlass.cute.nvgpu import cpasync
from cutlass.tensor_utils import LayoutEnum

from ..combine_kernel import weigh_and_sum
from .config import FIRST_STORE_WARP, STORE_WARPS, STORE_WARPS_BARRIER, l2_policy


class Epilogue:
    """The epilogue (see the module docstring): a part of `HopperGroupedGemm`, which
    sets the sizes it reads (`self.tile_mnk`, `self.stages`, ...) in its `__init__`."""

    @cute.jit
    def epilogue_partitions(self, tiled_mma: cute.TiledMma, sC: cute.Tensor, acc: cute.Tensor,
                            consumer_tidx: cutlass.Int32) -> Tuple:
        """Accumulators -> output type -> shared memory (stmatrix for 16-bit outputs): the
        copy, its shared-memory and accumulator views, one sub-tile's registers, and which
        accumulators feed each sub-tile (`sub_tile_accumulators`)."""
        r2s_atom = sm90.get_smem_store_op(LayoutEnum.ROW_MAJOR, self.c_dtype, self.acc_dtype)
        tiled_r2s = cute.make_tiled_copy_S(
            r2s_atom,
            cute.make_tiled_copy_C_atom(
                cute.make_copy_atom(cute.nvgpu.warp.StMatrix8x8x16bOp(False, 4), self.c_dtype), tiled_mma
            ),
        )
        thr_r2s = tiled_r2s.get_slice(consumer_tidx)
        tRS_sC = thr_r2s.partition_D(sC)  # (R2S, R2S_M, R2S_N, epi buffer)
        tRS_acc = tiled_r2s.retile(acc)
        sub_shape = cute.shape(thr_r2s.partition_S(sC))[:3]
        sub_acc = cute.make_rmem_tensor(sub_shape, self.acc_dtype)
        sub_out = cute.make_rmem_tensor(sub_shape, self.c_dtype)
        return tiled_r2s, tRS_sC, tRS_acc, sub_acc, sub_out, self.sub_tile_accumulators(tiled_mma, tiled_r2s)

    def sub_tile_accumulators(self, tiled_mma: cute.TiledMma, tiled_r2s) -> Tuple[Tuple[Any, ...], ...]:
        """For each output sub-tile, the accumulator (flat index into the retiled
        accumulators) behind each of its values (flat index into a sub-tile's registers);
        with SwiGLU a pair for each value: its gate's and its up projection's (tile_n / 2
        columns further on, in the same thread).
        Read off thread 0's coordinates at trace time: the order is the same in every
        thread, but not contiguous per sub-tile when a warpgroup repeats its WGMMA down M
        (ping-pong). `tests/test_grouped_mm_host.py` checks it for other threads."""
        tile_m, tile_n, _ = self.tile_mnk
        acc = tiled_r2s.retile(tiled_mma.get_slice(0).partition_C(cute.make_identity_tensor((tile_m, tile_n))))
        index_of = {tuple(acc[i]): i for i in range(cute.size(acc))}
        sub = tiled_r2s.get_slice(0).partition_S(cute.make_identity_tensor((*self.epi_tile, 1)))[(None, None, None, 0)]

        def feeding(row: int, column: int) -> Any:
            if self.swiglu:
                return index_of[(row, column)], index_of[(row, column + tile_n // 2)]
            return index_of[(row, column)]

        return tuple(tuple(feeding(sub[v][0], sub[v][1] + self.epi_tile[1] * s) for v in range(cute.size(sub)))
                     for s in range(self.out_tile_n // self.epi_tile[1]))

    def store_sub_tile(self, tma_c: cute.CopyAtom, src: cute.Tensor, dst: cute.Tensor,
                       in_flight: Optional[int] = None) -> None:
        """One sub-tile's TMA store, committed; then the wait until at most `in_flight`
        stores (by default epi_stages - 1: the store issued epi_stages sub-tiles ago has
        read its buffer) are still reading shared memory (traced where it is called). The
        store asks L2 for `GemmConfig.store_policy`."""
        cute.copy(tma_c, src, dst, cache_policy=l2_policy(self.config.store_policy))
        cute.arch.cp_async_bulk_commit_group()
        cute.arch.cp_async_bulk_wait_group(self.epi_stages - 1 if in_flight is None else in_flight, read=True)

    @cute.jit
    def store_tile(self, tma_c: cute.CopyAtom, mC: cute.Tensor, total: cutlass.Int32, sC: cute.Tensor,
                   tiled_r2s, tRS_sC: cute.Tensor, tRS_acc: cute.Tensor, sub_acc: cute.Tensor, sub_out: cute.Tensor,
                   accumulators: Tuple[Tuple[Any, ...], ...], group: cutlass.Int32, start: cutlass.Int32,
                   rows: cutlass.Int32, m_tile: cutlass.Int32, n_tile: cutlass.Int32, warp: cutlass.Int32,
                   epilogue_barrier: pipeline.NamedBarrier,
                   store_warp: cutlass.Int32, first_buffer: cutlass.Int32, signal: Optional[cute.Tensor] = None):
        """The epilogue of one tile: sub-tiles of tile_m x 32 through shared memory, one TMA
        store each, in the sub-tile buffers from `first_buffer` on; `store_warp` issues
        the stores, and `epilogue_barrier` spans the warps that share them. With `signal`,
        the storing thread then waits for the tile's stores to be written and adds one to
        signal[group] (release, GPU scope): `Producer.wait_for_group` reads it."""
        sub_tiles = self.out_tile_n // self.epi_tile[1]
        bSG_sC, bSG_gC = self.store_partitions(tma_c, mC, sC, total, group, start, rows, m_tile, n_tile)
        for sub in cutlass.range_constexpr(sub_tiles):
            buffer = first_buffer + sub % self.epi_stages  # sub_tiles is a multiple of epi_stages
            self.sub_tile_to_smem(tiled_r2s, tRS_sC, tRS_acc, sub_acc, sub_out, accumulators, sub, buffer)
            # make the generic-proxy smem writes visible to TMA, then to the storing warp
            cute.arch.fence_proxy("async.shared", space="cta")
            epilogue_barrier.arrive_and_wait()
            if warp == store_warp:
                if cutlass.const_expr(self.split_k > 1):
                    # A reduce-add copy elects its issuing lane itself (`elect.sync` over the
                    # whole warp: inside an elected lane it would wait for the other 31
                    # forever). Every lane commits and waits: the issuing lane's group is
                    # the one that counts, the others' are empty.
                    self.store_sub_tile(tma_c, bSG_sC[(None, buffer)], bSG_gC[(None, (0, sub))])
                else:
                    with cute.arch.elect_one():
                        self.store_sub_tile(tma_c, bSG_sC[(None, buffer)], bSG_gC[(None, (0, sub))])
            epilogue_barrier.arrive_and_wait()  # nobody refills a buffer still being read
        if cutlass.const_expr(signal is not None):
            if warp == store_warp:
                with cute.arch.elect_one():
                    cute.arch.cp_async_bulk_wait_group(0, read=False)  # the tile's rows written
                    cute.arch.fence_proxy("async.global")  # TMA's writes before the count
                    cute.arch.atomic_add(signal.iterator + group, cutlass.Int32(1), sem="release", scope="gpu")

    @cute.jit
    def store_partitions(self, tma_c: cute.CopyAtom, mC: cute.Tensor, sC: cute.Tensor, total: cutlass.Int32,
                         group: cutlass.Int32, start: cutlass.Int32, rows: cutlass.Int32, m_tile: cutlass.Int32,
                         n_tile: cutlass.Int32) -> Tuple:
        """A tile's TMA store views: the sub-tile buffers and the tile's sub-tiles of the output."""
        gC = self.output_sub_tiles(mC, total, group, start, rows, m_tile, n_tile)
        return cpasync.tma_partition(tma_c, 0, cute.make_layout(1), cute.group_modes(sC, 0, 2), gC)

    @cute.jit
    def output_sub_tiles(self, mC: cute.Tensor, total: cutlass.Int32, group: cutlass.Int32, start: cutlass.Int32,
                         rows: cutlass.Int32, m_tile: cutlass.Int32, n_tile: cutlass.Int32) -> cute.Tensor:
        """The tile's part of the output as its TMA store addresses it: (epi_tile, sub-tile)."""
        if cutlass.const_expr(self.ragged == "m"):
            # The group's rows through the ragged descriptor: row coordinate
            # total - rows + r, third coordinate start + rows; rows r >= rows clip.
            mC_group = cute.domain_offset((total - rows, 0), mC[(None, None, start + rows)])
        else:
            mC_group = mC[(None, None, group)]  # (M, N) of the group; TMA clips at M and N
        return cute.zipped_divide(cute.local_tile(mC_group, (self.tile_m, self.out_tile_n), (m_tile, n_tile)),
                                  self.epi_tile)

    @cute.jit
    def sub_tile_to_smem(self, tiled_r2s, tRS_sC: cute.Tensor, tRS_acc: cute.Tensor, sub_acc: cute.Tensor,
                         sub_out: cute.Tensor, accumulators: Tuple[Tuple[Any, ...], ...], sub: int, buffer) -> None:
        """A consumer thread's values of output sub-tile `sub` (SwiGLU applied where asked),
        in the output type, into sub-tile buffer `buffer`."""
        for v in cutlass.range_constexpr(cute.size(sub_acc)):
            if cutlass.const_expr(self.swiglu):
                gate, up = tRS_acc[accumulators[sub][v][0]], tRS_acc[accumulators[sub][v][1]]
                # silu(gate) * up = gate * up / (1 + e^-gate): ex2 and rcp, approximate (MUFU)
                sub_acc[v] = gate * up * cute.arch.rcp_approx(1.0 + cute.math.exp(-gate, fastmath=True))
            else:
                sub_acc[v] = tRS_acc[accumulators[sub][v]]
        sub_out.store(sub_acc.load().to(self.c_dtype))
        cute.copy(tiled_r2s, sub_out, tRS_sC[(None, None, None, buffer)])

    def make_hand_off(self, barriers: cute.Pointer):
        """The ring of sub-tile buffers between the consumers and the store warps, on the
        2 x epi_stages mbarriers at `barriers` (traced in the kernel): a buffer is full
        once each of the 256 consumer threads has written its part and fenced it for
        TMA, and empty again once the store warp's 32 lanes arrive, after its store has
        read it. It starts empty."""
        return pipeline.PipelineAsync.create(
            barrier_storage=barriers, num_stages=self.epi_stages,
            producer_group=pipeline.CooperativeGroup(pipeline.Agent.Thread, 256),
            consumer_group=pipeline.CooperativeGroup(pipeline.Agent.Thread, 32), defer_sync=True)

    @cute.jit
    def hand_over_tile(self, hand_off, handed, tiled_r2s, tRS_sC: cute.Tensor, tRS_acc: cute.Tensor,
                       sub_acc: cute.Tensor, sub_out: cute.Tensor, accumulators: Tuple[Tuple[Any, ...], ...]):
        """The consumers' part of a tile the store warps store (`store_handed_tiles`): each
        output sub-tile into the next buffer of the ring once it is empty, then handed
        over. The consumers go on to the next tile's WGMMAs without waiting for the
        stores. `handed`: the ring's producer state (a tile's sub-tiles fill whole turns
        of it, so sub-tile s goes to buffer s mod epi_stages). Returns it, advanced."""
        for sub in cutlass.range_constexpr(self.out_tile_n // self.epi_tile[1]):
            hand_off.producer_acquire(handed)
            self.sub_tile_to_smem(tiled_r2s, tRS_sC, tRS_acc, sub_acc, sub_out, accumulators, sub,
                                  sub % self.epi_stages)
            cute.arch.fence_proxy("async.shared", space="cta")  # the writes, visible to TMA
            hand_off.producer_commit(handed)
            handed.advance()
        return handed

    @cute.jit
    def store_handed_tiles(self, hand_off, tma_c: cute.CopyAtom, mC: cute.Tensor, total: cutlass.Int32,
                           sC: cute.Tensor, tile_end: cute.Tensor, row_end: cute.Tensor, total_tiles: cutlass.Int32,
                           cta: cutlass.Int32, num_ctas: cutlass.Int32, warp: cutlass.Int32, combine: Tuple,
                           deal=None):
        """The store warps (`config.FIRST_STORE_WARP` on): for each of the CTA's tiles, as
        the consumers deal them, the first store warp takes each sub-tile the consumers
        hand over (`hand_over_tile`) from the ring, stores it and gives the buffer back
        once the store has read it; then all of them run the tile's combine
        (`finish_tokens`). `deal`, as the producer's."""
        sub_tiles = self.out_tile_n // self.epi_tile[1]
        in_flight = 0  # each store's read waited for before its buffer goes back
        taken = pipeline.make_pipeline_state(pipeline.PipelineUserType.Consumer, self.epi_stages)
        tile = cta
        group = cutlass.Int32(0)
        while tile < self.work_items(total_tiles):
            scheduled, _, _ = self.split_of(tile)
            group, m_tile, n_tile, rows, start, _ = self.locate(tile_end, row_end, scheduled, group, total)
            if rows > m_tile * self.tile_m:  # (the consumers' condition for handing it over)
                bSG_sC, bSG_gC = self.store_partitions(tma_c, mC, sC, total, group, start, rows, m_tile, n_tile)
                if warp == FIRST_STORE_WARP:
                    for sub in cutlass.range_constexpr(sub_tiles):
                        hand_off.consumer_wait(taken)
                        src, dst = bSG_sC[(None, sub % self.epi_stages)], bSG_gC[(None, (0, sub))]
                        if cutlass.const_expr(self.split_k > 1):  # every lane (see `store_tile`)
                            self.store_sub_tile(tma_c, src, dst, in_flight)
                        else:
                            with cute.arch.elect_one():
                                self.store_sub_tile(tma_c, src, dst, in_flight)
                        cute.arch.sync_warp()
                        hand_off.consumer_release(taken)
                        taken.advance()
                rows_in_tile = cutlass.min(rows - m_tile * self.tile_m, self.tile_m)
                self.finish_tokens(combine, start + m_tile * self.tile_m, rows_in_tile, n_tile, warp)
            tile = self.next_item(tile, num_ctas, deal)

    @cute.jit
    def finish_tokens(self, combine: Tuple, first_row: cutlass.Int32, rows_in_tile: cutlass.Int32,
                      n_tile: cutlass.Int32, warp: cutlass.Int32):
        """The weighted combine of an MoE layer in its down tiles' epilogue (`experts.py`):
        out[t, columns of the tile] = sum_j weights[t k + j] * y[row_of[t k + j], columns],
        in fp32, in slot order, by whichever tile brings the last of the token's rows.

        Run by the store warps (`store_handed_tiles`). `combine` = (token, row_of,
        weights, y, out, counts, finished, k). The first store warp waits for the tile's
        stores to be written and fences the proxies; then a lane a row adds one to
        counts[t, n_tile] for the row's token t (acquire and release, GPU scope). The add
        that reaches k x split_k (each of the token's k rows comes from one tile, `split_k`
        work items each) follows every other row's store of those columns, so its tile
        lists t in `finished` (shared memory, the count in its last entry), and after the
        store warps' barrier their threads sum the listed tokens' rows, 16 bytes of
        columns a thread. Each token and column tile is summed once, in one order: the
        same result on every run."""
        token, row_of, weights, y, out, counts, finished, top_k = combine
        tile_m, tile_n = self.tile_m, self.config.tile_n
        arrivals = top_k * self.split_k
        if warp == FIRST_STORE_WARP:
            if cutlass.const_expr(self.split_k > 1):
                cute.arch.cp_async_bulk_wait_group(0, read=False)  # every lane, as the reduce-adds were issued
            else:
                with cute.arch.elect_one():
                    cute.arch.cp_async_bulk_wait_group(0, read=False)  # the tile's rows written
            cute.arch.fence_proxy("async.global")  # TMA's writes before the counts
            cute.arch.sync_warp()
            for r in cutlass.range(cute.arch.lane_idx(), rows_in_tile, 32, unroll=1):
                t = cutlass.Int32(token[first_row + r])
                seen = cute.arch.atomic_add(counts.iterator + t * self.n_tiles + n_tile, cutlass.Int32(1),
                                            sem="acq_rel", scope="gpu")
                if seen == arrivals - 1:
                    finished[cute.arch.atomic_add(finished.iterator + tile_m, cutlass.Int32(1), scope="cta")] = t
        STORE_WARPS_BARRIER.arrive_and_wait()
        vector = 128 // self.c_dtype.width  # y's columns in 16 bytes
        vectors = tile_n // vector  # a token's threads
        thread = cute.arch.thread_idx()[0] - 32 * FIRST_STORE_WARP
        column = n_tile * vectors + thread % vectors  # in vectors
        for i in cutlass.range(thread // vectors, finished[tile_m], 32 * STORE_WARPS // vectors, unroll=1):
            if column < self.n // vector:
                weigh_and_sum(y, row_of, weights, out, finished[i], column, top_k, vector)
        STORE_WARPS_BARRIER.arrive_and_wait()  # the list read before it is emptied
        if thread == 0:
            finished[tile_m] = cutlass.Int32(0)
