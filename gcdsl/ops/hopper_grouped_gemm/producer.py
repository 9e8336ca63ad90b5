"""The producer warp: TMA loads of A and B into the shared-memory ring, one k-tile per stage."""
from __future__ import annotations

from typing import Optional, Tuple

import cutlass
import cutlass.cute as cute
import cutlass.pipeline as pipeline
from cutlass.cute.nvgpu import cpasync

from ...lower._dsl import tma_load_2d_by_this_thread, trap_unless
from .config import A_SHORT_BOX_ROWS, PHASES, l2_policy

# How long a tile may wait for the tiles of another GEMM of its kernel before the kernel
# traps (`Producer.wait_for_group`): far above any real wait, which lasts one GEMM at most.
WAIT_LIMIT_NS = 20 * 10**9


class Producer:
    """The producer warp (see the module docstring): a part of `HopperGroupedGemm`, which
    sets the sizes it reads (`self.tile_mnk`, `self.stages`, ...) in its `__init__`."""

    @cute.jit
    def produce(self, mainloop, tma_a: cute.CopyAtom, mA: cute.Tensor, tma_b: cute.CopyAtom, mB: cute.Tensor,
                tBgB: cute.Tensor, tBsB: cute.Tensor, sA: cute.Tensor, sB: cute.Tensor, tile_end: cute.Tensor,
                row_end: cute.Tensor, total: cutlass.Int32, total_tiles: cutlass.Int32, cluster_idx: cutlass.Int32,
                num_clusters: cutlass.Int32, rank: cutlass.Int32, state=None, finish: bool = True,
                wait_on: Optional[Tuple[cute.Tensor, int]] = None, stagger_k: bool = False,
                stamp: Optional[cute.Tensor] = None, a_short: Tuple = (None, None),
                a_rows: Tuple = (None, None), deal=None, claims=None):
        """The producer warp: TMA loads of A and B into the ring, one k-tile per stage.

        For a kernel that runs two GEMMs one after the other (`experts.py`): `state` is
        the pipeline state to go on from, `finish` whether to wait at the end for every
        stage's release, and `wait_on` = (counters, tiles) holds each tile's loads until
        counters[group] reaches `tiles` per M-step of the group. With `stagger_k` a tile
        loads its k-tiles from the (tile mod k-tiles)-th on, wrapping round (the consumers
        sum them in any order), so that CTAs that start together read different columns
        of their weight rows, not the same ones at the same stride. `stamp`, the CTA's
        phase stamps (`experts.PHASES`): the global timer once its first tile's wait is
        over. `a_short`, A's atom and coordinates in short boxes (`tma_atom_a_short`;
        (None, None) without): a partial M-tile loads only the boxes that cover its rows,
        and since the stage's A bytes then vary, the full barrier expects B's at the
        arrive and the producer adds A's before it issues any load. `a_rows`, for ragged M:
        (atom, rows) of A gathered row by row (`tma_atom_a_rows`; `tma_a`, `mA` and
        `a_short` unused): the tile's row r is row rows[first row + r] of the gathered
        tensor (the token of a sorted slot, in the expert layer), one box a row and k-tile.
        The rows' indices are read once a tile, lane l holding those of rows l, l + 32, ...,
        and each lane issues the loads of its own rows. `deal`: the CTA's tiles after the
        first as that deal gives them (`next_item`), not every `num_clusters`; `claims`, as the
        claims give them (`claims.TileClaims`): the cluster's first CTA claims each next tile
        as it starts the one before. Returns the state."""
        tile_m, _, tile_k = self.tile_mnk
        cluster_m = self.cluster_m
        both_ctas = cutlass.Int16((1 << cluster_m) - 1)  # multicast to every CTA of the pair
        if cutlass.const_expr(state is None):
            state = pipeline.make_pipeline_state(pipeline.PipelineUserType.Producer, self.stages)
        tma_a_short, mA_short = a_short
        tma_a_rows, row_index = a_rows
        tile = cluster_idx
        group = cutlass.Int32(0)
        if cutlass.const_expr(claims is not None):
            claiming, reading = claims.publisher_state(), claims.reader_state()
        while tile < self.work_items(total_tiles):
            if cutlass.const_expr(claims is not None):
                if rank == 0:  # the next tile, claimed before this one's loads
                    claiming = claims.publish(claiming)
            scheduled, k_first_tile, k_tiles = self.split_of(tile)
            group, m_step, n_tile, rows, start, length = self.locate(tile_end, row_end, scheduled, group, total)
            m_tile = m_step * cluster_m + rank
            if cutlass.const_expr(self.ragged == "m"):
                first_row = self.tile_first_row(start, rows, m_tile)
                if cutlass.const_expr(tma_a_rows is None):
                    gA = cute.local_tile(cute.domain_offset((first_row, 0), mA), (tile_m, tile_k), (0, None))
                tBgB_tile = tBgB[(None, n_tile, None, group)]
            elif cutlass.const_expr(self.ragged == "k"):
                # The group's K range through the views of `operands`: third coordinate
                # start, k coordinate kk from column k_first of the group (`group_k_tiles`).
                # A K-major operand (T contiguous) has the plain view: column start + k_first.
                k_tiles, k_first = self.group_k_tiles(length)
                gA = cute.local_tile(self.group_columns(mA, start, k_first), (tile_m, tile_k), (m_tile, None))
                tBgB_tile = self.group_b_boxes(tma_b, mB, sB, start, k_first, n_tile, rank)
            else:
                gA = cute.local_tile(mA[(None, None, group)], (tile_m, tile_k), (m_tile, None))
                tBgB_tile = tBgB[(None, n_tile, None, group)]
            if cutlass.const_expr(tma_a_rows is None):
                tAsA, tAgA = cpasync.tma_partition(
                    tma_a, 0, cute.make_layout(1), cute.group_modes(sA, 0, 2), cute.group_modes(gA, 0, 2)
                )
            else:
                sA_rows = cute.flat_divide(sA, (1, tile_k))  # (1, tile_k, row, 1, stage): one box a row
                rows_in_tile = self.tile_rows(rows, m_tile)
                lane_rows = self.lane_row_indices(row_index, first_row, rows_in_tile)
            short_boxes = cutlass.Int32(0)  # 0: the whole A tile, one box
            if cutlass.const_expr(tma_a_short is not None):
                # A's boxes of A_SHORT_BOX_ROWS rows from the tile's first row, into the
                # matching rows of each stage (a box of whole swizzle atoms: 8 rows of 128 B)
                gA_short = cute.local_tile(cute.domain_offset((first_row, 0), mA_short), (A_SHORT_BOX_ROWS, tile_k),
                                           (None, None))
                tAsA_short, tAgA_short = cpasync.tma_partition(
                    tma_a_short, 0, cute.make_layout(1),
                    cute.group_modes(cute.flat_divide(sA, (A_SHORT_BOX_ROWS, tile_k)), 0, 2),
                    cute.group_modes(gA_short, 0, 2))
                # (no rows: a pair's second CTA, loading the first tile)
                short_boxes = self.short_boxes(rows - m_tile * tile_m)
            if cutlass.const_expr(wait_on is not None):
                self.wait_for_group(wait_on[0], wait_on[1], group, rows)
                if cutlass.const_expr(stamp is not None):
                    if tile == cluster_idx:
                        with cute.arch.elect_one():
                            stamp[PHASES.index("first down tile's wait over")] = cute.arch.globaltimer()
            rotation = scheduled % k_tiles if cutlass.const_expr(stagger_k) else 0
            for k in cutlass.range(k_tiles, unroll=1):
                mainloop.producer_acquire(state)  # waits for an empty stage, arms expect_tx
                full = mainloop.producer_get_barrier(state)
                kk = k
                if cutlass.const_expr(stagger_k):
                    kk = self.staggered(k, rotation, k_tiles)
                kk = self.k_tile(k_first_tile, kk)
                # A: gathered row by row, in one box, or (short boxes) in the boxes its rows need
                if cutlass.const_expr(tma_a_rows is not None):
                    self.load_gathered_rows(tma_a_rows, sA_rows, state.index, full, kk, rows_in_tile, lane_rows)
                elif cutlass.const_expr(tma_a_short is None):
                    cute.copy(tma_a, tAgA[(None, kk)], tAsA[(None, state.index)], tma_bar_ptr=full,
                              cache_policy=self.load_policy())
                else:
                    self.load_a_in_short_boxes(tma_a, tAgA, tAsA, tma_a_short, tAgA_short, tAsA_short, short_boxes,
                                               state.index, full, kk)
                if cutlass.const_expr(cluster_m > 1):
                    cute.copy(tma_b, tBgB_tile[(None, kk)], tBsB[(None, state.index)], tma_bar_ptr=full,
                              mcast_mask=both_ctas, cache_policy=self.load_policy())
                else:
                    cute.copy(tma_b, tBgB_tile[(None, kk)], tBsB[(None, state.index)], tma_bar_ptr=full,
                              cache_policy=self.load_policy())
                state.advance()
            if cutlass.const_expr(claims is None):
                tile = self.next_item(tile, num_clusters, deal)
            else:
                tile, reading = claims.take(reading)
        if cutlass.const_expr(claims is not None):
            if rank == 0:
                claims.tail(claiming)  # every CTA's last reads done before this one exits
        if cutlass.const_expr(finish):
            mainloop.producer_tail(state)  # every stage released before the CTA exits
        return state

    def load_policy(self) -> Optional[cutlass.Int64]:
        """The L2 policy of the TMA loads of A and B (`GemmConfig.load_policy`); None leaves
        it to `cute.copy`. (A gathered row by row, `load_gathered_rows`, asks for none.)"""
        return l2_policy(self.config.load_policy)

    @cute.jit
    def tile_first_row(self, start: cutlass.Int32, rows: cutlass.Int32, m_tile: cutlass.Int32) -> cutlass.Int32:
        """Ragged M: the first row of M-tile `m_tile` of a group of `rows` rows from row
        `start` (not a multiple of the tile). A CTA without rows (the second of a pair)
        loads the group's first tile instead: its data is never used, and no TMA box lies
        wholly outside A."""
        first_row = start
        if m_tile * self.tile_m < rows:
            first_row += m_tile * self.tile_m
        return first_row

    def tile_rows(self, rows, m_tile):
        """The rows of M-tile `m_tile` of a group of `rows` rows: a tile's at most (none
        past the group's last tile)."""
        return cutlass.min(rows - m_tile * self.tile_m, self.tile_m)

    def group_k_tiles(self, length) -> Tuple:
        """Ragged K: (k-tiles, the first one's column from the group's start) of a group of
        `length` columns: the k-tiles end at the group's end, so only the first starts
        before it (at a column in (-tile_k, 0]), where TMA reads zeros."""
        tile_k = self.tile_mnk[2]
        k_tiles = (length + tile_k - 1) // tile_k
        return k_tiles, length - k_tiles * tile_k

    @cute.jit
    def short_boxes(self, rows_in_tile: cutlass.Int32) -> cutlass.Int32:
        """The boxes of A_SHORT_BOX_ROWS rows that cover a partial M-tile's `rows_in_tile`
        rows; 0 for a whole tile, or none (the whole tile in one box)."""
        boxes = cutlass.Int32(0)
        if rows_in_tile > 0 and rows_in_tile < self.tile_m:
            boxes = (rows_in_tile + A_SHORT_BOX_ROWS - 1) // A_SHORT_BOX_ROWS
        return boxes

    @cute.jit
    def staggered(self, k: cutlass.Int32, rotation: cutlass.Int32, k_tiles: cutlass.Int32) -> cutlass.Int32:
        """With `stagger_k`: the k-tile a tile loads k-th, from its `rotation`-th on,
        wrapping round at `k_tiles`."""
        kk = k + rotation
        if kk >= k_tiles:
            kk -= k_tiles
        return kk

    @cute.jit
    def load_a_in_short_boxes(self, tma_a: cute.CopyAtom, tAgA: cute.Tensor, tAsA: cute.Tensor,
                              tma_a_short: cute.CopyAtom, tAgA_short: cute.Tensor, tAsA_short: cute.Tensor,
                              short_boxes: cutlass.Int32, stage: cutlass.Int32, full, kk: cutlass.Int32):
        """k-tile kk of A into `stage` where its bytes vary (`a_short`): the whole tile in
        one box (`short_boxes` 0), or the short boxes that cover a partial tile's rows,
        the bytes added to the full barrier before any load of the stage, so that its
        phase cannot end early."""
        if short_boxes == 0:
            with cute.arch.elect_one():
                cute.arch.mbarrier_expect_tx(full, self.a_tile_bytes)
            cute.copy(tma_a, tAgA[(None, kk)], tAsA[(None, stage)], tma_bar_ptr=full, cache_policy=self.load_policy())
        else:
            with cute.arch.elect_one():
                cute.arch.mbarrier_expect_tx(full, short_boxes * self.a_short_box_bytes)
            for box in cutlass.range(short_boxes, unroll=1):
                cute.copy(tma_a_short, tAgA_short[(None, box, kk)], tAsA_short[(None, box, 0, stage)],
                          tma_bar_ptr=full, cache_policy=self.load_policy())

    @cute.jit
    def lane_row_indices(self, row_index: cute.Tensor, first_row: cutlass.Int32, rows_in_tile: cutlass.Int32):
        """A gathered tile's row indices in this lane's registers: those of rows l, l + 32,
        ... for lane l (0 past the tile's rows), every load in flight before the first use."""
        lane = cute.arch.lane_idx()
        lane_rows = cute.make_rmem_tensor((self.tile_m // 32,), cutlass.Int32)
        for j in cutlass.range_constexpr(self.tile_m // 32):
            lane_rows[j] = cutlass.Int32(0)
            if lane + 32 * j < rows_in_tile:
                lane_rows[j] = cutlass.Int32(row_index[first_row + lane + 32 * j])
        return lane_rows

    @cute.jit
    def load_gathered_rows(self, tma_a_rows: cute.CopyAtom, sA_rows: cute.Tensor, stage: cutlass.Int32, full,
                           kk: cutlass.Int32, rows_in_tile: cutlass.Int32, lane_rows: cute.Tensor):
        """k-tile kk of a gathered tile's rows into `stage`: each lane issues the loads of
        its own rows (`lane_row_indices`), all of them at once."""
        # Before any load of the stage, as for whole tiles. (Should a row land first, the
        # phase still cannot end: the arrive expected B's bytes, loaded after.)
        with cute.arch.elect_one():
            cute.arch.mbarrier_expect_tx(full, rows_in_tile * self.a_row_bytes)
        lane = cute.arch.lane_idx()
        for j in cutlass.range_constexpr(self.tile_m // 32):
            if lane + 32 * j < rows_in_tile:
                tma_load_2d_by_this_thread(tma_a_rows, sA_rows[(None, None, 32 * j + lane, 0, stage)].iterator, full,
                                           kk * self.tile_mnk[2], lane_rows[j])

    @cute.jit
    def b_boxes(self, tma_b: cute.CopyAtom, mB: cute.Tensor, sB: cute.Tensor, rank: cutlass.Int32) -> Tuple:
        """Ragged M and batches: (this CTA's part of each stage's B, its TMA boxes of B as
        (TMA, n_tile, k_tile, group)). In a pair, its half of every B tile, which it
        multicasts to both CTAs: the first half for rank 0, the second for rank 1 (with
        SwiGLU, the tile's gate rows and its up rows)."""
        gB = cute.local_tile(mB, self.tile_mnk[1:], (None,) * cute.rank(mB))
        return cpasync.tma_partition(
            tma_b, rank, cute.make_layout(self.cluster_m), cute.group_modes(sB, 0, 2), cute.group_modes(gB, 0, 2)
        )

    @cute.jit
    def group_b_boxes(self, tma_b: cute.CopyAtom, mB: cute.Tensor, sB: cute.Tensor, start: cutlass.Int32,
                      k_first: cutlass.Int32, n_tile: cutlass.Int32, rank: cutlass.Int32) -> cute.Tensor:
        """Ragged K: this CTA's TMA boxes of B's N-tile `n_tile`, a k-tile each, over the
        group's columns (`group_columns`); in a pair, its half of the tile, which it
        multicasts to both CTAs."""
        gB = cute.local_tile(self.group_columns(mB, start, k_first), self.tile_mnk[1:], (n_tile, None))
        _, tBgB_tile = cpasync.tma_partition(  # in a pair, this CTA's half of the B tile
            tma_b, rank, cute.make_layout(self.cluster_m), cute.group_modes(sB, 0, 2), cute.group_modes(gB, 0, 2)
        )
        return tBgB_tile

    @staticmethod
    def group_columns(view: cute.Tensor, start, k_first) -> cute.Tensor:
        """Ragged K: an operand's (rows, K) from column k_first of the group that starts at
        `start`: through the group mode of a T-strided view, or along T of a plain one."""
        if cutlass.const_expr(cute.rank(view) == 3):
            return cute.domain_offset((0, k_first), view[(None, None, start)])
        return cute.domain_offset((0, start + k_first), view)

    @cute.jit
    def wait_for_group(self, counters: cute.Tensor, tiles: int, group: cutlass.Int32, rows: cutlass.Int32):
        """Until counters[group] reaches `tiles` for each M-step of the group's `rows`: every
        tile another GEMM of the kernel stores into this group's rows is written (its
        storing thread counts it after the stores complete, with release semantics). The
        acquire, then a proxy fence, so that the TMA loads after it read what was stored.

        A wait past WAIT_LIMIT_NS prints why and traps (a launch error, not a hang):
        the CTAs it waits on cannot all be running."""
        rows_per_step = self.tile_m * self.cluster_m
        target = (rows + rows_per_step - 1) // rows_per_step * tiles
        count = counters.iterator + group
        start = cute.arch.globaltimer()
        seen = cute.arch.load(count, cutlass.Int32, sem="acquire", scope="gpu")
        while seen < target:
            seen = cute.arch.load(count, cutlass.Int32, sem="acquire", scope="gpu")
            # (no printf arguments: they would need a local-memory buffer in every CTA)
            trap_unless(cute.arch.globaltimer() - start < WAIT_LIMIT_NS,
                        "gcdsl: a tile waited 20 s for the tiles of the GEMM before it: not every CTA of "
                        "the kernel runs at once (SMs held by other work?)\n")
        cute.arch.fence_proxy("async.global")
