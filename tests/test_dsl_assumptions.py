"""Every assumption gcdsl makes about the CuTe DSL's internals, pinned one by one.

gcdsl/lower/_dsl.py holds every use of private DSL details (the TVM-FFI handle
marker in gcdsl/lower/grid_constant.py excepted, see below). When a DSL upgrade
breaks one, the test here that names it fails first, with what to revisit.
"""
import importlib.metadata
import inspect
import os
import re
from typing import List

import pytest

import cutlass
import cutlass.cute as cute
from cutlass.cute.nvgpu import cpasync

from gcdsl.lower import _dsl

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def test_the_installed_dsl_is_a_supported_version():
    from packaging.specifiers import SpecifierSet

    installed = importlib.metadata.version("nvidia-cutlass-dsl")
    assert installed in SpecifierSet(_dsl.SUPPORTED_DSL_VERSIONS), (
        f"nvidia-cutlass-dsl {installed} is outside {_dsl.SUPPORTED_DSL_VERSIONS}: revisit gcdsl/lower/_dsl.py")
    pyproject = open(os.path.join(ROOT, "pyproject.toml")).read()
    assert f'"nvidia-cutlass-dsl{_dsl.SUPPORTED_DSL_VERSIONS}"' in pyproject, "pyproject.toml and _dsl disagree"


def test_kernel_trace_state_that_abandon_trace_undoes():
    from cutlass.cutlass_dsl import CuTeDSL

    dsl = CuTeDSL._get_dsl()
    assert isinstance(dsl.num_kernels, int), "the DSL no longer numbers kernels in `num_kernels`"
    assert hasattr(dsl, "_pending_launches"), "the DSL no longer tracks launchers in `_pending_launches`"
    source = inspect.getsource(type(dsl)._build_gpu_module)
    assert "self.gpu_module" in source, "kernels no longer live in `dsl.gpu_module`"


def test_dsl_errors_carry_a_location_that_can_be_rewritten():
    from cutlass.base_dsl.common import DSLBaseError

    err = DSLBaseError("boom", line=3, filename="<x>")
    assert (err.filename, err.line) == ("<x>", 3)
    err.filename, err.line = "y.py", 4
    assert "y.py" in err._format_message(), "relocate_dsl_error re-renders through `_format_message`"


def test_containers_are_registered_by_exact_type():
    from cutlass.base_dsl.utils.tree_utils import _node_types, register_pytree_node  # noqa: F401

    class Named(list):
        def __init__(self, items, param):
            super().__init__(items)
            self.param = param

    assert Named not in _node_types
    _dsl.carry_like_a_list(Named)
    assert Named in _node_types, "carry_like_a_list: the DSL's pytree registry moved"


def test_cute_size_is_a_mode_op_over_a_function_gcdsl_can_wrap():
    """_dsl.let_size_measure swaps the function behind `cute.size`; every other argument
    still reaches the DSL's own."""
    import cutlass.cute as cute
    from cutlass.cute import core

    import gcdsl.lower.grid_constant  # noqa: F401  (registers the tables)

    assert cute.size is core.size and callable(core.size.func), "cute.size is no longer a ModeOp with .func"
    assert core.size.func.measures_gcdsl_objects and core.size.func.__wrapped__.__name__ == "size"
    # how dsl_user_op locates an op, which the wrapper repeats for the user's frame
    from cutlass._mlir_helpers import op

    for helper in ("_find_user_frame", "_fast_frameinfo", "_get_location_from_frame_info"):
        assert callable(getattr(op, helper, None)), f"cutlass._mlir_helpers.op.{helper} is gone"
    assert isinstance(op._ENABLE_FRAME_FILTERING, bool)
    assert 'kwargs.pop("loc", None)' in inspect.getsource(op.dsl_user_op), "dsl_user_op no longer takes loc="


def test_private_ops_and_helpers_exist():
    from cutlass._mlir import ir
    from cutlass._mlir.dialects import cuda
    from cutlass._mlir.dialects import cute_nvgpu as nvgpu
    from cutlass.base_dsl.utils.mlir_value_tree import extract_mlir_attributes  # noqa: F401
    from cutlass.cute import core

    for op in ("get_tma_desc_addr", "get_grid_constant_pointer", "copy_tma_desc", "atom_make_exec_tma",
               "arch_prefetch_tma_desc"):
        assert hasattr(nvgpu, op), f"cute_nvgpu.{op} is gone"
    assert hasattr(cuda, "return_if_error"), "cuda.return_if_error is gone (table checks at launch)"
    assert hasattr(ir, "register_value_caster") and hasattr(core, "_Pointer"), "grid_constant_address's caster swap"


def test_tvm_ffi_takes_a_class_with_struct_type_as_an_opaque_handle():
    """gcdsl/lower/grid_constant.py marks GridConstantTensor with `_struct_type`."""
    from cutlass.cute import metadata

    assert "_struct_type" in inspect.getsource(metadata._native_struct_type)


@pytest.mark.parametrize("text, layout", [
    ("i32", (4, 4)), ("i1", (1, 1)), ("f16", (2, 2)),
    ('!cute.memref<f32, gmem, align<16>, "(256,128):(128,1)">', (8, 8)),
    ('!cute.memref<f32, gmem, align<16>, "(?,?):(?{i64},1)">', (24, 8)),
    ('!cute.layout<"(?,8):(8,1)">', (4, 4)),
    ('!cute.coord_tensor<"(0,0)", "(256,128):(1@1,1@0)">', (0, 1)),
    ("!llvm.array<5 x vector<32xi32>>", (640, 128)),
    ("!llvm.ptr<1>", (8, 8)), ("!llvm.ptr", (8, 8)),
])
def test_printed_kernel_argument_types_are_sized_as_the_ptx_lays_them_out(text, layout):
    """The rules behind the parameter budget; tests/test_param_layout.py holds them
    against the PTX of every compiled case."""
    assert _dsl.param_layout(text) == layout


@cute.jit
def _inspect_atoms(a: cute.Tensor, found: cutlass.Constexpr):
    plain = cute.make_layout((64, 32), stride=(32, 1))
    swizzled = cute.make_composed_layout(cute.make_swizzle(2, 4, 3), 0, plain)
    for smem in (plain, swizzled):
        atom, coords = cpasync.make_tiled_tma_atom(cpasync.CopyBulkTensorTileG2SOp(), a, smem, (64, 32))
        found.append((_dsl.tma_atom_signature(atom), _dsl.tma_atom_box(atom), _dsl.tma_atom_element(atom),
                      _dsl.tensor_kind(coords), _dsl.tensor_kind(a)))


def test_what_the_op_that_built_a_tma_atom_tells():
    found: List = []
    cute.compile(_inspect_atoms, cute.runtime.make_fake_compact_tensor(
        cutlass.Float16, (256, 128), stride_order=(1, 0), assumed_align=16), found)
    (plain, box, element, coord_kind, tensor_kind), (swizzled, *_) = found
    assert plain is not None, "TMA atoms are no longer built by a `make_*tma*` op whose operands gcdsl reads"
    assert plain["element type"] == "f16" and plain["rank"] == "2"
    assert "S<2,4,3>" in swizzled["shared-memory layout (swizzle included)"], "the swizzle moved off the op"
    assert plain["atom type"] == swizzled["atom type"], "the printed type now shows the swizzle: simplify"
    assert (box, element) == ((64, 32), "f16"), "the printed TMA basis or element type changed shape"
    assert (coord_kind, tensor_kind) == ("coord", "memref")


def test_unparse_round_trips_so_the_dump_can_find_its_statements():
    """gcdsl/frontend/dump.py parses `ast.unparse`'s text again and walks both trees."""
    import ast

    tree = ast.parse("@d\ndef f(x):\n    y = f'{x!r:>3}'\n    if y:\n        return [a for a in x]\n")
    again = ast.parse(ast.unparse(tree))
    assert ast.dump(again) == ast.dump(tree)
    assert re.search(r"def f", ast.unparse(tree))


def test_the_arch_the_dsl_read_at_import_is_envar_arch():
    """compile_target_problem compares CUTE_DSL_ARCH with what the DSL read when `cutlass`
    was imported: `envar._arch` of the DSL instance (None until detected, where unset)."""
    envar = _dsl._dsl_instance().envar
    assert hasattr(envar, "_arch")
    if os.environ.get("CUTE_DSL_ARCH"):
        assert envar._arch == os.environ["CUTE_DSL_ARCH"]



def test_kernels_keep_the_location_they_were_decorated_at():
    """`locate_kernel_at` moves it to the user's `def` (the PTX entry's `.loc` with line info)."""
    from benchmarks import launch_kernels as L

    assert _dsl.locate_kernel_at(L.plain_kernel, "somewhere.py", 7)
    assert L.plain_kernel.__wrapped__._decorator_location.filename == "somewhere.py"
    from cutlass._mlir_helpers.op import loc_transform  # the front ends' hook `locations_at` uses

    assert callable(loc_transform)
