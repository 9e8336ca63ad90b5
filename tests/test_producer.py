"""The grouped GEMM's producer warp (`hopper_grouped_gemm/producer.py`) run on the CPU.

Its loads of A and its waits run as plain Python on a simulated warp (`tests/simt.py`),
TMA loads recorded rather than made: the rows of a group's M-tiles, the gathered rows
of the expert layer's gate-up tiles, a partial M-tile's short boxes and how many it
takes, a down tile's wait for its expert's gate-up tiles, a staggered tile's k order;
and the k-tiles of a work item (its K splits, a group of the grouped reduction),
arithmetic on ints.
"""
import random
import threading
import time
import types
from typing import Tuple

import numpy as np
import pytest

from tests.simt import Pointer, Shared, Tensor, Threads, _mbarrier, _mbarrier_init, install, make_layout, plain

cutlass = pytest.importorskip("cutlass")

from gcdsl.ops import hopper_grouped_gemm as hgg  # noqa: E402
from gcdsl.ops.hopper_grouped_gemm import producer  # noqa: E402
from gcdsl.ops.hopper_grouped_gemm.config import A_SHORT_BOX_ROWS  # noqa: E402
from gcdsl.ops.hopper_grouped_gemm.experts import MoeExperts  # noqa: E402


def _coordinate(tensor: Tensor, shape) -> Tuple[int, ...]:
    """Where a slice of a compact tensor of `shape` starts: its coordinate, mode 0 first."""
    return tuple(int(c) for c in np.unravel_index(tensor.pointer.offset, shape, order="F"))


def test_one_kernel_gathers_each_tile_row_of_x_by_its_token_on_a_simulated_warp(monkeypatch):
    """`lane_row_indices` and `load_gathered_rows`, the one kernel's gate-up tiles' A rows
    gathered from x, a TMA box a row, by each lane for its own rows, for a k-tile into a
    stage, at every count of a tile's rows that parts the warp's lanes differently: each
    row r of the tile loaded once, from x's row of the token of sorted row first_row + r,
    into row r of the stage, at the k-tile's column; the stage's mbarrier expecting just
    those rows' bytes."""
    rng = random.Random(1)
    up = MoeExperts(cutlass.BFloat16, 4, 256, 128, 2).up
    tile_m, tile_k = up.tile_m, up.tile_mnk[2]
    stages, stage, kk, first_row = 3, 1, 2, 37
    install(monkeypatch, producer)
    loads = []
    monkeypatch.setattr(producer, "tma_load_2d_by_this_thread", lambda atom, dst, mbarrier, column, row: (
        loads.append((dst.offset, column, row)), _mbarrier(mbarrier).transfer(-up.a_row_bytes)))
    lane_row_indices, load_gathered_rows = (plain(producer.Producer.lane_row_indices),
                                            plain(producer.Producer.load_gathered_rows))
    row_index = Shared.of(rng.randrange(1000) for _ in range(first_row + tile_m + 32))
    # a stage's rows as `produce` views them: (1, tile_k, row, 1, stage), one box a row
    sA_rows = Tensor(Pointer(np.zeros(tile_k * tile_m * stages)), make_layout((1, tile_k, tile_m, 1, stages)))
    for rows_in_tile in (1, 5, 31, 32, 33, 64, 100, 127, tile_m):
        loads.clear()
        full = Pointer(np.zeros(1))
        _mbarrier_init(full, 1)

        def warp():
            lane_rows = lane_row_indices(up, row_index, first_row, rows_in_tile)
            load_gathered_rows(up, None, sA_rows, stage, full, kk, rows_in_tile, lane_rows)

        Threads(32).run(warp)
        landed = sorted((divmod(offset, tile_k * tile_m), column, row) for offset, column, row in loads)
        assert landed == [((stage, r * tile_k), kk * tile_k, row_index[first_row + r]) for r in range(rows_in_tile)], \
            (rows_in_tile, landed[:4])
        assert _mbarrier(full).bytes == 0  # (the rows' bytes expected, and come)


def test_a_partial_tile_loads_the_short_boxes_that_cover_its_rows_on_a_simulated_warp(monkeypatch):
    """`load_a_in_short_boxes`: a k-tile of A into a stage either as the whole tile, one
    box (`short_boxes` 0), or as the first `short_boxes` boxes of A_SHORT_BOX_ROWS rows,
    box b of the k-tile into box b of the stage; each issued once for the warp; the
    stage's mbarrier expecting just the bytes loaded."""
    gemm = MoeExperts(cutlass.BFloat16, 4, 256, 128, 2).down
    tile_m, stages, k_tiles, stage, kk = gemm.tile_m, 4, 6, 2, 3
    boxes = tile_m // A_SHORT_BOX_ROWS
    install(monkeypatch, producer)
    copies = []

    def copy(atom, source, destination, tma_bar_ptr, cache_policy):
        assert cache_policy is None  # the default configuration leaves the L2 policy to cute.copy
        if Threads.current().lane() == 0:  # (a TMA copy is issued by one elected lane)
            copies.append((atom.name, _coordinate(source, atom.source), _coordinate(destination, atom.stage)))
            _mbarrier(tma_bar_ptr).transfer(-atom.bytes)

    monkeypatch.setattr(producer.cute, "copy", copy)
    whole = types.SimpleNamespace(name="whole", bytes=gemm.a_tile_bytes, source=(1, k_tiles), stage=(1, stages))
    short = types.SimpleNamespace(name="short", bytes=gemm.a_short_box_bytes, source=(1, boxes, k_tiles),
                                  stage=(1, boxes, 1, stages))

    def tensor(shape):  # (what `produce` partitions: a TMA box a mode-0 element)
        return Tensor(Pointer(np.zeros(int(np.prod(shape)))), make_layout(shape))

    load = plain(producer.Producer.load_a_in_short_boxes)
    for short_boxes in range(boxes):
        copies.clear()
        full = Pointer(np.zeros(1))
        _mbarrier_init(full, 1)
        Threads(32).run(lambda: load(gemm, whole, tensor(whole.source), tensor(whole.stage), short,
                                     tensor(short.source), tensor(short.stage), short_boxes, stage, full, kk))
        if short_boxes == 0:
            assert copies == [("whole", (0, kk), (0, stage))], copies
        else:
            assert copies == [("short", (0, b, kk), (0, b, 0, stage)) for b in range(short_boxes)], copies
        assert _mbarrier(full).bytes == 0  # (the boxes' bytes expected, and come)


@pytest.mark.parametrize("rows, tiles", [(1, 3), (128, 2), (129, 2), (300, 1)])
def test_a_down_tile_waits_on_a_simulated_thread_until_every_gate_up_tile_of_its_expert_is_counted(
        rows, tiles, monkeypatch):
    """`wait_for_group`, the producer's wait before a down tile's loads, while another
    thread counts the expert's gate-up tiles in one at a time: it ends once the counter
    holds every gate-up tile of the expert (its M-steps, ceil(rows / 128), times its
    N-tiles `tiles`), not before."""
    down = MoeExperts(cutlass.BFloat16, 4, 256, 128, 2).down
    install(monkeypatch, producer)
    group, target = 2, -(-rows // down.tile_m) * tiles
    counters = Shared(4, fill=0)
    seen_at_end = []

    def count_in():
        for _ in range(target):
            time.sleep(0.02)
            counters[group] += 1

    counting = threading.Thread(target=count_in)
    counting.start()
    Threads(1).run(lambda: (plain(producer.Producer.wait_for_group)(down, counters, tiles, group, rows),
                            seen_at_end.append(counters[group])))
    counting.join()
    assert seen_at_end == [target]


@pytest.mark.parametrize("inter", [256, 448, 2048, 14336])
@pytest.mark.parametrize("split_k", [2, 3, 4])
def test_k_splits_of_a_down_tile_read_each_of_its_k_tiles_once_in_order(inter, split_k):
    """`split_of`: a down tile's `split_k` work items (consecutive items) read K's k-tiles
    in consecutive ranges, each k-tile in exactly one of them, none empty."""
    down = MoeExperts(cutlass.BFloat16, 4, 256, inter, 2, split_k=split_k).down
    for tile in (0, 5):
        ranges = [down.split_of(tile * split_k + split)[1:] for split in range(split_k)]
        assert all(down.split_of(tile * split_k + split)[0] == tile for split in range(split_k))
        read = [first + k for first, count in ranges for k in range(count)]
        assert read == list(range(down.k_tiles)) and all(count > 0 for _, count in ranges), ranges


def test_a_partial_tile_takes_the_fewest_short_boxes_that_cover_its_rows_on_a_simulated_warp(monkeypatch):
    """`short_boxes`: a partial M-tile's rows (1 to 127) in the fewest boxes of
    A_SHORT_BOX_ROWS rows that cover them; a whole tile, or a CTA without rows (a pair's
    second), in none (the whole tile in one box)."""
    gemm = MoeExperts(cutlass.BFloat16, 4, 256, 128, 2).down
    install(monkeypatch, producer)
    short_boxes = plain(producer.Producer.short_boxes)
    for rows in range(-3, gemm.tile_m + 3):
        boxes = short_boxes(gemm, rows)
        if 0 < rows < gemm.tile_m:
            assert (boxes - 1) * A_SHORT_BOX_ROWS < rows <= boxes * A_SHORT_BOX_ROWS, (rows, boxes)
        else:
            assert boxes == 0, (rows, boxes)


def test_grouped_reduction_k_tiles_of_a_group_end_at_its_end_and_start_at_most_a_tile_before_it():
    """`group_k_tiles`, ragged K: a group of `length` columns in ceil(length / tile_k)
    k-tiles from column k_first of the group, the last ending at the group's end and the
    first starting at most a k-tile before its start (TMA reads zeros there)."""
    gemm = hgg.HopperGroupedGemm(hgg.GemmConfig(cutlass.BFloat16, cutlass.Float32, 8, 256, 0, 128, ragged="k", m=256))
    tile_k = gemm.tile_mnk[2]
    for length in range(0, 5 * tile_k + 2):
        k_tiles, k_first = gemm.group_k_tiles(length)
        assert k_tiles == -(-length // tile_k) and k_first + k_tiles * tile_k == length and -tile_k < k_first <= 0


@pytest.mark.parametrize("k_tiles", [1, 2, 7, 32])
def test_a_staggered_tile_reads_each_k_tile_once_whatever_its_rotation(k_tiles, monkeypatch):
    """`staggered`: a tile whose k-tiles start at any rotation reads every k-tile of K
    once, from the rotation on, wrapping round at K (none past it)."""
    gemm = MoeExperts(cutlass.BFloat16, 4, 256, 128, 2).down
    install(monkeypatch, producer)
    staggered = plain(producer.Producer.staggered)
    for rotation in range(k_tiles):
        order = [staggered(gemm, k, rotation, k_tiles) for k in range(k_tiles)]
        assert order == [(rotation + k) % k_tiles for k in range(k_tiles)], (rotation, order)


def test_the_m_tile_rows_of_a_group_cover_each_of_its_rows_once(monkeypatch):
    """`tile_first_row` and `tile_rows`, ragged M: a group's M-tiles, each at most
    tile_m rows from its first, read each row of the group once, in order; an M-tile
    past the group's (a pair's second CTA without rows) has none and loads from the
    group's first row, inside A."""
    gemm = MoeExperts(cutlass.BFloat16, 4, 256, 128, 2).up
    install(monkeypatch, producer)
    tile_first_row = plain(producer.Producer.tile_first_row)
    start = 1000
    for rows in (0, 1, 127, 128, 129, 300, 512):
        tiles = -(-rows // gemm.tile_m)
        read = []
        for m_tile in range(tiles):
            first, count = tile_first_row(gemm, start, rows, m_tile), gemm.tile_rows(rows, m_tile)
            assert 0 < count <= gemm.tile_m
            read += range(first, first + count)
        assert read == list(range(start, start + rows)), rows
        assert tile_first_row(gemm, start, rows, tiles) == start and gemm.tile_rows(rows, tiles) <= 0
