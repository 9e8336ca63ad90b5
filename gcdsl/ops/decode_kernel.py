"""An MoE expert layer at a decode step, on CUDA cores, in one kernel (`MoeDecode`).

With a few token slots (T k <= MAX_SLOTS) the layer multiplies each active expert's
weights by one row, or a few: its time is that of streaming those weights from HBM
once, and a tensor-core tile of 128 rows would be almost all padding. Here each CTA
streams its own slice of the weights, 16-byte loads many in flight a lane, and dots it
with the few rows on CUDA cores:

    route      each CTA sorts the slots by expert itself (a warp, a lane a slot: T k
               fits one), from `topk_ids`: the token of each sorted slot, each slot's
               sorted row and the experts with a slot, in id order;
    gate-up    CTA (a, c) for active expert a and chunk c of `columns` intermediate
               columns: a warp a column at a time, its gate row and its up row of w1
               against the rows of x of the expert's slots (read where they lie);
               silu(gate) * up, rounded to x's type, into act (T k, I), at the slots'
               sorted rows;
    staging    meanwhile, where shared memory holds them, CTA b's down rows (below) of
               every active expert, copied there by one bulk copy an expert (the copy
               engine, an mbarrier): the down GEMVs' weights stream from HBM beside the
               gate-up's, not after them;
    barrier    every CTA's act written: each CTA adds its share to a counter (acq_rel,
               GPU scope), asks L2 for its down rows of the active experts not staged,
               to keep (evict_last), and waits for all (acquire); then it reads act.
               The shares add up to 2^31: the last one flips the counter's top bit,
               which is what the CTAs wait for, and leaves its low 31 bits as they
               were, zero, for the next launch (`arrive`);
    down       CTA b: rows [b rows, (b + 1) rows) of H of every active expert's w2
               (shared memory or L2) against act's rows of the expert's slots into y
               (fp32, shared memory); a warp takes 8 staged rows at once and reduces
               their sums over its lanes together (`reduce_scatter`);
               then each token's k slots of y weighed and summed in fp32, in slot order
               (the same sum on every run), into out in x's type.

Every CTA runs at once (the grid is at most the SMs), so the barrier's wait ends; a wait
past WAIT_LIMIT_NS traps with a message instead of hanging. The layer is this one kernel:
the counter's low 31 bits are zero when it starts and when it ends (`grid_barrier` hands
out such counters), and it checks the ids itself. It is launched with programmatic stream
serialization and waits for the grid before it (the router's, say) before it reads
anything: a kernel before it that lets it start early may still be writing topk_ids.

Streamed (`streamed=True`, `decode_ring`): every weight row a CTA reads comes through one
ring of shared-memory buffers filled by bulk copies, in the order the CTA reads them (its
gate-up rows, then its down rows), in place of the per-thread loads and the staging.

Phase stamps (`trace=True`, for `fused_moe.decode_phases`): each CTA's thread 0 writes the
global timer (ns) at each of `PHASES` it reaches into eight Int64 after the counter (from
its buffer's byte 8), CTA c's at byte 8 + 64 c; the build waits for the CTA's last warp
before its "gate-up GEMVs done" and "end" stamps. Without it the kernel has no such code.
"""
from __future__ import annotations

from typing import Optional, Tuple

import cuda.bindings.driver as cuda

import cutlass
import cutlass.cute as cute
from cutlass.memory import SmemAllocator, get_smem_capacity_in_bytes

import gcdsl

from ..lower._dsl import prefetch_to_l2_evict_last, trap_unless
from .decode_ring import RingSources, RingStream, ring_plan
from .hopper_grouped_gemm.producer import WAIT_LIMIT_NS

MAX_SLOTS = 32  # T k: a warp's lanes hold the slots when the CTA finds the experts
THREADS = 512
WARPS = THREADS // 32
LANE_VECTORS = 32  # a row's 16-byte vectors a warp reads in one step: one a lane
REGISTERS = 72  # of a lane's 128: for its fp32 sums and the weight loads it has in flight
VECTOR_REGISTERS = 4  # a 16-byte load's
LINE = 128  # bytes of an L2 prefetch
BATCH = 4  # rows of x (or act) an expert of three slots or more takes at once (of two: two)
STAGED_UNIT_ROWS = 8  # rows of a staged expert a warp takes at once (their sums reduced together)
HEADER_BYTES = 1024  # shared memory before the staged down rows: the sorted slots, an mbarrier
# What each of a CTA's phase stamps marks with `trace` (a CTA without down rows stamps the
# first four), in slot order; STAMP_SLOTS Int64 a CTA (the last one unused).
PHASES = ("start", "slots sorted", "gate-up GEMVs done", "barrier over",
          "staged down rows landed", "down GEMVs done", "end")
STAMP_SLOTS = 8


FLIP = 1 << 31  # the barrier counter's bit that all CTAs' shares flip (`MoeDecode.arrive`)


def flipped(before, now):
    """1 where bit 31 of `now` differs from that of `before`, else 0 (Int32 in a kernel,
    Python ints of any sign in a test: the same bit of two's complement)."""
    return ((before ^ now) >> 31) & 1


def _divisors(n: int):
    return [d for d in range(1, n + 1) if n % d == 0]


def _most_loads(rows: int, steps: int, sums_a_row: int, loads_a_step: int) -> Tuple[int, int]:
    """(rows, step): a divisor of `rows` and one of `steps` whose loads (rows x step x
    `loads_a_step` 16-byte vectors) and fp32 sums (`sums_a_row` a row) fit in REGISTERS,
    the most loads; in a tie, the longer step."""
    fits = [(r * s, s, r) for r in _divisors(rows) for s in _divisors(steps)
            if r * sums_a_row + r * s * loads_a_step * VECTOR_REGISTERS <= REGISTERS]
    _, step, rows = max(fits)
    return rows, step


class MoeDecode(RingStream):
    """The kernel for `ab_dtype` (cutlass.BFloat16 or Float16) weights and activations,
    E `experts`, `hidden` H, `inter` I, `top_k` k, `slots` T k, ids of `id_dtype`
    (cutlass.Int32 or Int64) and `sms` SMs; `early_prefetch`: ask L2 for the down rows
    before the gate-up GEMVs (else while the CTA waits at the barrier); `staged_experts`:
    at most so many active experts' down rows copied into shared memory while the gate-up
    GEMVs run (None: every active expert's where they all fit, else none); `trace`: the
    phase stamps (the module docstring); `streamed`: every weight through a ring of
    shared-memory buffers filled by bulk copies (`decode_ring`), none staged or read by
    per-thread loads. H and I are multiples of 256 (a warp's 16-byte vectors of a row in
    whole steps).

    `__call__` is the host function to `cute.compile`:
        (x, ids, weights, w1, w2, act, counter, out, stream)
    all pointers: x (T, H) and out (T, H), act (T k, I), w1 (E, 2I, H) and w2 (E, H, I),
    16-byte aligned and contiguous; ids (T k,) and weights (T k,) Float32, the router's
    top-k flattened; counter an Int32 whose low 31 bits are zero when the kernel starts,
    and zero again when it ends (with `trace`, 8 + 64 CTAs bytes, the stamps' zeroed)."""

    def __init__(self, ab_dtype, experts: int, hidden: int, inter: int, top_k: int, slots: int, id_dtype,
                 sms: int, early_prefetch: bool = False, staged_experts: Optional[int] = None,
                 trace: bool = False, streamed: bool = False) -> None:
        self.vector = 128 // ab_dtype.width
        step = LANE_VECTORS * self.vector
        if hidden % step or inter % step:
            raise ValueError(f"H = {hidden} and I = {inter}: the decode kernel reads rows in steps of {step} columns")
        if not 1 <= slots <= MAX_SLOTS or slots % top_k or not 1 <= top_k <= experts:
            raise ValueError(f"{slots} slots of k = {top_k}: the decode kernel takes 1 to {MAX_SLOTS}, T k of them")
        self.ab_dtype, self.id_dtype, self.experts, self.hidden, self.inter = ab_dtype, id_dtype, experts, hidden, inter
        self.top_k, self.slots, self.tokens = top_k, slots, slots // top_k
        self.early_prefetch, self.trace, self.streamed = early_prefetch, trace, streamed
        self.threads, self.warps, self.batch_rows = THREADS, WARPS, BATCH
        most_active = min(experts, slots)
        if most_active > sms:  # (each active expert's gate-up GEMVs take one CTA at least)
            raise ValueError(f"{most_active} experts with a slot and {sms} SMs: the decode kernel runs one CTA an SM")
        # gate-up: the most chunks of I (of whole warps' columns) that the active experts
        # spread over the SMs; down: the fewest rows of H a CTA that spread over them
        self.chunks = max(n for n in range(1, inter // WARPS + 1)
                          if inter % n == 0 and (inter // n) % WARPS == 0 and most_active * n <= sms)
        self.columns = inter // self.chunks
        self.blocks = max(b for b in range(1, min(hidden, sms) + 1) if hidden % b == 0)
        self.rows = hidden // self.blocks
        self.ctas = max(most_active * self.chunks, self.blocks)
        assert self.ctas >= 2, self.ctas  # (H of 256 or more: two blocks at least; `arrive`'s shares fit Int32)
        self.up_steps, self.down_steps = hidden // step, inter // step  # of a lane, a row
        # the active experts whose down rows a CTA stages in shared memory, the first ones:
        # by default all that the slots can reach or none (W8: staging some and reading the
        # others through L2 was slower than staging none)
        self.block_bytes = self.rows * inter * ab_dtype.width // 8  # a CTA's down rows of an expert, contiguous
        capacity = get_smem_capacity_in_bytes("sm_90")
        free = capacity - HEADER_BYTES - 4 * slots * self.rows  # (y's fp32 rows)
        fit = free // self.block_bytes
        self.plan = None
        if streamed:  # (no rows staged: the ring takes the shared memory)
            if early_prefetch or staged_experts:
                raise ValueError("a streamed build reads every weight through its ring: no rows staged or prefetched")
            self.plan = ring_plan(hidden, inter, self.columns, self.rows, ab_dtype.width // 8, free, WARPS, BATCH)
            if self.plan is None:
                raise ValueError(f"H = {hidden}, I = {inter}: no ring of two buffers fits shared memory")
            self.staged = 0
        elif staged_experts is None:
            self.staged = most_active if most_active <= fit else 0
        else:
            self.staged = min(most_active, fit, staged_experts)
        # every expert a slot can reach staged: no down rows are read through L2, and that
        # path (where the spills of a build that holds both paths sit) is not compiled
        self.all_staged = 0 < self.staged == most_active
        self.shared_bytes = self._shared_storage().size_in_bytes()
        assert self.shared_bytes <= capacity, self.shared_bytes  # (HEADER_BYTES is short)

    # With `batch` rows of x (or act) at once, 1, 2 or BATCH: how many weight rows (gate-up:
    # columns, each a gate and an up row) a warp reads together and how many 16-byte
    # steps of each it loads before their first use: as many loads as fit beside the
    # sums (in a tie, longer steps of fewer rows).
    def _down_rows_and_step(self, batch: int) -> Tuple[int, int]:
        within = self.rows if batch == 1 else self._down_rows_and_step(1)[0]
        return _most_loads(within, self.down_steps, batch * self.vector, 1)

    def _down_unit_rows(self) -> int:
        """Rows of one expert a warp takes at once in the down GEMVs: up to STAGED_UNIT_ROWS
        where they are staged in shared memory (their sums reduced together), else as
        many as have their loads in flight at once."""
        if self.staged > 0:
            return max(r for r in (1, 2, 4, STAGED_UNIT_ROWS) if self.rows % r == 0)
        return self._down_rows_and_step(1)[0]

    def _up_columns_and_step(self, batch: int) -> Tuple[int, int]:
        within = self.columns // WARPS if batch == 1 else self._up_columns_and_step(1)[0]
        return _most_loads(within, self.up_steps, 2 * batch * self.vector, 2)

    def _shared_storage(self) -> type:
        """The CTA's shared memory, a cute.struct (built here, outside a trace, so that
        `__init__` can size it)."""
        fields = {
            "token": cute.struct.MemRange[cutlass.Int32, MAX_SLOTS],  # the token of each sorted slot
            "row_of": cute.struct.MemRange[cutlass.Int32, MAX_SLOTS],  # the sorted row of each slot
            # the experts with a slot, in id order: the expert, its first sorted slot, its slots
            "active_expert": cute.struct.MemRange[cutlass.Int32, MAX_SLOTS],
            "active_first": cute.struct.MemRange[cutlass.Int32, MAX_SLOTS],
            "active_count": cute.struct.MemRange[cutlass.Int32, MAX_SLOTS],
            "active": cute.struct.MemRange[cutlass.Int32, 1],
            "y": cute.struct.MemRange[cutlass.Float32, self.slots * self.rows],  # this CTA's rows of each slot
        }
        if self.plan is None:
            fields.update({
                "staged_full": cute.struct.MemRange[cutlass.Int64, 1],  # the staging copies' mbarrier
                # this CTA's down rows of the first `staged` active experts, an expert after the other
                "staged": cute.struct.Align[cute.struct.MemRange[self.ab_dtype, self._staged_elements()], 128],
            })
        else:
            plan = self.plan
            fields.update({
                "full": cute.struct.MemRange[cutlass.Int64, plan.stages],  # each buffer's mbarrier
                # a gate-up item's sums: (column, gate or up, segment, batch row)
                "table": cute.struct.MemRange[cutlass.Float32, self.columns * 2 * plan.segments * BATCH],
                "ring": cute.struct.Align[
                    cute.struct.MemRange[self.ab_dtype, plan.stages * self.buffer_elements()], 128],
            })
        return cute.struct(type("SharedStorage", (), {"__annotations__": fields}))

    def _staged_elements(self) -> int:
        """The staging buffer's elements (a 16-byte vector's where none are staged)."""
        return max(self.vector, self.staged * self.rows * self.inter)

    def _rows_of(self, rows: int, columns: int) -> cute.Layout:
        """Rows as (vector, columns / vector): a lane's 16 bytes, one of mode 1."""
        return cute.make_layout((rows, (self.vector, columns // self.vector)), stride=(columns, (1, self.vector)))

    def trace_args(self) -> Tuple:
        def ptr(dtype, align):
            return cute.runtime.make_ptr(dtype, 0, cute.AddressSpace.gmem, assumed_align=align)

        ab = self.ab_dtype
        return (ptr(ab, 16), ptr(self.id_dtype, self.id_dtype.width // 8), ptr(cutlass.Float32, 4), ptr(ab, 16),
                ptr(ab, 16), ptr(ab, 16), ptr(cutlass.Int32, 4), ptr(ab, 16), cute.runtime.make_fake_stream())

    @cute.jit
    def __call__(self, x_ptr: cute.Pointer, ids_ptr: cute.Pointer, weight_ptr: cute.Pointer, w1_ptr: cute.Pointer,
                 w2_ptr: cute.Pointer, act_ptr: cute.Pointer, counter_ptr: cute.Pointer, out_ptr: cute.Pointer,
                 stream: cuda.CUstream):
        hidden, inter = self.hidden, self.inter

        def rows_of(ptr, rows, columns):
            return cute.make_tensor(ptr, self._rows_of(rows, columns))

        x, out = rows_of(x_ptr, self.tokens, hidden), rows_of(out_ptr, self.tokens, hidden)
        act = rows_of(act_ptr, self.slots, inter)
        # one expert's rows (`expert_rows` moves them to each expert's own)
        w1 = rows_of(w1_ptr, 2 * inter, hidden)
        w2 = rows_of(w2_ptr, hidden, inter)
        ids = cute.make_tensor(ids_ptr, cute.make_layout(self.slots))
        weights = cute.make_tensor(weight_ptr, cute.make_layout(self.slots))
        counter = cute.make_tensor(counter_ptr, cute.make_layout(1))

        self.shared_storage = self._shared_storage()
        self.kernel(x, ids, weights, w1, w2, act, counter, out).launch(
            grid=(self.ctas, 1, 1), block=(THREADS, 1, 1), min_blocks_per_mp=1, stream=stream, use_pdl=True)

    @gcdsl.kernel
    def kernel(self, x: cute.Tensor, ids: cute.Tensor, weights: cute.Tensor, w1: cute.Tensor, w2: cute.Tensor,
               act: cute.Tensor, counter: cute.Tensor, out: cute.Tensor):
        tidx, _, _ = cute.arch.thread_idx()
        bidx, _, _ = cute.arch.block_idx()
        warp = cute.arch.make_warp_uniform(cute.arch.warp_idx())
        lane = cute.arch.lane_idx()
        storage = SmemAllocator().allocate(self.shared_storage)
        slots = cute.make_layout(MAX_SLOTS)
        token, row_of = storage.token.get_tensor(slots), storage.row_of.get_tensor(slots)
        active_expert, active_first = storage.active_expert.get_tensor(slots), storage.active_first.get_tensor(slots)
        active_count = storage.active_count.get_tensor(slots)
        active = storage.active.get_tensor(cute.make_layout(1))
        y = storage.y.get_tensor(cute.make_layout((self.slots, self.rows), stride=(self.rows, 1)))
        staged_full, staged = None, None
        if cutlass.const_expr(not self.streamed):
            staged_full = storage.staged_full.data_ptr()
            staged = storage.staged.get_tensor(cute.make_layout(self._staged_elements()))
        stamps = None
        if cutlass.const_expr(self.trace):
            first_stamp = cute.make_ptr(cutlass.Int64, counter.iterator.toint() + 8 + bidx * (STAMP_SLOTS * 8),
                                        cute.AddressSpace.gmem, assumed_align=8)
            stamps = cute.make_tensor(first_stamp, cute.make_layout(STAMP_SLOTS))
        self.stamp(stamps, "start", tidx)
        cute.arch.griddepcontrol_wait()  # (the grid before this one over: topk_ids written)

        if warp == 0:
            self.route(ids, token, row_of, active_expert, active_first, active_count, active, lane)
        cute.arch.sync_threads()
        self.stamp(stamps, "slots sorted", tidx)
        experts_with_slots = active[0]
        first_row = bidx * self.rows
        has_down_rows = bidx < self.blocks
        if cutlass.const_expr(self.staged > 0):
            if has_down_rows and tidx == 0:
                self.stage_down_rows(w2, staged, staged_full, active_expert, experts_with_slots, first_row)
        if cutlass.const_expr(self.early_prefetch):
            if has_down_rows:
                self.prefetch_down_rows(w2, active_expert, experts_with_slots, first_row, tidx)

        item_expert, chunk = bidx // self.chunks, bidx % self.chunks
        if cutlass.const_expr(self.streamed):
            ring = storage.ring.get_tensor(cute.make_layout(self.plan.stages * self.buffer_elements()))
            full = storage.full.data_ptr()
            table = storage.table.get_tensor(cute.make_layout((self.columns, 2, self.plan.segments, BATCH)))
            has_gate_up = item_expert < experts_with_slots
            up_expert, up_first, up_count = cutlass.Int32(0), cutlass.Int32(0), cutlass.Int32(0)
            if has_gate_up:
                up_expert = active_expert[item_expert]
                up_first, up_count = active_first[item_expert], active_count[item_expert]
            up_items = cutlass.select_(has_gate_up, self.gate_up_items(up_count), 0)
            down_items = cutlass.select_(has_down_rows, experts_with_slots * self.plan.expert_items, 0)
            total_items = up_items + down_items
            sources = RingSources(w1, w2, up_expert, chunk * self.columns, active_expert, first_row)
            if tidx == 0:
                self.ring_start(ring, full, sources, up_items, total_items)
            cute.arch.sync_threads()  # (the mbarriers initialised)
            if has_gate_up:
                self.gate_up_streamed(x, token, act, ring, full, table, sources, up_first, up_count, up_items,
                                      total_items, warp, lane, tidx)
        elif item_expert < experts_with_slots:
            self.gate_up(x, token, w1, act, active_expert[item_expert], active_first[item_expert],
                         active_count[item_expert], chunk * self.columns, warp, lane)
        if cutlass.const_expr(self.trace):
            cute.arch.sync_threads()
            self.stamp(stamps, "gate-up GEMVs done", tidx)

        cute.arch.sync_threads()  # this CTA's act written
        before, after = cutlass.Int32(0), cutlass.Int32(0)  # (thread 0's: the counter before and after its add)
        if tidx == 0:
            before, after = self.arrive(counter, bidx)
        if cutlass.const_expr(not self.early_prefetch and not self.streamed):
            if has_down_rows:
                self.prefetch_down_rows(w2, active_expert, experts_with_slots, first_row, tidx)
        if tidx == 0:
            self.wait_for_all(counter, before, after)
            self.stamp(stamps, "barrier over", tidx)
        cute.arch.sync_threads()  # every CTA's act written

        if has_down_rows:
            if cutlass.const_expr(self.staged > 0):
                cute.arch.mbarrier_wait(staged_full, 0)
                self.stamp(stamps, "staged down rows landed", tidx)
            if cutlass.const_expr(self.streamed):
                self.down_streamed(act, ring, full, y, sources, active_first, active_count, up_items, total_items,
                                   warp, lane, tidx)
            else:
                self.down(act, w2, staged, y, active_expert, active_first, active_count, experts_with_slots,
                          first_row, warp, lane)
            cute.arch.sync_threads()  # y written
            self.stamp(stamps, "down GEMVs done", tidx)
            self.combine(y, row_of, weights, out, first_row, tidx)
            if cutlass.const_expr(self.trace):
                cute.arch.sync_threads()
                self.stamp(stamps, "end", tidx)

    @cute.jit
    def stamp(self, stamps, phase: str, tidx: cutlass.Int32):
        """With `trace`, the global timer into this CTA's stamp of `phase`, by thread 0;
        nothing otherwise."""
        if cutlass.const_expr(stamps is not None):
            if tidx == 0:
                stamps[PHASES.index(phase)] = cute.arch.globaltimer()

    @cute.jit
    def route(self, ids: cute.Tensor, token: cute.Tensor, row_of: cute.Tensor, active_expert: cute.Tensor,
              active_first: cute.Tensor, active_count: cute.Tensor, active: cute.Tensor, lane: cutlass.Int32):
        """The slots sorted by expert, stably, by one warp, a lane a slot, each lane
        counting over the others' experts (shuffles): into shared memory the token of each
        sorted slot, each slot's sorted row, and the experts with a slot in id order (an
        expert, its first sorted row, its slot count; how many). Traps on an id outside
        [0, E), as the routing kernel does, before any weight is read."""
        slot = lane
        expert = cutlass.Int32(-1)  # (lanes past the slots: below every expert, counted by none)
        if slot < self.slots:
            wide = cutlass.Int64(ids[slot])  # checked before it is narrowed
            trap_unless(wide >= 0, "gcdsl: topk_ids holds an id below 0: experts are 0 to E - 1\n")
            trap_unless(wide < self.experts, "gcdsl: topk_ids holds an id of E or more: experts are 0 to E - 1\n")
            expert = cutlass.Int32(wide)
        below, ahead, same = cutlass.Int32(0), cutlass.Int32(0), cutlass.Int32(0)
        for other_slot in cutlass.range_constexpr(self.slots):
            other = cute.arch.shuffle_sync(expert, other_slot)
            if other >= 0 and other < expert:
                below += 1  # slots of lower experts: where this expert's rows start
            if other == expert:
                same += 1
                if other_slot < slot:
                    ahead += 1  # this expert's slots before this one
        starts = slot < self.slots and ahead == 0
        starting = cute.arch.vote_ballot_sync(starts)
        rank = cutlass.Int32(0)  # the starting slots of lower experts
        for other_slot in cutlass.range_constexpr(self.slots):
            other = cute.arch.shuffle_sync(expert, other_slot)
            if (starting >> other_slot) & 1 == 1 and other >= 0 and other < expert:
                rank += 1
        if slot < self.slots:
            row_of[slot] = below + ahead
            token[below + ahead] = slot // self.top_k
            if starts:
                active_expert[rank] = expert
                active_first[rank] = below
                active_count[rank] = same
        if lane == 0:
            active[0] = cute.arch.popc(starting)

    @cute.jit
    def gate_up(self, x: cute.Tensor, token: cute.Tensor, w1: cute.Tensor, act: cute.Tensor,
                expert: cutlass.Int32, first: cutlass.Int32, count: cutlass.Int32, first_column: cutlass.Int32,
                warp: cutlass.Int32, lane: cutlass.Int32):
        """act[first .. first + count, first_column + this chunk's columns] for `expert`."""
        weights = self.expert_rows(w1, expert, 2 * self.inter * self.hidden)
        self.by_batch(count, lambda batch: self.gate_up_rows(x, token, weights, act, first, count, first_column,
                                                             warp, lane, batch))

    @cute.jit
    def gate_up_rows(self, x: cute.Tensor, token: cute.Tensor, w1: cute.Tensor, act: cute.Tensor,
                     first: cutlass.Int32, count: cutlass.Int32, first_column: cutlass.Int32, warp: cutlass.Int32,
                     lane: cutlass.Int32, batch: int):
        columns, step = self._up_columns_and_step(batch)
        for done in cutlass.range(0, count, batch, unroll=1):
            # the batch's token rows; past the last slot, the last again (computed, not stored)
            rows = [token[first + cutlass.min(done + r, count - 1)] for r in range(batch)]
            for pair in cutlass.range(0, self.columns // WARPS, columns, unroll=1):
                # this warp's columns: warp, warp + WARPS, ...
                gate = cute.make_rmem_tensor((columns, batch, self.vector), cutlass.Float32)
                up = cute.make_rmem_tensor((columns, batch, self.vector), cutlass.Float32)
                gate.fill(0.0)
                up.fill(0.0)
                for first_step in cutlass.range(0, self.up_steps, step, unroll=1):
                    # every load of the step in flight before the first use
                    loaded = []
                    for s in cutlass.range_constexpr(step):
                        vec = lane + LANE_VECTORS * (first_step + s)
                        for c in cutlass.range_constexpr(columns):
                            column = first_column + warp + WARPS * (pair + c)
                            loaded.append((vec, c, w1[(column, (None, vec))].load(),
                                           w1[(self.inter + column, (None, vec))].load()))
                    for vec, c, g, u in loaded:
                        g32, u32 = g.to(cutlass.Float32), u.to(cutlass.Float32)
                        for r in cutlass.range_constexpr(batch):
                            xr = x[(rows[r], (None, vec))].load().to(cutlass.Float32)
                            gate[(c, r, None)].store(gate[(c, r, None)].load() + g32 * xr)
                            up[(c, r, None)].store(up[(c, r, None)].load() + u32 * xr)
                for c in cutlass.range_constexpr(columns):
                    column = first_column + warp + WARPS * (pair + c)
                    for r in cutlass.range_constexpr(batch):
                        g = cute.arch.warp_reduction_sum(
                            gate[(c, r, None)].load().reduce(cute.ReductionOp.ADD, 0.0, 0))
                        u = cute.arch.warp_reduction_sum(up[(c, r, None)].load().reduce(cute.ReductionOp.ADD, 0.0, 0))
                        if lane == r and done + r < count:
                            # silu(gate) * up = gate * up / (1 + e^-gate), as the tensor-core epilogue computes it
                            value = g * u * cute.arch.rcp_approx(1.0 + cute.math.exp(-g, fastmath=True))
                            act[(first + done + r, (column % self.vector, column // self.vector))] = \
                                self.ab_dtype(value)

    @cute.jit
    def expert_rows(self, weights: cute.Tensor, expert: cutlass.Int32, elements: int) -> cute.Tensor:
        """The expert's rows of a (rows, (vector, columns / vector)) view of all experts'
        weights, `elements` an expert: its own tensor (64-bit address arithmetic here,
        32-bit offsets within it), still 16-byte aligned."""
        address = weights.iterator.toint() + cutlass.Int64(expert) * (elements * self.ab_dtype.width // 8)
        return cute.make_tensor(cute.make_ptr(self.ab_dtype, address, cute.AddressSpace.gmem, assumed_align=16),
                                weights.layout)

    @cute.jit
    def staged_rows(self, staged: cute.Tensor, a: cutlass.Int32) -> cute.Tensor:
        """This CTA's down rows of the a-th active expert as `stage_down_rows` left them."""
        return cute.make_tensor(staged.iterator + a * (self.rows * self.inter), self._rows_of(self.rows, self.inter))

    @cute.jit
    def prefetch_down_rows(self, w2: cute.Tensor, active_expert: cute.Tensor, experts_with_slots: cutlass.Int32,
                           first_row: cutlass.Int32, tidx: cutlass.Int32):
        """This CTA's rows of every active expert's w2 not staged asked of L2, a line a
        thread at a time, to keep over the lines read once: its down GEMVs then read them
        from L2."""
        lines = self.block_bytes // LINE  # an expert's, contiguous
        for i in cutlass.range(self.staged * lines + tidx, experts_with_slots * lines, THREADS, unroll=1):
            rows = self.expert_rows(w2, active_expert[i // lines], self.hidden * self.inter)
            address = rows.iterator.toint() + cutlass.Int64(first_row * self.inter * (self.ab_dtype.width // 8)
                                                            + (i % lines) * LINE)
            line = cute.make_ptr(cutlass.Int8, address, cute.AddressSpace.gmem, assumed_align=LINE)
            prefetch_to_l2_evict_last(line)

    @cute.jit
    def stage_down_rows(self, w2: cute.Tensor, staged: cute.Tensor, staged_full: cute.Pointer,
                        active_expert: cute.Tensor, experts_with_slots: cutlass.Int32, first_row: cutlass.Int32):
        """This CTA's down rows of the first `staged` active experts into shared memory, a
        bulk copy an expert, all counted on the `staged_full` mbarrier (by one thread)."""
        elements = self.rows * self.inter  # an expert's
        copies = cutlass.min(experts_with_slots, self.staged)
        bulk = cute.make_copy_atom(cute.nvgpu.cpasync.CopyBulkG2SOp(), self.ab_dtype,
                                   num_bits_per_copy=self.block_bytes * 8)
        cute.arch.mbarrier_init(staged_full, 1)
        cute.arch.mbarrier_init_fence()
        cute.arch.mbarrier_arrive_and_expect_tx(staged_full, copies * self.block_bytes)
        for a in cutlass.range(copies, unroll=1):
            rows = self.expert_rows(w2, active_expert[a], self.hidden * self.inter)
            source = cute.make_tensor(rows.iterator + first_row * self.inter, cute.make_layout(elements))
            cute.copy(bulk, source, cute.make_tensor(self.staged_rows(staged, a).iterator, cute.make_layout(elements)),
                      mbar_ptr=staged_full)

    @cute.jit
    def arrive(self, counter: cute.Tensor, bidx: cutlass.Int32) -> Tuple[cutlass.Int32, cutlass.Int32]:
        """This CTA's share added to the counter (acq_rel, GPU scope): 2^31 - (CTAs - 1)
        for CTA 0, one for each other, 2^31 in all. From low 31 bits of zero, no sum
        of fewer shares reaches bit 31, and all of them flip it and leave the low bits
        zero again: the barrier needs no reset, whatever the CTA count of the launch
        before. Returns the counter before and after the add (Int32, wrapping)."""
        share = cutlass.select_(bidx == 0, cutlass.Int32(FLIP - (self.ctas - 1)), cutlass.Int32(1))
        before = cute.arch.atomic_add(counter.iterator, share, sem="acq_rel", scope="gpu")
        return before, before + share

    @cute.jit
    def wait_for_all(self, counter: cute.Tensor, before: cutlass.Int32, seen: cutlass.Int32):
        """Until the counter's top bit differs from `before`'s: every CTA's share in
        (acquire loads, GPU scope; with the CTA barrier after them, the CTA's reads of act
        come after every CTA's stores). The CTA whose share flipped it loads nothing."""
        start = cute.arch.globaltimer()
        while flipped(before, seen) == 0:
            seen = cute.arch.load(counter.iterator, cutlass.Int32, sem="acquire", scope="gpu")
            trap_unless(cute.arch.globaltimer() - start < WAIT_LIMIT_NS,
                        "gcdsl: the decode kernel's CTAs waited 20 s for each other: not every CTA of the kernel "
                        "runs at once (SMs held by other work?)\n")

    @cute.jit
    def down(self, act: cute.Tensor, w2: cute.Tensor, staged: cute.Tensor, y: cute.Tensor,
             active_expert: cute.Tensor, active_first: cute.Tensor, active_count: cute.Tensor,
             experts_with_slots: cutlass.Int32, first_row: cutlass.Int32, warp: cutlass.Int32, lane: cutlass.Int32):
        """y[slot, row] = act[slot] . w2[e, first_row + row] for every slot of each active
        expert e and each of this CTA's rows: a warp `unit_rows` rows of one expert, from
        shared memory where they are staged."""
        unit_rows = self._down_unit_rows()
        units = self.rows // unit_rows
        for unit in cutlass.range(warp, experts_with_slots * units, WARPS, unroll=1):
            a, row = unit // units, unit % units * unit_rows  # (row: of this CTA's)
            first, count = active_first[a], active_count[a]
            through_l2 = lambda: self.down_unit(  # noqa: E731  (this expert's rows read from w2, through L2)
                act, self.expert_rows(w2, active_expert[a], self.hidden * self.inter), y, first, count,
                first_row + row, first_row, unit_rows, lane)
            from_shared = lambda: self.down_staged_unit(  # noqa: E731  (its rows staged in shared memory)
                act, staged, y, a, first, count, row, unit_rows, lane)
            if cutlass.const_expr(self.all_staged):  # (a < experts_with_slots <= every expert a slot reaches)
                from_shared()
            elif cutlass.const_expr(self.staged > 0):
                if a < self.staged:
                    from_shared()
                else:
                    through_l2()
            else:
                through_l2()

    @cute.jit
    def down_staged_unit(self, act: cute.Tensor, staged: cute.Tensor, y: cute.Tensor, a: cutlass.Int32,
                         first: cutlass.Int32, count: cutlass.Int32, row: cutlass.Int32, unit_rows: int,
                         lane: cutlass.Int32):
        """A warp's unit of the a-th active expert's staged rows: [row, row + unit_rows) of
        this CTA's."""
        staged_rows = self.staged_rows(staged, a)
        self.by_batch(count, lambda batch: self.down_staged_rows(act, staged_rows, y, first, count, row, unit_rows,
                                                                lane, batch))

    @cute.jit
    def down_unit(self, act: cute.Tensor, w2: cute.Tensor, y: cute.Tensor, first: cutlass.Int32,
                  count: cutlass.Int32, row: cutlass.Int32, first_row: cutlass.Int32, unit_rows: int,
                  lane: cutlass.Int32):
        """A warp's unit: rows [row, row + unit_rows) of w2 (y's from row - first_row)."""
        self.by_batch(count, lambda batch: self.down_in_parts(act, w2, y, first, count, row, first_row, unit_rows,
                                                              lane, batch))

    @cute.jit
    def by_batch(self, count: cutlass.Int32, run):
        """run(batch) for an expert of `count` slots: its rows of x (or act) 1, 2 or BATCH at once."""
        if count == 1:
            run(1)
        elif count == 2:
            run(2)
        else:
            run(BATCH)

    @cute.jit
    def down_staged_rows(self, act: cute.Tensor, w2: cute.Tensor, y: cute.Tensor, first: cutlass.Int32,
                         count: cutlass.Int32, row: cutlass.Int32, rows: int, lane: cutlass.Int32, batch: int,
                         y_row=None):
        """y[slot, y_row + q] = act[slot] . w2[row + q] for q < rows (y_row: row where None),
        w2 an expert's rows in shared memory: a lane's fp32 sum of its vectors' products for
        each (row, slot), then the warp's sums of all of them reduced together
        (`reduce_scatter`)."""
        if cutlass.const_expr(y_row is None):
            y_row = row
        for done in cutlass.range(0, count, batch, unroll=1):
            slots = [first + cutlass.min(done + r, count - 1) for r in range(batch)]
            sums = cute.make_rmem_tensor((rows, batch), cutlass.Float32)
            sums.fill(0.0)
            for step in cutlass.range_constexpr(self.down_steps):
                vec = lane + LANE_VECTORS * step
                ws = [w2[(row + q, (None, vec))].load().to(cutlass.Float32) for q in range(rows)]
                for r in cutlass.range_constexpr(batch):
                    ar = act[(slots[r], (None, vec))].load().to(cutlass.Float32)
                    for q in cutlass.range_constexpr(rows):
                        total = sums[(q, r)]
                        for e in cutlass.range_constexpr(self.vector):
                            total = total + ws[q][e] * ar[e]
                        sums[(q, r)] = total
            # (rows x batch sums: a power of two, at most 32)
            total = self.reduce_scatter([sums[(q, r)] for q in range(rows) for r in range(batch)], lane)
            held = self.held_value(lane, rows * batch)
            held_row, held_slot = held // batch, held % batch
            if self.first_holder(lane, rows * batch) and done + held_slot < count:
                y[(first + done + held_slot, y_row + held_row)] = total

    def reduce_scatter(self, values: list, lane: cutlass.Int32) -> cutlass.Float32:
        """The warp's sum of each of a lane's `values` (a power of two of them, up to 32):
        at each butterfly step a lane keeps half the values (the upper half where its
        lane bit of that step is set) and adds its partner's of the same half, so that
        after log2(n) steps lane l holds value l >> (5 - log2 n), and the remaining steps
        sum it over the lanes that share it: n - 1 + 5 - log2(n) shuffles, not 5 n. (Plain
        Python, unrolled as it is traced.)"""
        offset = 16
        while len(values) > 1:
            half = len(values) // 2
            upper = (lane & offset) != 0
            kept = []
            for j in range(half):
                keep = cutlass.select_(upper, values[half + j], values[j])
                give = cutlass.select_(upper, values[j], values[half + j])
                kept.append(keep + cute.arch.shuffle_sync_bfly(give, offset))
            values, offset = kept, offset // 2
        total = values[0]
        while offset >= 1:
            total = total + cute.arch.shuffle_sync_bfly(total, offset)
            offset //= 2
        return total

    @staticmethod
    def held_value(lane: cutlass.Int32, n: int) -> cutlass.Int32:
        """After `reduce_scatter` of n values: the one whose warp total `lane` holds."""
        return lane >> (6 - n.bit_length())

    @staticmethod
    def first_holder(lane: cutlass.Int32, n: int) -> cutlass.Boolean:
        """After `reduce_scatter` of n values: whether `lane` is the first of the 32 / n
        lanes that hold its value's total."""
        return lane % (32 // n) == 0

    @cute.jit
    def down_in_parts(self, act: cute.Tensor, w2: cute.Tensor, y: cute.Tensor, first: cutlass.Int32,
                      count: cutlass.Int32, row: cutlass.Int32, first_row: cutlass.Int32, unit_rows: int,
                      lane: cutlass.Int32, batch: int):
        """`down_rows` over a unit's rows a part at a time: with `batch` rows of act, fewer
        weight rows fit at once."""
        part_rows, _ = self._down_rows_and_step(batch)
        for part in cutlass.range_constexpr(0, unit_rows, part_rows):
            self.down_rows(act, w2, y, first, count, row + part, first_row, part_rows, lane, batch)

    @cute.jit
    def down_rows(self, act: cute.Tensor, w2: cute.Tensor, y: cute.Tensor, first: cutlass.Int32,
                  count: cutlass.Int32, row: cutlass.Int32, first_row: cutlass.Int32, rows: int,
                  lane: cutlass.Int32, batch: int):
        _, step = self._down_rows_and_step(batch)
        for done in cutlass.range(0, count, batch, unroll=1):
            slots = [first + cutlass.min(done + r, count - 1) for r in range(batch)]
            sums = cute.make_rmem_tensor((rows, batch, self.vector), cutlass.Float32)
            sums.fill(0.0)
            for first_step in cutlass.range(0, self.down_steps, step, unroll=1):
                loaded = []
                for s in cutlass.range_constexpr(step):
                    vec = lane + LANE_VECTORS * (first_step + s)
                    loaded.append((vec, [w2[(row + q, (None, vec))].load() for q in range(rows)]))
                for vec, ws in loaded:
                    for r in cutlass.range_constexpr(batch):
                        ar = act[(slots[r], (None, vec))].load().to(cutlass.Float32)
                        for q in cutlass.range_constexpr(rows):
                            sums[(q, r, None)].store(sums[(q, r, None)].load() + ws[q].to(cutlass.Float32) * ar)
            for q in cutlass.range_constexpr(rows):
                for r in cutlass.range_constexpr(batch):
                    total = cute.arch.warp_reduction_sum(sums[(q, r, None)].load().reduce(cute.ReductionOp.ADD, 0.0, 0))
                    if lane == 0 and done + r < count:
                        y[(first + done + r, row + q - first_row)] = total

    @cute.jit
    def combine(self, y: cute.Tensor, row_of: cute.Tensor, weights: cute.Tensor, out: cute.Tensor,
                first_row: cutlass.Int32, tidx: cutlass.Int32):
        """out[t, first_row + row] = sum_j weights[t k + j] y[row_of[t k + j], row], in slot order."""
        k = self.top_k
        for i in cutlass.range(tidx, self.tokens * self.rows, THREADS, unroll=1):
            t, row = i // self.rows, i % self.rows
            total = cutlass.Float32(0.0)
            for j in cutlass.range_constexpr(k):
                total += weights[t * k + j] * y[(row_of[t * k + j], row)]
            column = first_row + row
            out[(t, (column % self.vector, column // self.vector))] = self.ab_dtype(total)

