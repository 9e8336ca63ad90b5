"""The grouped GEMM's tile schedule (`hopper_grouped_gemm/schedule.py`) run on the CPU.

`build_schedule`, the code one warp runs on `offs` in every CTA, runs as plain Python on
a simulated warp (`tests/simt.py`); `locate` then places every cluster tile. Both are
held to a reference written from `offs` directly: each end the largest so far, clamped
to T; a group's tiles ceil(rows / (128 x cluster_m)) x N-tiles, in the configuration's
tile order (M-steps or N-tiles fastest, the full M-steps' tiles before the partial
step's, or M-steps fastest in blocks of M-steps); each group
of an M-major A with rows starting at a multiple of 8, and, in the grouped reduction with
T contiguous, ending there, or the kernel traps. `offs` here is anything a router could
write, bad values included (decreasing, negative, past T).
"""
import functools

import pytest
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

from tests import simt
from tests.simt import Shared, Threads, Trap, install, plain

cutlass = pytest.importorskip("cutlass")

from gcdsl.ops import hopper_grouped_gemm as hgg  # noqa: E402
from gcdsl.ops.hopper_grouped_gemm import schedule  # noqa: E402

ALIGN = 8  # rows of 16 bytes of a 16-bit operand
# (monkeypatch sets the same stand-ins for every example)
FIXTURE_OK = dict(deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])


def test_the_simulated_warp_shuffles_as_shfl_sync_and_refuses_lanes_that_part_ways(monkeypatch):
    warp = Threads(32)
    assert warp.run(lambda: warp.shuffle_up(10 * warp.index(), 3)) == [0, 10, 20] + [10 * lane for lane in range(29)]
    assert warp.run(lambda: warp.shuffle(warp.index(), 7)) == [7] * 32
    assert warp.run(lambda: warp.ballot(warp.index() % 3 == 0)) == [sum(1 << lane for lane in range(0, 32, 3))] * 32
    monkeypatch.setattr(simt, "STEP_TIMEOUT_S", 0.5)
    warp = Threads(32)
    with pytest.raises(AssertionError, match="never reached"):
        warp.run(lambda: warp.shuffle_up(1, 1) if warp.index() % 2 else 0)
    warp = Threads(32)
    with pytest.raises(ZeroDivisionError):  # a lane's own error, the others let go
        warp.run(lambda: warp.shuffle_up(1 // (warp.index() - 5), 1))


@functools.lru_cache(maxsize=None)
def _gemm(groups, n, cluster_m=1, ragged="m", a_major="k", b_major="k", m=0, tile_order="m"):
    config = hgg.GemmConfig(cutlass.BFloat16, cutlass.BFloat16, groups, n, 0 if ragged == "k" else 128, 128,
                            cluster_m=cluster_m, ragged=ragged, a_major=a_major, b_major=b_major, m=m,
                            tile_order=tile_order)
    return hgg.HopperGroupedGemm(config)


def _run_schedule(gemm, offs, total, monkeypatch):
    """(tile_end, row_end, the trap's message or None) as the schedule warp leaves them for `offs`."""
    warp = Threads(32)
    install(monkeypatch, schedule)
    table = 32 * gemm.lane_groups
    tile_end, row_end = Shared(table), Shared(table + 1)
    try:
        warp.run(lambda: plain(schedule.Schedule.build_schedule)(gemm, Shared.of(offs), total, tile_end, row_end))
    except Trap as trap:
        return tile_end, row_end, str(trap)
    return tile_end, row_end, None


def _ends(offs, total):
    """Each group's (start, end) as the kernel reads `offs`."""
    spans, start, running = [], 0, 0
    for end in offs:
        running = max(running, end)
        spans.append((start, min(running, total)))
        start = spans[-1][1]
    return spans


def _reference_tiles(offs, total, rows_per_step, n_tiles, tile_order="m"):
    """(group, m_step, n_tile, rows, start, length) of every cluster tile, in order."""
    tiles = []
    for group, (start, end) in enumerate(_ends(offs, total)):
        length = end - start
        m_steps = -(-length // rows_per_step)
        full = length // rows_per_step
        blocks = [range(first, min(first + hgg.M_BLOCK_STEPS, m_steps)) for first in range(0, m_steps, hgg.M_BLOCK_STEPS)]
        steps = {"m": [(m, n) for n in range(n_tiles) for m in range(m_steps)],
                 "n": [(m, n) for m in range(m_steps) for n in range(n_tiles)],
                 "m_partial_last": [(m, n) for n in range(n_tiles) for m in range(full)]
                 + [(full, n) for n in range(n_tiles) if full < m_steps],
                 "m_blocks": [(m, n) for block in blocks for n in range(n_tiles) for m in block]}[tile_order]
        tiles += [(group, m_step, n_tile, length, start, length) for m_step, n_tile in steps]
    return tiles


def _located(gemm, tile_end, row_end, tiles, total):
    """`locate` of each tile in turn, the group carried from one to the next as a CTA does."""
    placed, group = [], 0
    for tile in range(tiles):
        placed.append(plain(schedule.Schedule.locate)(gemm, tile_end, row_end, tile, group, total))
        group = placed[-1][0]
    return placed


def _offs(draw, groups, total):
    """Group ends a router could write: cumulative sizes (many groups empty), or any ints."""
    if draw(st.booleans()):
        sizes = draw(st.lists(st.sampled_from([0, 0, 0, 1, 7, 8, 127, 128, 129, 256, 300]),
                              min_size=groups, max_size=groups))
        return [sum(sizes[:g + 1]) for g in range(groups)]
    return draw(st.lists(st.integers(-3, total + 300), min_size=groups, max_size=groups))


@st.composite
def _ragged_m_problems(draw):
    groups = draw(st.sampled_from([1, 2, 5, 31, 32, 33, 64, 100, 256]))
    total = draw(st.integers(0, 3000))
    n, cluster_m = draw(st.sampled_from([128, 352, 1024])), draw(st.sampled_from([1, 2]))
    return groups, n, cluster_m, _offs(draw, groups, total), total


@pytest.mark.parametrize("tile_order", ["m", "n", "m_partial_last", "m_blocks"])  # each with examples of its own
@settings(max_examples=60, **FIXTURE_OK)
@given(problem=_ragged_m_problems())
@example(problem=(2, 1024, 1, [300, 600], 600))  # full and partial M-steps by many N-tiles: the orders differ
@example(problem=(2, 352, 1, [2500, 2600], 2600))  # 20 M-steps, then 1: two blocks and a third of one
def test_schedule_on_a_simulated_warp_places_every_ragged_m_tile_once(tile_order, problem, monkeypatch):
    groups, n, cluster_m, offs, total = problem
    gemm = _gemm(groups, n, cluster_m, tile_order=tile_order)
    tile_end, row_end, trap = _run_schedule(gemm, offs, total, monkeypatch)
    ends = _ends(offs, total)
    expected = _reference_tiles(offs, total, gemm.tile_m * cluster_m, gemm.n_tiles, tile_order)
    last = ends[-1][1]
    assert row_end[0] == 0 and row_end[1:groups + 1] == [end for _, end in ends]
    assert set(row_end[groups + 1:]) <= {last}  # the table's entries past G add no rows ...
    counts = [sum(1 for tile in expected if tile[0] == g) for g in range(groups)]
    assert tile_end[:groups] == [sum(counts[:g + 1]) for g in range(groups)]
    assert set(tile_end[groups:]) <= {len(expected)}  # ... and no tiles
    assert _located(gemm, tile_end, row_end, tile_end[len(tile_end) - 1], total) == expected
    assert trap is None  # A K-major: groups start anywhere


@settings(max_examples=40, **FIXTURE_OK)
@given(data=st.data())
def test_schedule_on_a_simulated_warp_traps_at_an_m_major_group_starting_off_16_bytes(data, monkeypatch):
    groups = data.draw(st.sampled_from([1, 3, 33, 64]))
    total = data.draw(st.integers(0, 2000))
    offs = _offs(data.draw, groups, total)
    _, _, trap = _run_schedule(_gemm(groups, 352, a_major="m"), offs, total, monkeypatch)
    misaligned = [start for start, end in _ends(offs, total) if end > start and start % ALIGN]
    assert trap == (schedule.UNALIGNED_GROUP_MESSAGE if misaligned else None), misaligned


@pytest.mark.parametrize("majors", [("m", "n"), ("k", "n"), ("m", "k"), ("k", "k")])
@settings(max_examples=25, **FIXTURE_OK)
@given(data=st.data())
def test_grouped_reduction_schedule_on_a_simulated_warp_places_every_tile_once(majors, data, monkeypatch):
    """Ragged K: every (group, M-tile, N-tile) once, a pair's CTAs on consecutive M-tiles;
    each group's range of the reduction from the ends; with T contiguous in A (K-major) or
    B (K-major) a group with columns must end on 16 bytes."""
    a_major, b_major = majors
    groups = data.draw(st.sampled_from([1, 4, 33]))
    cluster_m = data.draw(st.sampled_from([1, 2]))
    total = data.draw(st.integers(0, 1500))
    offs = _offs(data.draw, groups, total)
    gemm = _gemm(groups, 352, cluster_m, ragged="k", a_major=a_major, b_major=b_major, m=512)
    tile_end, row_end, trap = _run_schedule(gemm, offs, total, monkeypatch)
    ends = _ends(offs, total)
    t_contiguous = "k" in (a_major, b_major)
    misaligned = [end for start, end in ends if end > start and end % ALIGN]
    assert trap == (schedule.UNALIGNED_REDUCTION_GROUP_MESSAGE if t_contiguous and misaligned else None), misaligned
    if trap:
        return  # (the kernel ends there)
    tiles = groups * gemm.m_tiles // cluster_m * gemm.n_tiles  # the kernel's count with ragged K
    covered = []
    for group, m_step, n_tile, rows, start, length in _located(gemm, tile_end, row_end, tiles, total):
        assert (rows, start, length) == (512, ends[group][0], ends[group][1] - ends[group][0])
        covered += [(group, m_step * cluster_m + rank, n_tile) for rank in range(cluster_m)]
    assert sorted(covered) == [(g, m, n) for g in range(groups) for m in range(gemm.m_tiles)
                               for n in range(gemm.n_tiles)]


@pytest.mark.parametrize("groups, m, n", [(3, 300, 128), (1, 128, 1024), (4, 640, 352)])
def test_batch_schedule_places_every_tile_once_n_tile_fastest_then_group_then_m_tile(groups, m, n, monkeypatch):
    """The batch (3D x 3D, no `offs`, M a runtime extent): `locate` of tile t, as a
    CTA's threads run it, for every tile of the launch: each (group, M-tile, N-tile)
    once, the N-tile fastest, then the group, then the M-tile, every group's whole M
    and K."""
    gemm = _gemm(groups, n, ragged="batch")
    install(monkeypatch, schedule)
    m_tiles = -(-m // gemm.tile_m)
    placed = [plain(schedule.Schedule.locate)(gemm, None, None, tile, 0, m)
              for tile in range(groups * m_tiles * gemm.n_tiles)]
    assert placed == [(group, m_tile, n_tile, m, 0, gemm.k) for m_tile in range(m_tiles)
                      for group in range(groups) for n_tile in range(gemm.n_tiles)]
