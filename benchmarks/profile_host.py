"""Where an eager W6 layer's host time goes: the grouped GEMM calls against the rest.

    python -m benchmarks.profile_host [--points "qwen3-30b-a3b 1,deepseek-v3-ep8 1"]
                                      [--variants torch,gcdsl] [--calls 200] [--rounds 5] [--cprofile]
                                      [--json NAME]

At few tokens an eager layer is bound by its host: the GPU finishes each kernel before
the host has launched the next, and the layer takes as long as its Python and launch
calls. W6 times that layer between CUDA events; this splits the host's share. Each
variant in turn (one further on each round, `harness.rotated`) runs `--calls` layers
back to back on new tokens, as W6's eager batch does, with `grouped_mm` wrapped in a
`time.perf_counter` pair: per layer, the wall time between CUDA events, the host time of
the layer's Python call, and the host time inside its grouped GEMM calls. Medians over
rounds. With `--cprofile`, one more batch per variant under `cProfile`: the functions
with the most own time, to find what a call does that the other's does not.

Writes benchmarks/results/profile_host.json (with `--json NAME`, NAME.json: a run kept
beside it); RESULTS.md's profile-host region shows every such run.
"""
from __future__ import annotations

import argparse
import cProfile
import io
import os
import pstats
import statistics
import sys
import time
from typing import Any, Callable, Dict, List, Tuple

HERE = os.path.dirname(os.path.abspath(__file__))
if os.path.dirname(HERE) not in sys.path:
    sys.path.insert(0, os.path.dirname(HERE))

from benchmarks import profile_layer  # noqa: E402  (imports no DSL)
from benchmarks.harness import OK, Report, rotated, table  # noqa: E402
from benchmarks.moe_layer import GROUPED_MMS, SHAPES, MoEWeights, moe_forward  # noqa: E402

POINTS = "qwen3-30b-a3b 1,deepseek-v3-ep8 1,mixtral-8x7b 1"
POOL = 8  # distinct inputs cycled through: new routing on every call, as in W6


class TimedGroupedMM:
    """`grouped_mm` with the host time of its calls added up."""

    def __init__(self, gmm: Callable) -> None:
        self.gmm, self.seconds = gmm, 0.0

    def __call__(self, a, b, offs):
        t0 = time.perf_counter()
        out = self.gmm(a, b, offs)
        self.seconds += time.perf_counter() - t0
        return out


def batch(layer: Callable[[int], None], gmm: TimedGroupedMM, calls: int) -> Dict[str, float]:
    """Microseconds per layer of `calls` layers back to back: between CUDA events (wall),
    the host's Python calls, and the host inside the grouped GEMM calls."""
    import torch

    for i in range(calls):  # untimed: caches, clocks, the allocator's pools
        layer(i)
    torch.cuda.synchronize()
    gmm.seconds = 0.0
    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    start.record()
    t0 = time.perf_counter()
    for i in range(calls):
        layer(i)
    host = time.perf_counter() - t0
    end.record()
    end.synchronize()
    return {"wall_us": start.elapsed_time(end) * 1e3 / calls, "host_us": host * 1e6 / calls,
            "gemm_host_us": gmm.seconds * 1e6 / calls}


def profile_top(layer: Callable[[int], None], calls: int, top: int = 25) -> str:
    """cProfile's functions with the most own time over `calls` layers."""
    import torch

    prof = cProfile.Profile()
    prof.enable()
    for i in range(calls):
        layer(i)
    prof.disable()
    torch.cuda.synchronize()
    text = io.StringIO()
    pstats.Stats(prof, stream=text).sort_stats("tottime").print_stats(top)
    return text.getvalue()


def run(args, machine: Dict[str, Any]) -> Report:
    import torch

    variants: List[str] = args.variants.split(",")
    report = Report("profile_host", "W6 eager layers, host time in the grouped GEMM calls and elsewhere",
                    config={"calls": args.calls, "rounds": args.rounds, "variants": variants})
    for name, tokens in args.points:
        shape = SHAPES[name]
        w = MoEWeights.random(shape, torch.bfloat16, 0)
        g = torch.Generator(device="cuda").manual_seed(1)
        pool = [torch.randn(tokens, shape.hidden, device="cuda", generator=g).to(torch.bfloat16)
                for _ in range(POOL)]
        timed = {v: TimedGroupedMM(GROUPED_MMS[v]) for v in variants}
        layers = {v: (lambda i, gmm=timed[v]: moe_forward(pool[i % POOL], w, shape.top_k, gmm)) for v in variants}
        samples: Dict[str, List[Dict[str, float]]] = {v: [] for v in variants}
        for r in range(args.rounds):
            for v in rotated(variants, r):
                samples[v].append(batch(layers[v], timed[v], args.calls))
        med = {v: {k: statistics.median(s[k] for s in samples[v]) for k in samples[v][0]} for v in variants}
        print(f"\n{name}, {tokens} tokens, eager: microseconds per layer (median of {args.rounds} rounds of "
              f"{args.calls} layers)")
        rows = [[v, f"{m['wall_us']:.1f}", f"{m['host_us']:.1f}", f"{m['gemm_host_us']:.1f}",
                 f"{m['host_us'] - m['gemm_host_us']:.1f}"] for v, m in med.items()]
        print(table(["variant", "wall", "host", "host in grouped GEMMs", "host elsewhere"], rows), flush=True)
        for v in variants:
            profile = profile_top(layers[v], args.calls) if args.cprofile else None
            if profile:
                print(f"\n{name}, {tokens} tokens, {v}: cProfile over {args.calls} layers, by own time\n{profile}")
            report.add(shape=name, tokens=tokens, variant=v, status=OK, rounds=samples[v], cprofile=profile,
                       **med[v])
        del layers, timed
        torch.cuda.empty_cache()
    return report


def points(text: str) -> List[Tuple[str, int]]:
    """`--points`: (shape, tokens) for each comma-separated "shape tokens" (`profile_layer`'s
    form, without its training steps: an eager step is not bound by its host)."""
    out = profile_layer.points(text)
    if any(step for _, _, step in out):
        raise argparse.ArgumentTypeError(f"{text!r}: layers only, \"shape tokens\" (no \"step\")")
    return [(name, tokens) for name, tokens, _ in out]


def main(argv=None) -> int:
    from benchmarks import harness

    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--points", default=POINTS, type=points, help='comma-separated "shape tokens"')
    p.add_argument("--variants", default="torch,gcdsl")
    p.add_argument("--calls", type=int, default=200)
    p.add_argument("--rounds", type=int, default=5)
    p.add_argument("--cprofile", action="store_true", help="also print cProfile's top functions per variant")
    harness.add_json_flag(p, "profile_host")
    return harness.main_on_gpu("profile_host", run, p.parse_args(argv))


if __name__ == "__main__":
    sys.exit(main())
