"""Test tiers: front end (pure Python), compile-only (no GPU; sm_90a and sm_100a), GPU.

Compile-only tests run the DSL in subprocesses (`tests/compile_cases.py`), since the
DSL fixes its target architecture when `cutlass` is imported. In-process tests that
trace kernels default to sm_90a where no GPU is present.
"""
import os
import subprocess
import sys

import pytest

from benchmarks.harness import has_hopper_gpu

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


# The GPU tier's kernels are built for sm_90a: on a GPU other than a Hopper it skips and
# in-process traces target sm_90a, as without a GPU.
if not has_hopper_gpu():
    os.environ.setdefault("CUTE_DSL_ARCH", "sm_90a")

# In-process compiles with `--keep-ptx` write their PTX into the DSL's dump folder, the
# working directory unless this is set (read when `cutlass` is imported): a temporary one.
if "CUTE_DSL_DUMP_DIR" not in os.environ:
    import atexit
    import shutil
    import tempfile

    os.environ["CUTE_DSL_DUMP_DIR"] = tempfile.mkdtemp(prefix="gcdsl-tests-ptx-")
    atexit.register(shutil.rmtree, os.environ["CUTE_DSL_DUMP_DIR"], ignore_errors=True)


def pytest_addoption(parser):
    parser.addoption("--upstream-jobs", type=int, default=1,
                     help="upstream examples compiled at a time (each in two processes); see test_upstream_compat.py")


def pytest_configure(config):
    config.addinivalue_line("markers", "gpu: needs an NVIDIA Hopper GPU; skipped without one")
    config.addinivalue_line(
        "markers", "upstream: upstream CuTe DSL examples under both decorators (needs GCDSL_UPSTREAM_EXAMPLES)")


def pytest_terminal_summary(terminalreporter):
    """The upstream sweep's table, when it ran."""
    module = sys.modules.get("tests.test_upstream_compat")
    if module is None or not module.OUTCOMES:
        return
    from tests.upstream_compat import markdown

    total = sum(o.seconds for o in module.OUTCOMES)
    terminalreporter.write_sep("=", "upstream examples under @cute.kernel and @gcdsl.kernel")
    terminalreporter.write_line(markdown(module.OUTCOMES) + f"Sum of the examples' times: {total:.0f} s.")


def pytest_collection_modifyitems(config, items):
    if has_hopper_gpu():
        return
    skip = pytest.mark.skip(reason="no Hopper GPU on this machine")
    for item in items:
        if "gpu" in item.keywords:
            item.add_marker(skip)


class CaseFailed(AssertionError):
    """A case compiled with keep_going failed; its exception is the message."""


class Compiled:
    """PTX/SASS of the cases compiled for one (arch, decorator) pair."""

    def __init__(self, out_dir: str) -> None:
        self.out_dir = out_dir

    def ptx(self, case: str) -> str:
        error = os.path.join(self.out_dir, case + ".error")
        if os.path.exists(error):  # compiled with keep_going: this case failed
            with open(error) as f:
                raise CaseFailed(f"{case} did not compile: {f.read()[-6000:]}")
        with open(os.path.join(self.out_dir, case + ".ptx")) as f:
            return f.read()

    def param_bytes(self, case: str) -> dict:
        """What gcdsl's budget check computed for each kernel the case launches, by name."""
        import json

        with open(os.path.join(self.out_dir, case + ".param_bytes.json")) as f:
            return json.load(f)

    def sass(self, case: str) -> str:
        path = os.path.join(self.out_dir, case + ".sass")
        if not os.path.exists(path):
            pytest.skip("SASS needs nvdisasm (pip install 'nvidia-cuda-nvdisasm>=13.4,<14')")
        with open(path) as f:
            return f.read()


@pytest.fixture(scope="session")
def compile_cases(tmp_path_factory):
    """compile_cases(arch, decorator, cases) -> Compiled; each case is compiled once per session
    for each (arch, decorator), the ones not seen yet in one subprocess.

    With keep_going=True a failing case does not stop the others: asking for its
    PTX raises CaseFailed with its exception. sass=False keeps PTX only, faster.
    """
    out_dirs, done = {}, set()

    def run(arch: str, decorator: str, cases: tuple, keep_going: bool = False, sass: bool = True) -> Compiled:
        key = (arch, decorator, keep_going, sass)
        if key not in out_dirs:
            out_dirs[key] = tmp_path_factory.mktemp(f"{arch}-{decorator}")
        todo = [c for c in cases if (*key, c) not in done]
        if todo:
            env = {k: v for k, v in os.environ.items() if not k.startswith("CUTE_DSL_")}
            proc = subprocess.run(
                [sys.executable, "-m", "tests.compile_cases", "--arch", arch,
                 "--decorator", decorator, "--out", str(out_dirs[key]),
                 *(["--keep-going"] if keep_going else []), *([] if sass else ["--no-sass"]), *todo],
                cwd=ROOT, env=env, capture_output=True, text=True, timeout=900,
            )
            assert proc.returncode == 0, f"compile failed:\n{proc.stdout}\n{proc.stderr[-6000:]}"
            done.update((*key, c) for c in todo)
        return Compiled(str(out_dirs[key]))

    return run
