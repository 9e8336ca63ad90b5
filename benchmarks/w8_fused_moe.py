"""W8: the MoE expert layer after the router, as inference engines run it (`fused_moe`).

Given `x` (T, H), `w1` (E, 2I, H), `w2` (E, H, I) and the router's `topk_weights` and
`topk_ids` (T, k) on the GPU, each variant computes the same layer
(`benchmarks/moe_layer.py: moe_experts`):

    torch        permute, torch._grouped_mm, SwiGLU, torch._grouped_mm, weighted combine
    gcdsl        the same layer on gcdsl.ops.grouped_mm
    fused_moe    gcdsl.ops.fused_moe: both GEMMs in one persistent kernel, SwiGLU in the
                 gate-up tiles' epilogue
    pair         fused_moe's two-GEMM form (fused_moe_pair: grouped_mm_swiglu, grouped_mm)
    quack        quack-kernels' fused pieces: gemm_act (cu_seqlens_m, A_idx gathering
                 x's rows, SwiGLU over w1's [gate; up] halves), then gemm, then the
                 same combine; their default configuration (tuned=False; autotuned with
                 --quack-tuned)

Shapes (bf16): Qwen3-30B-A3B experts (E 128, H 2048, I 768, top-8), DeepSeek-V3 at
8-way expert parallelism (E 32, H 7168, I 2048, top-8), Mixtral-8x7B (E 8, H 4096,
I 14336, top-2); T in 1, 8, 64, 512, 4096.

Method
- Routing made on the GPU by a random router (softmax, top-k, renormalised): a pool
  of POOL token batches, so every call has new routing. Every variant's output is
  checked against a float32 reference of the same layer (relative error <= 2e-2).
- Graph: each variant captured once per batch of the pool (`--captures` times with more),
  on that batch's inputs; replays go round the graphs, so every replay has new routing
  and nothing is copied in between (the layer's inputs are where the model step before
  it left them).
  Eager: calls back to back. CUDA events
  around `--calls` calls; variants in turn for `--rounds` rounds, each round one
  variant further on (`harness.rotated`); the median.
- Bound: the active experts' weight bytes (those with at least one slot, from the
  routing of batch 0) over the measured device-to-device copy bandwidth, the time a
  layer bound by streaming its weights cannot beat; `vs bound` = layer time / bound,
  and the HBM fraction its inverse.
- Floor: graphs of one kernel that zeroes a word, replayed back to back on the GPU
  (`graph_floor_us`): what a graph's launch adds to every graph-replayed time, a share
  of the HBM fraction no layer can win back.
- Targets (graph replays): fused_moe at or above 1.5x torch's layer and 80% of the HBM
  bandwidth for T <= 64, 1.15x torch's for T >= 512, and at or above quack everywhere.

    python benchmarks/w8_fused_moe.py [--shapes qwen3-30b-a3b] [--tokens 1,64] [--rounds 3] [--every-config]
                                      [--forced "one kernel stagger,one kernel split 2"] [--json W8_configs]

Writes benchmarks/results/W8.json (machine, commit, every sample) and W8_<shape>.png
(graph-replayed time against T); with `--json NAME`, NAME.json and no plots.
Exit status 1 if a variant FAILED or raised.
"""
from __future__ import annotations

import argparse
import os
import statistics
import sys
import traceback
from typing import Any, Callable, Dict, List

HERE = os.path.dirname(os.path.abspath(__file__))
if os.path.dirname(HERE) not in sys.path:
    sys.path.insert(0, os.path.dirname(HERE))

from benchmarks.harness import (ERROR, FAILED, OK, SKIPPED, Report, add_json_flag, rotated, table,  # noqa: E402
                                time_device_ms, us_per_call)  # (imports no DSL)
from benchmarks.moe_layer import (  # noqa: E402
    GROUPED_MMS, QUACK, SHAPES, MoEWeights, add_quack_flag, expert_ends, moe_experts, moe_experts_reference,
    quack_note, route,
)
from benchmarks.reporting.fused_moe import targets  # noqa: E402
from benchmarks.w5_grouped_gemm import copy_bandwidth  # noqa: E402
from benchmarks.w6_moe_layer import available  # noqa: E402  (quack importable or not)

TOKENS = (1, 8, 64, 512, 4096)
VARIANTS = ("torch", "gcdsl", "fused_moe", "pair", "quack")
MODES = ("graph", "eager")
# `--every-config`: fused_moe's decode kernel ("decode", up to its slots; "decode early
# prefetch": its down rows asked of L2 first thing, not at the barrier; "decode unstaged":
# none of them staged in shared memory; "decode streamed": every weight row through a ring
# of shared-memory buffers filled by bulk copies), its one kernel
# at the rules' choices ("one kernel default") and at each tile width ("one kernel <tile_n>"), with
# its down tiles in K splits ("one kernel split <n>"), each tile's k-tiles read from a
# different one on or not ("one kernel stagger ...", "... unstaggered"), with n rounds of its
# down tiles dealt first to the CTAs a gate-up tile short ("one kernel lead <n>"), and with
# torch's routing kernels; and
# its two-GEMM form with one of its GEMMs forced to each configuration the grouped GEMM
# has ("pair up <schedule> <tile_n>" the SwiGLU gate-up GEMM, "pair down ..." the down
# GEMM, then "alone" or "pairs" for CTAs alone or in pairs where the rule would pick
# either), or with the heuristics' tiles and a group's tiles M-steps or N-tiles fastest
# ("pair up m-order", ..., "pair down n-order"; `gcdsl.ops.grouped_mm.forcing`), or with
# both GEMMs' warpgroups running their WGMMAs on tiles where they have no rows ("pair
# mma-without-rows", `GemmConfig.mma_without_rows`), or with both GEMMs' clusters claiming
# their tiles from a counter ("pair claimed-tiles", `GemmConfig.claimed_tiles`, where they
# run the cooperative schedule). Graph replays only: the data for their rules.
FORCED = (("decode", "decode early prefetch", "decode unstaged", "decode streamed", "one kernel default",
           "one kernel 64", "one kernel 128", "one kernel 256", "one kernel split 2", "one kernel split 4",
           "one kernel stagger", "one kernel unstaggered", "one kernel stagger split 4", "one kernel torch route",
           "one kernel lead 0", "one kernel lead 2", "one kernel lead 3")
          + tuple(f"pair up {s} {t}" for s, t in (("cooperative", 256), ("cooperative", 128), ("cooperative", 64),
                                                  ("pingpong", 128), ("pingpong", 64)))
          + tuple(f"pair down {s} {t}" for s, t in (("cooperative", 256), ("cooperative", 128), ("cooperative", 64),
                                                    ("pingpong", 192), ("pingpong", 128), ("pingpong", 64)))
          + tuple(f"pair {gemm} cooperative 256 {cluster}" for gemm in ("up", "down") for cluster in ("alone", "pairs"))
          + tuple(f"pair {gemm} {order}-order" for gemm in ("up", "down")
                  for order in ("m", "n", "m_partial_last", "m_blocks"))
          + ("pair mma-without-rows", "pair claimed-tiles"))
CLUSTERS = {"alone": 1, "pairs": 2}  # the last word of a forced two-GEMM form
POOL = 4
TOLERANCE = 2e-2


def quack_layer(x, w1, w2, weights, ids):
    """quack-kernels' pieces: gathered, SwiGLU-fused gate-up GEMM, the down GEMM, the combine."""
    import torch
    import torch.nn.functional as F
    from quack.gemm_interface import gemm, gemm_act

    top_k = ids.shape[1]
    cu_seqlens = F.pad(expert_ends(ids, w1.shape[0]), (1, 0))
    order = ids.flatten().argsort(stable=True)
    token = order // top_k
    _, act = gemm_act(x, w1.transpose(-2, -1), activation="swiglu", cu_seqlens_m=cu_seqlens,
                      A_idx=token.to(torch.int32), store_preact=False, concat_layout=("B",), tuned=QUACK["tuned"])
    y = gemm(act, w2.transpose(-2, -1), cu_seqlens_m=cu_seqlens, tuned=QUACK["tuned"])
    y = y.float() * weights.flatten()[order, None]
    return torch.zeros(x.shape, dtype=torch.float32, device=x.device).index_add_(0, token, y).to(x.dtype)


def decode_takes(shape, tokens: int) -> bool:
    from gcdsl.ops.fused_moe import decode_applies

    return decode_applies(shape.experts, shape.hidden, shape.intermediate, tokens * shape.top_k)


def layer(variant: str) -> Callable:
    if variant in ("torch", "gcdsl"):
        gmm = GROUPED_MMS[variant]
        return lambda x, w1, w2, weights, ids: moe_experts(x, w1, w2, weights, ids, gmm)
    import gcdsl.ops
    from gcdsl.ops.fused_moe import fused_moe_decode, fused_moe_megakernel, fused_moe_pair

    if variant == "fused_moe":
        return gcdsl.ops.fused_moe
    if variant == "pair":
        return fused_moe_pair
    if variant.startswith("decode"):
        options = {"decode early prefetch": {"early_prefetch": True}, "decode unstaged": {"staged_experts": 0},
                   "decode streamed": {"streamed": True}}
        return lambda *args: fused_moe_decode(*args, **options.get(variant, {}))
    if variant.startswith("one kernel "):  # "one kernel" then "<tile_n>", "[stagger|unstaggered] [split <n>]", "lead <n>"
        words, options = variant.split()[2:], {}  # or "torch route", or "default"
        while words:
            word = words.pop(0)
            if word == "default":
                continue
            if word in ("stagger", "unstaggered"):
                options["stagger_k"] = word == "stagger"
            elif word == "split":
                options["split_k"] = int(words.pop(0))
            elif word == "lead":
                options["down_lead"] = int(words.pop(0))
            elif word == "torch":
                options["route_kernel"] = False
                words.pop(0)  # "route"
            else:
                options["tile_n"] = int(word)
        return lambda *args: fused_moe_megakernel(*args, **options)
    if variant in FORCED:  # "pair <gemm> <schedule> <tile_n> [alone|pairs]", or "pair <gemm> <tile order>-order"
        from gcdsl.ops.grouped_mm import forcing

        _, gemm, *words = variant.split()
        if gemm in ("mma-without-rows", "claimed-tiles"):  # an option of both GEMMs
            option = {gemm.replace("-", "_"): True}

            def both(*args):
                with forcing("swiglu", **option), forcing("none", **option):
                    return fused_moe_pair(*args)

            return both
        activation = "swiglu" if gemm == "up" else "none"
        if words[0].endswith("-order"):
            options = dict(tile_order=words[0][:-len("-order")])
        else:
            schedule, tile_n, *cluster = words
            options = dict(schedule=schedule, tile_n=int(tile_n), cluster_m=CLUSTERS[cluster[0]] if cluster else None)

        def forced(*args):
            with forcing(activation, **options):
                return fused_moe_pair(*args)

        return forced
    return quack_layer


class Point:
    """One (shape, tokens): weights, a pool of routed batches, their references."""

    def __init__(self, shape, tokens: int, seed: int = 0) -> None:
        import torch

        self.shape, self.tokens = shape, tokens
        w = MoEWeights.random(shape, torch.bfloat16, seed)
        self.w1, self.w2 = w.w13, w.w2
        g = torch.Generator(device="cuda").manual_seed(seed + 1)
        self.pool = []
        for _ in range(POOL):
            x = torch.randn(tokens, shape.hidden, device="cuda", generator=g).to(torch.bfloat16)
            weights, ids, _ = route(x, w.router, shape.top_k)
            self.pool.append((x, weights, ids))
        offs = expert_ends(self.pool[0][2], shape.experts)  # batch 0's experts with a slot
        self.active = int((offs.diff(prepend=offs.new_zeros(1)) > 0).sum())
        self.refs: Dict[int, Any] = {}  # batch: its float32 reference, made once for every variant

    def error(self, out, batch: int = 0) -> float:
        if batch not in self.refs:
            self.refs[batch] = moe_experts_reference(self.pool[batch][0], self.w1, self.w2, *self.pool[batch][1:])
        ref = self.refs[batch]
        return ((out.float() - ref).abs().max() / ref.abs().max()).item()


def eager_timer(p: Point, fn: Callable, calls: int) -> Callable[[], float]:
    def once() -> float:
        return us_per_call(lambda i: fn(p.pool[i % POOL][0], p.w1, p.w2, *p.pool[i % POOL][1:]), calls)

    return once


def warm_up(p: Point, fn: Callable) -> None:
    """One call of the layer on batch 0, on a side stream, as torch asks before a capture."""
    import torch

    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):
        fn(p.pool[0][0], p.w1, p.w2, *p.pool[0][1:])
    torch.cuda.current_stream().wait_stream(side)


def capture(p: Point, fn: Callable, batch: int):
    """(graph, its inputs, its output): the layer captured on its own copy of `batch`'s
    inputs, checked on its first replay."""
    import torch

    inputs = [t.clone() for t in p.pool[batch]]
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        out = fn(inputs[0], p.w1, p.w2, *inputs[1:])
    graph.replay()
    torch.cuda.synchronize()
    err = p.error(out, batch)
    if not err <= TOLERANCE:
        raise AssertionError(f"graph replay on batch {batch}: relative error {err:.2e}")
    return graph, inputs, out


def graph_timer(p: Point, fn: Callable, calls: int, captures: int = 1) -> Callable[[], float]:
    """The layer captured `captures` times per batch of the pool, each graph on its own
    copy of its batch's inputs: replay i runs graph i mod the graphs, the batches in turn,
    new routing with nothing copied before it (as a layer of a captured model step runs
    on what the layer before it wrote). More captures average over what a capture's
    own placement adds or takes (`w8_instances.py`)."""
    warm_up(p, fn)
    graphs = [capture(p, fn, batch) for _ in range(captures) for batch in range(POOL)]

    def once() -> float:
        return us_per_call(lambda i: graphs[i % len(graphs)][0].replay(), calls)

    once.graphs = graphs  # keep the graphs (and their pools) alive with the timer
    return once


def graph_floor_us(calls: int, rounds: int) -> float:
    """Microseconds a replay of a graph of one kernel that zeroes one word takes on the
    GPU, POOL such graphs replayed in turn, `calls` back to back behind a sleep long
    enough for the host to queue them all (`harness.time_device_ms`; the median of
    `rounds`): what launching a graph adds to every graph-replayed time here, whatever
    the layer does. (Timed as the layers are, without the sleep, such short replays
    would time the host's launches instead.)"""
    import torch

    words = torch.ones(POOL, dtype=torch.int32, device="cuda")
    graphs = []
    for i in range(POOL):
        graph = torch.cuda.CUDAGraph()
        with torch.cuda.graph(graph):
            words[i].zero_()
        graphs.append(graph)

    def replays():
        for i in range(calls):
            graphs[i % POOL].replay()

    return time_device_ms(replays, rounds, 3)["median"] * 1e3 / calls


def run(args, machine: Dict[str, Any]) -> Report:
    import torch

    QUACK["tuned"] = args.quack_tuned

    report = Report("W8", "MoE expert layer after the router: torch vs gcdsl vs fused_moe vs quack",
                    config={"calls": args.calls, "rounds": args.rounds, "pool": POOL, "captures": args.captures,
                            "tolerance": TOLERANCE,
                            "quack": quack_note("gemm_act(A_idx, swiglu, concat_layout=('B',)) + gemm")})
    copy_gbps = report.config["copy_gbps"] = copy_bandwidth(20, 3)["gbps"]
    floor = report.config["graph_floor_us"] = graph_floor_us(args.calls, args.rounds)
    print(f"a graph of one kernel zeroing a word replays in {floor:.1f} us", flush=True)
    shapes = [SHAPES[s] for s in (args.shapes.split(",") if args.shapes else SHAPES)]
    tokens = [int(t) for t in args.tokens.split(",")] if args.tokens else TOKENS
    variants = [v for v in VARIANTS if v in (args.variants.split(",") if args.variants else VARIANTS)]
    if args.every_config or args.forced:
        forced = args.forced.split(",") if args.forced else FORCED
        unknown = [v for v in forced if v not in FORCED]
        if unknown:
            raise SystemExit(f"--forced: {', '.join(unknown)} not in: {', '.join(FORCED)}")
        variants += forced
    for shape in shapes:
        for t in tokens:
            p = Point(shape, t)
            bound_us = shape.weight_bytes(p.active) / (copy_gbps * 1e9) * 1e6
            print(f"\n{shape.name}, {t} tokens: {p.active} active experts, weight-streaming bound "
                  f"{bound_us:.1f} us", flush=True)
            timers: Dict[tuple, Callable[[], float]] = {}
            for v in variants:
                if not available(v):
                    for mode in MODES:
                        report.add(shape=shape.name, tokens=t, variant=v, mode=mode, status=SKIPPED,
                                   detail="quack-kernels is not installed")
                    continue
                if v.startswith("decode") and not decode_takes(shape, t):
                    report.add(shape=shape.name, tokens=t, variant=v, mode="graph", status=SKIPPED,
                               detail="more slots than the decode kernel takes")
                    continue
                try:
                    fn = layer(v)
                    err = p.error(fn(p.pool[0][0], p.w1, p.w2, *p.pool[0][1:]))
                    if not err <= TOLERANCE:
                        raise AssertionError(f"relative error {err:.2e}")
                    timers[(v, "graph")] = graph_timer(p, fn, args.calls, args.captures)
                    if v not in FORCED:
                        timers[(v, "eager")] = eager_timer(p, fn, args.calls)
                except Exception as exc:  # noqa: BLE001  (a failing variant is reported, not fatal)
                    status = FAILED if isinstance(exc, AssertionError) else ERROR
                    print(f"  {v}: {status}: {str(exc)[:300]}", flush=True)
                    if args.verbose:
                        traceback.print_exc()
                    for mode in MODES[:1] if v in FORCED else MODES:
                        report.add(shape=shape.name, tokens=t, variant=v, mode=mode, status=status,
                                   detail=str(exc)[:2000])
            samples: Dict[tuple, List[float]] = {key: [] for key in timers}
            for r in range(args.rounds):  # alternating rounds
                for key, once in rotated(timers.items(), r):
                    samples[key].append(once())
            for (v, mode), s in samples.items():
                us = statistics.median(s)
                report.add(shape=shape.name, tokens=t, variant=v, mode=mode, status=OK, us=us, rounds_us=s,
                           active_experts=p.active, bound_us=bound_us, vs_bound=us / bound_us if bound_us else None)
            del p, timers
            torch.cuda.empty_cache()
    main_variants = [v for v in variants if v not in FORCED]
    summarize_report(report, shapes, tokens, main_variants)
    _print_forced(report, shapes, tokens, [v for v in variants if v in FORCED])
    if not args.json:  # (a side run's plots would replace the headline run's)
        report.config["plots"] = [path for shape in shapes if (path := _plot(report, shape, main_variants))]
    return report


def _plot(report: Report, shape, variants):
    """W8_<shape>.png: graph-replayed microseconds per layer against T, a line per variant
    and the weight-streaming bound."""
    from benchmarks.harness import RESULTS, plot_lines

    series = {v: {r["tokens"]: r["us"] for r in report.rows if (r["shape"], r["variant"], r["mode"]) ==
                  (shape.name, v, "graph") and r["status"] == OK} for v in variants}
    series["weight-streaming bound"] = {r["tokens"]: r["bound_us"] for r in report.rows
                                        if r["shape"] == shape.name and r.get("bound_us")}
    os.makedirs(RESULTS, exist_ok=True)
    return plot_lines(os.path.join(RESULTS, f"W8_{shape.name}.png"),
                      f"W8 {shape.name}: the expert layer after the router, graph replay", "tokens T",
                      "us per layer", series)


def _us(report: Report, shape: str, t: int, v: str, mode: str):
    for r in report.rows:
        if (r["shape"], r["tokens"], r["variant"], r["mode"]) == (shape, t, v, mode) and r["status"] == OK:
            return r["us"]
    return None


def _bound(report: Report, shape: str, t: int):
    """The weight-streaming bound of (shape, T), in microseconds (None where unmeasured)."""
    return next((r["bound_us"] for r in report.rows if (r["shape"], r["tokens"]) == (shape, t) and r.get("bound_us")),
                None)


def _print_forced(report: Report, shapes, tokens, forced) -> None:
    """--every-config: each forced configuration's graph replay over its form's default
    (fused_moe's for the one kernel, the pair's for the pair; above 1: the forced one is
    faster), per point, and the fastest of each."""
    if not forced:
        return
    kinds = {"decode": "fused_moe", "one kernel": "fused_moe", "pair up": "pair", "pair down": "pair",
             "pair mma-without-rows": "pair", "pair claimed-tiles": "pair"}
    rows = []
    for shape in shapes:
        for t in tokens:
            defaults = {kind: _us(report, shape.name, t, v, "graph") for kind, v in kinds.items()}
            times = {v: _us(report, shape.name, t, v, "graph") for v in forced}
            kind_of = {v: next(k for k in kinds if v == k or v.startswith(k + " ")) for v in forced}
            ratios = [f"{defaults[kind_of[v]] / u:.2f}x" if defaults[kind_of[v]] and u else "-"
                      for v, u in times.items()]
            best = {kind: min((u, v) for v, u in times.items() if u and kind_of[v] == kind)
                    for kind in kinds if any(u and kind_of[v] == kind for v, u in times.items())}
            rows.append([shape.name, t, *ratios, *((best[k][1][len(k) + 1:] or best[k][1]) if k in best else "-" for k in kinds)])
    print("\nforced configurations: the default graph time of their form over each one's")
    print(table(["shape", "tokens", *forced, *(f"fastest {k}" for k in kinds)], rows))


def summarize_report(report: Report, shapes, tokens, variants) -> None:
    for mode in MODES:
        rows = []
        for shape in shapes:
            for t in tokens:
                cells = [shape.name, t] + [f"{u:.1f}" if (u := _us(report, shape.name, t, v, mode)) else "-"
                                            for v in variants]
                ours = _us(report, shape.name, t, "fused_moe", mode)
                torch_us = _us(report, shape.name, t, "torch", mode)
                bound = _bound(report, shape.name, t)
                cells += [f"{torch_us / ours:.2f}x" if ours and torch_us else "-",
                          f"{ours / bound:.2f}x" if ours and bound else "-"]
                rows.append(cells)
        print(f"\n{mode}: us per layer")
        print(table(["shape", "tokens", *variants, "torch / fused_moe", "fused_moe / bound"], rows))
    # the targets, on graph replays: the rules the RESULTS.md region applies to the JSON
    checks = targets({"W8": {"results": report.rows, "config": report.config}})
    print("\ntargets (graph replays)")
    print(table(["what", "measured", "target", ""],
                [[c["what"], c["value"], f">= {c['target']}", "met" if c["met"] else "MISSED"] for c in checks]))
    report.notes += [f"{c['what']}: {c['value']} (target {c['target']}) {'met' if c['met'] else 'MISSED'}"
                     for c in checks]


def parse_args(argv=None):
    p = argparse.ArgumentParser(description="W8 fused MoE benchmark (see the module docstring)")
    p.add_argument("--shapes", default="", help="comma-separated subset of " + ",".join(SHAPES))
    p.add_argument("--tokens", default="", help="comma-separated token counts (default 1,8,64,512,4096)")
    p.add_argument("--variants", default="", help="comma-separated subset of " + ",".join(VARIANTS))
    p.add_argument("--calls", type=int, default=20, help="layer calls per timed batch")
    p.add_argument("--rounds", type=int, default=3)
    p.add_argument("--captures", type=int, default=1,
                   help="graphs captured per batch of the pool and variant (replays go round all of them)")
    p.add_argument("--every-config", action="store_true",
                   help="also time the one kernel at each tile width and K split and the two-GEMM form with "
                        "each GEMM forced to each configuration (FORCED), graph only")
    p.add_argument("--forced", default="", help="comma-separated subset of FORCED to time (as --every-config)")
    add_quack_flag(p)
    add_json_flag(p, "W8")
    p.add_argument("--verbose", action="store_true")
    return p.parse_args(argv)


def main(argv=None) -> int:
    from benchmarks import harness

    args = parse_args(argv)
    if args.captures < 1:
        raise SystemExit(f"--captures {args.captures}: at least one graph per batch and variant")
    return harness.main_on_gpu("W8", run, args)


if __name__ == "__main__":
    sys.exit(main())
