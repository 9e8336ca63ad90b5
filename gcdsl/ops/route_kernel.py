"""The routing bookkeeping of an MoE layer in one kernel, for decode (`RouteSlots`).

Given the router's `topk_ids` (T, k), flattened to the T k slots, one CTA writes

    row_of[s] the position of slot s once the slots are sorted by expert, stably: the
              row of the grouped GEMMs' operands that holds it
    token[p]  the token of the slot at position p
    offs[e]   the cumulative slot count of experts 0 .. e (the grouped GEMMs' group ends)
    zeros[i]  0 for i < `zero_count`: the expert kernel's counters (per expert, then per
              token and column tile), cleared here rather than by a launch of their own

and traps, with a message, on an id outside [0, E). One thread a slot: up to MAX_SLOTS
slots (T k <= 1024: decode), where six of torch's kernels (a sort, two fills, a
scatter-add, a scan and a division) would each cost a launch. A slot's place is its
expert's start plus the slots of its expert before it, counted by the thread itself:
O(T k) compares a thread, no atomics on the order, so the sort is stable by construction.
"""
from __future__ import annotations

from typing import Tuple

import cuda.bindings.driver as cuda

import cutlass
import cutlass.cute as cute
from cutlass.memory import SmemAllocator

import gcdsl

from ..lower._dsl import trap_unless

MAX_SLOTS = 1024  # one thread a slot, one CTA


class RouteSlots:
    """The kernel for E experts and ids of `id_dtype` (cutlass.Int32 or Int64).

    `__call__` is the host function to `cute.compile`:
        (ids, row_of, token, offs, zeros, slots, top_k, zero_count, stream)
    `ids` the (T k,) ids; outputs `row_of` (T k,) Int32, `token` (T k,) Int64, `offs` and
    `zeros` (zero_count,) Int32."""

    def __init__(self, experts: int, id_dtype) -> None:
        if not 1 <= experts <= MAX_SLOTS:
            raise ValueError(f"E = {experts}: the routing kernel counts up to {MAX_SLOTS} experts, a thread each")
        self.experts, self.id_dtype = experts, id_dtype

    def trace_args(self) -> Tuple:
        def ptr(dtype):
            return cute.runtime.make_ptr(dtype, 0, cute.AddressSpace.gmem, assumed_align=dtype.width // 8)

        return (ptr(self.id_dtype), ptr(cutlass.Int32), ptr(cutlass.Int64), ptr(cutlass.Int32), ptr(cutlass.Int32),
                cutlass.Int32(1), cutlass.Int32(1), cutlass.Int32(1), cute.runtime.make_fake_stream())

    @cute.jit
    def __call__(self, ids_ptr: cute.Pointer, row_ptr: cute.Pointer, token_ptr: cute.Pointer,
                 offs_ptr: cute.Pointer, zeros_ptr: cute.Pointer, slots: cutlass.Int32, top_k: cutlass.Int32,
                 zero_count: cutlass.Int32, stream: cuda.CUstream):
        ids = cute.make_tensor(ids_ptr, cute.make_layout(slots))
        row_of = cute.make_tensor(row_ptr, cute.make_layout(slots))
        token = cute.make_tensor(token_ptr, cute.make_layout(slots))
        offs = cute.make_tensor(offs_ptr, cute.make_layout(self.experts))
        zeros = cute.make_tensor(zeros_ptr, cute.make_layout(zero_count))

        @cute.struct
        class SharedStorage:
            counts: cute.struct.MemRange[cutlass.Int32, self.experts]  # slots of each expert
            starts: cute.struct.MemRange[cutlass.Int32, self.experts]  # where each expert's slots begin
            slot_expert: cute.struct.MemRange[cutlass.Int32, MAX_SLOTS]

        self.shared_storage = SharedStorage
        self.kernel(ids, row_of, token, offs, zeros, slots, top_k, zero_count).launch(
            grid=(1, 1, 1), block=(MAX_SLOTS, 1, 1), stream=stream)

    @gcdsl.kernel
    def kernel(self, ids: cute.Tensor, row_of: cute.Tensor, token: cute.Tensor, offs: cute.Tensor,
               zeros: cute.Tensor, slots: cutlass.Int32, top_k: cutlass.Int32, zero_count: cutlass.Int32):
        # The expert kernel after this one may start now (its CTAs set up, then wait for
        # this grid to end before they read what it writes): it saves that kernel's launch.
        # This kernel itself is launched plainly, so the kernels before it (those that
        # wrote x) have ended when it starts, and so when the expert kernel's wait ends.
        cute.arch.griddepcontrol_launch_dependents()
        tidx, _, _ = cute.arch.thread_idx()
        experts = self.experts
        storage = SmemAllocator().allocate(self.shared_storage)
        counts = storage.counts.get_tensor(cute.make_layout(experts))
        starts = storage.starts.get_tensor(cute.make_layout(experts))
        slot_expert = storage.slot_expert.get_tensor(cute.make_layout(MAX_SLOTS))

        if tidx < experts:
            counts[tidx] = cutlass.Int32(0)
        for i in cutlass.range(tidx, zero_count, MAX_SLOTS, unroll=1):
            zeros[i] = cutlass.Int32(0)
        expert = cutlass.Int32(0)
        if tidx < slots:
            wide = cutlass.Int64(ids[tidx])  # checked before it is narrowed
            trap_unless(wide >= 0, "gcdsl: topk_ids holds an id below 0: experts are 0 to E - 1\n")
            trap_unless(wide < experts, "gcdsl: topk_ids holds an id of E or more: experts are 0 to E - 1\n")
            expert = cutlass.Int32(wide)
            slot_expert[tidx] = expert
        cute.arch.sync_threads()
        if tidx < slots:
            cute.arch.atomic_add(counts.iterator + expert, cutlass.Int32(1))
        cute.arch.sync_threads()
        if tidx < experts:
            start = cutlass.Int32(0)
            for before in cutlass.range(tidx, unroll=8):  # unrolled: the loads in flight together
                start += counts[before]
            starts[tidx] = start
            offs[tidx] = start + counts[tidx]
        cute.arch.sync_threads()
        if tidx < slots:
            rank = cutlass.Int32(0)  # the slots of this expert before this one
            for before in cutlass.range(tidx, unroll=8):
                if slot_expert[before] == expert:
                    rank += 1
            place = starts[expert] + rank
            row_of[tidx] = place
            token[place] = cutlass.Int64(tidx // top_k)
