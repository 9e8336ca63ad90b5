"""README "Your first kernel": the code blocks run exactly as printed, so README and code cannot drift."""
import glob
import os
import re
import subprocess
import sys

import pytest

from gcdsl import ptx
from tests.conftest import ROOT

BLOCK = re.compile(r"<!-- first-kernel: (\w+) -->\n```python\n(.*?)```\n", re.S)


def readme_blocks() -> dict:
    with open(os.path.join(ROOT, "README.md")) as f:
        blocks = dict(BLOCK.findall(f.read()))
    assert set(blocks) == {"kernel", "compile", "gpu"}, f"README first-kernel blocks: {sorted(blocks)}"
    return blocks


def run_blocks(tmp_path, *names):
    """The named blocks, one after another in one file, run as a script; PTX kept in tmp_path/ptx."""
    blocks = readme_blocks()
    script = tmp_path / "first_kernel.py"
    script.write_text("".join(blocks[name] for name in names))
    (tmp_path / "ptx").mkdir()
    env = {k: v for k, v in os.environ.items() if not k.startswith(("CUTE_DSL_", "GCDSL_"))}
    # only what lets the test look at the result: the code decides the target itself
    path = os.pathsep.join(p for p in (ROOT, os.environ.get("PYTHONPATH")) if p)  # the DSL may live there
    env.update(PYTHONPATH=path, CUTE_DSL_KEEP="ptx", CUTE_DSL_DUMP_DIR=str(tmp_path / "ptx"), CUTE_DSL_NO_CACHE="1")
    proc = subprocess.run([sys.executable, str(script)], cwd=tmp_path, env=env,
                          capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-5000:]
    return proc


def test_first_kernel_compiles_as_printed(tmp_path):
    proc = run_blocks(tmp_path, "kernel", "compile")
    assert "@__gcdsl__.cute.kernel" in proc.stdout
    assert "__gcdsl__.param_desc_ptr(loads, k)" in proc.stdout and "__gcdsl__.param_desc_ptr(stores, k)" in proc.stdout
    (ptx_file,) = glob.glob(str(tmp_path / "ptx" / "*.ptx"))
    with open(ptx_file) as f:
        text = f.read()
    summary = ptx.summary(text)
    assert "10 x 128 B at +0 in 4 parameters" in summary  # per list: a template + 4 packed descriptors
    assert "2 cp.async.bulk.tensor" in summary
    import torch

    if not torch.cuda.is_available():
        assert re.search(r"^\.target\s+sm_90a\b", text, re.M)  # the README's CUTE_DSL_ARCH took effect


@pytest.mark.gpu
def test_first_kernel_runs_as_printed(tmp_path):
    proc = run_blocks(tmp_path, "kernel", "compile", "gpu")
    assert "copied 4 tensors through runtime-indexed descriptors" in proc.stdout
