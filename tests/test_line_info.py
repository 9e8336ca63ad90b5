"""With line info, a gcdsl kernel's PTX `.loc` lines name the user's file and lines.

The DSL reads a kernel's source again to trace it, so gcdsl hands it the desugared
text under a name of its own (`<gcdsl: kernel from file.py:LINE>`), and the DSL
records locations in that text and in gcdsl's own runtime. `_Launcher.launch`
moves every one of them to the user's line (through the DSL's `loc_transform`), so
Nsight Compute's source view shows the user's file.

    python -m pytest -q tests/test_line_info.py
"""
import inspect
import re

import pytest


@pytest.fixture(scope="module")
def ptx():
    import cutlass.cute as cute

    from benchmarks import launch_kernels as L

    fn, args = L.fake_args("list", 3)
    return cute.compile(fn, *args, options="--generate-line-info --keep-ptx").__ptx__


def _files(ptx):
    return dict(re.findall(r'^\s*\.file\s+(\d+)\s+"([^"]+)"', ptx, re.M))


def test_every_location_is_in_the_users_file(ptx):
    from benchmarks import launch_kernels as L

    assert set(_files(ptx).values()) == {inspect.getsourcefile(L)}  # not the desugared text, not gcdsl's code


def test_the_tma_load_is_at_the_users_copy(ptx):
    from benchmarks import launch_kernels as L

    source = inspect.getsource(L).splitlines()
    copy_line = next(i + 1 for i, text in enumerate(source) if "cute.copy(loads[k]" in text)
    def_line = next(i + 1 for i, text in enumerate(source) if text.startswith("def list_kernel("))
    before = ptx[:ptx.index("cp.async.bulk.tensor")]
    locs = re.findall(r"^\s*\.loc\s+\d+\s+(\d+)\s+\d+", before, re.M)
    assert int(locs[-1]) == copy_line
    assert str(def_line) in locs  # the entry, at the user's def


def test_cute_size_keeps_the_dsls_ir_and_locations(tmp_path):
    """gcdsl answers `cute.size` of a table itself and hands every other call to the DSL's
    own with the location the DSL would have given it: the kernel's IR with line info,
    with and without gcdsl imported, is the same text (the size op at the user's line)."""
    import os
    import subprocess
    import sys

    from tests.conftest import ROOT
    from tests.kernels import dynamic_size

    texts = []
    for flag in ([], ["--with-gcdsl"]):
        dump = tmp_path / ("gcdsl" if flag else "plain")
        dump.mkdir()
        env = {**os.environ, "CUTE_DSL_ARCH": "sm_90a", "CUTE_DSL_KEEP": "ir-debug", "CUTE_DSL_LINEINFO": "1",
               "CUTE_DSL_NO_CACHE": "1", "CUTE_DSL_DUMP_DIR": str(dump)}
        proc = subprocess.run([sys.executable, "-m", "tests.kernels.dynamic_size", *flag], cwd=ROOT, env=env,
                              capture_output=True, text=True, timeout=300)
        assert proc.returncode == 0, proc.stderr[-2000:]
        (path,) = dump.glob("*.mlir")
        texts.append(path.read_text())
    assert texts[0] == texts[1]
    size_line = next(i + 1 for i, text in enumerate(inspect.getsource(dynamic_size).splitlines())
                     if "cute.size(t, mode=[0])" in text)
    assert f'{os.path.basename(dynamic_size.__file__)}":{size_line}' in texts[1]
    assert "lower/_dsl.py" not in texts[1]
