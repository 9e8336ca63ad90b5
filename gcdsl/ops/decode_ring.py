"""The decode kernel's weights through a shared-memory ring (`MoeDecode(streamed=True)`).

By default the decode kernel's gate-up GEMVs read w1 by per-thread 16-byte loads, and its
down rows are staged in shared memory by bulk copies where they all fit (else read
through L2). Streamed, every weight byte a CTA reads comes through one ring of
`stages` shared-memory buffers, filled by bulk copies (the copy engine) in the order
the CTA reads them, its items:

    gate-up   `pairs` columns of the CTA's chunk of I an item: their gate rows, then
              their up rows (two bulk copies of whole rows); the chunk's columns once
              for each batch of the expert's slots (1, 2 or BATCH rows of x at once)
    down      `chunk_rows` of the CTA's rows of H of one active expert's w2 an item
              (one bulk copy), the active experts in order

Thread 0 keeps every buffer in flight: it fills them all before the first item, and
once the CTA is done with an item (a CTA barrier) refills its buffer with the item
`stages` on. So the down items land while the last gate-up items are read and the CTAs
meet at the grid barrier, as staged rows did; where the ring holds every down item
(Qwen3's experts at one token) none is copied after it.

Each row of a gate-up item is read by warps / (2 pairs) warps, a segment of the row
each: a warp dots its segment with each x row of the batch and its lane 0 writes the
sum into a table in shared memory (column, gate or up, segment, batch row); after the
batch's last item the CTA adds up each column's segments and writes silu(gate) * up
into act. In the down GEMVs the CTA waits for up to `stages` items at once (every one,
where the ring holds them all) and its warps share their rows as they share staged
rows (`MoeDecode.down_staged_rows`), up to 4 rows a warp at once (8, as staged rows
take, spill registers beside the ring's state).

Whether it is faster than the default build has not been measured yet: W8's forced
variant `decode streamed` times it, and `benchmarks/w8_decode_stream.py` times the two
ways of streaming alone.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any, NamedTuple, Optional

import cutlass
import cutlass.cute as cute

LANES = 32
DOWN_ITEM_BYTES = 32 * 1024  # a down item's bytes at most, where a gate-up item's are fewer
MAX_STAGES = 16


@dataclass(frozen=True)
class RingPlan:
    """How a CTA's weights go through its ring (the module docstring)."""
    pairs: int  # columns a gate-up item (each a gate and an up row)
    segments: int  # warps a row of a gate-up item
    chunk_rows: int  # rows of H a down item
    buffer_bytes: int
    stages: int
    batch_items: int  # gate-up items a batch of x rows: the CTA's columns / pairs
    expert_items: int  # down items an active expert: the CTA's rows / chunk_rows


def ring_plan(hidden: int, inter: int, columns: int, rows: int, element_bytes: int, free_bytes: int, warps: int,
              batch: int) -> Optional[RingPlan]:
    """The plan with the most buffers in `free_bytes` of shared memory (in a tie, fewer
    columns an item), for a CTA of `warps` warps that reads `columns` columns of I
    (gate-up, with up to `batch` x rows at once) and `rows` rows of H (down); None where
    no plan leaves two buffers."""
    vectors = hidden * element_bytes // 16  # a row's 16-byte vectors
    best = None
    for pairs in (1, 2, 4, 8):
        if columns % pairs or warps % (2 * pairs):
            continue
        segments = warps // (2 * pairs)
        if vectors % (segments * LANES):
            continue  # (a warp reads its segment in whole steps of its lanes)
        up_bytes = 2 * pairs * hidden * element_bytes
        row_bytes = inter * element_bytes
        fits = [r for r in range(1, rows + 1) if rows % r == 0 and r * row_bytes <= max(up_bytes, DOWN_ITEM_BYTES)]
        chunk_rows = max(fits, default=1)
        buffer_bytes = max(up_bytes, chunk_rows * row_bytes)
        table_bytes = 4 * columns * 2 * segments * batch
        stages = min(MAX_STAGES, (free_bytes - table_bytes - 8 * MAX_STAGES) // buffer_bytes)
        if stages >= 2 and (best is None or stages > best.stages):
            best = RingPlan(pairs, segments, chunk_rows, buffer_bytes, stages, columns // pairs, rows // chunk_rows)
    return best


class RingSources(NamedTuple):
    """Where a CTA's items come from (the kernel's values, as `ring_issue` reads them)."""
    w1: Any  # every expert's w1, (2I, (vector, H / vector)) an expert
    w2: Any  # every expert's w2, (H, (vector, I / vector)) an expert
    up_expert: Any  # the expert of the CTA's gate-up items
    first_column: Any  # the first column of I of the CTA's chunk
    active_expert: Any  # the experts with a slot, in id order (shared memory)
    first_row: Any  # the CTA's first row of H


class RingStream:
    """`MoeDecode`'s streamed steps (a mixin: they read the kernel's sizes, its `warps`,
    `threads` and `batch_rows`, and its plan, `self.plan`)."""

    def gate_up_items(self, count):
        """The gate-up items of an expert of `count` slots: its batches (`by_batch`'s) x the
        chunk's items."""
        batches = cutlass.select_(count <= 2, 1, (count + self.batch_rows - 1) // self.batch_rows)
        return batches * self.plan.batch_items

    def buffer_elements(self) -> int:
        """A buffer's elements of the weights' type."""
        return self.plan.buffer_bytes * 8 // self.ab_dtype.width

    @cute.jit
    def ring_start(self, ring: cute.Tensor, full: cute.Pointer, sources: RingSources, up_items: cutlass.Int32,
                   total_items: cutlass.Int32):
        """(Thread 0.) The buffers' mbarriers, then the first `stages` items on their way."""
        for buffer in cutlass.range_constexpr(self.plan.stages):
            cute.arch.mbarrier_init(full + buffer, 1)
        cute.arch.mbarrier_init_fence()
        for item in cutlass.range(cutlass.min(total_items, self.plan.stages), unroll=1):
            self.ring_issue(item, ring, full, sources, up_items)

    @cute.jit
    def ring_issue(self, item: cutlass.Int32, ring: cute.Tensor, full: cute.Pointer, sources: RingSources,
                   up_items: cutlass.Int32):
        """(Thread 0.) Item `item` into its buffer, counted on the buffer's mbarrier."""
        plan, width = self.plan, self.ab_dtype.width // 8
        buffer = item % plan.stages
        target = ring.iterator + buffer * self.buffer_elements()
        barrier = full + buffer
        if item < up_items:
            elements = plan.pairs * self.hidden
            atom = cute.make_copy_atom(cute.nvgpu.cpasync.CopyBulkG2SOp(), self.ab_dtype,
                                       num_bits_per_copy=elements * width * 8)
            rows = self.expert_rows(sources.w1, sources.up_expert, 2 * self.inter * self.hidden)
            column = sources.first_column + item % plan.batch_items * plan.pairs
            cute.arch.mbarrier_arrive_and_expect_tx(barrier, 2 * elements * width)
            for half in cutlass.range_constexpr(2):  # the gate rows, then the up rows
                source = rows.iterator + (half * self.inter + column) * self.hidden
                cute.copy(atom, cute.make_tensor(source, cute.make_layout(elements)),
                          cute.make_tensor(target + half * elements, cute.make_layout(elements)), mbar_ptr=barrier)
        else:
            elements = plan.chunk_rows * self.inter
            atom = cute.make_copy_atom(cute.nvgpu.cpasync.CopyBulkG2SOp(), self.ab_dtype,
                                       num_bits_per_copy=elements * width * 8)
            down = item - up_items
            chunks = plan.expert_items
            rows = self.expert_rows(sources.w2, sources.active_expert[down // chunks], self.hidden * self.inter)
            source = rows.iterator + (sources.first_row + down % chunks * plan.chunk_rows) * self.inter
            cute.arch.mbarrier_arrive_and_expect_tx(barrier, elements * width)
            cute.copy(atom, cute.make_tensor(source, cute.make_layout(elements)),
                      cute.make_tensor(target, cute.make_layout(elements)), mbar_ptr=barrier)

    @cute.jit
    def item_rows(self, ring: cute.Tensor, item: cutlass.Int32, rows: int, columns: int) -> cute.Tensor:
        """Item `item`'s buffer as `rows` rows of `columns` (in 16-byte vectors)."""
        start = ring.iterator + item % self.plan.stages * self.buffer_elements()
        return cute.make_tensor(start, self._rows_of(rows, columns))

    @cute.jit
    def gate_up_streamed(self, x: cute.Tensor, token: cute.Tensor, act: cute.Tensor, ring: cute.Tensor,
                         full: cute.Pointer, table: cute.Tensor, sources: RingSources, first: cutlass.Int32,
                         count: cutlass.Int32, up_items: cutlass.Int32, total_items: cutlass.Int32, warp: cutlass.Int32,
                         lane: cutlass.Int32, tidx: cutlass.Int32):
        """act[first .. first + count, the chunk's columns] from the gate-up items."""
        self.by_batch(count, lambda batch: self.gate_up_items_of_batch(
            x, token, act, ring, full, table, sources, first, count, up_items, total_items, warp, lane, tidx, batch))

    @cute.jit
    def gate_up_items_of_batch(self, x: cute.Tensor, token: cute.Tensor, act: cute.Tensor, ring: cute.Tensor,
                               full: cute.Pointer, table: cute.Tensor, sources: RingSources, first: cutlass.Int32,
                               count: cutlass.Int32, up_items: cutlass.Int32, total_items: cutlass.Int32,
                               warp: cutlass.Int32, lane: cutlass.Int32, tidx: cutlass.Int32, batch: int):
        plan = self.plan
        items = plan.batch_items
        segment, row = warp % plan.segments, warp // plan.segments  # (row: of the item's 2 pairs)
        vectors = self.hidden // self.vector // plan.segments  # of a segment
        for done in cutlass.range(0, count, batch, unroll=1):
            # the batch's token rows; past the last slot, the last again (computed, not stored)
            rows = [token[first + cutlass.min(done + r, count - 1)] for r in range(batch)]
            for step in cutlass.range(items, unroll=1):
                item = done // batch * items + step
                cute.arch.mbarrier_wait(full + item % plan.stages, item // plan.stages % 2)
                weights = self.item_rows(ring, item, 2 * plan.pairs, self.hidden)
                sums = [cutlass.Float32(0.0) for _ in range(batch)]
                for j in cutlass.range_constexpr(vectors // LANES):
                    vec = segment * vectors + lane + LANES * j
                    w = weights[(row, (None, vec))].load().to(cutlass.Float32)
                    for r in cutlass.range_constexpr(batch):
                        xr = x[(rows[r], (None, vec))].load().to(cutlass.Float32)
                        sums[r] = sums[r] + (w * xr).reduce(cute.ReductionOp.ADD, 0.0, 0)
                for r in cutlass.range_constexpr(batch):
                    total = cute.arch.warp_reduction_sum(sums[r])
                    if lane == 0:
                        table[(step * plan.pairs + row % plan.pairs, row // plan.pairs, segment, r)] = total
                cute.arch.sync_threads()  # the item read: its buffer may take the next
                if tidx == 0 and item + plan.stages < total_items:
                    self.ring_issue(item + plan.stages, ring, full, sources, up_items)
            for k in cutlass.range(tidx, self.columns * batch, self.threads, unroll=1):
                c, r = k // batch, k % batch
                g, u = cutlass.Float32(0.0), cutlass.Float32(0.0)
                for s in cutlass.range_constexpr(plan.segments):
                    g = g + table[(c, 0, s, r)]
                    u = u + table[(c, 1, s, r)]
                if done + r < count:
                    # silu(gate) * up = gate * up / (1 + e^-gate), as the tensor-core epilogue computes it
                    value = g * u * cute.arch.rcp_approx(1.0 + cute.math.exp(-g, fastmath=True))
                    column = sources.first_column + c
                    act[(first + done + r, (column % self.vector, column // self.vector))] = self.ab_dtype(value)
            cute.arch.sync_threads()  # the table read: the next batch's sums may go in

    @cute.jit
    def down_streamed(self, act: cute.Tensor, ring: cute.Tensor, full: cute.Pointer, y: cute.Tensor,
                      sources: RingSources, active_first: cute.Tensor, active_count: cute.Tensor,
                      up_items: cutlass.Int32, total_items: cutlass.Int32, warp: cutlass.Int32,
                      lane: cutlass.Int32, tidx: cutlass.Int32):
        """y[slot, row] for every slot and each of the CTA's rows, from the down items, up
        to `stages` of them at once, their rows shared by the warps."""
        plan = self.plan
        unit_rows = max(r for r in (1, 2, 4) if plan.chunk_rows % r == 0)  # a warp's at once (the docstring)
        units = plan.chunk_rows // unit_rows  # an item's
        chunks = plan.expert_items
        for start in cutlass.range(up_items, total_items, plan.stages, unroll=1):
            end = cutlass.min(start + plan.stages, total_items)
            for item in cutlass.range(start, end, unroll=1):
                cute.arch.mbarrier_wait(full + item % plan.stages, item // plan.stages % 2)
            for unit in cutlass.range(warp, (end - start) * units, self.warps, unroll=1):
                item = start + unit // units
                down = item - up_items
                a, row = down // chunks, unit % units * unit_rows
                first, count = active_first[a], active_count[a]
                weights = self.item_rows(ring, item, plan.chunk_rows, self.inter)
                y_row = down % chunks * plan.chunk_rows + row
                self.by_batch(count, lambda batch: self.down_staged_rows(act, weights, y, first, count, row, unit_rows,
                                                                        lane, batch, y_row=y_row))
            cute.arch.sync_threads()  # the items read: their buffers may take the next
            if tidx == 0:
                for item in cutlass.range(start, end, unroll=1):
                    if item + plan.stages < total_items:
                        self.ring_issue(item + plan.stages, ring, full, sources, up_items)
