"""Trace-time validation of runtime-indexed descriptor lists (no GPU needed)."""
import pytest

import cutlass
import cutlass.cute as cute

from gcdsl import Diag, GcdslError
from tests.kernels import batch_copy, mismatch


def test_atom_mismatch_names_the_runtime_pick_the_entry_and_the_property():
    with pytest.raises(GcdslError) as info:
        cute.compile(mismatch.mixed_tiles, *mismatch.fake_sources())
    err = info.value
    assert err.diag is Diag.ATOM_TYPE_MISMATCH
    assert err.param == "loads"
    assert err.location.filename == batch_copy.__file__
    line = open(batch_copy.__file__).read().splitlines()[err.location.line - 1]
    assert "loads[k]" in line  # the first runtime pick, where one template must serve all
    text = str(err)
    assert "`loads[2]` and `loads[0]` differ in shared-memory layout" in text
    assert '"(32,64):(64,1)"' in text and '"(64,64):(64,1)"' in text  # both values shown


def test_empty_list_is_rejected():
    with pytest.raises(GcdslError) as info:
        cute.compile(mismatch.empty_list, *mismatch.fake_sources(1))
    assert info.value.diag is Diag.EMPTY_LIST and info.value.param == "loads"


def test_desugared_source_is_what_the_dsl_reads():
    import inspect

    kernel = batch_copy.runtime_indexed_kernel
    wrapped = kernel._cute_kernel
    func = getattr(wrapped, "__wrapped__", None) or getattr(wrapped, "func", None) or wrapped
    assert inspect.getsource(func).strip() in kernel.desugared_source
    assert "__gcdsl__.param_desc_ptr(loads, k)" in inspect.getsource(func)


def test_closures_and_computed_defaults_reach_the_desugared_kernel():
    from tests.kernels import closures

    fill, host = closures.make_fill(1.5)
    assert "def __gcdsl_bind__(value, __default_offset__):" in fill.desugared_source
    out = cute.runtime.make_fake_compact_tensor(cutlass.Float32, (32,))
    cute.compile(host, out)  # a lost closure or default would fail here with a NameError


@pytest.mark.parametrize("host, diag", [
    ("single_atom", Diag.NOT_A_LIST),
    ("tensors_for_atoms", Diag.NOT_A_TMA_ATOM),
])
def test_wrong_kinds_of_argument_for_a_descriptor_list(host, diag):
    with pytest.raises(GcdslError) as info:
        cute.compile(getattr(mismatch, host), *mismatch.fake_sources())
    assert info.value.diag is diag and info.value.param == "loads"
    assert info.value.location.filename == batch_copy.__file__


def test_constant_index_out_of_range_is_caught_at_trace_time_at_the_users_line():
    from tests.kernels import constant_index

    srcs, _ = mismatch.fake_sources(3)
    cute.compile(constant_index.prefetch, srcs, 2)  # in range: fine
    with pytest.raises(GcdslError) as info:
        cute.compile(constant_index.prefetch, srcs, 3)
    err = info.value
    assert err.diag is Diag.INDEX_OUT_OF_RANGE and "index 3 is out of range for a list of 3 atoms" in str(err)
    assert err.location.filename == constant_index.__file__
    assert "loads[which]" in open(constant_index.__file__).read().splitlines()[err.location.line - 1]


def test_global_tensor_passed_for_a_grid_constant_table():
    from tests.kernels import table_lookup

    fake = cute.runtime.make_fake_compact_tensor
    with pytest.raises(GcdslError) as info:
        cute.compile(table_lookup.gather_from_global, fake(cutlass.Int32, (10, 4), stride_order=(1, 0)),
                     fake(cutlass.Int32, (1, table_lookup.THREADS), stride_order=(1, 0)))
    assert info.value.diag is Diag.BAD_GRID_CONSTANT and info.value.param == "table"
    assert "gcdsl.grid_constant" in str(info.value)
