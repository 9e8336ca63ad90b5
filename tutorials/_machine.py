"""What the tutorials share: run on a GPU if there is one, else compile for sm_90a.

Import this before `cutlass`: the DSL reads its CUTE_DSL_* variables on import,
and without a GPU the tutorials ask it to keep the PTX so they can show it.
"""
import glob
import os
import sys
import tempfile


def _gpu_available() -> bool:
    try:
        import torch
    except ImportError:
        return False
    return torch.cuda.is_available()


HAS_GPU = _gpu_available()
DUMP_DIR = None
if not HAS_GPU:
    DUMP_DIR = tempfile.mkdtemp(prefix="gcdsl-tutorial-")
    os.environ.setdefault("CUTE_DSL_ARCH", "sm_90a")
    os.environ.update(CUTE_DSL_KEEP="ptx", CUTE_DSL_DUMP_DIR=DUMP_DIR, CUTE_DSL_NO_CACHE="1")

# the tutorials run from a checkout: make `import gcdsl` find it
sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))


def time_launches(launch, reps: int):
    """Median, min and max of `reps` launches in microseconds (CUDA events, 3 warm-ups)."""
    import torch

    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    for _ in range(3):
        launch()
    times = []
    for _ in range(reps):
        start.record()
        launch()
        end.record()
        torch.cuda.synchronize()
        times.append(start.elapsed_time(end) * 1e3)
    times.sort()
    return times[len(times) // 2], times[0], times[-1]


def show_compile(kernel) -> None:
    """Print what a compile-only run has to show: the desugared kernel and its PTX."""
    from gcdsl import ptx

    print("No GPU here: compiled for sm_90a instead of running.\n")
    print(f"The kernel as it runs ({kernel.__name__}.desugared_source):\n")
    print(kernel.desugared_source)
    with open(glob.glob(os.path.join(DUMP_DIR, "*.ptx"))[0]) as f:
        print("What the PTX shows:")
        print(ptx.summary(f.read()))
