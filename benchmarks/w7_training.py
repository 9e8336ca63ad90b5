"""W7: grouped_mm for training: each grouped GEMM of an MoE layer's step, and the step itself.

The layer is W6's (`benchmarks/moe_layer.py`), routed on the GPU. Its step runs six
grouped GEMMs, three for each of the gate-up weights `w13` (E, 2I, H) and the down
weights `w2` (E, H, I):

    forward          y  = x  @ w^T    2D x 3D, b K-major (the weight as it lies, transposed)
    input gradient   dx = dy @ w      2D x 3D, b N-major
    weight gradient  dw = dy^T @ x    2D x 2D, the reduction ragged, (E, N, K) as the weight lies

Shapes (bf16): Qwen3-30B-A3B experts (E 128, H 2048, I 768, top-8) and DeepSeek-V3 at
8-way expert parallelism (E 32, H 7168, I 2048, top-8); 4,096 and 16,384 tokens.

Variants: `gcdsl.ops.grouped_mm`, `torch._grouped_mm`, and quack-kernels' `gemm` with
`cu_seqlens_m` (the 2D x 3D cases) or `cu_seqlens_k` (the weight gradient), its default
configuration (`tuned=False`; autotuned with `--quack-tuned`; skipped where `quack` is not
importable); and gcdsl's kernel held to its cooperative consumer schedule (`cooperative`:
`grouped_mm_into(..., schedule="cooperative")`), to show what the default's choice of
schedule gains. With
`--every-config`, gcdsl forced to each configuration it has too (`FORCED`; `--forced` times
a subset): the data behind its heuristics (gcdsl/ops/grouped_mm_rules.py). With `--orders`,
torch and gcdsl as it picks beside gcdsl with each tile order forced (`ORDERS`: a group's
M-steps or N-tiles fastest), on the cases with ragged rows: the data behind
`N_FASTEST_ROWS_PER_GROUP`. With `--load-policies`, torch and gcdsl beside gcdsl with its
TMA loads' L2 policy forced (`LOAD_POLICY_VARIANTS`, `hopper_grouped_gemm.L2_POLICIES`); with
`--store-policies`, with its TMA stores' (`STORE_POLICY_VARIANTS`). With `--mma-without-rows`,
torch and gcdsl beside gcdsl with its warpgroups that have no rows in a tile running their
WGMMAs anyway (`GemmConfig.mma_without_rows`), on the cases with ragged rows; with
`--claimed-tiles`, beside gcdsl with its clusters claiming their tiles from a counter
(`GemmConfig.claimed_tiles`), on the same cases.

Method
- Every variant's result is checked against a float32 reference, group by group
  (max |out - ref| / max |ref| <= 1e-2), before it is timed.
- Per case: device time (`harness.time_device_ms`, the stream held busy while the host
  enqueues), `--reps` calls per round, variants in turn for `--rounds` rounds, each
  round one variant further on (`harness.rotated`); the
  median of the round medians. TFLOP/s = 2 rows N K / time.
- Training step: the layer's forward and backward by autograd (a loss of the output's
  mean square; gradients of x, the router, w13 and w2), eager, `--steps` steps between
  CUDA events, new tokens each step; gcdsl and torch in turn for `--rounds` rounds. The
  two variants' weight gradients are compared first (relative error <= 2e-2).

    python benchmarks/w7_training.py [--shapes qwen3-30b-a3b] [--tokens 4096] [--rounds 3]
                                     [--cases "w13 weight grad,w2 weight grad"] [--every-config]
    python benchmarks/w7_training.py --orders --shapes deepseek-v3-ep8,qwen3-30b-a3b,mixtral-8x7b \
                                     --json W7_orders

Writes benchmarks/results/W7.json (machine, commit, every sample) and W7.png; with
`--json NAME`, NAME.json and no plot.
Exit status 1 if a variant FAILED or raised.
"""
from __future__ import annotations

import argparse
import functools
import os
import statistics
import sys
import traceback
from typing import Any, Callable, Dict, List

HERE = os.path.dirname(os.path.abspath(__file__))
if os.path.dirname(HERE) not in sys.path:
    sys.path.insert(0, os.path.dirname(HERE))

from benchmarks.harness import (  # noqa: E402
    ERROR, FAILED, OK, SKIPPED, Report, add_json_flag, rotated, summarize, table, time_device_ms, us_per_call,
)
from benchmarks.moe_layer import (  # noqa: E402
    QUACK, SHAPES, MoEWeights, add_quack_flag, moe_forward, quack_note, route,
)

TRAINING_SHAPES = ("qwen3-30b-a3b", "deepseek-v3-ep8")
TOKENS = (4096, 16384)
VARIANTS = ("torch", "gcdsl", "quack", "cooperative")  # cooperative: gcdsl held to its cooperative schedule
CASES = ("w13 forward", "w13 input grad", "w13 weight grad", "w2 forward", "w2 input grad", "w2 weight grad")
TOLERANCE = 1e-2
STEP_TOLERANCE = 2e-2
POOL = 4  # distinct token batches for the training step: new routing every step
# `--every-config`: gcdsl forced to each schedule, tile width and cluster size it has
# ("gcdsl <schedule> <tile_n>[ pairs]"; a configuration whose pairs N does not fit reports the error)
FORCED = tuple(f"gcdsl {schedule} {tile_n}{pairs}" for schedule, tile_n, pairs in (
    ("cooperative", 128, ""), ("cooperative", 256, ""), ("cooperative", 128, " pairs"), ("cooperative", 256, " pairs"),
    ("pingpong", 128, ""), ("pingpong", 192, ""), ("pingpong", 128, " pairs"), ("pingpong", 192, " pairs")))
# gcdsl with its heuristics' tiles and cluster, the tile order forced (`--orders`)
ORDERS = ("gcdsl m-order", "gcdsl n-order", "gcdsl m_partial_last-order", "gcdsl m_blocks-order")
# ... and its loads of A and B asking L2 for a policy other than `cute.copy`'s own (`--load-policies`)
TIMED_LOAD_POLICIES = ("evict_normal", "evict_last")
LOAD_POLICY_VARIANTS = tuple(f"gcdsl {policy}-policy" for policy in TIMED_LOAD_POLICIES)
# ... and its stores of the output asking for one (`--store-policies`)
TIMED_STORE_POLICIES = ("evict_first", "evict_normal")
STORE_POLICY_VARIANTS = tuple(f"gcdsl {policy}-store" for policy in TIMED_STORE_POLICIES)
# ... and its warpgroups without rows in a tile running their WGMMAs anyway (`mma_without_rows`)
MMA_WITHOUT_ROWS = "gcdsl mma-without-rows"
# ... and its clusters claiming their tiles from a counter (`claimed_tiles`; the cooperative
# schedule, which the variant then holds it to)
CLAIMED_TILES = "gcdsl claimed-tiles"
RAGGED_ROWS_CASES = ("w13 forward", "w13 input grad", "w2 forward", "w2 input grad")


def quack_available() -> bool:
    try:
        import quack.gemm_interface  # noqa: F401
    except Exception:
        return False
    return True


def grouped(variant: str, a, b, offs):
    """One grouped GEMM, torch._grouped_mm's semantics, through `variant`."""
    import torch

    if variant == "torch":
        return torch._grouped_mm(a, b, offs=offs)
    if variant == "gcdsl":
        import gcdsl.ops

        return gcdsl.ops.grouped_mm(a, b, offs)
    if variant == "cooperative" or variant.startswith("gcdsl "):
        from gcdsl.ops.grouped_cases import describe
        from gcdsl.ops.grouped_mm import grouped_mm_into

        out = describe(a, b, offs, None).make_output(a.device)
        if variant == "cooperative":
            return grouped_mm_into(a, b, offs, out, schedule="cooperative")
        if variant in ORDERS:
            return grouped_mm_into(a, b, offs, out, tile_order=variant.split()[1][:-len("-order")])
        if variant in LOAD_POLICY_VARIANTS:
            return grouped_mm_into(a, b, offs, out, load_policy=variant.split()[1][:-len("-policy")])
        if variant in STORE_POLICY_VARIANTS:
            return grouped_mm_into(a, b, offs, out, store_policy=variant.split()[1][:-len("-store")])
        if variant == MMA_WITHOUT_ROWS:
            return grouped_mm_into(a, b, offs, out, mma_without_rows=True)
        if variant == CLAIMED_TILES:
            return grouped_mm_into(a, b, offs, out, schedule="cooperative", claimed_tiles=True)
        _, schedule, tile_n, *pairs = variant.split()
        return grouped_mm_into(a, b, offs, out, schedule=schedule, tile_n=int(tile_n), cluster_m=2 if pairs else 1)
    from quack.gemm_interface import gemm

    cu_seqlens = torch.nn.functional.pad(offs, (1, 0))
    if a.dim() == 2 and b.dim() == 2:
        return gemm(a, b, cu_seqlens_k=cu_seqlens, tuned=QUACK["tuned"])
    return gemm(a, b, cu_seqlens_m=cu_seqlens, tuned=QUACK["tuned"])


def reference(a, b, offs):
    """float32, group by group."""
    import torch

    bounds = [0] + offs.tolist()
    if a.dim() == 2 and b.dim() == 2:
        return torch.stack([a[:, s:e].float() @ b[s:e].float() for s, e in zip(bounds, bounds[1:])])
    return torch.cat([a[s:e].float() @ b[g].float() for g, (s, e) in enumerate(zip(bounds, bounds[1:]))])


# How `Cases` counts each expert's rows: the router's counts; the same count for every
# expert ("even"); or the router's counts rounded to whole multiples of WHOLE_TILE_ROWS,
# the rows of a pair's M-step ("whole-tiles": groups of different sizes, none ending
# inside a tile). The last two keep the total, and so every operand.
ROUTINGS = ("routed", "even", "whole-tiles")
WHOLE_TILE_ROWS = 256


def even_rows(shape, tokens: int) -> int:
    """The rows each expert of `shape` gets when `tokens` tokens' routed rows are shared
    out equally (routing "even"); ValueError where they cannot be."""
    rows, experts = tokens * shape.top_k, shape.experts
    if rows % experts:
        raise ValueError(f"{tokens} tokens x top-{shape.top_k} make {rows} rows, not a multiple of "
                         f"{experts} experts: no even routing")
    return rows // experts


def whole_tile_counts(counts: List[int], unit: int = WHOLE_TILE_ROWS) -> List[int]:
    """`counts` rounded to multiples of `unit` with the same sum (which must be a multiple
    of `unit`; ValueError otherwise): each rounded down, then the units left over given,
    one each, to the counts that lost the most (the first of equals first)."""
    total = sum(counts)
    if total % unit:
        raise ValueError(f"{total} rows are not a multiple of {unit}: no routing in whole tiles")
    rounded = [c // unit * unit for c in counts]
    left = (total - sum(rounded)) // unit
    for i in sorted(range(len(counts)), key=lambda i: (-(counts[i] % unit), i))[:left]:
        rounded[i] += unit
    return rounded


def check_routing(shape, tokens: int, routing: str) -> None:
    """ValueError unless `routing` (ROUTINGS) can count `tokens` tokens' rows over `shape`'s experts."""
    if routing not in ROUTINGS:
        raise ValueError(f"routing {routing!r}: expected one of {', '.join(ROUTINGS)}")
    if routing == "even":
        even_rows(shape, tokens)
    elif routing == "whole-tiles":
        whole_tile_counts([tokens * shape.top_k])  # (its check of the total)


class Cases:
    """One (shape, tokens): the routed operands of the six GEMMs of a training step. With
    another `routing` (ROUTINGS) than the router's, the same operands under other `offs`:
    equal groups, or groups of whole tiles, for profiling against the routed ones."""

    def __init__(self, shape, tokens: int, seed: int = 0, routing: str = "routed") -> None:
        import torch
        import torch.nn.functional as F

        self.shape, self.tokens = shape, tokens
        w = self.w = MoEWeights.random(shape, torch.bfloat16, seed)
        g = torch.Generator(device="cuda").manual_seed(seed + 1)
        x = torch.randn(tokens, shape.hidden, device="cuda", generator=g).to(torch.bfloat16)
        _, ids, self.offs = route(x, w.router, shape.top_k)
        check_routing(shape, tokens, routing)
        if routing == "even":
            self.offs = torch.arange(1, shape.experts + 1, device="cuda", dtype=torch.int32) * even_rows(shape, tokens)
        elif routing == "whole-tiles":
            counts = torch.diff(self.offs, prepend=self.offs.new_zeros(1)).tolist()
            self.offs = torch.tensor(whole_tile_counts(counts), dtype=torch.int32).cumsum(0).int().cuda()
        xs = x[ids.flatten().argsort(stable=True) // shape.top_k]  # (T k, H), grouped by expert
        h = torch._grouped_mm(xs, w.w13.transpose(-2, -1), offs=self.offs)  # (T k, 2I)
        gate, up = h.chunk(2, dim=-1)
        act = (F.silu(gate) * up).contiguous()  # (T k, I)
        dh = torch.randn_like(h)  # the gradients arriving at each GEMM's output
        dy = torch.randn(act.shape[0], shape.hidden, device="cuda", dtype=torch.bfloat16)
        self.operands = {  # case: (a, b)
            "w13 forward": (xs, w.w13.transpose(-2, -1)),
            "w13 input grad": (dh, w.w13),
            "w13 weight grad": (dh.t(), xs),
            "w2 forward": (act, w.w2.transpose(-2, -1)),
            "w2 input grad": (dy, w.w2),
            "w2 weight grad": (dy.t(), act),
        }
        self.rows = int(self.offs[-1])

    def flops(self, case: str) -> int:
        a, b = self.operands[case]
        n = b.shape[-1]
        k = a.shape[-1] if a.dim() == 2 and b.dim() == 3 else None
        if k is None:  # the weight gradient: (M, T) @ (T, N)
            return 2 * a.shape[0] * a.shape[1] * n
        return 2 * self.rows * k * n


def ragged_rows_extents(a, b, offs) -> Dict[str, Any]:
    """A 2D x 3D case's N and K, and the tile order gcdsl picks for it (`pick_tile_order`)."""
    if (a.dim(), b.dim()) != (2, 3):
        return {}
    from gcdsl.ops.grouped_cases import describe
    from gcdsl.ops.grouped_mm_rules import pick_tile_order

    return {"n": b.shape[-1], "k": a.shape[-1], "picked_order": pick_tile_order(describe(a, b, offs, None))}


def picked_configuration(a, b, offs) -> Dict[str, Any]:
    """What the *gcdsl* variant runs for a case (`grouped_mm.configuration`)."""
    from gcdsl.ops.grouped_mm import configuration

    return {"picked": str(configuration(a, b, offs))}


def time_cases(report: Report, c: Cases, variants: List[str], args) -> None:
    calls: Dict[tuple, Callable[[], Any]] = {}
    extents: Dict[str, Dict[str, Any]] = {}
    for case in args.cases.split(",") if args.cases else CASES:
        a, b = c.operands[case]
        extents[case] = {**ragged_rows_extents(a, b, c.offs),
                         **(picked_configuration(a, b, c.offs) if "gcdsl" in variants else {})}
        ref = reference(a, b, c.offs)
        for v in variants:
            try:
                err = ((grouped(v, a, b, c.offs).float() - ref).abs().max() / ref.abs().max()).item()
                if not err <= TOLERANCE:
                    raise AssertionError(f"relative error {err:.2e}")
                calls[(case, v)] = lambda v=v, a=a, b=b: grouped(v, a, b, c.offs)
            except Exception as exc:  # noqa: BLE001  (a failing variant is reported, not fatal)
                status = FAILED if isinstance(exc, AssertionError) else ERROR
                print(f"  {case}, {v}: {status}: {str(exc)[:200]}", flush=True)
                if args.verbose:
                    traceback.print_exc()
                report.add(shape=c.shape.name, tokens=c.tokens, case=case, variant=v, status=status,
                           detail=str(exc)[:2000])
        del ref
    medians: Dict[tuple, List[float]] = {key: [] for key in calls}
    samples: Dict[tuple, List[float]] = {key: [] for key in calls}
    for r in range(args.rounds):  # alternating rounds: every variant of every case once per round
        for key, call in rotated(calls.items(), r):
            stats = time_device_ms(call, args.reps, warmup=2)
            medians[key].append(stats["median"])
            samples[key] += stats["samples"]
    for (case, v), ms in medians.items():
        us = statistics.median(ms) * 1e3
        report.add(shape=c.shape.name, tokens=c.tokens, case=case, variant=v, status=OK, us=us,
                   tflops=c.flops(case) / (us * 1e-6) / 1e12, round_medians_ms=ms, samples_ms=summarize(samples[(case, v)]),
                   **extents[case])


def time_training_step(report: Report, shape, tokens: int, args) -> None:
    """Forward and backward of the layer, gcdsl's grouped_mm against torch's."""
    import torch

    w0 = MoEWeights.random(shape, torch.bfloat16, 0)
    g = torch.Generator(device="cuda").manual_seed(7)
    pool = [torch.randn(tokens, shape.hidden, device="cuda", generator=g).to(torch.bfloat16) for _ in range(POOL)]
    gmms = {v: functools.partial(grouped, v) for v in ("torch", "gcdsl")}
    params = {v: MoEWeights(*(t.detach().clone().requires_grad_() for t in (w0.router, w0.w13, w0.w2)))
              for v in gmms}

    def step(v: str, x) -> None:
        w = params[v]
        for t in (w.router, w.w13, w.w2):
            t.grad = None
        x = x.detach().requires_grad_()
        moe_forward(x, w, shape.top_k, gmms[v]).float().square().mean().backward()

    timers = {}
    for v in gmms:
        try:
            step(v, pool[0])
            timers[v] = v
        except Exception as exc:  # noqa: BLE001
            print(f"  training step, {v}: ERROR: {str(exc)[:200]}", flush=True)
            if args.verbose:
                traceback.print_exc()
            report.add(shape=shape.name, tokens=tokens, case="training step", variant=v, status=ERROR,
                       detail=str(exc)[:2000])
    if set(timers) == set(gmms):  # the two steps' gradients from the same tokens agree
        for name in ("w13", "w2"):
            mine, theirs = getattr(params["gcdsl"], name).grad.float(), getattr(params["torch"], name).grad.float()
            err = ((mine - theirs).abs().max() / theirs.abs().max()).item()
            if not err <= STEP_TOLERANCE:
                print(f"  training step: {name} gradients differ by {err:.2e}", flush=True)
                report.add(shape=shape.name, tokens=tokens, case="training step", variant="gcdsl", status=FAILED,
                           detail=f"{name}.grad relative error {err:.2e} against torch's")
                timers.pop("gcdsl")

    def once(v: str) -> float:
        return us_per_call(lambda i: step(v, pool[i % POOL]), args.steps)

    samples: Dict[str, List[float]] = {v: [] for v in timers}
    for r in range(args.rounds):
        for v in rotated(timers, r):
            samples[v].append(once(v))
    for v, s in samples.items():
        report.add(shape=shape.name, tokens=tokens, case="training step", variant=v, status=OK,
                   us=statistics.median(s), rounds=summarize(s))


def _get(report: Report, shape: str, tokens: int, case: str, variant: str, key: str = "us"):
    for r in report.rows:
        if (r["shape"], r["tokens"], r["case"], r["variant"]) == (shape, tokens, case, variant) and r["status"] == OK:
            return r.get(key)
    return None


def summarize_report(report: Report, shapes: List[str], tokens: List[int]) -> None:
    print("\ndevice microseconds per grouped GEMM (TFLOP/s); ratio = peer time / gcdsl time")
    rows, checks = [], []
    for s in shapes:
        for t in tokens:
            for case in CASES + ("training step",):
                ours = _get(report, s, t, case, "gcdsl")
                row = [s, t, case]
                for v in VARIANTS:
                    us, tf = _get(report, s, t, case, v), _get(report, s, t, case, v, "tflops")
                    row.append("-" if us is None else f"{us:.1f}" + (f" ({tf:.0f})" if tf else ""))
                for v in ("torch", "quack"):
                    theirs = _get(report, s, t, case, v)
                    row.append(f"{theirs / ours:.2f}x" if theirs and ours else "-")
                    if theirs and ours:
                        target = 1.0
                        checks.append([s, t, case, f"vs {v}", f"{theirs / ours:.2f}x", f">= {target:.2f}x",
                                       "met" if theirs >= target * ours else "MISSED"])
                rows.append(row)
    print(table(["shape", "tokens", "case", *VARIANTS, "vs torch", "vs quack"], rows))
    print("\ntargets (the training step aims for 1.15x torch)")
    print(table(["shape", "tokens", "case", "what", "measured", "target", ""], checks))
    report.notes += [" ".join(str(c) for c in row) for row in checks]
    forced = [v for v in (*FORCED, *ORDERS, *LOAD_POLICY_VARIANTS, *STORE_POLICY_VARIANTS, MMA_WITHOUT_ROWS,
                          CLAIMED_TILES) if any(r["variant"] == v for r in report.rows)]
    if forced:  # --every-config: the default's time over each forced configuration's
        rows = [[s, t, case, *(f"{us:.1f}" if (us := _get(report, s, t, case, v)) else "-" for v in forced)]
                for s in shapes for t in tokens for case in CASES]
        print("\ngcdsl forced to each configuration: device microseconds")
        print(table(["shape", "tokens", "case", *(v[len("gcdsl "):] for v in forced)], rows))


def _plot(report: Report, machine: Dict[str, Any], shapes: List[str], tokens: List[int]):
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        return None
    from benchmarks.harness import RESULTS

    points = [(s, t) for s in shapes for t in tokens]
    cases = CASES + ("training step",)
    fig, axes = plt.subplots(1, len(points), figsize=(4.2 * len(points), 4.5), sharey=True, squeeze=False)
    for ax, (s, t) in zip(axes[0], points):
        for i, v in enumerate(VARIANTS):
            ys = []
            for case in cases:
                ours, theirs = _get(report, s, t, case, "gcdsl"), _get(report, s, t, case, v)
                ys.append(ours / theirs if ours and theirs else 0)  # speed relative to gcdsl
            width = 0.8 / len(VARIANTS)
            ax.bar([x + i * width for x in range(len(cases))], ys, width, label=v)
        ax.set_xticks([x + 0.4 - 0.4 / len(VARIANTS) for x in range(len(cases))])
        ax.set_xticklabels([c.replace(" ", "\n", 1) for c in cases], fontsize=6)
        ax.set_title(f"{s.split('-')[0]}, {t} tokens", fontsize=9)
        ax.axhline(1.0, color="k", lw=0.5)
        ax.grid(True, axis="y", alpha=0.3)
    axes[0][0].set_ylabel("speed relative to gcdsl (higher is faster)")
    axes[0][0].legend(fontsize=8)
    fig.suptitle(f"W7 training GEMMs and step ({machine.get('gpu', 'GPU')})", fontsize=10)
    fig.tight_layout()
    os.makedirs(RESULTS, exist_ok=True)
    path = os.path.join(RESULTS, "W7.png")
    fig.savefig(path, dpi=120)
    plt.close(fig)
    return path


def run(args, machine: Dict[str, Any]) -> Report:
    import torch

    QUACK["tuned"] = args.quack_tuned

    shapes = args.shapes.split(",") if args.shapes else list(TRAINING_SHAPES)
    tokens = [int(t) for t in args.tokens.split(",")] if args.tokens else list(TOKENS)
    variants = [v for v in VARIANTS if v != "quack" or quack_available()]
    if args.no_cooperative:
        variants.remove("cooperative")
    if args.forced:
        unknown = [v for v in args.forced.split(",") if f"gcdsl {v}" not in FORCED]
        if unknown:
            raise SystemExit(f"--forced: {', '.join(unknown)} not in: {', '.join(f[len('gcdsl '):] for f in FORCED)}")
        variants += [f"gcdsl {v}" for v in args.forced.split(",")]
    elif args.every_config:
        variants += FORCED
    if args.orders:
        variants = ["torch", "gcdsl", *ORDERS]
        args.cases = args.cases or ",".join(RAGGED_ROWS_CASES)
        args.no_step = True
    if args.load_policies or args.store_policies:
        variants = ["torch", "gcdsl", *(LOAD_POLICY_VARIANTS if args.load_policies else ()),
                    *(STORE_POLICY_VARIANTS if args.store_policies else ())]
        args.no_step = True
    if args.mma_without_rows or args.claimed_tiles:
        variants = ["torch", "gcdsl", *([MMA_WITHOUT_ROWS] if args.mma_without_rows else []),
                    *([CLAIMED_TILES] if args.claimed_tiles else [])]
        args.cases = args.cases or ",".join(RAGGED_ROWS_CASES)
        args.no_step = True
    report = Report("W7", "MoE training: the step's grouped GEMMs and the step; torch vs gcdsl vs quack",
                    config={"reps": args.reps, "rounds": args.rounds, "steps": args.steps, "tolerance": TOLERANCE,
                            "quack": quack_note("gemm(cu_seqlens_m= or cu_seqlens_k=...)")})
    if "quack" not in variants:
        report.notes.append("quack-kernels is not installed: its column is skipped")
        for s in shapes:
            for t in tokens:
                for case in CASES:
                    report.add(shape=s, tokens=t, case=case, variant="quack", status=SKIPPED)
    for s in shapes:
        for t in tokens:
            print(f"\n{s}, {t} tokens", flush=True)
            c = Cases(SHAPES[s], t)
            time_cases(report, c, variants, args)
            del c
            torch.cuda.empty_cache()
            if not args.no_step:
                time_training_step(report, SHAPES[s], t, args)
                torch.cuda.empty_cache()
            for r in report.rows:
                if (r["shape"], r["tokens"]) == (s, t) and r["status"] == OK and "printed" not in r:
                    r["printed"] = True
                    print(f"  {r['case']:16s} {r['variant']:6s} {r['us']:10.1f} us", flush=True)
    summarize_report(report, shapes, tokens)
    if not args.json:  # (a side run's plot would replace the headline run's)
        report.config["plot"] = _plot(report, machine, shapes, tokens)
    return report


def parse_args(argv=None):
    p = argparse.ArgumentParser(description="W7 MoE training benchmark (see the module docstring)")
    p.add_argument("--shapes", default="", help="comma-separated subset of " + ",".join(TRAINING_SHAPES))
    p.add_argument("--tokens", default="", help="comma-separated token counts (default 4096,16384)")
    p.add_argument("--reps", type=int, default=10, help="timed calls per case, variant and round")
    p.add_argument("--rounds", type=int, default=3)
    p.add_argument("--steps", type=int, default=3, help="training steps per timed batch")
    p.add_argument("--no-step", action="store_true", help="time the GEMMs only")
    p.add_argument("--cases", default="", help="comma-separated subset of " + ",".join(CASES))
    p.add_argument("--no-cooperative", action="store_true", help="leave out gcdsl held to its cooperative schedule")
    p.add_argument("--orders", action="store_true",
                   help="torch and gcdsl beside gcdsl with each tile order forced (ORDERS), ragged-row cases, no step")
    p.add_argument("--load-policies", action="store_true",
                   help="torch and gcdsl beside gcdsl with its loads' L2 policy forced (LOAD_POLICY_VARIANTS), no step")
    p.add_argument("--store-policies", action="store_true",
                   help="torch and gcdsl beside gcdsl with its stores' L2 policy forced (STORE_POLICY_VARIANTS), "
                        "no step")
    p.add_argument("--mma-without-rows", action="store_true",
                   help="torch and gcdsl beside gcdsl with its warpgroups without rows running their WGMMAs "
                        f"({MMA_WITHOUT_ROWS!r}), ragged-row cases, no step")
    p.add_argument("--claimed-tiles", action="store_true",
                   help=f"torch and gcdsl beside gcdsl with its clusters claiming their tiles ({CLAIMED_TILES!r}), "
                        "ragged-row cases, no step")
    p.add_argument("--every-config", action="store_true",
                   help="also time gcdsl forced to each schedule, tile width and cluster size (FORCED)")
    p.add_argument("--forced", default="",
                   help='comma-separated subset of FORCED to time, as --every-config (e.g. "pingpong 192 pairs")')
    add_quack_flag(p)
    add_json_flag(p, "W7")
    p.add_argument("--verbose", action="store_true")
    return p.parse_args(argv)


def main(argv=None) -> int:
    from benchmarks import harness

    return harness.main_on_gpu("W7", run, parse_args(argv))


if __name__ == "__main__":
    sys.exit(main())
