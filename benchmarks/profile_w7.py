"""One W7 case through one variant, for a profiler to look at.

    ncu --profile-from-start off --clock-control none \\
        --section SpeedOfLight --section WarpStateStats --section MemoryWorkloadAnalysis \\
        python -m benchmarks.profile_w7 qwen3-30b-a3b 4096 "w13 weight grad" "gcdsl pingpong 192"

Variants are W7's (`w7_training.grouped`): torch, gcdsl, quack, cooperative,
"gcdsl <schedule> <tile_n>" forced, and "gcdsl m-order" or "gcdsl n-order" (the tile
order forced). The data is W7's (`w7_training.Cases`). Three calls
(the first compiles); only the third runs inside the profiler's range, so every kernel
the profiler reports is the variant's own. A fifth argument, one of `w7_training.ROUTINGS`,
counts the experts' rows otherwise than the router: "even" gives every expert the same
number, "whole-tiles" rounds the router's counts to whole pair M-steps.
"""
import sys

import torch

from benchmarks.moe_layer import SHAPES
from benchmarks.w7_training import ROUTINGS, Cases, grouped


def main(shape: str, tokens: str, case: str, variant: str, routing: str = "routed") -> None:
    if routing not in ROUTINGS:
        raise SystemExit(f"routing {routing!r}: expected one of {', '.join(ROUTINGS)}")
    c = Cases(SHAPES[shape], int(tokens), routing=routing)
    a, b = c.operands[case]
    for _ in range(2):
        grouped(variant, a, b, c.offs)
    torch.cuda.synchronize()
    torch.cuda.cudart().cudaProfilerStart()
    grouped(variant, a, b, c.offs)
    torch.cuda.synchronize()
    torch.cuda.cudart().cudaProfilerStop()


if __name__ == "__main__":
    main(*sys.argv[1:6])
