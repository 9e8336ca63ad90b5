"""Launch `batch_copy.checked` with a given index table; run as a process by the GPU tests:

    python -m tests.kernels.bounds_trap 0 3 7     # 4 atoms: index 7 must trap
"""
import sys

import torch
from cutlass.cute.runtime import from_dlpack

from tests.kernels import batch_copy as bc


def main(indices) -> int:
    srcs = [torch.randn(256, 128, device="cuda") for _ in range(4)]
    pick = torch.tensor(indices, dtype=torch.int32, device="cuda")
    out = torch.full((len(indices),), -1, dtype=torch.int32, device="cuda")
    bc.checked([from_dlpack(s, assumed_align=16) for s in srcs], from_dlpack(out, assumed_align=4),
               from_dlpack(pick, assumed_align=4))
    torch.cuda.synchronize()
    print("completed:", out.tolist(), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main([int(a) for a in sys.argv[1:]]))
