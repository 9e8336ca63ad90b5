"""The consumer warpgroups' code that needs no tensor cores, run on simulated threads
(`tests/simt.py`) without a GPU:
- the tiles each warpgroup computes and stores, its WGMMA mainloop (`mma_tile`) and its
  store (`store_tile`) recorded rather than run: every tile of the schedule stored once
  at its own M-tile, with the accumulators its own mainloop left, zeros for a group
  without K (cooperative and ping-pong, ragged M and K, CTAs alone and in pairs); each
  ping-pong warpgroup storing through sub-tile buffers, a barrier and a warp of its own;
- in the grouped reduction with T contiguous, the zeros written over the columns of a
  stage that come before the group.
"""
import itertools
import math
import types

import numpy as np
import pytest

from tests.simt import Pointer, Tensor, Threads, install, make_layout, plain, plain_methods, registers

cutlass = pytest.importorskip("cutlass")

from gcdsl.ops import hopper_grouped_gemm as hgg  # noqa: E402
from gcdsl.ops.hopper_grouped_gemm import consumers  # noqa: E402
from gcdsl.ops.hopper_grouped_gemm.config import ZERO_FILL_BARRIER  # noqa: E402
from tests.test_schedule import _ends, _reference_tiles, _run_schedule  # noqa: E402


class _PipelineState:
    """A pipeline state as the consumers step it: only its advances matter here."""

    def __init__(self) -> None:
        self.index = 0

    def advance(self) -> None:
        self.index += 1


def _stored_tiles(gemm, offs, total: int, clusters: int, monkeypatch) -> list:
    """(group, m_tile, n_tile, warpgroup, the value its accumulators held, (its storing
    warp, first sub-tile buffer, epilogue barrier)) of every tile a consumer warpgroup
    stores, each CTA's two warpgroups run in turn as plain Python. The mainloop fills the
    accumulators with a value of its own for every tile it computes."""
    tile_end, row_end, trap = _run_schedule(gemm, offs, total, monkeypatch)
    assert trap is None
    install(monkeypatch, consumers)
    monkeypatch.setattr(consumers, "warpgroup", types.SimpleNamespace(Field=types.SimpleNamespace(ACCUMULATE=0)))

    def named_barrier(barrier_id, num_threads):  # (one warpgroup at a time: no waits)
        return types.SimpleNamespace(barrier_id=barrier_id, arrive_and_wait=lambda: None, arrive=lambda: None)

    monkeypatch.setattr(consumers, "pipeline", types.SimpleNamespace(
        make_pipeline_state=lambda kind, stages: _PipelineState(), NamedBarrier=named_barrier,
        PipelineUserType=types.SimpleNamespace(Consumer=0, Producer=1)))
    plain_methods(gemm)
    stamps = itertools.count(1)
    acc = registers((4,), float)
    stored = []

    def mma_tile(mainloop, tiled_mma, acc, tCrA, tCrB, read, release, k_tiles, rows_here, *turn):
        if rows_here > 0:
            acc.fill(float(next(stamps)))  # (the real one zeroes them, then sums k_tiles products)
        return read, release

    def store_tile(*args):
        group, start, rows, m_tile, n_tile, warp, barrier, store_warp, first_buffer = args[10:19]
        stored.append((group, m_tile, n_tile, warpgroup_idx, acc[0], (store_warp, first_buffer, barrier.barrier_id)))

    gemm.mma_tile, gemm.store_tile = mma_tile, store_tile
    gemm.consumer_views = lambda tiled_mma, sA, sB, sC, tidx: (None, None, acc, (None, None, acc, None, None, None))
    gemm.zero_columns_before_group = lambda *args: None
    consume = gemm.consume_pingpong if gemm.pingpong else gemm.consume
    tiled_mma = types.SimpleNamespace(set=lambda field, value: None)
    if gemm.ragged == "k":
        total_tiles = gemm.groups * gemm.fixed_m_steps * gemm.n_tiles
    else:
        total_tiles = tile_end[len(tile_end) - 1]
    for cta in range(clusters * gemm.cluster_m):
        for warpgroup_idx in (1, 2):
            acc.fill(math.nan)  # (registers hold anything at first)
            tidx = 128 * warpgroup_idx
            Threads(1).run(lambda: consume(None, tiled_mma, None, None, total, None, None, None, tile_end, row_end,
                                           total_tiles, cta // gemm.cluster_m, clusters, cta % gemm.cluster_m,
                                           tidx, tidx // 32, warpgroup_idx))
    return stored


@pytest.mark.parametrize("schedule, ragged, cluster_m, tile_order", [
    ("pingpong", "m", 1, "m"), ("cooperative", "m", 1, "m"), ("cooperative", "m", 2, "m"),
    ("pingpong", "m", 1, "n"), ("cooperative", "m", 2, "n"), ("pingpong", "m", 1, "m_partial_last"),
    ("cooperative", "m", 2, "m_partial_last"), ("cooperative", "m", 1, "m_blocks"),
    ("pingpong", "m", 2, "m"), ("pingpong", "m", 2, "n"), ("cooperative", "k", 1, "m"), ("cooperative", "k", 2, "m"), ("pingpong", "k", 1, "m"), ("pingpong", "k", 2, "m")])
def test_each_tile_is_stored_once_at_its_own_m_tile_with_its_own_accumulators(schedule, ragged, cluster_m,
                                                                              tile_order, monkeypatch):
    """Ragged M: each M-tile with rows of each group, by one warpgroup in ping-pong and by
    both (their halves) cooperatively; ragged K: every M-tile of every group, zeros for a
    group with no columns. A tile's accumulators are those its own mainloop left."""
    groups, n, total = 6, 256, 900
    offs = [130, 130, 200, 520, 585, 900] if ragged == "m" else [64, 64, 200, 200, 600, 900]
    config = hgg.GemmConfig(cutlass.BFloat16, cutlass.Float32, groups, n, 0 if ragged == "k" else 128, 128,
                            cluster_m=cluster_m, ragged=ragged, a_major="m" if ragged == "k" else "k",
                            b_major="n" if ragged == "k" else "k", m=512 if ragged == "k" else 0, schedule=schedule,
                            tile_order=tile_order)
    gemm = hgg.HopperGroupedGemm(config)
    tile_m = gemm.tile_m
    stored = _stored_tiles(gemm, offs, total, 3, monkeypatch)
    ends = _ends(offs, total)
    if ragged == "m":
        tiles = [(group, m_step, n_tile) for group, m_step, n_tile, *_ in
                 _reference_tiles(offs, total, tile_m * cluster_m, gemm.n_tiles, tile_order)]
        wanted = [(group, m_step * cluster_m + rank, n_tile) for group, m_step, n_tile in tiles
                  for rank in range(cluster_m)
                  if ends[group][1] - ends[group][0] > (m_step * cluster_m + rank) * tile_m]  # (a pair's odd last tile)
    else:
        wanted = [(group, m_tile, n_tile) for group in range(groups) for m_tile in range(gemm.m_tiles)
                  for n_tile in range(gemm.n_tiles)]
    if schedule == "pingpong":  # the warpgroups take turns: each tile by one of them
        assert sorted((g, m, n) for g, m, n, *_ in stored) == sorted(wanted)
    else:  # both warpgroups, each its half of the tile
        assert sorted((g, m, n, w) for g, m, n, w, *_ in stored) == sorted((g, m, n, w) for g, m, n in wanted
                                                                          for w in (1, 2))
    computed = []
    for group, m_tile, n_tile, warpgroup_idx, value, _ in stored:
        rows = ends[group][1] - ends[group][0] - m_tile * tile_m
        if ragged == "k" and ends[group][0] == ends[group][1]:
            assert value == 0.0, (group, m_tile, n_tile)  # an expert no token reached: a zero gradient
        # (cooperative, warpgroup 2 holds the tile's rows 64 on: the store clips them where there are none)
        elif schedule == "pingpong" or ragged == "k" or warpgroup_idx == 1 or rows > 64:
            assert value == value and value > 0, (group, m_tile, n_tile, warpgroup_idx)  # its own mainloop's
            computed.append(value)
    assert len(computed) == len(set(computed))  # no tile stores another's accumulators


@pytest.mark.parametrize("ragged", ["m", "k"])
def test_pingpong_warpgroups_store_through_their_own_buffers_barrier_and_warp(ragged, monkeypatch):
    """Ping-pong: each warpgroup stores its tiles while the other's WGMMAs run, so each has
    its own sub-tile buffers (epi_stages of the 2 epi_stages), its own epilogue barrier
    and a storing warp of its own warps."""
    config = hgg.GemmConfig(cutlass.BFloat16, cutlass.Float32, 6, 256, 0 if ragged == "k" else 128, 128,
                            ragged=ragged, a_major="m" if ragged == "k" else "k", b_major="n" if ragged == "k" else "k",
                            m=512 if ragged == "k" else 0, schedule="pingpong")
    gemm = hgg.HopperGroupedGemm(config)
    stored = _stored_tiles(gemm, [130, 130, 200, 520, 585, 900], 900, 2, monkeypatch)
    resources = {}
    for *_, warpgroup_idx, _, used in stored:
        resources.setdefault(warpgroup_idx, set()).add(used)
    assert sorted(resources) == [1, 2] and all(len(used) == 1 for used in resources.values()), resources
    (warp_1, buffer_1, barrier_1), (warp_2, buffer_2, barrier_2) = (resources[1].pop(), resources[2].pop())
    assert warp_1 // 4 == 1 and warp_2 // 4 == 2 and barrier_1 != barrier_2
    stages = gemm.epi_stages
    assert gemm.epi_buffers == 2 * stages and sorted((buffer_1, buffer_2)) == [0, stages]


@pytest.mark.parametrize("majors", [("k", "k"), ("k", "n"), ("m", "k")])
def test_the_columns_before_a_group_are_zeroed_in_each_k_major_operand(majors, monkeypatch):
    """`zero_columns_before_group`, by the 256 threads of both consumer warpgroups: once the
    stage has landed, columns 0 .. columns - 1 of its A (tile_m rows) and of its B (tile_n
    rows) are zero in each K-major operand, and nothing else of the stage, of another
    stage or of an N- or M-major operand changes."""
    a_major, b_major = majors
    gemm = hgg.HopperGroupedGemm(hgg.GemmConfig(cutlass.BFloat16, cutlass.Float32, 4, 256, 0, 128, ragged="k",
                                                a_major=a_major, b_major=b_major, m=256))
    assert gemm.config.zero_fill
    tile_m, tile_n, tile_k = gemm.tile_mnk
    stages, stage = 3, 1
    install(monkeypatch, consumers)
    waited = []
    monkeypatch.setattr(consumers, "pipeline", types.SimpleNamespace(NamedBarrier=lambda barrier_id, num_threads: (
        types.SimpleNamespace(arrive_and_wait=lambda: Threads.current().sync()))))
    monkeypatch.setattr(gemm, "ab_dtype", float)  # (the stage's element type: a plain number here)
    mainloop = types.SimpleNamespace(consumer_wait=lambda read: waited.append(read.index))
    zero_columns = plain(consumers.Consumers.zero_columns_before_group)
    for columns in (0, 1, 8, 37, tile_k - 1):
        before_a = np.random.default_rng(columns).uniform(1, 2, (tile_m, tile_k, stages))
        before_b = np.random.default_rng(columns + 1).uniform(1, 2, (tile_n, tile_k, stages))
        sA = Tensor(Pointer(before_a.flatten(order="F")), make_layout((tile_m, tile_k, stages)))
        sB = Tensor(Pointer(before_b.flatten(order="F")), make_layout((tile_n, tile_k, stages)))
        waited.clear()

        def thread():
            zero_columns(gemm, mainloop, types.SimpleNamespace(index=stage), sA, sB, columns,
                         Threads.current().index(), 256, ZERO_FILL_BARRIER)

        Threads(256).run(thread)
        for tensor, before, major in ((sA, before_a, a_major), (sB, before_b, b_major)):
            after = tensor.pointer.array.reshape(before.shape, order="F")
            wanted = before.copy()
            if major == "k":
                wanted[:, :columns, stage] = 0
            assert np.array_equal(after, wanted), (major, columns, np.argwhere(after != wanted)[:3])
        assert set(waited) <= {stage} and (columns == 0) == (not waited)  # the stage waited for first
