"""Where a W6 layer's or W7 step's device time goes, kernel by kernel, per grouped GEMM.

    python -m benchmarks.profile_layer deepseek-v3-ep8 4096 [--step] [--variants torch,gcdsl] [--calls 10]

Runs the layer (`moe_layer.moe_forward`, W6's) or its training step (forward and
backward, W7's) `--calls` times per variant on new tokens each call, under
`torch.profiler` with CUDA activity only, after untimed warm-up calls. Prints, per
kernel name (shortened), the device microseconds per call of every variant, the
grouped GEMMs first, then every other kernel; the last rows are the sums. A kernel
that costs more with one grouped GEMM than another, though it is not a GEMM, shows
up here as a row that differs.
"""
from __future__ import annotations

import argparse
import collections
import os
import re
import sys
from typing import Dict, List

HERE = os.path.dirname(os.path.abspath(__file__))
if os.path.dirname(HERE) not in sys.path:
    sys.path.insert(0, os.path.dirname(HERE))

from benchmarks.harness import table  # noqa: E402  (imports no DSL)
from benchmarks.moe_layer import GROUPED_MMS, SHAPES, MoEWeights, moe_forward  # noqa: E402

# Kernel names of the grouped GEMMs themselves: gcdsl's and quack's (CuTe DSL kernels), torch's (CUTLASS).
GEMM_NAME = re.compile(r"grouped_mm|kernel_cutlass|cutlass|Gemm|gemm", re.IGNORECASE)


def short(name: str) -> str:
    """A kernel name without template arguments and parameter lists, at most 60 characters."""
    name = re.sub(r"\(.*", "", re.sub(r"<.*", "", name.replace("(anonymous namespace)::", "")))
    return name if len(name) <= 60 else name[:57] + "..."


def per_call_us(shape, tokens: int, variant: str, step: bool, calls: int) -> Dict[str, float]:
    import torch
    from torch.profiler import ProfilerActivity, profile

    w = MoEWeights.random(shape, torch.bfloat16, 0)
    if step:
        w = MoEWeights(*(t.detach().requires_grad_() for t in (w.router, w.w13, w.w2)))
    g = torch.Generator(device="cuda").manual_seed(7)
    pool = [torch.randn(tokens, shape.hidden, device="cuda", generator=g).to(torch.bfloat16) for _ in range(4)]
    gmm = GROUPED_MMS[variant]

    def call(i: int) -> None:
        x = pool[i % len(pool)]
        if not step:
            moe_forward(x, w, shape.top_k, gmm)
            return
        for t in (w.router, w.w13, w.w2):
            t.grad = None
        x = x.detach().requires_grad_()
        moe_forward(x, w, shape.top_k, gmm).float().square().mean().backward()

    for i in range(3):
        call(i)
    torch.cuda.synchronize()
    with profile(activities=[ProfilerActivity.CUDA]) as prof:
        for i in range(calls):
            call(i)
        torch.cuda.synchronize()
    totals: Dict[str, float] = collections.defaultdict(float)
    for e in prof.key_averages():  # with CUDA activity only, one entry per kernel name (and memcpy, memset)
        us = getattr(e, "self_device_time_total", None)
        us = e.self_cuda_time_total if us is None else us
        if us > 0:
            totals[short(e.key)] += us / calls
    return totals


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("shape", choices=sorted(SHAPES))
    p.add_argument("tokens", type=int)
    p.add_argument("--step", action="store_true", help="the training step (forward and backward), not the layer")
    p.add_argument("--variants", default="torch,gcdsl")
    p.add_argument("--calls", type=int, default=10)
    args = p.parse_args(argv)
    variants: List[str] = args.variants.split(",")
    times = {v: per_call_us(SHAPES[args.shape], args.tokens, v, args.step, args.calls) for v in variants}
    names = sorted({n for t in times.values() for n in t},
                   key=lambda n: (not GEMM_NAME.search(n), -max(t.get(n, 0.0) for t in times.values())))
    rows = [[n] + [f"{times[v].get(n, 0.0):.1f}" for v in variants] for n in names]
    for label, pick in (("grouped GEMMs", lambda n: bool(GEMM_NAME.search(n))), ("everything else", lambda n: not GEMM_NAME.search(n)),
                        ("all", lambda n: True)):
        rows.append([f"sum: {label}"] + [f"{sum(t for n, t in times[v].items() if pick(n)):.1f}" for v in variants])
    what = "training step" if args.step else "layer"
    print(f"{args.shape}, {args.tokens} tokens, {what}: device us per call by kernel")
    print(table(["kernel"] + variants, rows))
    return 0


if __name__ == "__main__":
    sys.exit(main())
