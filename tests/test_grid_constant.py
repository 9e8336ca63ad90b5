"""Grid-constant tensors: host tables, the lowering in PTX and SASS (no GPU needed)."""
import re

import numpy as np
import pytest

from gcdsl import Diag, GcdslError, ptx


def test_table_from_numpy_sequence_and_torch():
    import cutlass
    import torch

    import gcdsl

    assert gcdsl.grid_constant(np.arange(6, dtype=np.int16).reshape(2, 3)).dtype is cutlass.Int16
    seq = gcdsl.grid_constant([[1, 2], [3, 4]], dtype=cutlass.Int32)
    assert seq.shape == (2, 2) and seq.numpy().tolist() == [[1, 2], [3, 4]]
    t = gcdsl.grid_constant(torch.arange(5, dtype=torch.float32))
    assert t.dtype is cutlass.Float32 and t.numpy().tolist() == [0.0, 1.0, 2.0, 3.0, 4.0]


def test_update_keeps_the_spec_and_rejects_a_new_shape():
    import gcdsl

    table = gcdsl.grid_constant(np.zeros((4, 2), dtype=np.int32))
    before = repr(table)
    table.update(np.ones((4, 2), dtype=np.int64))  # converted to the table's dtype
    assert table.numpy().sum() == 8 and repr(table) == before  # contents never show in the repr
    with pytest.raises(GcdslError) as info:
        table.update(np.ones((2, 4)))
    assert info.value.diag is Diag.BAD_GRID_CONSTANT and "(2, 4)" in str(info.value)


def test_device_tensor_is_refused_with_the_reason():
    import torch

    import gcdsl

    with pytest.raises(GcdslError) as info:
        gcdsl.grid_constant(torch.empty(4, device="meta"))
    assert info.value.diag is Diag.GRID_CONSTANT_ON_DEVICE
    assert "device-to-host copy" in str(info.value)


def test_host_bytes_are_aligned_as_the_parameter():
    import gcdsl

    import ctypes

    for align in (16, 64, 128):
        table = gcdsl.grid_constant(np.arange(33, dtype=np.uint8), align=align)
        assert table.address % align == 0
        # the compiled host function takes the table's address: a launch passes a pointer to it
        (pointer,) = table.__c_pointers__()
        assert ctypes.c_void_p.from_address(pointer.value).value == table.address
        assert table.__tvm_ffi_opaque_ptr__() == pointer.value


@pytest.fixture(scope="module")
def gather(compile_cases):
    return compile_cases("sm_90a", "gcdsl", ("table_gather",))


def test_table_is_one_param_array_of_full_size(gather):
    entry = ptx.single_entry(gather.ptx("table_gather"))
    table, out = entry.params
    assert table.size == 10 * 4 * 4 and table.align == 16
    assert out.size == 8  # the output tensor's pointer; nothing else stands in for the table
    assert "ld.global" not in entry.body
    # reads go through parameter space: a param load with a register address
    assert re.search(r"ld\.param\.b32\s+%r\d+,\s*\[%rd\d+\]", entry.body)


def test_runtime_indexed_read_is_one_constant_bank_load(gather):
    sass = gather.sass("table_gather")
    assert re.search(r"\bLDC\s+R\d+,\s*c\[0x0\]\[R\d+\+0x[0-9a-f]+\]", sass), "no register-indexed LDC"
    assert not re.search(r"\b(LDG|LDL|SEL)\b", sass)  # no global read, no local copy, no select chain


def test_descriptor_table_feeds_tma_from_parameter_space(compile_cases):
    from tests.test_lowering_ptx import _assert_runtime_descriptors

    entry = ptx.single_entry(compile_cases("sm_90a", "gcdsl", ("descriptor_table",)).ptx("descriptor_table"))
    table = entry.params[0]
    assert table.size == 5 * 128 and table.align == 128
    _assert_runtime_descriptors(entry, "cp.async.bulk.tensor", 1)


def _table_load_error(table) -> GcdslError:
    """The error of compiling tests/kernels/desc_table.py's `table_load` with `table`."""
    import cutlass
    import cutlass.cute as cute

    from tests.kernels import desc_table as dt

    fake = cute.runtime.make_fake_compact_tensor
    args = (
        fake(cutlass.Float32, (256, 96), stride_order=(1, 0), assumed_align=16),
        fake(cutlass.Int32, (5,), assumed_align=4),
        fake(cutlass.Float32, (60, 64, 32), stride_order=(2, 1, 0), assumed_align=16),
    )
    with pytest.raises(GcdslError) as info:
        cute.compile(dt.table_load, table, *args)
    return info.value


def test_template_checked_against_table_at_the_users_line():
    import cutlass

    import gcdsl
    from tests.kernels import desc_table as dt

    err = _table_load_error(gcdsl.TensorMapTable(box=(32, 32)).placeholder(5, cutlass.Float32))
    assert err.diag is Diag.ATOM_TYPE_MISMATCH
    assert "box: template (64, 32), table (32, 32)" in str(err)
    assert err.location.filename == dt.__file__
    assert "cute.copy(template" in open(dt.__file__).read().splitlines()[err.location.line - 1]


def test_cute_size_of_a_table_in_the_host_function():
    """`cute.size(table)` and `cute.size(table, mode=[i])` in a `@cute.jit` host function
    (a grid size from a task table): the table's static shape; a mode past its rank is a
    gcdsl error at the user's line."""
    import cutlass.cute as cute

    import gcdsl

    seen = {}

    @cute.jit
    def host(tasks: gcdsl.GridConstantTensor):
        seen["sizes"] = (cute.size(tasks), cute.size(tasks, mode=[0]), cute.size[1](tasks), tasks.shape)
        seen["layout"] = cute.size(cute.make_layout((4, 8)), mode=[1])  # still the DSL's own

    @cute.jit
    def past_the_rank(tasks: gcdsl.GridConstantTensor):
        cute.size(tasks, mode=[2])

    tasks = gcdsl.grid_constant(np.arange(12, dtype=np.int32).reshape(6, 2))
    cute.compile(host, tasks)
    assert seen["sizes"] == (12, 6, 2, (6, 2))
    with pytest.raises(GcdslError) as info:
        cute.compile(past_the_rank, tasks)
    assert info.value.diag is Diag.BAD_GRID_CONSTANT and "mode=[2]" in str(info.value)
    assert info.value.location.filename == __file__
    assert "cute.size(tasks, mode=[2])" in open(__file__).read().splitlines()[info.value.location.line - 1]
    assert seen["layout"] == 8


def test_parameter_budget_just_under_compiles():
    import cutlass.cute as cute

    from tests.kernels import budget, table_lookup

    cute.compile(table_lookup.gather, *budget.args_for(budget.JUST_UNDER))


def test_parameter_budget_just_over_fails_before_compiling_with_the_listing():
    import cutlass.cute as cute

    from tests.kernels import budget, table_lookup

    with pytest.raises(GcdslError) as info:
        cute.compile(table_lookup.gather, *budget.args_for(budget.JUST_OVER))
    text = str(info.value)
    assert info.value.diag is Diag.PARAM_BUDGET
    assert "32776 bytes" in text and "32764" in text
    assert re.search(r"table\s+32768 B", text) and re.search(r"out\s+8 B", text)
    assert info.value.location.filename == table_lookup.__file__


def test_the_spec_fingerprint_sits_just_before_the_table():
    """What a compiled call compares before it launches (tests/test_gpu.py refuses a mismatch)."""
    import ctypes

    import cutlass
    import numpy as np

    import gcdsl
    from gcdsl.lower import _dsl
    from gcdsl.lower.grid_constant import spec_fingerprint

    a = gcdsl.grid_constant(np.zeros((12, 4), dtype=np.int32))
    b = gcdsl.grid_constant(np.ones((10, 4), dtype=np.int32))
    c = gcdsl.grid_constant(np.ones((12, 4), dtype=np.int32))
    stored = [ctypes.c_uint64.from_address(t.address - _dsl.FINGERPRINT_OFFSET).value for t in (a, b, c)]
    assert stored == [spec_fingerprint(t.spec) for t in (a, b, c)]
    assert stored[0] != stored[1] and stored[0] == stored[2]  # same spec, same fingerprint
    maps = gcdsl.TensorMapTable(box=(64, 32))
    assert spec_fingerprint(maps.placeholder(5, cutlass.Float32).spec) != \
        spec_fingerprint(gcdsl.TensorMapTable(box=(32, 32)).placeholder(5, cutlass.Float32).spec)


@pytest.mark.parametrize("spelling", ["cutlass", "torch", "numpy type", "numpy dtype", "string"])
def test_table_dtype_in_every_usual_spelling(spelling):
    import cutlass
    import torch

    import gcdsl

    dtype = {"cutlass": cutlass.Int32, "torch": torch.int32, "numpy type": np.int32,
             "numpy dtype": np.dtype("int32"), "string": "int32"}[spelling]
    table = gcdsl.grid_constant([[1, 2], [3, 4]], dtype=dtype)
    assert table.dtype is cutlass.Int32 and table.numpy().dtype == np.int32


def test_table_dtype_errors_say_what_to_pass():
    import torch

    import gcdsl

    with pytest.raises(GcdslError) as info:
        gcdsl.grid_constant([1, 2], dtype=torch.bfloat16)
    assert info.value.diag is Diag.BAD_GRID_CONSTANT and info.value.param == "dtype"
    assert "torch.int32" in info.value.hint and "'int32'" in info.value.hint
    with pytest.raises(GcdslError) as info:
        gcdsl.grid_constant([[1, 2], [3]])  # ragged rows
    assert "same length" in info.value.hint


@pytest.mark.parametrize("swizzle", ["128B", "64B"])
def test_template_swizzle_checked_against_table_when_the_kernel_is_called(swizzle):
    """An atom's type leaves the swizzle out, so the trace cannot compare it: the host does,
    for every `tma_desc_ptr(table, i, template=atom)` whose names are kernel parameters."""
    import cutlass

    import gcdsl
    from tests.kernels import desc_table as dt

    err = _table_load_error(gcdsl.TensorMapTable(box=(64, 32), swizzle=swizzle).placeholder(5, cutlass.Float32))
    assert err.diag is Diag.ATOM_TYPE_MISMATCH and err.param == "descs"
    assert f"swizzle none, but the descriptors of `descs` were encoded with swizzle {swizzle}" in str(err)
    assert "swizzle='none'" in err.hint
    line = open(dt.__file__).read().splitlines()[err.location.line - 1]
    assert line[err.location.col:].startswith("gcdsl.tma_desc_ptr(descs, k, template=template)")


def test_swizzle_of_a_printed_layout():
    from gcdsl.lower import _dsl

    assert _dsl.swizzle_of_layout('!cute.composed_layout<"S<3,4,3> o 0 o (64,64):(64,1)">') == "128B"
    assert _dsl.swizzle_of_layout('!cute.composed_layout<"S<2,4,3> o 0 o (8,32):(32,1)">') == "64B"
    assert _dsl.swizzle_of_layout('!cute.composed_layout<"S<1,4,3> o 0 o (8,16):(16,1)">') == "32B"
    assert _dsl.swizzle_of_layout('!cute.layout<"(64,64):(64,1)">') == "none"
