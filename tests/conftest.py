"""Test tiers: front end (pure Python), compile-only (no GPU; sm_90a and sm_100a), GPU.

Compile-only tests run the DSL in subprocesses (`tests/compile_cases.py`), since the
DSL fixes its target architecture when `cutlass` is imported. In-process tests that
trace kernels default to sm_90a where no GPU is present.
"""
import os
import subprocess
import sys

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def has_gpu() -> bool:
    try:
        import torch
    except ImportError:
        return False
    return torch.cuda.is_available()


if not has_gpu():
    os.environ.setdefault("CUTE_DSL_ARCH", "sm_90a")


def pytest_configure(config):
    config.addinivalue_line("markers", "gpu: needs an NVIDIA Hopper GPU; skipped without one")


def pytest_collection_modifyitems(config, items):
    if has_gpu():
        return
    skip = pytest.mark.skip(reason="no CUDA GPU on this machine")
    for item in items:
        if "gpu" in item.keywords:
            item.add_marker(skip)


class Compiled:
    """PTX/SASS of the cases compiled for one (arch, decorator) pair."""

    def __init__(self, out_dir: str) -> None:
        self.out_dir = out_dir

    def ptx(self, case: str) -> str:
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
    for each (arch, decorator), the ones not seen yet in one subprocess."""
    out_dirs, done = {}, set()

    def run(arch: str, decorator: str, cases: tuple) -> Compiled:
        key = (arch, decorator)
        if key not in out_dirs:
            out_dirs[key] = tmp_path_factory.mktemp(f"{arch}-{decorator}")
        todo = [c for c in cases if (arch, decorator, c) not in done]
        if todo:
            env = {k: v for k, v in os.environ.items() if not k.startswith("CUTE_DSL_")}
            proc = subprocess.run(
                [sys.executable, "-m", "tests.compile_cases", "--arch", arch,
                 "--decorator", decorator, "--out", str(out_dirs[key]), *todo],
                cwd=ROOT, env=env, capture_output=True, text=True, timeout=900,
            )
            assert proc.returncode == 0, f"compile failed:\n{proc.stdout}\n{proc.stderr[-6000:]}"
            done.update((arch, decorator, c) for c in todo)
        return Compiled(str(out_dirs[key]))

    return run
