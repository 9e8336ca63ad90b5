"""TensorMapTable's cache and the libcuda encoder's arguments, without a GPU.

The encoder is replaced by one that writes what a descriptor depends on (data
pointer, shape, strides, dtype) into the entry's 128 bytes, so a stale entry
shows as bytes that differ from what the tensor is now. Tensors are CPU tensors:
the cache only reads pointers, shapes, strides, dtypes and version counters.
"""
import ctypes
import struct
import types

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

torch = pytest.importorskip("torch")

from gcdsl import Diag, GcdslError  # noqa: E402
from gcdsl.lower import tensor_map_encoder, tensor_maps  # noqa: E402

BOX = (2, 4)


def fingerprint(t) -> bytes:
    """What the stand-in encoder writes for `t`: everything a descriptor depends on."""
    fields = [t.data_ptr(), t.dim(), *t.shape, *t.stride(), hash(str(t.dtype)) & 0xFFFF]
    return struct.pack(f"<{len(fields)}q", *fields).ljust(128, b"\0")


@pytest.fixture
def encoded(monkeypatch):
    """Replaces the driver: returns the list of tensors encoded, in order."""
    calls = []

    def fake_encode_into(address, t, box, swizzle):
        assert address % 64 == 0 and box == BOX
        ctypes.memmove(address, fingerprint(t), 128)
        calls.append(t)

    monkeypatch.setattr(tensor_map_encoder, "encode_into", fake_encode_into)
    return calls


def tensors(n, rows=8, cols=16):
    return [torch.zeros(rows, cols) for _ in range(n)]


def assert_current(table, ts):
    rows = table.numpy()
    for i, t in enumerate(ts):
        assert rows[i].tobytes() == fingerprint(t), f"entry {i} is stale"


def test_unchanged_tensors_are_not_re_encoded_and_the_table_is_the_same(encoded):
    maps = tensor_maps.TensorMapTable(BOX)
    ts = tensors(5)
    table = maps.encode(ts)
    assert len(encoded) == 5 and maps.encodes == 5
    for _ in range(3):
        assert maps.encode(ts) is table
        assert maps.encode(list(ts)) is table  # another list of the same tensors
    assert maps.encodes == 5
    assert_current(table, ts)


def test_one_tensor_swapped_in_the_same_list(encoded):
    maps = tensor_maps.TensorMapTable(BOX)
    ts = tensors(4)
    table = maps.encode(ts)
    ts[2] = torch.ones(8, 16)
    assert maps.encode(ts) is table
    assert encoded[4:] == [ts[2]]
    assert_current(table, ts)


def test_a_swapped_in_equal_tensor_is_not_re_encoded(encoded):
    """A new tensor object describing the same memory needs no new descriptor."""
    maps = tensor_maps.TensorMapTable(BOX)
    ts = tensors(3)
    maps.encode(ts)
    ts[1] = ts[1].view(8, 16)
    maps.encode(ts)
    assert maps.encodes == 3


MUTATIONS = {
    "set_ to new storage": lambda t: t.set_(torch.zeros(8, 16)),
    "set_ same storage, smaller": lambda t: t.set_(t.untyped_storage(), 0, (4, 16), (16, 1)),
    "set_ same storage, offset": lambda t: t.set_(t.untyped_storage(), 16, (4, 16), (16, 1)),
    "resize_ smaller": lambda t: t.resize_(4, 16),
    "resize_ larger": lambda t: t.resize_(64, 16),
    "t_": lambda t: t.t_(),
    "transpose_": lambda t: t.transpose_(0, 1),
    "as_strided_": lambda t: t.as_strided_((4, 4), (1, 4)),
    "unsqueeze_ then squeeze_ of another mode": lambda t: t.unsqueeze_(0).squeeze_(0).t_(),
    "storage resize_": lambda t: t.untyped_storage().resize_(4096),
    ".data = tensor elsewhere": lambda t: setattr(t, "data", torch.zeros(8, 16)),
}


@pytest.mark.parametrize("mutation", sorted(MUTATIONS))
def test_a_tensor_changed_in_place_is_re_encoded(encoded, mutation):
    maps = tensor_maps.TensorMapTable(BOX)
    ts = tensors(3)
    table = maps.encode(ts)
    before = ts[1].data_ptr(), tuple(ts[1].shape), ts[1].stride()
    MUTATIONS[mutation](ts[1])
    assert (ts[1].data_ptr(), tuple(ts[1].shape), ts[1].stride()) != before or mutation == "storage resize_"
    assert maps.encode(ts) is table
    assert_current(table, ts)
    assert maps.encodes == 3 + ((ts[1].data_ptr(), tuple(ts[1].shape), ts[1].stride()) != before)


def blocks(n, rows=8, cols=16):
    """Per-group slices of one tensor, as a grouped GEMM's weights or outputs are."""
    base = torch.zeros(n * rows, cols)
    return base, [base[i * rows:(i + 1) * rows] for i in range(n)]


BASE_MUTATIONS = {
    "storage resize_": lambda b: b.untyped_storage().resize_(b.untyped_storage().nbytes() * 4),
    "set_ to new storage": lambda b: b.set_(torch.zeros(b.shape)),
    "resize_ larger": lambda b: b.resize_(b.shape[0] * 4, b.shape[1]),
}


@pytest.mark.parametrize("mutation", sorted(MUTATIONS))
def test_a_view_changed_in_place_is_re_encoded(encoded, mutation):
    maps = tensor_maps.TensorMapTable(BOX)
    _, ts = blocks(3)
    table = maps.encode(ts)
    MUTATIONS[mutation](ts[1])
    if mutation.startswith(".data"):
        maps.invalidate()  # the one change without a version bump: documented
    assert maps.encode(ts) is table
    assert_current(table, ts)


@pytest.mark.parametrize("mutation", sorted(BASE_MUTATIONS))
def test_views_follow_their_base(encoded, mutation):
    maps = tensor_maps.TensorMapTable(BOX)
    base, ts = blocks(4)
    table = maps.encode(ts)
    BASE_MUTATIONS[mutation](base)
    assert maps.encode(ts) is table
    assert_current(table, ts)


def test_a_table_of_views_of_one_tensor_checks_one_counter_and_one_pointer(encoded, monkeypatch):
    """The check for unchanged inputs does not grow with the number of views."""
    reads = []
    monkeypatch.setattr(tensor_maps, "_version", lambda t: reads.append("version") or t._version)
    maps = tensor_maps.TensorMapTable(BOX)
    maps._data_ptr = lambda t: reads.append("pointer") or t.data_ptr()
    base, ts = blocks(64)
    maps.encode(ts)
    reads.clear()
    for _ in range(3):
        maps.encode(ts)
    assert reads == ["version", "pointer"] * 3 and maps.encodes == 64
    separate = tensors(5)
    maps.encode(ts[:3] + separate)  # three views and five tensors of their own: six roots
    reads.clear()
    maps.encode(ts[:3] + separate)
    assert sorted(reads) == ["pointer"] * 6 + ["version"] * 6


def test_the_same_tuple_again_skips_the_identity_test_of_every_entry(encoded, monkeypatch):
    compared = []
    same_entries = tensor_maps._same_entries
    monkeypatch.setattr(tensor_maps, "_same_entries", lambda ts, held: compared.append(len(ts)) or same_entries(ts, held))
    maps = tensor_maps.TensorMapTable(BOX)
    base, views = blocks(64)
    frozen = tuple(views)
    table = maps.encode(frozen)
    assert maps.encode(frozen) is table and compared == []
    assert maps.encode(views) is table and compared == [64]  # a list may have been changed in place
    views[3] = torch.zeros(8, 16)
    assert maps.encode(views) is table and compared == [64, 64] and maps.encodes == 65
    assert maps.encode(tuple(views)) is table and maps.encodes == 65
    frozen = tuple(views)
    maps.encode(frozen)
    base.untyped_storage().resize_(base.untyped_storage().nbytes() * 2)  # views 0-2, 4-63 move
    assert maps.encode(frozen) is table
    assert_current(table, frozen)


def test_an_empty_tuple_is_refused_even_the_second_time():
    maps = tensor_maps.TensorMapTable(BOX)
    for _ in range(2):
        with pytest.raises(GcdslError):
            maps.encode(())


def test_a_view_whose_base_was_given_other_storage_is_its_own_root(encoded):
    maps = tensor_maps.TensorMapTable(BOX)
    base, ts = blocks(2)
    base.data = torch.zeros(base.shape)  # the views keep the old storage
    table = maps.encode(ts)
    ts[0].untyped_storage().resize_(4096)  # moves the views, not the base
    assert maps.encode(ts) is table
    assert_current(table, ts)


def test_in_place_writes_bump_the_version_but_encode_nothing(encoded):
    maps = tensor_maps.TensorMapTable(BOX)
    ts = tensors(3)
    maps.encode(ts)
    ts[0].fill_(3.0)
    ts[2].add_(1.0)
    maps.encode(ts)
    assert maps.encodes == 3
    assert maps.encode(ts) is not None and maps.encodes == 3


def test_data_assignment_keeping_the_pointer_needs_invalidate(encoded):
    maps = tensor_maps.TensorMapTable(BOX)
    ts = tensors(2)
    table = maps.encode(ts)
    ts[0].data = ts[0].data[:4]  # same pointer, another shape, no version bump
    maps.invalidate()
    assert maps.encode(ts) is table and maps.encodes == 3
    assert_current(table, ts)


def test_invalidate_lets_the_tensors_go(encoded):
    """A caller that tracks changes itself (gcdsl.ops) must not keep the last output alive:
    its memory would not return to the allocator, and every new output would move."""
    import gc
    import weakref

    maps = tensor_maps.TensorMapTable(BOX)
    for make in (lambda: tensors(3), lambda: blocks(3)[1]):
        ts = make()
        maps.encode(ts)
        watched = [weakref.ref(t) for t in ts] + [weakref.ref(t._base) for t in ts if t._base is not None]
        maps.invalidate()
        del ts
        encoded.clear()  # the stand-in encoder's record of what it encoded
        gc.collect()
        assert all(w() is None for w in watched)


def test_inference_tensors_are_checked_exactly(encoded):
    maps = tensor_maps.TensorMapTable(BOX)
    with torch.inference_mode():
        ts = tensors(3)
    table = maps.encode(ts)
    assert maps.encode(ts) is table and maps.encodes == 3
    with torch.inference_mode():
        ts[1] = torch.ones(4, 16)
    assert maps.encode(ts) is table and maps.encodes == 4
    assert_current(table, ts)


def test_a_new_count_makes_a_new_table(encoded):
    maps = tensor_maps.TensorMapTable(BOX)
    ts = tensors(3)
    first = maps.encode(ts)
    second = maps.encode(ts[:2])
    assert second is not first and second.shape == (2, 128) and maps.encodes == 5
    assert_current(second, ts[:2])


def test_a_failed_encode_leaves_no_fast_path_to_a_half_updated_table(encoded):
    maps = tensor_maps.TensorMapTable(BOX)
    ts = tensors(3)
    table = maps.encode(ts)
    changed = [torch.ones(8, 16), torch.ones(8, 16), torch.zeros(8, 16, dtype=torch.float64)]
    with pytest.raises(GcdslError) as info:
        maps.encode(changed)
    assert info.value.diag is Diag.BAD_GRID_CONSTANT and "tensor 2 is torch.float64" in str(info.value)
    assert maps.encode(ts) is table  # entries 0 and 1 were overwritten: they must be encoded again
    assert_current(table, ts)


def test_empty_list_and_unknown_dtype_are_refused():
    maps = tensor_maps.TensorMapTable(BOX)
    with pytest.raises(GcdslError) as info:
        maps.encode([])
    assert info.value.diag is Diag.EMPTY_LIST
    with pytest.raises(GcdslError, match="no TMA element type"):
        maps.encode([torch.zeros(8, 16, dtype=torch.complex64)])
    with pytest.raises(GcdslError, match="takes torch tensors"):
        maps.encode([object()])


OPS = st.lists(st.tuples(st.sampled_from(["keep", "swap", "set_", "resize_", "t_", "fill_", "reorder"]),
                         st.integers(0, 5)), min_size=1, max_size=12)


@settings(max_examples=60, deadline=None)
@given(ops=OPS)
def test_random_mutation_sequences_never_leave_a_stale_entry(ops):
    calls = []

    def fake_encode_into(address, t, box, swizzle):
        ctypes.memmove(address, fingerprint(t), 128)
        calls.append(t)

    original = tensor_map_encoder.encode_into
    tensor_map_encoder.encode_into = fake_encode_into
    try:
        maps = tensor_maps.TensorMapTable(BOX)
        ts = tensors(3) + blocks(3)[1]  # separate tensors and views of one tensor
        table = maps.encode(ts)
        for op, i in ops:
            if op == "swap":
                ts[i] = torch.zeros(8, 16)
            elif op == "set_":
                ts[i].set_(torch.zeros(4, 8))
            elif op == "resize_":
                ts[i].resize_(2 + i, 16)
            elif op == "t_":
                ts[i].t_()
            elif op == "fill_":
                ts[i].fill_(i)
            elif op == "reorder":
                ts.insert(0, ts.pop(i))
            assert maps.encode(ts) is table
            assert_current(table, ts)
    finally:
        tensor_map_encoder.encode_into = original


class FakeCudaTensor:
    """What the encoder reads of a torch CUDA tensor."""

    device = types.SimpleNamespace(type="cuda")

    def __init__(self, shape, stride, dtype="torch.float16", esize=2, ptr=0x7F0000001000):
        self.shape, self._stride, self.dtype, self._esize, self._ptr = shape, stride, dtype, esize, ptr

    def stride(self):
        return self._stride

    def element_size(self):
        return self._esize

    def data_ptr(self):
        return self._ptr

    def dim(self):
        return len(self.shape)


def test_encoder_passes_dims_innermost_first_and_byte_strides():
    from cuda.bindings import driver

    seen = {}

    def driver_stand_in(out, dtype, rank, ptr, dims, strides, box, elem_strides, interleave, swizzle, l2, oob):
        seen.update(out=out, dtype=dtype, rank=rank, ptr=ptr, dims=list(dims[:rank]), strides=list(strides[:rank - 1]),
                    box=list(box[:rank]), elem=list(elem_strides[:rank]), swizzle=swizzle)
        return 0

    enc = tensor_map_encoder.TiledEncoder(driver_stand_in)
    t = FakeCudaTensor((3, 100, 72), (100 * 80, 80, 1))  # padded rows: row stride 80 elements
    enc.encode_into(4096, t, (1, 64, 32), "128B")
    assert seen == dict(out=4096, dtype=int(driver.CUtensorMapDataType.CU_TENSOR_MAP_DATA_TYPE_FLOAT16), rank=3,
                        ptr=0x7F0000001000, dims=[72, 100, 3], strides=[160, 16000], box=[32, 64, 1], elem=[1, 1, 1],
                        swizzle=int(driver.CUtensorMapSwizzle.CU_TENSOR_MAP_SWIZZLE_128B))


def test_encoder_reports_the_driver_error_and_refuses_host_tensors():
    enc = tensor_map_encoder.TiledEncoder(lambda *args: 1)  # CUDA_ERROR_INVALID_VALUE
    with pytest.raises(GcdslError, match="CUDA_ERROR_INVALID_VALUE"):
        enc.encode_into(0, FakeCudaTensor((64, 64), (64, 1)), (64, 64), "none")
    with pytest.raises(GcdslError, match="GPU memory"):
        enc.encode_into(0, torch.zeros(64, 64), (64, 64), "none")
    with pytest.raises(GcdslError, match="rank"):
        enc.encode_into(0, FakeCudaTensor((64, 64), (64, 1)), (64,), "none")
    with pytest.raises(GcdslError, match="innermost"):  # a transposed tensor: TMA cannot stride its first dim
        enc.encode_into(0, FakeCudaTensor((64, 64), (1, 64)), (64, 64), "none")


def test_table_bytes_are_where_the_encoder_writes():
    import cutlass

    table = tensor_maps.TensorMapTable(BOX).placeholder(3, cutlass.Float32)
    assert table.address % 128 == 0
    ctypes.memmove(table.address + 128, b"\x07" * 128, 128)
    assert np.all(table.numpy()[1] == 7) and not table.numpy()[0].any()
