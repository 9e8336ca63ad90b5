"""One W5 shape through `gcdsl.ops.grouped_mm`, for a profiler to look at.

    ncu --clock-control none -k regex:kernel_cutlass --launch-skip 2 --launch-count 1 \\
        --section SpeedOfLight --section MemoryWorkloadAnalysis --section Occupancy --section LaunchStats \\
        python -m benchmarks.profile_w5 S4 bf16 > benchmarks/results/ncu_s4_bf16.txt

Three calls (the first compiles; the profiler skips two), same data as W5's shape.
"""
import sys

import torch

import gcdsl.ops

from benchmarks.w5_grouped_gemm import SHAPES


def main(shape: str, dtype: str) -> None:
    rows, n, k = SHAPES[shape.upper()]
    dt = {"bf16": torch.bfloat16, "fp16": torch.float16}[dtype]
    a = torch.randn(sum(rows), k, device="cuda", dtype=dt)
    b = torch.randn(len(rows), n, k, device="cuda", dtype=dt).transpose(-2, -1)
    offs = torch.tensor(rows, dtype=torch.int32).cumsum(0).to(torch.int32).cuda()  # as a router makes it
    for _ in range(3):
        gcdsl.ops.grouped_mm(a, b, offs)
    torch.cuda.synchronize()


if __name__ == "__main__":
    main(*sys.argv[1:3])
