"""Where a W6 layer's or W7 step's device time goes, kernel by kernel, per grouped GEMM.

    python -m benchmarks.profile_layer [--points "deepseek-v3-ep8 4096,deepseek-v3-ep8 16384 step"]
                                       [--variants torch,gcdsl] [--calls 5] [--rounds 3] [--clocks S]

Each point is a shape, a token count and optionally "step": the layer
(`moe_layer.moe_forward`, W6's) or its training step (forward and backward of the mean
square of its output, W7's). For each round, each variant in turn (one further on each
round, `harness.rotated`) runs `--calls` calls on new tokens each under `torch.profiler`
with CUDA activity only, after untimed warm-up calls. Prints, per kernel name
(shortened), the device microseconds per call of every variant, the grouped GEMMs'
kernels first, then every other kernel, then the sums: where one grouped GEMM makes the
layer slower than another, this says whether in its own kernels or in the others' (the
same kernels on the same data). Median over rounds of each kernel's time.

With `--clocks S`, each variant of each round also runs its calls for S seconds
untimed while `nvidia-smi` samples the SM clock and the board's power every 20 ms:
the medians over that window, per variant, say whether one grouped GEMM leaves the GPU
at other clocks than another for the kernels around it.

Writes benchmarks/results/profile_layer.json. Times under the profiler are device
times of each kernel; gaps between kernels (the host's share in eager calls) are not in
them, which W6 and W7 measure.
"""
from __future__ import annotations

import argparse
import collections
import datetime
import os
import re
import statistics
import subprocess
import sys
import tempfile
import time
from typing import Any, Callable, Dict, List, Optional, Tuple

HERE = os.path.dirname(os.path.abspath(__file__))
if os.path.dirname(HERE) not in sys.path:
    sys.path.insert(0, os.path.dirname(HERE))

from benchmarks.harness import OK, Report, rotated, table  # noqa: E402  (imports no DSL)
from benchmarks.moe_layer import GROUPED_MMS, SHAPES, MoEWeights, moe_forward  # noqa: E402

# The grouped GEMMs' kernels: gcdsl's and quack's (CuTe DSL kernels), torch's (CUTLASS's
# device_kernel, and the kernel that writes its per-group arguments).
GEMM_NAME = re.compile(r"grouped_gemm|quackgemm|cutlass13device_kernel|cutlass::device_kernel"
                       r"|prepare_grouped_gemm_data")
POINTS = "deepseek-v3-ep8 4096,mixtral-8x7b 4096,deepseek-v3-ep8 16384 step"


def short(name: str) -> str:
    """A kernel name without template arguments and parameter lists, at most 60 characters."""
    name = re.sub(r"\(.*", "", re.sub(r"<.*", "", name.replace("(anonymous namespace)::", "")))
    return name if len(name) <= 60 else name[:57] + "..."


def caller(shape, tokens: int, variant: str, step: bool) -> Callable[[int], None]:
    """call(i): the layer (or its step) on the i-th input of a pool of four, for `variant`."""
    import torch

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

    return call


def profiled(call: Callable[[int], None], calls: int) -> Dict[str, float]:
    """Device microseconds per call of each kernel name over `calls` calls, after three untimed."""
    import torch
    from torch.profiler import ProfilerActivity, profile

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


class Clocks:
    """`nvidia-smi` sampling the SM clock (MHz) and power (W) every 20 ms while it runs."""

    def __init__(self) -> None:
        self.log = tempfile.NamedTemporaryFile("w+", suffix=".csv", delete=False)
        self.proc = subprocess.Popen(["nvidia-smi", "--query-gpu=timestamp,clocks.sm,power.draw",
                                      "--format=csv,noheader,nounits", "-lms", "20"],
                                     stdout=self.log, stderr=subprocess.DEVNULL)

    def samples(self) -> List[Tuple[float, float, float]]:
        """(seconds since the epoch, MHz, W) of every sample so far."""
        out = []
        with open(self.log.name) as f:
            for line in f:
                try:
                    stamp, mhz, watts = (c.strip() for c in line.split(","))
                    when = datetime.datetime.strptime(stamp, "%Y/%m/%d %H:%M:%S.%f").timestamp()
                    out.append((when, float(mhz), float(watts)))
                except ValueError:
                    continue
        return out

    def stop(self) -> None:
        self.proc.terminate()
        self.proc.wait()
        os.unlink(self.log.name)


def clocks_while(call: Callable[[int], None], seconds: float) -> Tuple[float, float]:
    """The wall-clock window (start, end) of `call`s issued for `seconds`, the GPU idle after."""
    import torch

    torch.cuda.synchronize()
    start, i = time.time(), 0
    while time.time() - start < seconds:
        call(i)
        i += 1
    torch.cuda.synchronize()
    return start, time.time()


def window_medians(samples, window) -> Optional[Tuple[float, float]]:
    inside = [(mhz, watts) for when, mhz, watts in samples if window[0] <= when <= window[1]]
    if not inside:
        return None
    return statistics.median(m for m, _ in inside), statistics.median(w for _, w in inside)


def run(args, machine: Dict[str, Any]) -> Report:
    import torch

    variants: List[str] = args.variants.split(",")
    report = Report("profile_layer", "W6 layers and W7 steps, device time by kernel for each grouped GEMM",
                    config={"calls": args.calls, "rounds": args.rounds, "variants": variants,
                            "clock_seconds": args.clocks})
    clocks = Clocks() if args.clocks else None
    for name, tokens, step in args.points:
        callers = {v: caller(SHAPES[name], int(tokens), v, step) for v in variants}
        samples: Dict[str, List[Dict[str, float]]] = {v: [] for v in variants}
        windows: Dict[str, List[Tuple[float, float]]] = {v: [] for v in variants}
        for r in range(args.rounds):
            for v in rotated(variants, r):
                samples[v].append(profiled(callers[v], args.calls))
                if clocks:
                    windows[v].append(clocks_while(callers[v], args.clocks))
        sampled = clocks.samples() if clocks else []
        held = {v: [m for m in (window_medians(sampled, w) for w in windows[v]) if m] for v in variants}
        names = sorted({n for s in samples.values() for t in s for n in t},
                       key=lambda n: (not GEMM_NAME.search(n), -max(t.get(n, 0.0) for s in samples.values()
                                                                    for t in s)))
        times = {v: {n: statistics.median(t.get(n, 0.0) for t in samples[v]) for n in names} for v in variants}
        sums = {}
        for label, pick in (("grouped GEMMs", lambda n: bool(GEMM_NAME.search(n))),
                            ("everything else", lambda n: not GEMM_NAME.search(n)), ("all", lambda n: True)):
            sums[label] = {v: sum(t for n, t in times[v].items() if pick(n)) for v in variants}
        what = "training step" if step else "layer"
        print(f"\n{name}, {tokens} tokens, {what}: device us per call by kernel (median of {args.rounds} rounds)")
        rows = [[n] + [f"{times[v][n]:.1f}" for v in variants] for n in names]
        rows += [[f"sum: {label}"] + [f"{s[v]:.1f}" for v in variants] for label, s in sums.items()]
        if clocks:
            rows += [["SM clock (MHz), median of rounds"] + [
                f"{statistics.median(m for m, _ in held[v]):.0f}" if held[v] else "-" for v in variants]]
            rows += [["power (W), median of rounds"] + [
                f"{statistics.median(w for _, w in held[v]):.0f}" if held[v] else "-" for v in variants]]
        print(table(["kernel"] + variants, rows), flush=True)
        for v in variants:
            report.add(shape=name, tokens=int(tokens), case=what, variant=v, status=OK, kernels_us=times[v],
                       gemm_us=sums["grouped GEMMs"][v], other_us=sums["everything else"][v], us=sums["all"][v],
                       rounds=[sum(t.values()) for t in samples[v]],
                       sm_mhz_rounds=[m for m, _ in held[v]], power_w_rounds=[w for _, w in held[v]])
        del callers
        torch.cuda.empty_cache()
    if clocks:
        clocks.stop()
    return report


def points(text: str) -> List[Tuple[str, int, bool]]:
    """`--points`: (shape, tokens, whether the training step) for each comma-separated point."""
    out = []
    for point in text.split(","):
        words = point.split()
        if not (2 <= len(words) <= 3 and words[0] in SHAPES and words[1].isdigit() and int(words[1]) > 0
                and words[2:] in ([], ["step"])):
            raise argparse.ArgumentTypeError(f"{point.strip()!r}: expected \"shape tokens [step]\" with a shape "
                                             f"of {', '.join(SHAPES)} and a positive token count")
        out.append((words[0], int(words[1]), words[2:] == ["step"]))
    return out


def main(argv=None) -> int:
    from benchmarks import harness

    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--points", default=POINTS, type=points, help='comma-separated "shape tokens [step]"')
    p.add_argument("--variants", default="torch,gcdsl")
    p.add_argument("--calls", type=int, default=5)
    p.add_argument("--rounds", type=int, default=3)
    p.add_argument("--clocks", type=float, default=0.0, metavar="S",
                   help="also run each variant S seconds a round with nvidia-smi sampling SM clock and power")
    return harness.main_on_gpu("profile_layer", run, p.parse_args(argv))


if __name__ == "__main__":
    sys.exit(main())
