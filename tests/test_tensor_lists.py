"""Runtime-indexed List[cute.Tensor]: lowering in PTX, and static mismatches (no GPU needed)."""
import re

import pytest

from gcdsl import Diag, GcdslError, ptx


@pytest.fixture(scope="module")
def grouped(compile_cases):
    return ptx.single_entry(compile_cases("sm_90a", "gcdsl", ("grouped_n40",)).ptx("grouped_n40"))


def test_one_tma_per_call_site_and_extent_tables_in_param_space(grouped):
    from tests.test_lowering_ptx import _assert_runtime_descriptors

    _assert_runtime_descriptors(grouped, "cp.async.bulk.tensor", 1)
    sizes = [p.size for p in grouped.params]
    assert 40 * 2 * 8 in sizes   # coords: rows, cols per group
    assert 40 * 5 * 8 in sizes   # outs: address, rows, cols, two strides per group
    assert "ld.global" not in grouped.body  # extents and addresses come from parameter space
    assert re.search(r"ld\.param\.b64\s+%rd\d+,\s*\[%rd\d+(\+\d+)?\]", grouped.body)


def test_entries_differing_in_a_static_property_are_refused():
    import cutlass
    import cutlass.cute as cute

    import gcdsl
    from tests.kernels import grouped as gr

    fake = cute.runtime.make_fake_compact_tensor
    shapes, tasks = gr.make_problem(3)
    srcs = [fake(gr.DTYPE, s, stride_order=(1, 0), assumed_align=16) for s in shapes]
    outs = [fake(gr.DTYPE, s, stride_order=(1, 0), assumed_align=16) for s in shapes]
    outs[2] = fake(cutlass.Float16, shapes[2], stride_order=(1, 0), assumed_align=16)
    with pytest.raises(GcdslError) as info:
        cute.compile(gr.grouped, gcdsl.grid_constant(tasks), srcs, outs)
    err = info.value
    assert err.diag is Diag.TENSOR_LIST_MISMATCH and err.param == "outs"
    assert "`outs[2]` and `outs[0]` differ" in str(err) and "Float32" in str(err) and "Float16" in str(err)
    assert err.location.filename == gr.__file__
