"""Decorators stacked with @gcdsl.kernel (no GPU needed)."""
import pytest

from gcdsl import Diag, GcdslError
from tests.kernels import stacking


@pytest.mark.parametrize("make, line_text", [
    (stacking.cute_kernel_above, "@cute.kernel"),
    (stacking.gcdsl_above_cute_jit, "@cute.jit"),
    (stacking.user_decorator_below, "@traced"),
])
def test_refused_stacks_name_the_decorator_and_line(make, line_text):
    with pytest.raises(GcdslError) as info:
        make()
    err = info.value
    assert err.diag is Diag.UNSUPPORTED_DECORATOR
    assert err.location.filename == stacking.__file__
    assert open(stacking.__file__).read().splitlines()[err.location.line - 1].strip() == line_text


def test_user_decorator_above_and_static_methods_work():
    import gcdsl

    wrapped = stacking.user_decorator_above()
    assert isinstance(wrapped.__wrapped__, gcdsl.Kernel)
    assert isinstance(stacking.Holder.static_kernel, gcdsl.Kernel)
    assert "def static_kernel(x: cute.Tensor):" in stacking.Holder.static_kernel.desugared_source


def test_method_kernels_bind_like_functions():
    import types

    import gcdsl

    obj = stacking.Scaler()
    bound = obj.kernel
    assert isinstance(bound, types.MethodType) and bound.__self__ is obj
    assert isinstance(bound.__func__, gcdsl.Kernel)
    assert isinstance(stacking.Scaler.kernel, gcdsl.Kernel)      # through the class: unbound
    assert obj.static_below is stacking.Scaler.static_below       # @staticmethod below: never bound
    assert obj.class_below.__self__ is stacking.Scaler            # @classmethod below: bound to the class
    assert "@staticmethod" not in obj.static_below.desugared_source


def test_the_dsl_kernel_api_passes_through():
    kernel = stacking.Scaler.kernel
    assert callable(kernel.set_name_prefix)                        # what cute.kernel returns has it
    with pytest.raises(AttributeError):
        kernel.no_such_attribute


def test_cute_kernel_replaced_by_gcdsl_kernel_does_not_recurse(tmp_path):
    """A program (or a test harness) may switch every `@cute.kernel` to gcdsl by
    assignment; the desugared text still reaches the DSL's own decorator."""
    import os
    import subprocess
    import sys

    script = tmp_path / "switched.py"
    script.write_text(
        "import cutlass, cutlass.cute as cute, gcdsl\n"
        "cute.kernel = gcdsl.kernel\n\n\n"
        "@cute.kernel\n"
        "def fill(out: cute.Tensor):\n"
        "    tidx, _, _ = cute.arch.thread_idx()\n"
        "    out[tidx] = 1.0\n\n\n"
        "@cute.jit\n"
        "def host(out: cute.Tensor):\n"
        "    fill(out).launch(grid=(1, 1, 1), block=(32, 1, 1))\n\n\n"
        "cute.compile(host, cute.runtime.make_fake_compact_tensor(cutlass.Float32, (32,)))\n"
        "print(type(fill).__name__, 'compiled')\n"
    )
    root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    path = os.pathsep.join(p for p in (root, os.environ.get("PYTHONPATH")) if p)
    env = dict(os.environ, CUTE_DSL_ARCH="sm_90a", PYTHONPATH=path)
    proc = subprocess.run([sys.executable, str(script)], env=env, capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0 and "Kernel compiled" in proc.stdout, proc.stderr[-3000:]
