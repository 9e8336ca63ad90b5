"""The launch path without a GPU: how a table reaches the compiled host function,
TVM-FFI compiles, and gcdsl.launch's errors."""
import re

import pytest


def _host_ir(n: int, **compile_kwargs) -> str:
    import cutlass.cute as cute

    from tests.kernels import launch_table as lt

    return str(cute.compile(lt.first_tiles, *lt.fake_args(n, tvm_ffi=bool(compile_kwargs)), **compile_kwargs).ir_module)


def test_a_table_reaches_the_host_function_as_an_address():
    """A by-value argument of N x 128 bytes would cost host-code compile time in N."""
    text = _host_ir(200)
    (signature,) = re.findall(r"llvm\.func @cutlass_first_tiles\w*\((%arg0: [^,]+),", text)
    assert signature == "%arg0: !llvm.ptr"
    assert re.search(r"llvm\.load %arg0 : !llvm\.ptr -> !llvm\.array<200 x vector<32xi32>>", text)
    assert not re.search(r"llvm\.func [^\n]*\(%arg\d+: !llvm\.array<200 x", text)


def test_tvm_ffi_takes_a_table_as_an_opaque_handle():
    pytest.importorskip("tvm_ffi")
    text = _host_ir(6, options="--enable-tvm-ffi")
    assert "first_tiles(descs: handle, first: Tensor([64, 32], float32), out: Tensor([6, 64, 32], float32))" in text
    # the wrapper reads the table's address from the handle and calls the host function with it
    assert re.search(r"llvm\.call @cutlass_first_tiles\w*\(%\d+, ", text)


def test_compile_tvm_ffi_without_the_package_says_what_to_install(monkeypatch):
    import sys

    import gcdsl.launch

    monkeypatch.setitem(sys.modules, "tvm_ffi", None)
    with pytest.raises(ImportError, match=r"pip install 'apache-tvm-ffi"):
        gcdsl.launch.compile_tvm_ffi(lambda: None)
