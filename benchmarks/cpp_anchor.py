"""Build and run the CUDA C++ anchor (benchmarks/cpp/w1_anchor.cu) with nvcc, as a subprocess."""
from __future__ import annotations

import json
import os
import shutil
import subprocess
from typing import Any, Dict, List, Optional, Sequence, Tuple

from .harness import HERE, ROOT

SOURCE = os.path.join(HERE, "cpp", "w1_anchor.cu")
BUILD = os.path.join(HERE, "build")


def nvcc() -> Optional[str]:
    found = shutil.which("nvcc")
    if found:
        return found
    for candidate in ("/usr/local/cuda/bin/nvcc", "/usr/local/cuda-13.0/bin/nvcc"):
        if os.path.exists(candidate):
            return candidate
    return None


def _flags(arch: str) -> List[str]:
    return [f"-arch={arch}", "-O3", "-std=c++17", "-lineinfo"]


def build(arch: str = "sm_90a", force: bool = False) -> Tuple[Optional[str], str]:
    """(path of the binary or None, message). Rebuilt when the source is newer than the binary.

    No `-lcuda`: the binary gets cuTensorMapEncodeTiled from the driver at run time
    (cudaGetDriverEntryPointByVersion), so it links wherever nvcc runs.
    """
    compiler = nvcc()
    if compiler is None:
        return None, "nvcc not found: C++ anchor skipped"
    os.makedirs(BUILD, exist_ok=True)
    binary = os.path.join(BUILD, f"w1_anchor_{arch}")
    if not force and os.path.exists(binary) and os.path.getmtime(binary) >= os.path.getmtime(SOURCE):
        return binary, "cached build"
    cmd = [compiler, *_flags(arch), "-o", binary, SOURCE]
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=600)
    if proc.returncode != 0:
        return None, f"nvcc failed ({' '.join(cmd)}):\n{proc.stderr[-3000:]}"
    # recorded in the results: paths inside the checkout relative to it, the same on every machine
    return binary, " ".join(os.path.relpath(c, ROOT) if c.startswith(ROOT + os.sep) else c for c in cmd)


def run(binary: str, ns: Sequence[int], k_loads: int, grid: int, reps: int, warmup: int) -> Dict[str, Any]:
    cmd = [binary, "--n", ",".join(map(str, ns)), "--k-loads", str(k_loads), "--grid", str(grid),
           "--reps", str(reps), "--warmup", str(warmup)]
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=300)
    lines = [line for line in proc.stdout.splitlines() if line.startswith("{")]
    if not lines:
        raise RuntimeError(f"{' '.join(cmd)} exited {proc.returncode}: {proc.stderr[-2000:]}")
    result = json.loads(lines[-1])
    if "error" in result:
        raise RuntimeError(f"{' '.join(cmd)}: {result['error']}")
    return result
