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
