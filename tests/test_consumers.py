"""The consumer warpgroups' code that needs no tensor cores, run on simulated threads
(`tests/simt.py`) without a GPU: in the grouped reduction with T contiguous, the zeros
written over the columns of a stage that come before the group."""
import types

import numpy as np
import pytest

from tests.simt import Pointer, Tensor, Threads, install, make_layout, plain

cutlass = pytest.importorskip("cutlass")

from gcdsl.ops import hopper_grouped_gemm as hgg  # noqa: E402
from gcdsl.ops.hopper_grouped_gemm import consumers  # noqa: E402
from gcdsl.ops.hopper_grouped_gemm.config import ZERO_FILL_BARRIER  # noqa: E402


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
