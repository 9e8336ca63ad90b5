"""GPU tier: runtime-indexed descriptors on real hardware (Hopper). Skipped without a GPU.

Outputs are poisoned (NaN) before every launch and compared bit-exactly.
"""
import pytest

torch = pytest.importorskip("torch")

pytestmark = pytest.mark.gpu

SIZES = (1, 3, 16, 64)
SHAPE = (256, 128)  # 4 x 2 tiles of 64 x 64 per tensor


def _launch(fn, n, pick):
    import cutlass.cute as cute
    from cutlass.cute.runtime import from_dlpack

    srcs = [torch.randn(SHAPE, device="cuda") for _ in range(n)]
    dsts = [torch.full(SHAPE, float("nan"), device="cuda") for _ in range(n)]
    wrap = lambda ts: [from_dlpack(t, assumed_align=16) for t in ts]  # noqa: E731
    args = (wrap(srcs), wrap(dsts), from_dlpack(pick.cuda(), assumed_align=4))
    cute.compile(fn, *args)(*args)
    torch.cuda.synchronize()
    return srcs, dsts


@pytest.mark.parametrize("n", SIZES)
@pytest.mark.parametrize("order", ["tile_mod_n", "random_permutation"])
def test_runtime_indexed_loads_and_stores_bit_exact(n, order):
    from tests.kernels import batch_copy as bc

    pick = torch.arange(n, dtype=torch.int32)
    if order == "random_permutation":
        pick = torch.randperm(n, dtype=torch.int32)
    srcs, dsts = _launch(bc.batch_copy, n, pick)
    bad = [i for i in range(n) if not torch.equal(srcs[i], dsts[i])]
    assert not bad, f"tensors {bad} differ (pick={pick.tolist()})"


def test_constant_chain_baseline_bit_exact():
    from tests.kernels import batch_copy as bc

    pick = torch.randperm(3, dtype=torch.int32)
    srcs, dsts = _launch(bc.batch_copy_constant_chain, 3, pick)
    assert all(torch.equal(s, d) for s, d in zip(srcs, dsts))


def test_wgmma_gemm_under_the_active_decorator():
    from tests.kernels import wgmma_gemm

    assert wgmma_gemm.run_on_gpu()


def test_runtime_indexed_tma_reduce_add():
    import cutlass.cute as cute
    from cutlass.cute.runtime import from_dlpack

    from tests.kernels import batch_copy as bc

    n = 16
    srcs = [torch.randn(SHAPE, device="cuda") for _ in range(n)]
    bases = [torch.randn(SHAPE, device="cuda") for _ in range(n)]
    dsts = [b.clone() for b in bases]
    wrap = lambda ts: [from_dlpack(t, assumed_align=16) for t in ts]  # noqa: E731
    args = (wrap(srcs), wrap(dsts), from_dlpack(torch.randperm(n, dtype=torch.int32).cuda(), assumed_align=4))
    cute.compile(bc.batch_add, *args)(*args)
    torch.cuda.synchronize()
    bad = [i for i in range(n) if not torch.equal(dsts[i], bases[i] + srcs[i])]
    assert not bad, f"tensors {bad} differ"


def _poisoned_out(blocks, threads):
    return torch.full((blocks, threads), -(2**31), dtype=torch.int32, device="cuda")


def test_grid_constant_table_read_with_runtime_indices():
    import numpy as np
    from cutlass.cute.runtime import from_dlpack

    import gcdsl
    from tests.kernels import table_lookup as tl

    data = np.random.default_rng(0).integers(-1000, 1000, size=(10, 4), dtype=np.int32)
    out = _poisoned_out(16, tl.THREADS)
    tl.gather(gcdsl.grid_constant(data), from_dlpack(out, assumed_align=4))
    torch.cuda.synchronize()
    assert np.array_equal(out.cpu().numpy(), tl.reference(data, 16))


def test_grid_constant_contents_change_without_recompiling():
    import cutlass.cute as cute
    import numpy as np
    from cutlass.cute.runtime import from_dlpack

    import gcdsl
    from tests.kernels import table_lookup as tl

    from gcdsl.lower._dsl import compiled_function_count

    rng = np.random.default_rng(1)
    table = gcdsl.grid_constant(np.zeros((12, 4), dtype=np.int32))
    out = _poisoned_out(8, tl.THREADS)
    compiled_before = compiled_function_count()
    for launch in range(4):
        data = rng.integers(0, 1 << 20, size=(12, 4), dtype=np.int32)
        if launch % 2:
            table.update(data)                     # same table object, new contents
            arg = table
        else:
            arg = gcdsl.grid_constant(data)        # a new table of the same spec
        out.fill_(-(2**31))
        tl.gather(arg, from_dlpack(out, assumed_align=4))
        torch.cuda.synchronize()
        assert np.array_equal(out.cpu().numpy(), tl.reference(data, 8)), f"launch {launch}"
    assert compiled_function_count() - compiled_before == 1, "new contents recompiled the kernel"

    # The explicit path: one compile, then launches with new tables.
    compiled = cute.compile(tl.gather, table, from_dlpack(out, assumed_align=4))
    for launch in range(3):
        data = rng.integers(0, 1 << 20, size=(12, 4), dtype=np.int32)
        out.fill_(-(2**31))
        compiled(gcdsl.grid_constant(data), from_dlpack(out, assumed_align=4))
        torch.cuda.synchronize()
        assert np.array_equal(out.cpu().numpy(), tl.reference(data, 8)), f"compiled launch {launch}"


def test_grid_constant_from_cuda_tensor_is_refused():
    import gcdsl
    from gcdsl import Diag, GcdslError

    with pytest.raises(GcdslError) as info:
        gcdsl.grid_constant(torch.arange(4, device="cuda"))
    assert info.value.diag is Diag.GRID_CONSTANT_ON_DEVICE


def test_a_host_encoded_descriptor_is_the_dsls_own_but_for_four_known_bits():
    """A `TensorMapTable` entry (the driver's `cuTensorMapEncodeTiled`, with CUTLASS's L2
    promotion of 128 bytes) and the descriptor the DSL's host code encodes for its own
    atom of the same tensor, box and swizzle: the same L2 promotion, and the same 128
    bytes but for `DSL_ONLY_BITS` and `DRIVER_ONLY_BITS`, whose meaning is not documented
    (first seen with nvidia-cutlass-dsl 4.8.1 and driver 580 on an H100)."""
    import ctypes

    import gcdsl
    from tests.kernels import descriptor_bytes as db

    t = torch.randn(512, 256, device="cuda").to(torch.bfloat16)
    ours = ctypes.string_at(gcdsl.TensorMapTable(box=db.BOX, swizzle=db.SWIZZLE).encode([t]).address, 128)
    theirs = db.dsl_descriptor(t)
    byte, mask = db.L2_PROMOTION
    assert ours[byte] & mask == theirs[byte] & mask == db.L2_PROMOTION_128B, (ours.hex(), theirs.hex())
    differing = {i: ours[i] ^ theirs[i] for i in range(128) if ours[i] != theirs[i]}
    assert all(theirs[i] & bits == bits and not ours[i] & bits for i, bits in db.DSL_ONLY_BITS.items())
    assert all(ours[i] & bits == bits and not theirs[i] & bits for i, bits in db.DRIVER_ONLY_BITS.items())
    assert differing == {**db.DSL_ONLY_BITS, **db.DRIVER_ONLY_BITS}, \
        f"the driver's {ours.hex()}, the DSL's {theirs.hex()}"


def test_host_encoded_descriptor_table_bit_exact_and_cached():
    import cutlass.cute as cute
    from cutlass.cute.runtime import from_dlpack

    import gcdsl
    from tests.kernels import desc_table as dt

    n, shape = 5, (256, 96)
    tiles = (shape[0] // dt.TILE[0]) * (shape[1] // dt.TILE[1])
    srcs = [torch.randn(shape, device="cuda") for _ in range(n)]
    pick = torch.randperm(n, dtype=torch.int32).cuda()
    out = torch.full((n * tiles, *dt.TILE), float("nan"), device="cuda")
    maps = gcdsl.TensorMapTable(box=dt.TILE)
    descs = maps.encode(srcs)
    args = (descs, from_dlpack(srcs[0], assumed_align=16), from_dlpack(pick, assumed_align=4),
            from_dlpack(out, assumed_align=16))
    compiled = cute.compile(dt.table_load, *args)

    def check(sources):
        out.fill_(float("nan"))
        compiled(*args)
        torch.cuda.synchronize()
        for b in range(n * tiles):
            k, t = pick[b % n].item(), b // n
            rows = shape[0] // dt.TILE[0]  # cute orders the tile index column-major
            r0, c0 = (t % rows) * dt.TILE[0], (t // rows) * dt.TILE[1]
            assert torch.equal(out[b], sources[k][r0:r0 + dt.TILE[0], c0:c0 + dt.TILE[1]]), f"block {b}"

    check(srcs)
    assert maps.encodes == n
    assert maps.encode(srcs) is descs and maps.encodes == n  # unchanged tensors: nothing re-encoded
    srcs[2] = torch.randn(shape, device="cuda")              # a new tensor in slot 2
    assert maps.encode(srcs) is descs and maps.encodes == n + 1
    check(srcs)                                               # same compiled kernel, new descriptor


@pytest.mark.parametrize("indices, traps", [([0, 3, 1, 2], False), ([0, 3, 7, 1], True), ([-1], True)])
def test_bounds_check_traps_with_a_message(indices, traps):
    import os
    import subprocess
    import sys

    root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    proc = subprocess.run([sys.executable, "-m", "tests.kernels.bounds_trap", *map(str, indices)],
                          cwd=root, capture_output=True, text=True, timeout=300)
    text = proc.stdout + proc.stderr
    if not traps:
        assert proc.returncode == 0 and f"completed: {indices}" in text, text[-3000:]
        return
    bad = next(i for i in indices if not 0 <= i < 4)
    assert proc.returncode != 0, text[-3000:]
    assert f"gcdsl: index {bad} out of range [0, 4) for `loads` in kernel `checked_kernel` at batch_copy.py:" in text, text[-3000:]


def test_runtime_indexed_multicast_load():
    from cutlass.cute.runtime import from_dlpack

    from tests.kernels import multicast as mc

    gen = torch.Generator().manual_seed(11)
    srcs = [torch.randn(256, 128, generator=gen).cuda() for _ in range(4)]
    pick = torch.randint(0, 4, (8,), dtype=torch.int32, generator=gen)
    out = torch.full((16, *mc.TILE), float("nan"), device="cuda")
    mc.multicast([from_dlpack(s, assumed_align=16) for s in srcs], from_dlpack(pick.cuda(), assumed_align=4),
                 from_dlpack(out, assumed_align=16))
    torch.cuda.synchronize()
    for b in range(16):
        tile, k = b // mc.CLUSTER, pick[b // mc.CLUSTER].item()
        r0, c0 = (tile % 4) * mc.TILE[0], (tile // 4) * mc.TILE[1]   # column-major tile order
        want = srcs[k][r0:r0 + mc.TILE[0], c0:c0 + mc.TILE[1]]
        assert torch.equal(out[b], want), f"CTA {b} (tile {tile}, source {k})"


def test_loads_and_stores_picked_by_different_runtime_indices():
    """A lowering that used one list's entry for the other, or the same index for both,
    writes the wrong tiles here."""
    import cutlass.cute as cute
    from cutlass.cute.runtime import from_dlpack

    from tests.kernels import batch_copy as bc

    n = 16
    gen = torch.Generator().manual_seed(5)
    load_pick = torch.randperm(n, dtype=torch.int32, generator=gen)
    store_pick = torch.randperm(n, dtype=torch.int32, generator=gen)
    assert not torch.equal(load_pick, store_pick)
    srcs = [torch.randn(SHAPE, generator=gen).cuda() for _ in range(n)]
    dsts = [torch.full(SHAPE, float("nan"), device="cuda") for _ in range(n)]
    wrap = lambda ts: [from_dlpack(t, assumed_align=16) for t in ts]  # noqa: E731
    args = (wrap(srcs), wrap(dsts), from_dlpack(load_pick.cuda(), assumed_align=4),
            from_dlpack(store_pick.cuda(), assumed_align=4))
    cute.compile(bc.crossed_copy, *args)(*args)
    torch.cuda.synchronize()
    bad = [i for i in range(n) if not torch.equal(dsts[store_pick[i]], srcs[load_pick[i]])]
    assert not bad, f"slots {bad} differ"


def test_grouped_copy_of_40_ragged_tensors():
    import gcdsl
    from cutlass.cute.runtime import from_dlpack

    from tests.kernels import grouped as gr

    shapes, tasks = gr.make_problem(40, seed=3)
    assert sum(r % gr.TILE[0] != 0 or c % gr.TILE[1] != 0 for r, c in shapes) >= 10
    srcs = [torch.randn(s, device="cuda") for s in shapes]
    outs = [torch.full(s, float("nan"), device="cuda") for s in shapes]
    wrap = lambda ts: [from_dlpack(t, assumed_align=16) for t in ts]  # noqa: E731
    gr.grouped(gcdsl.grid_constant(tasks), wrap(srcs), wrap(outs))
    torch.cuda.synchronize()
    bad = [g for g in range(40) if not torch.equal(srcs[g], outs[g])]
    assert not bad, f"groups {bad} differ (shapes {[shapes[g] for g in bad]})"


def test_a_table_of_another_shape_is_refused_when_the_compiled_function_is_called(capfd):
    import cutlass.cute as cute
    import numpy as np
    from cutlass.cute.runtime import from_dlpack

    import gcdsl
    from tests.kernels import table_lookup as tl

    out = _poisoned_out(8, tl.THREADS)
    compiled = cute.compile(tl.gather, gcdsl.grid_constant(np.zeros((12, 4), dtype=np.int32)),
                            from_dlpack(out, assumed_align=4))
    with pytest.raises(Exception) as info:
        compiled(gcdsl.grid_constant(np.zeros((10, 4), dtype=np.int32)), from_dlpack(out, assumed_align=4))
        torch.cuda.synchronize()
    printed = capfd.readouterr().out
    assert "gcdsl: a grid-constant table passed to this compiled function is not the GridConstant_Int32_12x4" in printed
    assert "cudaErrorNotSupported" in str(info.value), str(info.value)
    assert torch.all(out == -(2**31)), "the kernel ran with the wrong table"
