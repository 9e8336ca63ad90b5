"""Safety nets: every error a user can cause names their file and line (no GPU needed)."""
import os
import re
from typing import List

import pytest

import cutlass
import cutlass.cute as cute

from gcdsl import Diag, GcdslError
from tests.kernels import batch_copy, mismatch, safety


def _line(module, err) -> str:
    return open(module.__file__).read().splitlines()[err.location.line - 1]


def test_atoms_differing_only_in_swizzle_are_refused_at_the_runtime_pick():
    with pytest.raises(GcdslError) as info:
        cute.compile(safety.swizzle_differs, *mismatch.fake_sources())
    err = info.value
    assert err.diag is Diag.ATOM_TYPE_MISMATCH and err.param == "loads"
    assert "differ in shared-memory layout (swizzle included)" in str(err)
    assert "S<3,4,3>" in str(err)
    assert "loads[k]" in _line(batch_copy, err)


def test_a_literal_index_past_the_end_is_a_located_error():
    with pytest.raises(GcdslError) as info:
        cute.compile(safety.launch_with_loads, safety.literal_past_the_end, *mismatch.fake_sources())
    err = info.value
    assert err.diag is Diag.INDEX_OUT_OF_RANGE and err.param == "loads"
    assert "loads[-5]" in _line(safety, err) and "holds 3 entries" in str(err)


def test_a_slice_with_a_runtime_bound_is_a_located_error():
    with pytest.raises(GcdslError) as info:
        cute.compile(safety.launch_with_loads, safety.runtime_slice, *mismatch.fake_sources())
    err = info.value
    assert err.diag is Diag.BAD_INDEX_TYPE and err.param == "loads"
    assert "loads[start:]" in _line(safety, err)


def test_dsl_errors_in_the_kernel_name_the_users_file_and_line():
    from cutlass.base_dsl.common import DSLBaseError

    with pytest.raises(DSLBaseError) as info:
        cute.compile(safety.launch_with_loads, safety.early_exit_in_a_dynamic_loop, *mismatch.fake_sources())
    err = info.value
    assert err.filename == safety.__file__, str(err)
    assert "return" in open(safety.__file__).read().splitlines()[err.line - 1]
    assert "<gcdsl:" not in str(err) and "decorator.py" not in str(err)


def test_decorating_a_class_is_a_located_error():
    with pytest.raises(GcdslError) as info:
        safety.decorate_a_class()
    err = info.value
    assert err.diag is Diag.NOT_A_FUNCTION and "class `NotAKernel`" in str(err)
    assert err.location.filename == safety.__file__


def test_an_unknown_option_is_a_located_error():
    with pytest.raises(GcdslError) as info:
        safety.unknown_option()
    err = info.value
    assert err.diag is Diag.UNSUPPORTED_DECORATOR and "`check_bound`" in str(err)
    assert "check_bound=True" in _line(safety, err)


def test_options_of_cute_kernel_pass_through():
    assert "@__gcdsl__.cute.kernel(preprocess=True)" in safety.with_dsl_option.desugared_source
    cute.compile(safety.launch_with_dsl_option, cute.runtime.make_fake_compact_tensor(cutlass.Float32, (32,)))


def test_parameter_budget_at_the_edge_with_readme_shaped_tma_kernels():
    """Descriptor lists, a TMA coordinate tensor and a layout: every kind is sized."""
    from tests.kernels import budget

    with pytest.raises(GcdslError) as info:
        cute.compile(batch_copy.batch_copy, *budget.tma_args(budget.TMA_JUST_OVER))
    err = info.value
    assert err.diag is Diag.PARAM_BUDGET
    assert "needs 32784 bytes" in str(err)
    for name, size in (("loads", 128 * 128), ("stores", 128 * 128), ("coords", 8), ("pick", 8)):  # 127 + 1
        assert re.search(rf"^\s+{name}\s+{size} B$", str(err), re.M), (name, str(err))
    cute.compile(batch_copy.batch_copy, *budget.tma_args(budget.TMA_JUST_UNDER))  # 32528 bytes: fits


@pytest.mark.parametrize("make", [
    lambda gcdsl: gcdsl.grid_constant(["a"]),
    lambda gcdsl: gcdsl.grid_constant(__import__("numpy").array([object(), 1], dtype=object)),
    lambda gcdsl: gcdsl.grid_constant([[1, 2], [3, 4]]).update([1, 2, 3]),
    lambda gcdsl: gcdsl.TensorMapTable(box=(64, 64), swizzle="96B"),
], ids=["strings", "object-dtype", "update-with-another-shape", "unknown-swizzle"])
def test_host_api_errors_name_the_callers_line(make):
    import gcdsl

    with pytest.raises(GcdslError) as info:
        make(gcdsl)
    err = info.value
    assert err.diag is Diag.BAD_GRID_CONSTANT
    assert err.location is not None and err.location.filename == __file__
    line = open(__file__).read().splitlines()[err.location.line - 1]
    assert "lambda gcdsl: gcdsl." in line
    assert line[err.location.col:].startswith("gcdsl."), (line, err.location.col)  # the caret under the call


def test_an_explicit_tma_desc_ptr_of_none_means_none_for_a_runtime_pick():
    """`cute.copy(loads[k], ..., tma_desc_ptr=None)`, as helpers written for either kind of
    atom pass it, is the picked atom's own descriptor, not a duplicate keyword."""
    cute.compile(safety.launch_with_explicit_none, *mismatch.fake_sources())


def test_errors_survive_pickling_with_every_field():
    """pytest-xdist and compile worker pools send errors between processes."""
    import pickle

    from gcdsl.diagnostics import SourceLocation

    err = GcdslError(Diag.BAD_OP_INPUT, "offs is wrong", location=SourceLocation(__file__, 3, 4),
                     param="offs", hint="fix it")
    back = pickle.loads(pickle.dumps(err))
    assert type(back) is GcdslError and str(back) == str(err)
    assert (back.diag, back.message, back.location, back.param, back.hint) == \
        (err.diag, err.message, err.location, err.param, err.hint)


_TARGET_PROBE = """
import os
{before}
import cutlass
import cutlass.cute as cute
{after}
import gcdsl

@gcdsl.kernel
def fill(x: cute.Tensor):
    tidx, _, _ = cute.arch.thread_idx()
    x[tidx] = cutlass.Float32(1.0)

@cute.jit
def host(x: cute.Tensor):
    fill(x).launch(grid=(1, 1, 1), block=(32, 1, 1))

cute.compile(host, cute.runtime.make_fake_compact_tensor(cutlass.Float32, (32,)))
cute.compile(host, cute.runtime.make_fake_compact_tensor(cutlass.Float32, (32,)))
"""


def _target_warnings(tmp_path, before: str, after: str) -> list:
    """The gcdsl warnings of a script that compiles one kernel twice (the source must be a file)."""
    import subprocess
    import sys

    from tests.conftest import ROOT

    script = tmp_path / f"probe_{abs(hash((before, after)))}.py"
    script.write_text(_TARGET_PROBE.format(before=before, after=after))
    env = {k: v for k, v in os.environ.items() if not k.startswith("CUTE_DSL_")}
    env.update(CUTE_DSL_NO_CACHE="1", PYTHONPATH=ROOT)
    proc = subprocess.run([sys.executable, "-W", "always", str(script)],
                          cwd=ROOT, env=env, capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr[-3000:]
    return [line for line in proc.stderr.splitlines() if "gcdsl: " in line]


def test_a_compile_target_chosen_by_accident_is_said_once(tmp_path):
    if _dsl_has_gpu():
        pytest.skip("a GPU here: the DSL compiles for it")
    unset = _target_warnings(tmp_path, "", "")
    assert len(unset) == 1 and "CUTE_DSL_ARCH is unset" in unset[0] and "sm_100a" in unset[0]
    late = _target_warnings(tmp_path, "", "os.environ['CUTE_DSL_ARCH'] = 'sm_90a'")
    assert len(late) == 1 and "set after `import cutlass`" in late[0]
    assert _target_warnings(tmp_path, "os.environ['CUTE_DSL_ARCH'] = 'sm_90a'", "") == []


def _dsl_has_gpu() -> bool:
    from gcdsl.lower import _dsl

    return _dsl._has_gpu()


def _gcdsl_frames(err) -> list:
    import traceback

    package = os.path.dirname(os.path.abspath(__import__("gcdsl").__file__))
    return [f.name for f in traceback.extract_tb(err.__traceback__) if f.filename.startswith(package)]


def test_errors_carry_the_users_frames_not_gcdsls():
    """The caret points at the user's subscript; gcdsl's own frames stay out of the
    traceback (GCDSL_FRONTEND_DEBUG keeps them)."""
    with pytest.raises(GcdslError) as info:
        cute.compile(safety.swizzle_differs, *mismatch.fake_sources())
    err = info.value
    line = open(err.location.filename).read().splitlines()[err.location.line - 1]
    assert line[err.location.col:].startswith("loads[k]"), (line, err.location.col)
    assert len(_gcdsl_frames(err)) <= 2, _gcdsl_frames(err)  # the launch and the re-raise, nothing deeper

    from typing import List

    import gcdsl

    with pytest.raises(GcdslError) as info:
        @gcdsl.kernel
        def aliased(atoms: List[cute.CopyAtom], i: int):
            xs = atoms
            cute.copy(xs[i], i, i)
    assert info.value.diag is Diag.LIST_ALIASED
    assert _gcdsl_frames(info.value) == ["kernel", "_decorate"]


def _picks(loads: List[cute.CopyAtom], k: int):
    cute.copy(loads[k], k, k)


def test_two_renderings_of_one_def_keep_their_own_source():
    """Kernels made from one `def` with different options have different desugared text:
    each is registered (and read by the DSL, and by tracebacks) under its own name."""
    import linecache

    import gcdsl

    plain, checked = gcdsl.kernel(_picks), gcdsl.kernel(check_bounds=True)(_picks)
    assert plain.desugared_source != checked.desugared_source
    assert plain._rendered.filename != checked._rendered.filename and checked._rendered.filename.endswith(" #2>")
    for k in (plain, checked):
        assert "".join(linecache.getlines(k._rendered.filename)) == k.desugared_source
    assert gcdsl.kernel(_picks)._rendered.filename == plain._rendered.filename  # the same text keeps its name
