"""What the tutorials share: run on a Hopper GPU if there is one, else compile for sm_90a.

Import this before `cutlass`: the DSL reads its CUTE_DSL_* variables on import,
and without a GPU the tutorials ask it to keep the PTX so they can show it.
"""
import atexit
import glob
import os
import shutil
import sys
import tempfile

# the tutorials run from a checkout: make `import gcdsl` (and the benchmark harness) find it
sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))

from benchmarks import harness  # noqa: E402  (no DSL import)

ON_HOPPER = harness.has_hopper_gpu()  # another GPU cannot run the kernels built for sm_90a
DUMP_DIR = None
if not ON_HOPPER:
    DUMP_DIR = tempfile.mkdtemp(prefix="gcdsl-tutorial-")
    atexit.register(shutil.rmtree, DUMP_DIR, True)  # also after --help or an error
    os.environ.setdefault("CUTE_DSL_ARCH", "sm_90a")
    os.environ.update(CUTE_DSL_KEEP="ptx", CUTE_DSL_DUMP_DIR=DUMP_DIR, CUTE_DSL_NO_CACHE="1")


def time_launches(launch, reps: int):
    """Median, min and max device time of `launch` in microseconds.

    The benchmarks' timer: CUDA events around each launch, with the stream held
    busy beforehand so that the events time the kernel, not the Python call.
    """
    stats = harness.time_device_ms(launch, reps=reps, warmup=3)
    return stats["median"] * 1e3, stats["min"] * 1e3, stats["max"] * 1e3


def time_calls(call, calls: int = 20, rounds: int = 5) -> float:
    """Median over `rounds` of microseconds per call, `call(i)` for i in range(calls) back
    to back between CUDA events: host and device overlapping as in a model's loop."""
    import statistics

    return statistics.median(harness.us_per_call(call, calls) for _ in range(rounds))


def plot(path: str, title: str, xlabel: str, ylabel: str, points: dict) -> None:
    """Write `points` ({x: y}) as a PNG at `path` and say where; only a note without matplotlib."""
    written = harness.plot_lines(path, title, xlabel, ylabel, {ylabel: points})
    if written:
        print(f"plot: {os.path.abspath(written)}")
    else:
        print("plot: not written (matplotlib is not installed; pip install -e '.[plot]')")


def show_compile(kernel) -> None:
    """Print what a compile-only run has to show: the desugared kernel and its PTX."""
    from gcdsl import ptx

    print("No Hopper GPU here: compiled for sm_90a instead of running.\n")
    print(f"The kernel as it runs ({kernel.__name__}.desugared_source):\n")
    print(kernel.desugared_source)
    with open(glob.glob(os.path.join(DUMP_DIR, "*.ptx"))[0]) as f:
        print("What the PTX shows:")
        print(ptx.summary(f.read(), kernel.parameter_spans))  # each array and table by its parameter
