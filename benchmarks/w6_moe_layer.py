"""W6: an MoE layer as models run it, the grouped GEMM swapped: torch, gcdsl, quack-kernels.

The layer is `benchmarks/moe_layer.py`: router, top-k, tokens per expert and `offs`
on the GPU, permutation, gate-up grouped GEMM, SwiGLU, down grouped GEMM, weighted
combine. The same code for every variant; only `grouped_mm` differs:
`torch._grouped_mm`, `gcdsl.ops.grouped_mm`, quack-kernels' `gemm(cu_seqlens_m=...)`
(its default configuration, autotuned with `--quack-tuned`; skipped where `quack` is not
importable).

Shapes (bf16): Qwen3-30B-A3B experts (E 128, H 2048, I 768, top-8), DeepSeek-V3 at
8-way expert parallelism (E 32, H 7168, I 2048, top-8), Mixtral-8x7B (E 8, H 4096,
I 14336, top-2); tokens 1, 64, 512, 4096.

Method
- Every variant's output is checked against a float32 reference of the same layer
  (max |out - ref| / max |ref| <= 2e-2) before it is timed.
- Eager: `--calls` layer calls back to back, or as many more as torch's layer needs
  to last `--eager-batch-ms` (every variant the same number at a point), each on new
  tokens (a pool of 8 inputs, so new routing every call), CUDA events around the
  batch: microseconds per layer with host and device overlapping as in a model. At few
  tokens the host bounds the layer, and 20 calls last a few milliseconds, short enough
  for the host's jitter to move a round's time.
- Graph: the layer captured in `torch.cuda.graph` once per input of the pool, each
  graph on its own copy of its input; replay i runs graph i % 8, so every replay has
  new routing and nothing is copied between replays (as a layer of a captured model
  step runs on what the layer before it wrote).
- Rounds: every (shape, tokens) point times its variants in turn, `--rounds` times,
  each round one variant further on (`harness.rotated`);
  the median over rounds is reported.
- GEMMs only: device time of the two grouped GEMMs on one routed problem
  (`harness.time_device_ms`), and at 1 and 64 tokens the active experts' weight
  bytes / that time as a fraction of the device-to-device copy bandwidth.
- Host: one `grouped_mm` call's host time (time.perf_counter, the GPU idle before
  it) at G in 1, 8, 32, 128, 256 with `offs` on the GPU (and on the CPU for gcdsl,
  and gcdsl's compiled host function alone), in interleaved rounds.

    python benchmarks/w6_moe_layer.py [--shapes qwen3-30b-a3b] [--tokens 1,64] [--rounds 5]

Writes benchmarks/results/W6.json (machine, commit, every sample) and W6.png; with
`--json NAME`, NAME.json and no plot.
Exit status 1 if a variant FAILED or raised.
"""
from __future__ import annotations

import argparse
import math
import os
import statistics
import sys
import time
import traceback
from typing import Any, Callable, Dict, List

HERE = os.path.dirname(os.path.abspath(__file__))
if os.path.dirname(HERE) not in sys.path:
    sys.path.insert(0, os.path.dirname(HERE))

from benchmarks.harness import (  # noqa: E402  (imports no DSL)
    ERROR, FAILED, OK, SKIPPED, Report, add_json_flag, rotated, summarize, table, time_device_ms, us_per_call,
)
from benchmarks.w5_grouped_gemm import copy_bandwidth  # noqa: E402
from benchmarks.moe_layer import (  # noqa: E402
    GROUPED_MMS, QUACK, SHAPES, MoEWeights, add_quack_flag, moe_forward, moe_reference, quack_note, route,
)

TOKENS = (1, 64, 512, 4096)
HBM_TOKENS = (1, 64)
HOST_GROUPS = (1, 8, 32, 128, 256)
POOL = 8  # distinct inputs cycled through: new routing on every call
TOLERANCE = 2e-2


def available(variant: str) -> bool:
    if variant != "quack":
        return True
    try:
        import quack.gemm_interface  # noqa: F401  (importable: the variant runs)
    except Exception:
        return False
    return True


class Point:
    """One (shape, tokens): weights, a pool of inputs, the reference output of input 0."""

    def __init__(self, shape, tokens: int, seed: int = 0) -> None:
        import torch

        self.shape, self.tokens = shape, tokens
        self.w = MoEWeights.random(shape, torch.bfloat16, seed)
        g = torch.Generator(device="cuda").manual_seed(seed + 1)
        self.pool = [torch.randn(tokens, shape.hidden, device="cuda", generator=g).to(torch.bfloat16)
                     for _ in range(POOL)]
        self.ref = moe_reference(self.pool[0], self.w, shape.top_k)

    def error(self, out) -> float:
        return ((out.float() - self.ref).abs().max() / self.ref.abs().max()).item()


def eager_calls(layer_us: float, calls: int, batch_ms: float) -> int:
    """The calls of an eager batch: `calls`, or as many as last `batch_ms` at `layer_us` a call."""
    return max(calls, math.ceil(batch_ms * 1e3 / layer_us))


def eager_batch(p: Point, calls: int, batch_ms: float) -> int:
    """The calls of every variant's eager batch at this point (one length, so the same
    inputs in the same proportions), sized by a batch of torch's layer timed first."""
    layer_us = us_per_call(lambda i: moe_forward(p.pool[i % POOL], p.w, p.shape.top_k, GROUPED_MMS["torch"]), calls)
    return eager_calls(layer_us, calls, batch_ms)


def eager_timer(p: Point, gmm: Callable, calls: int) -> Callable[[], float]:
    def once() -> float:
        return us_per_call(lambda i: moe_forward(p.pool[i % POOL], p.w, p.shape.top_k, gmm), calls)

    return once


def graph_timer(p: Point, gmm: Callable, calls: int) -> Callable[[], float]:
    import torch

    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):
        moe_forward(p.pool[0].clone(), p.w, p.shape.top_k, gmm)  # warm-up on a side stream, as torch asks
    torch.cuda.current_stream().wait_stream(side)
    graphs = []
    for batch in range(POOL):
        x = p.pool[batch].clone()
        graph = torch.cuda.CUDAGraph()
        with torch.cuda.graph(graph):
            out = moe_forward(x, p.w, p.shape.top_k, gmm)
        graphs.append((graph, x, out))
    # the replays are checked like the eager call: inputs 0 and 1 through their graphs
    for batch in range(2):
        graph, x, out = graphs[batch]
        graph.replay()
        torch.cuda.synchronize()
        want = p.ref if batch == 0 else moe_reference(p.pool[1], p.w, p.shape.top_k)
        err = ((out.float() - want).abs().max() / want.abs().max()).item()
        if not err <= TOLERANCE:
            raise AssertionError(f"graph replay on input {batch}: relative error {err:.2e}")

    def once() -> float:
        return us_per_call(lambda i: graphs[i % POOL][0].replay(), calls)

    once.graphs = graphs  # keep the graphs (and their pools) alive with the timer
    return once


def gemm_time(p: Point, gmm: Callable, reps: int) -> Dict[str, Any]:
    """Device time of the layer's two grouped GEMMs on input 0's routing."""
    import torch.nn.functional as F

    x, w, k = p.pool[0], p.w, p.shape.top_k
    weights, ids, offs = route(x, w.router, k)
    order = ids.flatten().argsort(stable=True)
    xs = x[order // k]
    act = F.silu(gmm(xs, w.w13.transpose(-2, -1), offs).chunk(2, -1)[0]).contiguous()
    b13, b2 = w.w13.transpose(-2, -1), w.w2.transpose(-2, -1)

    def both():
        gmm(xs, b13, offs)
        gmm(act, b2, offs)

    stats = time_device_ms(both, reps, warmup=3)
    active = int((offs.diff(prepend=offs.new_zeros(1)) > 0).sum())
    return {"stats": stats, "active_experts": active, "weight_bytes": p.shape.weight_bytes(active)}


def host_times(variants: List[str], reps: int, rounds: int = 5) -> List[Dict[str, Any]]:
    """One grouped_mm call's host time at several G (N 1536, K 2048, 8 rows a group).

    Every (G, variant) is timed `reps` times per round, in turn, for `rounds` rounds.
    "gcdsl, compiled call" is the compiled host function alone (TVM-FFI, the DSL's
    descriptor encoding, the launch), given the integers the Python side passes it.
    """
    import importlib

    import torch

    gm = importlib.import_module("gcdsl.ops.grouped_mm")  # the module (gcdsl.ops.grouped_mm is the function)
    cases = []
    for groups in HOST_GROUPS:
        a = torch.randn(8 * groups, 2048, device="cuda", dtype=torch.bfloat16)
        b = torch.randn(groups, 1536, 2048, device="cuda", dtype=torch.bfloat16).transpose(-2, -1)
        offs = torch.arange(1, groups + 1, device="cuda", dtype=torch.int32) * 8
        for v in variants:
            cases.append((groups, v, lambda a=a, b=b, offs=offs, gmm=GROUPED_MMS[v]: gmm(a, b, offs)))
        host_offs = offs.cpu()
        cases.append((groups, "gcdsl, offs on the CPU",
                      lambda a=a, b=b, o=host_offs, gmm=GROUPED_MMS["gcdsl"]: gmm(a, b, o)))
        launch = gm._launch_for(a, b, offs, None)
        out = launch.problem.make_output(a.device)
        args = (a.data_ptr(), b.data_ptr(), out.data_ptr() - launch.c_back, offs.data_ptr(), launch.problem.total,
                launch.ctas, torch.cuda.current_stream().cuda_stream)
        cases.append((groups, "gcdsl, compiled call", lambda kernel=launch.kernel, args=args, keep=out: kernel(*args)))
    samples: Dict[tuple, List[float]] = {(g, v): [] for g, v, _ in cases}
    for _, _, call in cases:
        for _ in range(3):
            call()
    for r in range(rounds):
        for groups, v, call in rotated(cases, r):
            for _ in range(reps):
                torch.cuda.synchronize()
                t0 = time.perf_counter()
                call()
                samples[(groups, v)].append((time.perf_counter() - t0) * 1e6)
    torch.cuda.synchronize()
    return [{"groups": g, "variant": v, "host_us": summarize(s)} for (g, v), s in samples.items()]


def run(args) -> Report:
    import torch

    QUACK["tuned"] = args.quack_tuned

    from benchmarks import harness

    variants = ["torch", "gcdsl", "quack"]
    report = Report("W6", "MoE layer: router, grouped GEMMs, SwiGLU, combine; torch vs gcdsl vs quack",
                    config={"calls": args.calls, "eager_batch_ms": args.eager_batch_ms, "rounds": args.rounds,
                            "pool": POOL, "tolerance": TOLERANCE,
                            "quack": quack_note("gemm(cu_seqlens_m=...)")})
    copy_gbps = report.config["copy_gbps"] = copy_bandwidth(20, 3)["gbps"]  # read + write
    shapes = [SHAPES[s] for s in (args.shapes.split(",") if args.shapes else SHAPES)]
    tokens = [int(t) for t in args.tokens.split(",")] if args.tokens else TOKENS
    for shape in shapes:
        for t in tokens:
            p = Point(shape, t)
            print(f"\n{shape.name}, {t} tokens ({t * shape.top_k} routed rows)", flush=True)
            timers: Dict[tuple, Callable[[], float]] = {}
            calls = {"eager": eager_batch(p, args.calls, args.eager_batch_ms), "graph": args.calls}  # per batch
            for v in variants:
                if not available(v):
                    for mode in ("eager", "graph"):
                        report.add(shape=shape.name, tokens=t, variant=v, mode=mode, status=SKIPPED,
                                   detail="quack-kernels is not installed")
                    continue
                gmm = GROUPED_MMS[v]
                try:
                    err = p.error(moe_forward(p.pool[0], p.w, shape.top_k, gmm))
                    if not err <= TOLERANCE:
                        raise AssertionError(f"relative error {err:.2e}")
                    timers[(v, "eager")] = eager_timer(p, gmm, calls["eager"])
                    timers[(v, "graph")] = graph_timer(p, gmm, calls["graph"])
                    gemms = gemm_time(p, gmm, args.reps)
                    report.add(shape=shape.name, tokens=t, variant=v, mode="gemms", status=OK, err=err,
                               us=gemms["stats"]["median"] * 1e3, stats=gemms["stats"],
                               active_experts=gemms["active_experts"], weight_bytes=gemms["weight_bytes"],
                               hbm_fraction=(gemms["weight_bytes"] / (gemms["stats"]["median"] * 1e-3) / 1e9 / copy_gbps
                                             if t in HBM_TOKENS else None))
                except Exception as exc:  # noqa: BLE001  (a failing variant is reported, not fatal)
                    status = FAILED if isinstance(exc, AssertionError) else ERROR
                    print(f"  {v}: {status}: {exc}")
                    if args.verbose:
                        traceback.print_exc()
                    for mode in ("eager", "graph"):
                        report.add(shape=shape.name, tokens=t, variant=v, mode=mode, status=status, detail=str(exc))
            samples: Dict[tuple, List[float]] = {key: [] for key in timers}
            for r in range(args.rounds):  # alternating rounds: every variant once per round
                for key, once in rotated(timers.items(), r):
                    samples[key].append(once())
            for (v, mode), s in samples.items():
                row = report.add(shape=shape.name, tokens=t, variant=v, mode=mode, status=OK,
                                 us=statistics.median(s), rounds=summarize(s), calls=calls[mode])
                print(f"  {v:6s} {mode:6s} {row['us']:9.1f} us/layer  [{min(s):.1f}-{max(s):.1f}]", flush=True)
            del timers, p
            torch.cuda.empty_cache()
    report.config["host"] = host_times([v for v in variants if available(v)], args.host_reps)
    summarize_report(report, shapes, tokens)
    if not args.json:  # (a side run's plot would replace the headline run's)
        report.config["plot"] = _plot(report, harness.machine_info())
    return report


def _get(report: Report, shape: str, t: int, v: str, mode: str, key: str = "us"):
    for r in report.rows:
        if (r["shape"], r["tokens"], r["variant"], r["mode"]) == (shape, t, v, mode) and r["status"] == OK:
            return r.get(key)
    return None


def summarize_report(report: Report, shapes, tokens) -> None:
    for mode in ("eager", "graph", "gemms"):
        print(f"\n{mode}: microseconds {'per layer' if mode != 'gemms' else 'of the two grouped GEMMs (device)'}; "
              "ratio = peer time / gcdsl time")
        rows = []
        for s in shapes:
            for t in tokens:
                ours = _get(report, s.name, t, "gcdsl", mode)
                row = [s.name, t]
                for v in ("torch", "gcdsl", "quack"):
                    us = _get(report, s.name, t, v, mode)
                    row.append(f"{us:.1f}" if us else "-")
                for v in ("torch", "quack"):
                    us = _get(report, s.name, t, v, mode)
                    row.append(f"{us / ours:.2f}x" if us and ours else "-")
                rows.append(row)
        print(table(["shape", "tokens", "torch", "gcdsl", "quack", "vs torch", "vs quack"], rows))
    print("\nthe two GEMMs at decode: active experts' weight bytes / device time, of the copy bandwidth "
          f"({report.config['copy_gbps']:.0f} GB/s)")
    rows = [[s.name, t, _get(report, s.name, t, "gcdsl", "gemms", "active_experts")]
            + [f"{f:.1%}" if (f := _get(report, s.name, t, v, "gemms", "hbm_fraction")) else "-"
               for v in ("torch", "gcdsl", "quack")]
            for s in shapes for t in tokens if t in HBM_TOKENS]
    print(table(["shape", "tokens", "active experts", "torch", "gcdsl", "quack"], rows))
    print("\nhost microseconds of one grouped_mm call (median; N 1536, K 2048, 8 rows a group)")
    host = report.config["host"]
    names = list(dict.fromkeys(r["variant"] for r in host))
    print(table(["G"] + names, [[g] + [f"{r['host_us']['median']:.1f}" for n in names for r in host
                                       if r["groups"] == g and r["variant"] == n] for g in HOST_GROUPS]))
    checks = []
    for s in shapes:
        for t in tokens:
            for mode in ("eager", "graph"):
                ours = _get(report, s.name, t, "gcdsl", mode)
                for v in ("torch", "quack"):
                    theirs = _get(report, s.name, t, v, mode)
                    if ours and theirs:
                        checks.append([s.name, t, mode, f"vs {v}", f"{theirs / ours:.2f}x", ">= 1.00x",
                                       "met" if theirs >= ours else "MISSED"])
    for g in HOST_GROUPS:
        ours = [r for r in host if r["groups"] == g and r["variant"] == "gcdsl"]
        theirs = [r for r in host if r["groups"] == g and r["variant"] == "torch"]
        if ours and theirs:
            a, b = ours[0]["host_us"]["median"], theirs[0]["host_us"]["median"]
            checks.append(["host", g, "call", "vs torch", f"{b / a:.2f}x", ">= 1.00x", "met" if b >= a else "MISSED"])
    print("\ntargets")
    print(table(["shape", "tokens", "mode", "what", "measured", "target", ""], checks))
    report.notes += [" ".join(str(c) for c in row) for row in checks]


def _plot(report: Report, machine: Dict[str, Any]):
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        return None
    from benchmarks.harness import RESULTS

    points = sorted({(r["shape"], r["tokens"]) for r in report.rows}, key=lambda p: (p[0], p[1]))
    fig, axes = plt.subplots(1, 2, figsize=(12, 4.5), sharey=True)
    for ax, mode in zip(axes, ("eager", "graph")):
        for i, v in enumerate(("torch", "gcdsl", "quack")):
            ys = []
            for s, t in points:
                ours, theirs = _get(report, s, t, "gcdsl", mode), _get(report, s, t, v, mode)
                ys.append(ours / theirs if ours and theirs else 0)  # speed relative to gcdsl
            ax.bar([x + i * 0.27 for x in range(len(points))], ys, 0.27, label=v)
        ax.set_xticks([x + 0.27 for x in range(len(points))])
        ax.set_xticklabels([f"{s.split('-')[0]}\n{t}" for s, t in points], fontsize=7)
        ax.set_title(f"{mode}: layer speed relative to gcdsl (higher is faster)", fontsize=9)
        ax.axhline(1.0, color="k", lw=0.5)
        ax.grid(True, axis="y", alpha=0.3)
    axes[0].legend(fontsize=8)
    fig.suptitle(f"W6 MoE layer ({machine.get('gpu', 'GPU')})", fontsize=10)
    fig.tight_layout()
    os.makedirs(RESULTS, exist_ok=True)
    path = os.path.join(RESULTS, "W6.png")
    fig.savefig(path, dpi=120)
    plt.close(fig)
    return path


def parse_args(argv=None):
    p = argparse.ArgumentParser(description="W6 MoE layer benchmark (see the module docstring)")
    p.add_argument("--shapes", default="", help="comma-separated subset of " + ",".join(SHAPES))
    p.add_argument("--tokens", default="", help="comma-separated token counts (default 1,64,512,4096)")
    p.add_argument("--calls", type=int, default=20, help="layer calls per timed batch (at least, eager)")
    p.add_argument("--eager-batch-ms", type=float, default=20.0,
                   help="an eager batch's calls last at least this long: at few tokens the host bounds the layer, "
                        "and a longer batch averages out its jitter")
    p.add_argument("--rounds", type=int, default=5)
    p.add_argument("--reps", type=int, default=20, help="timed repetitions of the GEMMs-only measurement")
    p.add_argument("--host-reps", type=int, default=10, help="host-time samples per case and round")
    add_quack_flag(p)
    add_json_flag(p, "W6")
    p.add_argument("--verbose", action="store_true")
    return p.parse_args(argv)


def main(argv=None) -> int:
    from benchmarks import harness

    return harness.main_on_gpu("W6", lambda args, machine: run(args), parse_args(argv))


if __name__ == "__main__":
    sys.exit(main())
