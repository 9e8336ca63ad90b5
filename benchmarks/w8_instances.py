"""W8's graph replays, instance by instance: how much one capture's time depends on the capture.

W8 times each variant on POOL graphs, one per routed batch. This captures the same call
(batch 0's inputs, copied afresh for each capture) `--instances` times per variant and
times every graph in alternating rounds, so that each variant's spread over captures of
one and the same call is measured beside the other variants': the part of a W8
difference that a new capture can move. For each (shape, T) and variant: the fastest,
median and slowest capture, and torch's median over fused_moe's per capture.

    python benchmarks/w8_instances.py [--points deepseek-v3-ep8:1,mixtral-8x7b:8] [--instances 6]
                                      [--variants torch,fused_moe]

Writes benchmarks/results/W8_instances.json (every capture's rounds).

To see what sets a fast capture apart from a slow one, `--replay-extremes N` replays
each variant's fastest and slowest capture N times after the timing, inside the NVTX
ranges "<variant> fastest" and "<variant> slowest", which Nsight Compute can select:

    ncu --graph-profiling node --nvtx --nvtx-include "fused_moe fastest/" \
        --nvtx-include "fused_moe slowest/" --set full -o w8_extremes \
        python benchmarks/w8_instances.py --points deepseek-v3-ep8:1 --variants fused_moe --replay-extremes 1
"""
from __future__ import annotations

import argparse
import os
import statistics
import sys
from typing import Dict, List

HERE = os.path.dirname(os.path.abspath(__file__))
if os.path.dirname(HERE) not in sys.path:
    sys.path.insert(0, os.path.dirname(HERE))

from benchmarks.harness import OK, Report, table, us_per_call  # noqa: E402  (imports no DSL)
from benchmarks.moe_layer import SHAPES  # noqa: E402
from benchmarks.w8_fused_moe import Point, capture, layer, warm_up  # noqa: E402

POINTS = ("deepseek-v3-ep8:1", "mixtral-8x7b:8", "qwen3-30b-a3b:1")
VARIANTS = ("torch", "fused_moe")


def run(args, machine) -> Report:
    import torch

    report = Report("W8_instances", "W8's graph replays, capture by capture (one call, captured again)",
                    config={"calls": args.calls, "rounds": args.rounds, "instances": args.instances})
    variants = args.variants.split(",") if args.variants else VARIANTS
    rows = []
    for name, tokens in args.points:
        p = Point(SHAPES[name], tokens)
        graphs: Dict[str, List] = {}
        for v in variants:
            fn = layer(v)
            warm_up(p, fn)  # compiles outside the captures
            graphs[v] = [capture(p, fn, 0) for _ in range(args.instances)]  # the same call each time
        samples = {(v, i): [] for v in variants for i in range(args.instances)}
        for _ in range(args.rounds):  # alternating rounds over every capture of every variant
            for v, i in samples:
                graph = graphs[v][i][0]
                samples[(v, i)].append(us_per_call(lambda _call: graph.replay(), args.calls))
        medians = {v: [statistics.median(samples[(v, i)]) for i in range(args.instances)] for v in variants}
        for v in variants:
            us = medians[v]
            report.add(shape=name, tokens=tokens, variant=v, status=OK, us=statistics.median(us),
                       min_us=min(us), max_us=max(us), instances_us=us,
                       rounds_us=[samples[(v, i)] for i in range(args.instances)])
            rows.append([name, tokens, v, f"{min(us):.1f}", f"{statistics.median(us):.1f}", f"{max(us):.1f}",
                         f"{max(us) / min(us):.2f}x"])
        if args.replay_extremes:
            replay_extremes(graphs, medians, args.replay_extremes)
        if {"torch", "fused_moe"} <= set(variants):
            torch_us = statistics.median(medians["torch"])
            ratios = [torch_us / u for u in medians["fused_moe"]]
            report.notes.append(f"{name}, {tokens} tokens: torch's median over fused_moe's captures "
                                f"{min(ratios):.2f}x to {max(ratios):.2f}x (median {statistics.median(ratios):.2f}x)")
            print(report.notes[-1], flush=True)
        del p, graphs
        torch.cuda.empty_cache()
    print(table(["shape", "tokens", "variant", "fastest us", "median us", "slowest us", "slowest / fastest"], rows))
    return report


def replay_extremes(graphs: Dict[str, List], medians: Dict[str, List[float]], replays: int) -> None:
    """Each variant's fastest and slowest capture replayed `replays` times inside the NVTX
    ranges "<variant> fastest" and "<variant> slowest", for a profiler to take them apart."""
    import torch

    for v, us in medians.items():
        for which, i in (("fastest", us.index(min(us))), ("slowest", us.index(max(us)))):
            with torch.cuda.nvtx.range(f"{v} {which}"):
                for _ in range(replays):
                    graphs[v][i][0].replay()
            torch.cuda.synchronize()


def parse_args(argv=None):
    p = argparse.ArgumentParser(description="W8's graph replays, capture by capture (see the module docstring)")
    p.add_argument("--points", default="", help="comma-separated shape:tokens (default " + ",".join(POINTS) + ")")
    p.add_argument("--variants", default="", help="comma-separated W8 variants (default " + ",".join(VARIANTS) + ")")
    p.add_argument("--instances", type=int, default=6, help="captures of the same call per variant")
    p.add_argument("--calls", type=int, default=20, help="replays per timed batch")
    p.add_argument("--replay-extremes", type=int, default=0, metavar="N",
                   help="then replay each variant's fastest and slowest capture N times in NVTX ranges")
    p.add_argument("--rounds", type=int, default=3)
    return p.parse_args(argv)


def main(argv=None) -> int:
    from benchmarks import harness

    args = parse_args(argv)
    points = []  # (shape, tokens), checked before anything runs
    for point in (args.points.split(",") if args.points else POINTS):
        shape, _, tokens = point.partition(":")
        if shape not in SHAPES or not tokens.isdigit() or int(tokens) < 1:
            raise SystemExit(f"--points: {point!r} is not shape:tokens, shape one of {', '.join(SHAPES)}")
        points.append((shape, int(tokens)))
    args.points = points
    if args.instances < 1:
        raise SystemExit(f"--instances {args.instances}: at least one capture per variant")
    return harness.main_on_gpu("W8_instances", run, args)


if __name__ == "__main__":
    sys.exit(main())
