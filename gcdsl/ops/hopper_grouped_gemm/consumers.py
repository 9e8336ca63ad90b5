"""The consumer warpgroups: the WGMMA mainloop of each tile, cooperative or ping-pong."""
from __future__ import annotations

from typing import Optional, Tuple

import cutlass
import cutlass.cute as cute
import cutlass.pipeline as pipeline
from cutlass.cute.nvgpu import warpgroup

from .config import FIRST_CONSUMER_WARP, EPILOGUE_BARRIER, FIRST_TURN_BARRIER, ZERO_FILL_BARRIER


class Consumers:
    """The consumer warpgroups (see the module docstring): a part of `HopperGroupedGemm`, which
    sets the sizes it reads (`self.tile_mnk`, `self.stages`, ...) in its `__init__`."""

    @cute.jit
    def consume(self, mainloop, tiled_mma: cute.TiledMma, tma_c: cute.CopyAtom, mC: cute.Tensor,
                total: cutlass.Int32, sA: cute.Tensor, sB: cute.Tensor, sC: cute.Tensor, tile_end: cute.Tensor,
                row_end: cute.Tensor, total_tiles: cutlass.Int32, cluster_idx: cutlass.Int32,
                num_clusters: cutlass.Int32, rank: cutlass.Int32, tidx: cutlass.Int32, warp: cutlass.Int32,
                warpgroup_idx: cutlass.Int32, states=None, finish: bool = True,
                signal: Optional[cute.Tensor] = None, hand_off=None, deal=None, claims=None):
        """The two consumer warpgroups: the WGMMA mainloop of each tile, then its store.

        For a kernel that runs two GEMMs one after the other (`experts.py`): `states`, the
        (read, release) pipeline states to go on from; `finish`, whether to wait at the end
        for the last stores to have read shared memory; `signal`, counters: each tile's
        storing thread adds one to signal[group] once the tile is written; `hand_off`,
        the ring through which the store warps take the tiles' output and store it
        (`Epilogue.make_hand_off`); `deal` and `claims`, as the producer's. Returns the states."""
        tile_m, tile_n, tile_k = self.tile_mnk
        cluster_m = self.cluster_m
        consumer_tidx = tidx - 128
        half = warpgroup_idx - 1  # which 64 rows of the tile this warpgroup computes
        tCrA, tCrB, acc, (tiled_r2s, tRS_sC, tRS_acc, sub_acc, sub_out, accumulators) = self.consumer_views(
            tiled_mma, sA, sB, sC, consumer_tidx)

        if cutlass.const_expr(states is None):
            read = pipeline.make_pipeline_state(pipeline.PipelineUserType.Consumer, self.stages)
            release = pipeline.make_pipeline_state(pipeline.PipelineUserType.Consumer, self.stages)
        else:
            read, release = states
        tiled_mma.set(warpgroup.Field.ACCUMULATE, True)
        if cutlass.const_expr(hand_off is not None):
            # The GEMM before (`states`) left stores reading the sub-tile buffers: its
            # storing thread has waited for them, and the other consumers wait for it.
            EPILOGUE_BARRIER.arrive_and_wait()
            handed = pipeline.make_pipeline_state(pipeline.PipelineUserType.Producer, self.epi_stages)
        tile = cluster_idx
        group = cutlass.Int32(0)
        if cutlass.const_expr(claims is not None):
            reading = claims.reader_state()
        while tile < self.work_items(total_tiles):
            scheduled, _, k_tiles = self.split_of(tile)
            group, m_step, n_tile, rows, start, length = self.locate(tile_end, row_end, scheduled, group, total)
            m_tile = m_step * cluster_m + rank  # past the group's rows for the second CTA
            # of a pair on an odd last M-tile: it only keeps the pipeline moving
            rows_here = rows - m_tile * tile_m - half * 64
            if cutlass.const_expr(self.ragged == "k"):
                k_tiles = (length + tile_k - 1) // tile_k
                # A group without K stores zeros (the weight gradient of an expert no
                # token reached): accumulators cleared, no k-tile to wait for.
                acc.fill(0.0)
                rows_here = rows_here * cutlass.min(k_tiles, 1)
                if cutlass.const_expr(self.config.zero_fill):  # both warpgroups, whatever their rows
                    self.zero_columns_before_group(mainloop, read, sA, sB, k_tiles * tile_k - length,
                                                   consumer_tidx, 256, ZERO_FILL_BARRIER)
            read, release = self.mma_tile(mainloop, tiled_mma, acc, tCrA, tCrB, read, release, k_tiles,
                                          self.mma_rows(rows_here, total))

            # (no store for the second CTA of a pair that has no rows: the whole CTA skips it)
            if rows > m_tile * tile_m:
                if cutlass.const_expr(hand_off is not None):
                    handed = self.hand_over_tile(hand_off, handed, tiled_r2s, tRS_sC, tRS_acc, sub_acc, sub_out,
                                                 accumulators)
                else:
                    self.store_tile(tma_c, mC, total, sC, tiled_r2s, tRS_sC, tRS_acc, sub_acc, sub_out, accumulators,
                                    group, start, rows, m_tile, n_tile, warp, EPILOGUE_BARRIER, FIRST_CONSUMER_WARP,
                                    0, signal)
            if cutlass.const_expr(claims is None):
                tile = self.next_item(tile, num_clusters, deal)
            else:
                tile, reading = claims.take(reading)

        if cutlass.const_expr(finish):
            if warp == FIRST_CONSUMER_WARP:
                if cutlass.const_expr(self.split_k > 1):
                    cute.arch.cp_async_bulk_wait_group(0, read=True)  # every lane (see `store_tile`)
                else:
                    with cute.arch.elect_one():
                        cute.arch.cp_async_bulk_wait_group(0, read=True)
        return read, release

    @cute.jit
    def consume_pingpong(self, mainloop, tiled_mma: cute.TiledMma, tma_c: cute.CopyAtom, mC: cute.Tensor,
                         total: cutlass.Int32, sA: cute.Tensor, sB: cute.Tensor, sC: cute.Tensor,
                         tile_end: cute.Tensor, row_end: cute.Tensor, total_tiles: cutlass.Int32,
                         cluster_idx: cutlass.Int32, num_clusters: cutlass.Int32, rank: cutlass.Int32,
                         tidx: cutlass.Int32, warp: cutlass.Int32, warpgroup_idx: cutlass.Int32):
        """The two consumer warpgroups, a whole tile each in turn: the CTA's tiles 0, 2,
        4, ... go to warpgroup 1 and 1, 3, 5, ... to warpgroup 2. Each waits for and
        releases only its own tiles' stages, and steps its pipeline states over the
        other's; each stores its own tiles through its own sub-tile buffers, barrier and
        storing warp, while the other's WGMMAs run.

        The mainloops take turns too (`FIRST_TURN_BARRIER`): a warpgroup waits on its
        tile's first stage only once the other has waited on the previous tile's last.
        Otherwise it would wait k-tiles ahead of the ring, where an mbarrier's phase
        parity no longer says which fill of a stage it sees."""
        tile_m, tile_n, tile_k = self.tile_mnk
        turn_of = warpgroup_idx - 1  # this warpgroup's tiles: those with turn == turn_of
        consumer_tidx = tidx - 128 * warpgroup_idx
        tCrA, tCrB, acc, (tiled_r2s, tRS_sC, tRS_acc, sub_acc, sub_out, accumulators) = self.consumer_views(
            tiled_mma, sA, sB, sC, consumer_tidx)
        epilogue_barrier = pipeline.NamedBarrier(barrier_id=1 + turn_of, num_threads=128)
        my_turn_done = pipeline.NamedBarrier(barrier_id=FIRST_TURN_BARRIER + turn_of, num_threads=256)
        other_turn_done = pipeline.NamedBarrier(barrier_id=FIRST_TURN_BARRIER + 1 - turn_of, num_threads=256)
        store_warp = FIRST_CONSUMER_WARP + 4 * turn_of
        first_buffer = turn_of * self.epi_stages

        read = pipeline.make_pipeline_state(pipeline.PipelineUserType.Consumer, self.stages)
        release = pipeline.make_pipeline_state(pipeline.PipelineUserType.Consumer, self.stages)
        tiled_mma.set(warpgroup.Field.ACCUMULATE, True)
        tile = cluster_idx
        turn = cutlass.Int32(0)
        group = cutlass.Int32(0)
        while tile < total_tiles:
            group, m_step, n_tile, rows, start, length = self.locate(tile_end, row_end, tile, group, total)
            m_tile = m_step * self.cluster_m + rank  # past the group's rows for the second CTA
            # of a pair on an odd last M-tile: its warpgroup only keeps the pipeline moving
            rows_here = rows - m_tile * tile_m
            k_tiles = self.k_tiles
            if cutlass.const_expr(self.ragged == "k"):
                k_tiles = (length + tile_k - 1) // tile_k
            if turn == turn_of:
                if cutlass.const_expr(self.ragged == "k"):
                    # A group without K stores zeros (see `consume`).
                    acc.fill(0.0)
                    rows_here = rows_here * cutlass.min(k_tiles, 1)
                if tile != cluster_idx:
                    other_turn_done.arrive_and_wait()  # the previous tile's mainloop has its stages
                if cutlass.const_expr(self.config.zero_fill):
                    self.zero_columns_before_group(mainloop, read, sA, sB, k_tiles * tile_k - length,
                                                   consumer_tidx, 128, ZERO_FILL_BARRIER + turn_of)
                read, release = self.mma_tile(mainloop, tiled_mma, acc, tCrA, tCrB, read, release, k_tiles,
                                              self.mma_rows(rows_here, total), my_turn_done,
                                              tile + num_clusters < total_tiles)
                if rows > m_tile * tile_m:
                    self.store_tile(tma_c, mC, total, sC, tiled_r2s, tRS_sC, tRS_acc, sub_acc, sub_out, accumulators,
                                    group, start, rows, m_tile, n_tile, warp, epilogue_barrier, store_warp,
                                    first_buffer)
            else:
                for k in cutlass.range(k_tiles, unroll=1):  # the other warpgroup's stages
                    read.advance()
                    release.advance()
            tile += num_clusters
            turn = 1 - turn

        if warp == store_warp:
            with cute.arch.elect_one():
                cute.arch.cp_async_bulk_wait_group(0, read=True)

    def mma_rows(self, rows_here: cutlass.Int32, total: cutlass.Int32) -> cutlass.Int32:
        """The rows `mma_tile` is told a warpgroup has: its own, or with
        `GemmConfig.mma_without_rows` all T of them (T > 0 wherever the kernel runs), so
        that its WGMMAs always run. (T, a runtime value, keeps the path without WGMMAs in
        the code, never taken: with it folded away, ptxas predicated an R2UR of a
        descriptor address, which the SASS test forbids.)"""
        if cutlass.const_expr(self.config.mma_without_rows):
            return cutlass.max(rows_here, total)
        return rows_here

    @cute.jit
    def mma_tile(self, mainloop, tiled_mma: cute.TiledMma, acc: cute.Tensor, tCrA: cute.Tensor, tCrB: cute.Tensor,
                 read, release, k_tiles: cutlass.Int32, rows_here: cutlass.Int32,
                 turn_done: Optional[pipeline.NamedBarrier] = None, next_turn: cutlass.Boolean = False) -> Tuple:
        """One tile's k-tiles for a consumer warpgroup: its WGMMAs into `acc`, each stage
        released once its WGMMAs have read it. With no rows here (past the group's end,
        or a group without K) no WGMMA runs, and the stages are only waited for and
        released, to keep the pipeline moving. Returns the pipeline states, advanced.

        With `turn_done` (ping-pong), once the last stage is waited for, arrives on it
        when `next_turn` (the other warpgroup has a next tile waiting on it)."""
        k_blocks = cute.size(tCrA, mode=[2])
        if rows_here > 0:
            acc.fill(0.0)
            warpgroup.fence()
            # k-tile 0: issue its WGMMAs, keep them in flight
            mainloop.consumer_wait(read)
            for kb in cutlass.range_constexpr(k_blocks):
                cute.gemm(tiled_mma, acc, tCrA[(None, None, kb, read.index)],
                          tCrB[(None, None, kb, read.index)], acc)
            warpgroup.commit_group()
            read.advance()
            for k in cutlass.range(1, k_tiles, unroll=1):
                mainloop.consumer_wait(read)
                for kb in cutlass.range_constexpr(k_blocks):
                    cute.gemm(tiled_mma, acc, tCrA[(None, None, kb, read.index)],
                              tCrB[(None, None, kb, read.index)], acc)
                warpgroup.commit_group()
                # k-tile k-1's WGMMAs are done reading their stage: release it
                warpgroup.wait_group(1)
                mainloop.consumer_release(release)
                release.advance()
                read.advance()
            self.hand_over_turn(turn_done, next_turn)
            warpgroup.wait_group(0)
            mainloop.consumer_release(release)
            release.advance()
        else:
            for k in cutlass.range(k_tiles, unroll=1):
                mainloop.consumer_wait(read)
                mainloop.consumer_release(release)
                release.advance()
                read.advance()
            self.hand_over_turn(turn_done, next_turn)
        return read, release

    @cute.jit
    def zero_columns_before_group(self, mainloop, read, sA: cute.Tensor, sB: cute.Tensor, columns: cutlass.Int32,
                                  thread: cutlass.Int32, threads: int, barrier_id: int):
        """Ragged K, an operand K-major (`GemmConfig.zero_fill`): a group's first k-tile
        starts `columns` (0 to 63) before the group, and such an operand's stage holds
        the previous group's values there (TMA clips only the T-strided views). Once the
        stage has landed, `threads` consumer threads zero those columns of every
        K-major operand, and a barrier orders the zeros (made visible to the WGMMAs'
        proxy) before any WGMMA reads the stage. Zeros in one operand would do for
        finite values; in both, an inf or NaN of another group cannot reach this one."""
        tile_m, tile_n, _ = self.tile_mnk
        if columns > 0:
            mainloop.consumer_wait(read)  # (the mainloop waits on it again: it stays complete)
            zero = self.ab_dtype(0)
            if cutlass.const_expr(self.config.a_major == "k"):
                for i in cutlass.range(thread, tile_m * columns, threads, unroll=1):
                    sA[(i % tile_m, i // tile_m, read.index)] = zero
            if cutlass.const_expr(self.config.b_major == "k"):
                for i in cutlass.range(thread, tile_n * columns, threads, unroll=1):
                    sB[(i % tile_n, i // tile_n, read.index)] = zero
            cute.arch.fence_proxy("async.shared", space="cta")
            pipeline.NamedBarrier(barrier_id=barrier_id, num_threads=threads).arrive_and_wait()

    @cute.jit
    def hand_over_turn(self, turn_done: Optional[pipeline.NamedBarrier], next_turn: cutlass.Boolean):
        """Ping-pong: lets the other warpgroup's mainloop start (see `consume_pingpong`)."""
        if cutlass.const_expr(turn_done is not None):
            if next_turn:
                turn_done.arrive()

    @cute.jit
    def consumer_views(self, tiled_mma: cute.TiledMma, sA: cute.Tensor, sB: cute.Tensor, sC: cute.Tensor,
                       consumer_tidx: cutlass.Int32) -> Tuple:
        """A consumer thread's WGMMA operands (shared-memory descriptors), its accumulators
        and its epilogue views (`epilogue_partitions`)."""
        tile_m, tile_n, _ = self.tile_mnk
        thr_mma = tiled_mma.get_slice(consumer_tidx)
        tCrA = tiled_mma.make_fragment_A(thr_mma.partition_A(sA))
        tCrB = tiled_mma.make_fragment_B(thr_mma.partition_B(sB))
        acc_shape = thr_mma.partition_C(cute.make_identity_tensor((tile_m, tile_n))).shape
        acc = cute.make_rmem_tensor(acc_shape, self.acc_dtype)
        return tCrA, tCrB, acc, self.epilogue_partitions(tiled_mma, sC, acc, consumer_tidx)
