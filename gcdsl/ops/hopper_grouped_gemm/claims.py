"""Claimed tiles (`GemmConfig.claimed_tiles`): each cluster takes its first tile, its
cluster index, and claims every tile after that from a counter in global memory.

The static deal (cluster c takes tiles c, c + clusters, ...) fixes in advance which tiles
run together. Where tiles differ in cost (a group's last, partial M-tile), the clusters
drift apart and the tiles at work at one time spread over more of the schedule, and so
over more of the groups' A rows and B tiles than L2 holds. A claim instead hands the
next cluster that is free the next tile of the schedule: the tiles at work stay a run of
about `clusters` consecutive tiles, whatever each one costs.

One warp claims for its cluster: the producer warp of the cluster's first CTA, a tile
ahead, as it starts loading the tile before (`publish`). The claim travels through a
ring of CLAIM_SLOTS slots in every CTA of the cluster, one Int32 and two mbarriers a
slot:
    full[s]   in each CTA: the claim is in this CTA's slot s. One arrival, by the
              claiming warp: a plain store and arrive in a single CTA; in a pair, an
              arrive with 4 expected bytes on each CTA's barrier and an `st.async` of the
              claim, whose completion counts those bytes.
    empty[s]  in the cluster's first CTA: every warp that reads claims (CLAIM_READERS
              a CTA: the producer and the eight consumer warps) has read slot s, so
              the claiming warp may write it again. One arrival a warp, from each CTA.
A claim at or past the last tile ends every reader's loop; the claiming warp then waits
for the last reads (`tail`), so that no arrival reaches a CTA that has exited.

The counter must be 0 at the launch; the host allocates a zeroed one a call, so that
calls on several streams never share one.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Tuple

import cutlass
import cutlass.cute as cute
import cutlass.pipeline as pipeline

from .config import CLAIM_READERS, CLAIM_SLOTS


@dataclass(frozen=True)  # (frozen: the DSL then passes it into its loops as it is, read only)
class TileClaims:
    """The claim ring of one CTA (the module docstring): `slots` (CLAIM_SLOTS Int32), the
    `full` and `empty` mbarriers (CLAIM_SLOTS each; `make` lays them out) and the launch's
    `counter`."""
    slots: cute.Tensor
    full: cute.Pointer
    empty: cute.Pointer
    counter: cute.Pointer
    cluster_m: int
    num_clusters: cutlass.Int32

    @staticmethod
    def make(slots: cute.Tensor, barriers: cute.Pointer, counter: cute.Pointer, cluster_m: int,
             num_clusters: cutlass.Int32) -> "TileClaims":
        """Over `barriers`, 2 CLAIM_SLOTS mbarriers: the full ones, then the empty ones."""
        return TileClaims(slots, barriers, barriers + CLAIM_SLOTS, counter, cluster_m, num_clusters)

    @staticmethod
    def init_barriers(barriers: cute.Pointer, cluster_m: int) -> None:
        """One thread of each CTA, before the kernel's mbarrier-init fence. (Plain Python,
        unrolled as it is traced.)"""
        for s in range(CLAIM_SLOTS):
            cute.arch.mbarrier_init(barriers + s, 1)  # full
            cute.arch.mbarrier_init(barriers + CLAIM_SLOTS + s, CLAIM_READERS * cluster_m)  # empty

    @staticmethod
    def publisher_state():
        return pipeline.make_pipeline_state(pipeline.PipelineUserType.Producer, CLAIM_SLOTS)

    @staticmethod
    def reader_state():
        return pipeline.make_pipeline_state(pipeline.PipelineUserType.Consumer, CLAIM_SLOTS)

    @cute.jit
    def publish(self, state):
        """The claiming warp (all lanes): claim the cluster's next tile and write it into
        slot `state.index` of every CTA of the cluster. Returns the advanced state."""
        cute.arch.mbarrier_wait(self.empty + state.index, state.phase)  # every reader has read the slot
        lane = cute.arch.lane_idx()
        ticket = cutlass.Int32(0)
        if lane == 0:
            ticket = cute.arch.atomic_add(self.counter, cutlass.Int32(1))
        tile = cute.arch.shuffle_sync(ticket, 0) + self.num_clusters  # (the first tiles are the clusters' own)
        full = self.full + state.index
        if cutlass.const_expr(self.cluster_m == 1):
            if lane == 0:
                self.slots[state.index] = tile
                cute.arch.mbarrier_arrive(full)  # (release: the store is seen by whoever sees the phase)
        else:
            if lane < self.cluster_m:  # lane r writes CTA r's slot
                cute.arch.mbarrier_arrive_and_expect_tx(full, 4, lane)
                cute.arch.store_async_dsmem(self.slots.iterator + state.index, tile, full, lane)
        state.advance()
        return state

    @cute.jit
    def take(self, state) -> Tuple:
        """A reading warp (all lanes): (the claim in slot `state.index`, the advanced state)."""
        cute.arch.mbarrier_wait(self.full + state.index, state.phase)
        # Lane 0 alone reads the slot and releases it: its arrive then orders its own read
        # before the next claim's write, with no other lane's read to account for.
        lane = cute.arch.lane_idx()
        tile = cutlass.Int32(0)
        if lane == 0:
            tile = self.slots[state.index]
            if cutlass.const_expr(self.cluster_m > 1):
                cute.arch.fence_view_async_shared()  # the read before the next st.async into the slot
        tile = cute.arch.shuffle_sync(tile, 0)
        if lane == 0:
            if cutlass.const_expr(self.cluster_m == 1):
                cute.arch.mbarrier_arrive(self.empty + state.index)
            else:
                cute.arch.mbarrier_arrive(self.empty + state.index, 0)  # the first CTA's barrier
        state.advance()
        return tile, state

    @cute.jit
    def tail(self, state) -> None:
        """The claiming warp, after its last claim: wait until every reader of the cluster
        has read the last CLAIM_SLOTS claims."""
        for _ in cutlass.range_constexpr(CLAIM_SLOTS):
            cute.arch.mbarrier_wait(self.empty + state.index, state.phase)
            state.advance()
