"""The tile schedule: the groups' tiles from `offs`, built by one warp into shared memory,
and the tile a CTA works on next (`locate`)."""
from __future__ import annotations

from typing import Tuple

import cutlass
import cutlass.cute as cute

from ...lower._dsl import trap_unless
from .config import M_BLOCK_STEPS

# TMA reads a box only from a 16-byte aligned start along the contiguous mode, and an
# M-major A's rows are that mode: with it, every group that has rows must start there.
UNALIGNED_GROUP_MESSAGE = (
    "gcdsl: grouped_mm: a group starts at a row that is not a multiple of 16 bytes (8 rows of 16 bits) "
    "of the operand whose grouped mode is contiguous (a column-major `a` of 2D x 3D, a row-major `b` of "
    "3D x 2D), where TMA cannot read it: make every group's size a multiple of 8, or pass that operand "
    "with K contiguous (.contiguous())\n")
# ... and in the grouped reduction, where a T-contiguous operand's k-tiles end at each
# group's end: every group that has columns must end there (and so starts where an
# earlier group ended, or at 0).
UNALIGNED_REDUCTION_GROUP_MESSAGE = (
    "gcdsl: grouped_mm: a group of the grouped reduction (2D x 2D) ends at a column that is not a "
    "multiple of 16 bytes (8 of 16 bits) of an operand whose mode T is contiguous (a row-major `a`, a "
    "column-major `b`), where TMA cannot read it: make every group's size a multiple of 8, or pass `a` "
    "column-major and `b` row-major (as x.t() and dy of a weight gradient)\n")


class Schedule:
    """The tile schedule (see the module docstring): a part of `HopperGroupedGemm`, which
    sets the sizes it reads (`self.tile_mnk`, `self.stages`, ...) in its `__init__`."""

    @cute.jit
    def build_schedule(self, offs: cute.Tensor, total: cutlass.Int32, tile_end: cute.Tensor,
                       row_end: cute.Tensor):
        """One warp: the clamped group ends and cumulative cluster tiles, from `offs`, into shared memory.

        Lane l owns groups l * c .. l * c + c - 1 (c = `lane_groups`); groups past G
        read offs[G - 1] again, so they end where the last group ends and add no tile.
        Each lane scans its own groups in registers; two warp scans (a running max of
        the ends, a sum of the tiles) give it what the lanes before it hold. With an
        M-major A a group with rows must start 16-byte aligned, and in a grouped
        reduction with T contiguous in an operand end so: otherwise the
        kernel traps with the reason (a launch error, never a wrong result).
        """
        c = self.lane_groups
        lane = cute.arch.lane_idx()
        ends = cute.make_rmem_tensor((c,), cutlass.Int32)
        tiles = cute.make_rmem_tensor((c,), cutlass.Int32)
        lane_max = cutlass.Int32(0)
        for j in cutlass.range_constexpr(c):  # every load in flight before the first use
            ends[j] = offs[cutlass.min(lane * c + j, self.groups - 1)]
        for j in cutlass.range_constexpr(c):
            lane_max = cutlass.max(lane_max, ends[j])
        # the largest end of the lanes before this one: where its first group starts
        run = lane_max
        for step in cutlass.range_constexpr(5):
            run = cutlass.max(run, cute.arch.shuffle_sync_up(run, 1 << step))  # lanes < step keep their own
        before = cute.arch.shuffle_sync_up(run, 1)
        if lane == 0:
            before = cutlass.Int32(0)
        rows_per_step = self.tile_m * self.cluster_m
        previous = cutlass.min(before, total)
        lane_tiles = cutlass.Int32(0)
        for j in cutlass.range_constexpr(c):
            before = cutlass.max(before, ends[j])
            end = cutlass.min(before, total)
            lane_tiles += (end - previous + rows_per_step - 1) // rows_per_step * self.n_tiles
            ends[j] = end
            tiles[j] = lane_tiles
            align = 128 // self.ab_dtype.width  # rows or columns of 16 bytes
            if cutlass.const_expr(self.ragged == "m" and self.config.a_major == "m"):
                trap_unless(cutlass.min(previous % align, end - previous) == 0, UNALIGNED_GROUP_MESSAGE)
            if cutlass.const_expr(self.config.zero_fill):
                trap_unless(cutlass.min(end % align, end - previous) == 0,
                            UNALIGNED_REDUCTION_GROUP_MESSAGE)
            previous = end
        total = lane_tiles
        for step in cutlass.range_constexpr(5):
            other = cute.arch.shuffle_sync_up(total, 1 << step)
            if lane >= (1 << step):
                total += other
        tiles_before = total - lane_tiles
        for j in cutlass.range_constexpr(c):
            tile_end[lane * c + j] = tiles_before + tiles[j]
            row_end[lane * c + j + 1] = ends[j]
        if lane == 0:
            row_end[0] = cutlass.Int32(0)

    @cute.jit
    def locate(self, tile_end: cute.Tensor, row_end: cute.Tensor, tile: cutlass.Int32,
               group: cutlass.Int32, total: cutlass.Int32) -> Tuple:
        """(group, m_step, n_tile, rows, start, length) of cluster tile `tile`.

        `rows` is the group's M extent; `start` and `length` its range along the ragged
        mode (rows for ragged M, the reduction for ragged K). A cluster tile spans
        `cluster_m` M-tiles: its CTAs take M-tiles `m_step * cluster_m + rank`.
        With ragged M the search walks forward from `group`, stepping over groups of
        0 rows (they end where they start), and orders a group's tiles by
        `config.tile_order`; every other group has the same tiles.
        """
        tile_m = self.tile_m
        if cutlass.const_expr(self.ragged == "batch"):
            # N-tile fastest, then the group, then the M-tile: the CTAs at work together
            # share A's row panel, and every divisor is a compile-time constant (a runtime
            # divisor here made ptxas predicate an R2UR, the hazard the SASS test guards).
            rest = tile // self.n_tiles
            return (rest % self.groups, rest // self.groups, tile % self.n_tiles, total, cutlass.Int32(0),
                    cutlass.Int32(self.k))
        if cutlass.const_expr(self.ragged == "k"):
            m_steps = self.fixed_m_steps  # every group has the same M-tiles
            group = tile // (m_steps * self.n_tiles)
            local = tile - group * (m_steps * self.n_tiles)
            start = row_end[group]
            length = row_end[group + 1] - start
            return group, local % m_steps, local // m_steps, cutlass.Int32(self.m), start, length
        while tile >= tile_end[group]:
            group += 1
        start = row_end[group]
        length = row_end[group + 1] - start
        rows_per_step = tile_m * self.cluster_m
        m_steps = (length + rows_per_step - 1) // rows_per_step
        local = tile - (tile_end[group] - m_steps * self.n_tiles)
        if cutlass.const_expr(self.config.tile_order == "n"):
            return group, local // self.n_tiles, local % self.n_tiles, length, start, length
        if cutlass.const_expr(self.config.tile_order == "m_partial_last"):
            full_steps = length // rows_per_step
            steps = cutlass.max(full_steps, 1)  # (a group of one partial step has only the run)
            m_step, n_tile = local % steps, local // steps
            if local >= full_steps * self.n_tiles:  # the partial step's N-tiles, after the full steps'
                m_step, n_tile = full_steps, local - full_steps * self.n_tiles
            return group, m_step, n_tile, length, start, length
        if cutlass.const_expr(self.config.tile_order == "m_blocks"):
            block_tiles = M_BLOCK_STEPS * self.n_tiles
            block = local // block_tiles
            within = local - block * block_tiles
            steps = cutlass.min(m_steps - block * M_BLOCK_STEPS, M_BLOCK_STEPS)  # (the last block's may be fewer)
            return group, block * M_BLOCK_STEPS + within % steps, within // steps, length, start, length
        return group, local % m_steps, local // m_steps, length, start, length

    @staticmethod
    def next_item(item, num_clusters, deal=None):
        """The CTA's work item after `item`: `num_clusters` on (the items dealt round the
        CTAs), or the next that `deal` gives it (`experts.DownDeal`)."""
        return item + num_clusters if deal is None else deal.next(item)

    def work_items(self, total_tiles):
        """What the CTAs share out: the schedule's tiles, each `split_k` times over with K splits."""
        return total_tiles if self.split_k == 1 else total_tiles * self.split_k

    def split_of(self, item) -> Tuple:
        """(the schedule's tile, its first k-tile, its k-tiles) of work item `item`. A tile's
        K splits are consecutive items, so that consecutive CTAs read its A rows together;
        without splits, (item, None, the k-tiles of K)."""
        if self.split_k == 1:
            return item, None, self.k_tiles
        split = item % self.split_k
        first = split * self.k_tiles // self.split_k
        return item // self.split_k, first, (split + 1) * self.k_tiles // self.split_k - first

    @staticmethod
    def k_tile(first, k):
        """k-tile `k` of a work item's K range (`split_of`)."""
        return k if first is None else first + k

