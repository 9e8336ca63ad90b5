"""The README's main command, the dump switches it exercises, and what the tutorials leave behind."""
import os
import subprocess
import sys

import pytest

from benchmarks.harness import has_hopper_gpu
from tests.conftest import ROOT

TUTORIALS = ("tutorials/01_batch_copy.py", "tutorials/02_megakernel.py", "tutorials/03_grouped_gemm.py",
             "tutorials/04_fused_moe.py", "tutorials/05_expert_parallel.py")


def run_tutorial(args, tmp_path, **env_vars):
    """Run a tutorial with its own TMPDIR, and check that it leaves no temporary folder there."""
    scratch = tmp_path / "tmp"
    scratch.mkdir(exist_ok=True)
    env = {k: v for k, v in os.environ.items() if not k.startswith(("CUTE_DSL_", "GCDSL_"))}
    env.update(TMPDIR=str(scratch), **env_vars)
    proc = subprocess.run([sys.executable, *args], cwd=ROOT, env=env, capture_output=True, text=True, timeout=600)
    left = [p for p in os.listdir(scratch) if p.startswith("gcdsl-tutorial-")]
    assert not left, f"{args[0]} left {left} behind"
    return proc


def test_tutorial_01_and_source_dump(tmp_path):
    dump = tmp_path / "dump"
    proc = run_tutorial(["tutorials/01_batch_copy.py", "--tensors", "4", "--rows", "512", "--cols", "128"],
                        tmp_path, GCDSL_DUMP="1", GCDSL_DUMP_DIR=str(dump))
    assert proc.returncode == 0, proc.stdout + proc.stderr[-4000:]
    (dumped,) = os.listdir(dump)
    assert dumped.startswith("batch_copy_kernel.01_batch_copy.py.")
    text = (dump / dumped).read_text()
    assert "@__gcdsl__.cute.kernel" in text and "__gcdsl__.param_desc_ptr(loads, k)" in text
    assert "# ---- gcdsl: desugared" in proc.stderr and text in proc.stderr  # GCDSL_DUMP=1
    if has_hopper_gpu():
        assert "bit-exact" in proc.stdout
    else:
        assert text in proc.stdout  # the tutorial prints desugared_source: the same text
        assert "10 x 128 B at +0 in 4 parameters" in proc.stdout and "2 cp.async.bulk.tensor" in proc.stdout


def test_tutorial_02_megakernel(tmp_path):
    proc = run_tutorial(["tutorials/02_megakernel.py", "--tensors", "32"], tmp_path)
    assert proc.returncode == 0, proc.stdout + proc.stderr[-4000:]
    if has_hopper_gpu():
        assert "bit-exact" in proc.stdout and "host:" in proc.stdout
    else:
        assert "tasks = __gcdsl__.table_view(tasks, __gcdsl__.param_space_ptr(tasks))" in proc.stdout
        assert "loads = __gcdsl__.table_view(loads, __gcdsl__.param_space_ptr(loads))" in proc.stdout  # a descriptor table
        assert "2 x 32 x 128 B descriptor tables" in proc.stdout
        assert "2 cp.async.bulk.tensor" in proc.stdout


def test_tutorial_03_grouped_gemm(tmp_path):
    proc = run_tutorial(["tutorials/03_grouped_gemm.py", "--experts", "16"], tmp_path)
    assert proc.returncode == 0, proc.stdout + proc.stderr[-4000:]
    if has_hopper_gpu():
        assert "verify against float32: PASS" in proc.stdout and "graph us/layer" in proc.stdout
    else:
        assert "self.build_schedule(offs, total, tile_end, row_end)" in proc.stdout  # offs, read in the kernel
        assert "self.produce(" in proc.stdout and "self.consume(" in proc.stdout  # the roles
        assert "708 bytes in 10 parameters" in proc.stdout  # four descriptors, whatever the expert count
        assert "WGMMA: 8 wgmma.mma_async" in proc.stdout and "local memory: none" in proc.stdout


def test_tutorial_04_fused_moe(tmp_path):
    proc = run_tutorial(["tutorials/04_fused_moe.py", "--experts", "16"], tmp_path)
    assert proc.returncode == 0, proc.stdout + proc.stderr[-4000:]
    if has_hopper_gpu():
        assert "verify against float32: PASS" in proc.stdout and "graph us" in proc.stdout
    else:
        assert "The kernel as it runs (kernel.desugared_source)" in proc.stdout
        assert "self.down.produce(" in proc.stdout and "wait_on=(done, self.up.n_tiles)" in proc.stdout
        assert ("an expert with r rows has ceil(r / 128) x 12 gate-up tiles (1536 columns of w1, 768 stored) and "
                "ceil(r / 128) x 16 down tiles (2048 columns)") in proc.stdout  # 16 experts: under 3 waves of 256
        assert ("One kernel: 1 entry, 7 TMA descriptors in parameter space; a gate-up tile's A: a 2-D TMA load of "
                "one row of x per token, 4 in the code (lane l of the producer warp loads rows l, l + 32, ...); "
                "gate and up rows: "
                "1 5-D TMA load of w1 a stage; silu(gate) * up: 32 ex2 and 32 rcp a thread; a gate-up tile's count "
                "1 release add after its stores, a down tile's wait 2 acquire loads, a down tile's combine 1 "
                "acquire-release add a row, 3 proxy fences") in proc.stdout


def test_tutorial_05_expert_parallel_on_two_cpu_processes(tmp_path):
    """torchrun, two ranks on gloo, experts on torch._grouped_mm (the GPU run uses NCCL and gcdsl's)."""
    proc = run_tutorial(["-m", "torch.distributed.run", "--nproc-per-node", "2", "tutorials/05_expert_parallel.py",
                         "--cpu"], tmp_path)
    assert proc.returncode == 0, proc.stdout + proc.stderr[-4000:]
    assert "2 ranks x 8 experts" in proc.stdout and ": PASS" in proc.stdout


@pytest.mark.parametrize("tutorial", TUTORIALS)
def test_help_leaves_nothing_behind(tutorial, tmp_path):
    proc = run_tutorial([tutorial, "--help"], tmp_path)
    assert proc.returncode == 0 and "usage:" in proc.stdout, proc.stderr[-2000:]


def test_a_failing_run_leaves_nothing_behind(tmp_path):
    proc = run_tutorial(["tutorials/01_batch_copy.py", "--tensors", "not-a-number"], tmp_path)
    assert proc.returncode != 0


@pytest.mark.gpu
def test_tutorial_01_sweep_prints_and_plots(tmp_path):
    png = tmp_path / "sweep.png"
    proc = run_tutorial(["tutorials/01_batch_copy.py", "--sweep", "1,4", "--rows", "512", "--cols", "128",
                         "--plot", str(png)], tmp_path)
    assert proc.returncode == 0, proc.stdout + proc.stderr[-4000:]
    assert proc.stdout.count("bit-exact") >= 4  # two runs, two table rows
    assert f"plot: {png}" in proc.stdout or "plot: not written (matplotlib" in proc.stdout


@pytest.mark.parametrize("block_matplotlib", [True, False])
def test_plot_never_fails(block_matplotlib, tmp_path):
    png = tmp_path / "points.png"
    code = (
        "import sys\n"
        "class Block:\n"
        "    def find_spec(self, name, path=None, target=None):\n"
        "        if name.split('.')[0] == 'matplotlib': raise ImportError(name)\n"
        f"if {block_matplotlib}: sys.meta_path.insert(0, Block())\n"
        "sys.path.insert(0, 'tutorials')\n"
        "import _machine\n"
        f"_machine.plot({str(png)!r}, 't', 'x', 'y', {{1: 2.0, 4: 3.0}})\n"
    )
    proc = run_tutorial(["-c", code], tmp_path)
    assert proc.returncode == 0, proc.stderr[-2000:]
    try:
        import matplotlib  # noqa: F401
        can_plot = not block_matplotlib
    except ImportError:
        can_plot = False
    if can_plot:
        assert png.exists() and f"plot: {png}" in proc.stdout
    else:
        assert not png.exists() and "matplotlib is not installed" in proc.stdout
