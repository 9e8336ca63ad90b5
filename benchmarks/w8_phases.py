"""W8's expert kernels, phase by phase: when each CTA reached each step of its work.

`gcdsl.ops.fused_moe.megakernel_phases` runs the layer with the one kernel built with
phase stamps (the global timer, in ns, written by one thread of each CTA at each of
`hopper_grouped_gemm.PHASES`). For each W8 shape and token count this prints, per
phase, the earliest, median and latest CTA (microseconds from the first CTA's start),
and the weight bytes over each GEMM's span: the gate-up GEMM from the start to its
last stored tile, the down GEMM from its first wait's end to its last tile. Where the
stream rate of a phase falls below the copy bandwidth, that phase is where the
layer's time goes.

With `--kernel decode`, the decode kernel (`fused_moe.decode_phases`, the phases of
`decode_kernel.PHASES`) at the points it takes (up to 32 slots): the same table, the
active weights' bytes over the kernel's span, and the span cut at the last CTA's
gate-up GEMVs and at the last CTA past the barrier; with `--kernel decode-streamed`, its
build with every weight row through the ring (`decode_ring`).

    python benchmarks/w8_phases.py [--kernel one|decode|decode-streamed] [--shapes qwen3-30b-a3b] [--tokens 1,8]

The stamps change the kernel a little (one store per phase per CTA), so its times are
for finding where the time goes, not for W8's tables. Writes
benchmarks/results/W8_phases.json (W8_decode_phases.json, W8_streamed_phases.json):
every CTA's stamps of the last call.
"""
from __future__ import annotations

import argparse
import os
import statistics
import sys
from typing import List

HERE = os.path.dirname(os.path.abspath(__file__))
if os.path.dirname(HERE) not in sys.path:
    sys.path.insert(0, os.path.dirname(HERE))

from benchmarks.harness import OK, Report, table  # noqa: E402  (imports no DSL)
from benchmarks.moe_layer import SHAPES  # noqa: E402
from benchmarks.w8_fused_moe import TOLERANCE, Point  # noqa: E402

TOKENS = (1, 8, 64)
DECODE_TOKENS = (1, 2, 4)


def _reached(values) -> List[float]:
    """A phase's times of the CTAs that reached it (NaN: a CTA without this phase)."""
    return [v for v in values.tolist() if v == v]


def _spread(values) -> str:
    seen = _reached(values)
    if not seen:
        return "-"
    return f"{min(seen):.1f} / {statistics.median(seen):.1f} / {max(seen):.1f}"


def run(args, machine) -> Report:
    import torch

    from benchmarks.w5_grouped_gemm import copy_bandwidth
    from gcdsl.ops import decode_kernel, hopper_grouped_gemm
    from gcdsl.ops.fused_moe import decode_phases, megakernel_phases

    decode = args.kernel.startswith("decode")
    if decode:
        streamed = args.kernel == "decode-streamed"
        phased, PHASES = (lambda *layer: decode_phases(*layer, streamed=streamed)), decode_kernel.PHASES
    else:
        phased, PHASES = megakernel_phases, hopper_grouped_gemm.PHASES
    report = Report(_workload(args.kernel), f"W8's {args.kernel} kernel, phase by phase (stamped build)",
                    config={"calls": args.calls, "kernel": args.kernel})
    copy_gbps = report.config["copy_gbps"] = copy_bandwidth(20, 3)["gbps"]
    shapes = [SHAPES[s] for s in (args.shapes.split(",") if args.shapes else SHAPES)]
    tokens = [int(t) for t in args.tokens.split(",")] if args.tokens else (DECODE_TOKENS if decode else TOKENS)
    for shape in shapes:
        for t in tokens:
            if decode and t * shape.top_k > decode_kernel.MAX_SLOTS:
                print(f"\n{shape.name}, {t} tokens: more slots than the decode kernel takes", flush=True)
                continue
            p = Point(shape, t)
            x, weights, ids = p.pool[0]
            for _ in range(args.calls):  # the first compiles; the stamps are the last call's
                out, phases = phased(x, p.w1, p.w2, weights, ids)
            err = p.error(out)
            if not err <= TOLERANCE:
                raise AssertionError(f"{shape.name}, {t} tokens: relative error {err:.2e}")
            if decode:
                report.add(**_decode_row(shape, t, p.active, phases, copy_gbps))
                del p
                torch.cuda.empty_cache()
                continue
            up_bytes = shape.weight_bytes(p.active) * 2 / 3  # w1 holds two of each expert's three matrices
            gate_up_us = max(_reached(phases["gate-up tiles stored"]))
            down_from = min(_reached(phases["first down tile's wait over"]))
            end_us = max(_reached(phases["down tiles done"]))
            gate_up_gbps = up_bytes / (gate_up_us * 1e3)
            down_gbps = up_bytes / 2 / ((end_us - down_from) * 1e3)
            print(f"\n{shape.name}, {t} tokens: {p.active} active experts, kernel {end_us:.1f} us; "
                  f"gate-up {gate_up_gbps:.0f} GB/s, down {down_gbps:.0f} GB/s "
                  f"(copy bandwidth {copy_gbps:.0f} GB/s)", flush=True)
            print(table(["phase", "us from start: first / median / last CTA"],
                        [[phase, _spread(phases[phase])] for phase in PHASES]))
            report.add(shape=shape.name, tokens=t, status=OK, active_experts=p.active, kernel_us=end_us,
                       gate_up_gbps=gate_up_gbps, down_gbps=down_gbps,
                       phases_us={phase: phases[phase].tolist() for phase in PHASES})
            del p
            torch.cuda.empty_cache()
    return report


def _decode_row(shape, tokens: int, active: int, phases, copy_gbps: float) -> dict:
    """Print the decode kernel's phases at one point; its report row."""
    from gcdsl.ops.decode_kernel import PHASES

    last = {phase: max(_reached(phases[phase]), default=float("nan")) for phase in PHASES}
    end_us = last["end"]
    gbps = shape.weight_bytes(active) / (end_us * 1e3)
    spans = {"gate-up GEMVs": last["gate-up GEMVs done"],
             "barrier": last["barrier over"] - last["gate-up GEMVs done"],
             "down GEMVs, combine": end_us - last["barrier over"]}
    print(f"\n{shape.name}, {tokens} tokens: {active} active experts, kernel {end_us:.1f} us, "
          f"{gbps:.0f} GB/s of weights (copy bandwidth {copy_gbps:.0f} GB/s); to the last CTA: "
          + ", ".join(f"{name} {us:.1f} us" for name, us in spans.items()), flush=True)
    print(table(["phase", "us from start: first / median / last CTA"],
                [[phase, _spread(phases[phase])] for phase in PHASES]))
    return dict(shape=shape.name, tokens=tokens, status=OK, active_experts=active, kernel_us=end_us, gbps=gbps,
                spans_us=spans, phases_us={phase: phases[phase].tolist() for phase in PHASES})


def _workload(kernel: str) -> str:
    return {"one": "W8_phases", "decode": "W8_decode_phases", "decode-streamed": "W8_streamed_phases"}[kernel]


def parse_args(argv=None):
    p = argparse.ArgumentParser(description="W8's expert kernels, phase by phase (see the module docstring)")
    p.add_argument("--kernel", choices=("one", "decode", "decode-streamed"), default="one",
                   help="the one tensor-core kernel (default), the decode kernel, or its streamed build")
    p.add_argument("--shapes", default="", help="comma-separated subset of " + ",".join(SHAPES))
    p.add_argument("--tokens", default="", help="comma-separated token counts (default 1,8,64; decode: 1,2,4)")
    p.add_argument("--calls", type=int, default=3, help="layer calls per point (the stamps of the last)")
    return p.parse_args(argv)


def main(argv=None) -> int:
    from benchmarks import harness

    args = parse_args(argv)
    return harness.main_on_gpu(_workload(args.kernel), run, args)


if __name__ == "__main__":
    sys.exit(main())
