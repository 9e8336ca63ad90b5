"""Shared machinery: timing, statistics, machine info, tables, JSON and plots.

Nothing here imports the CuTe DSL, so `run.py` can set `CUTE_DSL_*` before `cutlass` loads.
"""
from __future__ import annotations

import datetime
import importlib.metadata
import json
import os
import platform
import shutil
import statistics
import subprocess
import sys
import time
from dataclasses import dataclass, field
from typing import Any, Callable, Dict, List, Optional, Sequence

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
RESULTS = os.path.join(HERE, "results")

OK, FAILED, SKIPPED, ERROR = "OK", "FAILED", "SKIPPED", "ERROR"


# ---------------------------------------------------------------------------------------
# Statistics and timing
# ---------------------------------------------------------------------------------------
def rotated(items: Sequence[Any], round_index: int) -> List[Any]:
    """`items` starting at position `round_index` (mod their count): the order of a round
    of alternating timings. A fixed order would give each variant the same place in every
    round, and so the same share of whatever drifts within a round (clocks, temperature)."""
    items = list(items)
    shift = round_index % len(items) if items else 0
    return items[shift:] + items[:shift]


def summarize(samples: Sequence[float]) -> Dict[str, Any]:
    s = sorted(samples)
    return {"median": statistics.median(s), "min": s[0], "max": s[-1], "n": len(s), "samples": s}


def has_hopper_gpu() -> bool:
    """A Hopper GPU (compute capability 9.0) as device 0: what the GPU tests, the tutorials'
    runs and the benchmarks need, gcdsl.ops' kernels being built for sm_90a. Another GPU
    counts as none: there they compile for sm_90a, or skip, as without a GPU."""
    try:
        import torch
    except ImportError:
        return False
    return torch.cuda.is_available() and torch.cuda.get_device_capability(0) == (9, 0)


# How long `us_per_call` runs its calls untimed first: long enough for the GPU's clocks to
# settle at the timed work's own load. A timer that follows one that left the GPU mostly
# idle (an eager layer bound by its host at one token) would otherwise start slow.
WARMUP_S = 0.1


def us_per_call(call: Callable[[int], Any], calls: int) -> float:
    """Microseconds a call of `call(i)`, i = 0 .. calls - 1 issued back to back, between two
    CUDA events after the GPU is idle: the layer as a model runs it, host and device
    overlapping (eager), or replays of a graph. Untimed passes of the same calls go first,
    for at least WARMUP_S, so that no timer inherits the caches and clocks that the one
    before it left."""
    import torch

    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    warm_until = time.perf_counter() + WARMUP_S
    while True:
        for i in range(calls):
            call(i)
        torch.cuda.synchronize()
        if time.perf_counter() >= warm_until:
            break
    start.record()
    for i in range(calls):
        call(i)
    end.record()
    end.synchronize()
    return start.elapsed_time(end) * 1e3 / calls


def time_device_ms(fn: Callable[[], None], reps: int, warmup: int) -> Dict[str, Any]:
    """Device time of `fn` in ms by CUDA events: median, min, max over `reps` launches.

    Before each timed launch the stream is kept busy with `torch.cuda._sleep` for
    longer than the host needs to enqueue `fn`, so the start event fires only once
    the launch is already queued: the events time the kernel(s), not the Python call
    (which W3 measures on its own).
    """
    import torch

    for _ in range(warmup):
        fn()
    torch.cuda.synchronize()
    t0 = time.perf_counter()
    fn()
    host_s = time.perf_counter() - t0
    torch.cuda.synchronize()
    sleep = getattr(torch.cuda, "_sleep", None)
    # 3x the host time at an assumed 2 GHz clock (H200 boosts to 1.98 GHz), at least ~0.1 ms.
    cycles = int(max(2e5, 3 * host_s * 2e9))
    start = torch.cuda.Event(enable_timing=True)
    end = torch.cuda.Event(enable_timing=True)
    times = []
    for _ in range(reps):
        if sleep is not None:
            sleep(cycles)
        start.record()
        fn()
        end.record()
        end.synchronize()
        times.append(start.elapsed_time(end))
    out = summarize(times)
    out["host_call_ms"] = host_s * 1e3
    out["presleep"] = sleep is not None
    return out


# ---------------------------------------------------------------------------------------
# Machine information
# ---------------------------------------------------------------------------------------
def _version(dist: str) -> Optional[str]:
    try:
        return importlib.metadata.version(dist)
    except importlib.metadata.PackageNotFoundError:
        return None


def _run(cmd: List[str]) -> Optional[str]:
    try:
        return subprocess.run(cmd, capture_output=True, text=True, timeout=20).stdout.strip() or None
    except (OSError, subprocess.SubprocessError):
        return None


def git_commit() -> Dict[str, Any]:
    """The gcdsl commit being measured, and where that answer came from.

    A runner that copied a commit's tree elsewhere says which in `GCDSL_GIT_COMMIT`,
    and that answer wins: the copy may sit in a repository of its own whose HEAD is
    another commit. Otherwise `git` answers in a checkout (`safe.directory` lifted:
    a checkout owned by another user is refused otherwise); without either the JSON
    says so rather than guessing.
    """
    from gcdsl import config  # no DSL import

    if config.get().git_commit:
        return {"gcdsl_git": config.get().git_commit, "gcdsl_git_from": "GCDSL_GIT_COMMIT",
                "gcdsl_git_dirty": None}
    git = ["git", "-c", "safe.directory=*", "-C", ROOT]
    top = _run([*git, "rev-parse", "--show-toplevel"]) if shutil.which("git") else None
    if top and os.path.realpath(top) == os.path.realpath(ROOT):  # not some enclosing repository
        commit = _run([*git, "rev-parse", "HEAD"])
        dirty = _run([*git, "status", "--porcelain", "--untracked-files=no"])
        return {"gcdsl_git": commit, "gcdsl_git_from": "git", "gcdsl_git_dirty": bool(dirty)}
    return {"gcdsl_git": None, "gcdsl_git_from": "unknown: no .git here and GCDSL_GIT_COMMIT unset",
            "gcdsl_git_dirty": None}


def machine_info() -> Dict[str, Any]:
    """Everything a result needs to be reproduced: commit, GPU, driver, DSL, torch, Python, CPU.

    Every benchmark records this, through this one function.
    """
    info: Dict[str, Any] = {
        "date": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
        "host": platform.node(),
        "python": sys.version.split()[0],
        "platform": platform.platform(),
        "cpu": _cpu_model(),
        "nvidia_cutlass_dsl": _version("nvidia-cutlass-dsl"),
        "cuda_python": _version("cuda-python") or _version("cuda-bindings"),
        "torch": _version("torch"),
        **git_commit(),
        "cute_dsl_arch_env": os.environ.get("CUTE_DSL_ARCH"),
        "nvcc": _nvcc_release(),
    }
    try:
        import torch

        info["torch"] = torch.__version__  # with its CUDA suffix (+cu130)
        info["torch_cuda"] = torch.version.cuda
        if torch.cuda.is_available():
            p = torch.cuda.get_device_properties(0)
            info["gpu"] = p.name
            info["sm_count"] = p.multi_processor_count
            info["compute_capability"] = f"{p.major}.{p.minor}"
            info["gpu_memory_gib"] = round(p.total_memory / 2**30, 1)
    except Exception as exc:  # noqa: BLE001 - informational only
        info["torch_error"] = repr(exc)
    smi = _run(["nvidia-smi", "--query-gpu=driver_version,clocks.max.sm,clocks.max.mem", "--format=csv,noheader"])
    if smi:
        info["nvidia_smi"] = smi.splitlines()[0]
        info["driver"] = smi.split(",")[0].strip()
    try:
        import cuda.bindings.driver as cu

        err, version = cu.cuDriverGetVersion()
        if int(err) == 0:
            info["driver_cuda_version"] = f"{version // 1000}.{version % 1000 // 10}"
    except Exception:  # noqa: BLE001
        pass
    return info


def _nvcc_release() -> Optional[str]:
    if not shutil.which("nvcc"):
        return None
    lines = (_run(["nvcc", "--version"]) or "").splitlines()
    return next((line.strip() for line in lines if "release" in line), lines[-1] if lines else None)


def _cpu_model() -> Optional[str]:
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith("model name"):
                    return line.split(":", 1)[1].strip() + f" ({os.cpu_count()} logical CPUs)"
    except OSError:
        pass
    return platform.processor() or None


# ---------------------------------------------------------------------------------------
# Output
# ---------------------------------------------------------------------------------------
@dataclass
class Report:
    """One workload's results: a table for the terminal, JSON for the record."""

    workload: str
    title: str
    config: Dict[str, Any] = field(default_factory=dict)
    rows: List[Dict[str, Any]] = field(default_factory=list)
    notes: List[str] = field(default_factory=list)

    def add(self, **row: Any) -> Dict[str, Any]:
        self.rows.append(row)
        return row

    def write(self, machine: Dict[str, Any], name: str = "") -> str:
        """results/<name or the workload>.json"""
        os.makedirs(RESULTS, exist_ok=True)
        path = os.path.join(RESULTS, f"{name or self.workload}.json")
        with open(path, "w") as f:
            json.dump(
                {"workload": self.workload, "title": self.title, "machine": machine, "config": self.config,
                 "results": self.rows, "notes": self.notes},
                f, indent=1, default=str,
            )
        return path


def table(headers: Sequence[str], rows: Sequence[Sequence[Any]]) -> str:
    """Plain-text table: numbers right-aligned, text left-aligned."""
    cells = [[str(h) for h in headers]] + [[str(c) for c in r] for r in rows]
    widths = [max(len(r[i]) for r in cells) for i in range(len(headers))]

    def just(c: str, w: int) -> str:
        return c.rjust(w) if c[:1].isdigit() or c in ("-",) else c.ljust(w)

    out = ["  ".join(h.ljust(w) for h, w in zip(cells[0], widths)), "  ".join("-" * w for w in widths)]
    out += ["  ".join(just(c, w) for c, w in zip(r, widths)).rstrip() for r in cells[1:]]
    return "\n".join(out)


def fmt_range(stats: Optional[Dict[str, Any]], scale: float = 1.0, digits: int = 1) -> str:
    if not stats:
        return "-"
    return (f"{stats['median'] * scale:.{digits}f} "
            f"[{stats['min'] * scale:.{digits}f}-{stats['max'] * scale:.{digits}f}]")


def print_header(text: str) -> None:
    print("\n" + "=" * len(text) + "\n" + text + "\n" + "=" * len(text), flush=True)


def plot_lines(path: str, title: str, xlabel: str, ylabel: str,
               series: Dict[str, Dict[int, float]], hlines: Optional[Dict[str, float]] = None,
               logx: bool = True) -> Optional[str]:
    """A PNG of one line per variant against N; None where matplotlib is missing."""
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        return None
    fig, ax = plt.subplots(figsize=(7, 4.5))
    xs_all = set()
    for name, points in series.items():
        if points:
            xs = sorted(points)
            xs_all.update(xs)
            ax.plot(xs, [points[x] for x in xs], marker="o", label=name)
    for name, y in (hlines or {}).items():
        ax.axhline(y, linestyle="--", color="gray", linewidth=1, label=name)
    if logx:
        ax.set_xscale("log", base=2)
    if xs_all:
        ax.set_xticks(sorted(xs_all))
        ax.set_xticklabels([str(x) for x in sorted(xs_all)])
    tops = [y for points in series.values() for y in points.values()] + list((hlines or {}).values())
    ax.set_ylim(0, 1.12 * max(tops) if tops else None)
    ax.set_xlabel(xlabel)
    ax.set_ylabel(ylabel)
    ax.set_title(title, fontsize=10)
    ax.grid(True, alpha=0.3)
    ax.legend(fontsize=8, loc="lower left")
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)
    return path


def add_json_flag(parser: Any, workload: str) -> None:
    """`--json NAME`: a side run (a subset, forced configurations) kept beside the
    workload's own results rather than over them."""
    parser.add_argument("--json", default="", metavar="NAME",
                        help=f"write benchmarks/results/NAME.json instead of {workload}.json, and no plot "
                             f"(e.g. {workload}_h100 for a run on another GPU)")


def main_on_gpu(workload: str, run: Callable[[Any, Dict[str, Any]], "Report"], args: Any) -> int:
    """A GPU workload's command: `run(args, machine)`, its JSON written (as `args.json`
    where the workload takes `add_json_flag`'s option), exit status 1 if a variant FAILED
    or raised. Without a GPU it says so and succeeds (nothing to measure)."""
    if not has_hopper_gpu():
        print(f"{workload} needs a Hopper GPU; nothing to do here.")
        return 0
    machine = machine_info()
    machine["quack_kernels"] = _version("quack-kernels")
    print(f"{workload} on {machine.get('gpu')} | driver {machine.get('driver')} | nvidia-cutlass-dsl "
          f"{machine.get('nvidia_cutlass_dsl')} | torch {machine.get('torch')} | quack-kernels "
          f"{machine['quack_kernels']} | git {machine.get('gcdsl_git')}")
    started = time.perf_counter()
    report = run(args, machine)
    report.config["wall_s"] = round(time.perf_counter() - started, 1)
    path = report.write(machine, getattr(args, "json", ""))
    print(f"\nwrote {os.path.relpath(path, ROOT)} ({report.config['wall_s']} s)")
    return 1 if any(r.get("status") in (FAILED, ERROR) for r in report.rows) else 0
