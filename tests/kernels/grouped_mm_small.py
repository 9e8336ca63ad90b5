"""A small grouped GEMM for compute-sanitizer: every kernel variant once, verified.

    compute-sanitizer --tool memcheck  python -m tests.kernels.grouped_mm_small
    compute-sanitizer --tool racecheck python -m tests.kernels.grouped_mm_small
    compute-sanitizer --tool synccheck python -m tests.kernels.grouped_mm_small
    python -m tests.kernels.grouped_mm_small ragged        # 2D x 3D alone, every configuration
    python -m tests.kernels.grouped_mm_small only claimed_tiles   # 2D x 3D with one option (or mma_without_rows)
    python -m tests.kernels.grouped_mm_small reductions    # the grouped reductions alone
    python -m tests.kernels.grouped_mm_small swiglu        # the SwiGLU epilogue alone
    python -m tests.kernels.grouped_mm_small decode        # the decode kernel alone

`offs` on the GPU; groups of 0, 1, 129 and 64 rows (a pair of CTAs with an idle second CTA, a group
with a partial tile), N and K not multiples of the tile; single CTAs, pairs and the
ping-pong consumers (alone and in pairs), both tiles, every tile order, warpgroups without rows running their WGMMAs, claimed tiles, bf16 and fp32 outputs; then the other cases of `torch._grouped_mm`
on the same groups (B N-major, 3D x 2D, the grouped reduction with its empty group, a batch), the
grouped reduction with T contiguous in both operands and strided, single CTAs and pairs, and an
expert layer's two GEMMs in one kernel and in the decode kernel. Exits 1 if a result is wrong.
"""
import sys

import torch

from gcdsl.ops.grouped_mm import grouped_mm_into
from gcdsl.ops.grouped_mm_rules import pick_tile_n
from gcdsl.ops.hopper_grouped_gemm import pairs_fit


def main() -> int:
    rows = [0, 1, 129, 64]
    return 0 if ragged_rows(rows) and many_claims() and other_cases(rows) else 1


# (cluster_m, schedule, tile order, options): every configuration of the kernel with ragged
# rows; the options are `grouped_mm_into`'s mma_without_rows and claimed_tiles
RAGGED_CONFIGURATIONS = (
    (1, "cooperative", "m", {}), (2, "cooperative", "m", {}), (1, "pingpong", "m", {}),
    (2, "cooperative", "n", {}), (1, "pingpong", "n", {}), (1, "cooperative", "m_partial_last", {}),
    (1, "pingpong", "m_partial_last", {}), (2, "cooperative", "m_blocks", {}), (2, "pingpong", "m", {}),
    (1, "cooperative", "m", {"mma_without_rows": True}), (2, "pingpong", "m", {"mma_without_rows": True}),
    (1, "cooperative", "m", {"claimed_tiles": True}), (2, "cooperative", "n", {"claimed_tiles": True}),
)


def ragged_problem(rows, n: int, k: int):
    """(a, b, the group ends, the float32 reference) of 2D x 3D over groups of `rows` rows,
    `a` 3 rows longer than the groups."""
    ends = torch.tensor(rows).cumsum(0).to(torch.int32)
    a = torch.randn(int(ends[-1]) + 3, k, device="cuda", dtype=torch.bfloat16)
    b = torch.randn(len(rows), n, k, device="cuda", dtype=torch.bfloat16).transpose(-2, -1)
    ref = torch.cat([a[s:e].float() @ b[g].float()
                     for g, (s, e) in enumerate(zip([0] + ends[:-1].tolist(), ends.tolist()))])
    return a, b, ends, ref


def run_poisoned(a, b, ends, ref, out_dtype, label: str, **launch) -> bool:
    """`grouped_mm_into(..., **launch)` into a NaN-poisoned output: its groups' rows against
    `ref`, the rows past them still NaN; prints `label` with the verdict."""
    out = torch.full((a.shape[0], b.shape[2]), float("nan"), device="cuda", dtype=out_dtype)
    grouped_mm_into(a, b, ends.cuda(), out, **launch)
    torch.cuda.synchronize()
    end = int(ends[-1])
    err = ((out[:end].float() - ref).abs().max() / ref.abs().max()).item()
    good = err <= 1e-2 and bool(torch.isnan(out[end:]).all())
    print(f"{label}: rel err {err:.1e} {'PASS' if good else 'FAIL'}", flush=True)
    return good


def many_claims() -> bool:
    """Claimed tiles with more tiles than SMs (on a GPU of up to 320 SMs), so that clusters
    claim real tiles, not only the claim that ends their loop: the groups above 80 times
    over: 640 tiles of 128 x 256 for single CTAs, 480 cluster tiles for pairs."""
    torch.manual_seed(1)
    rows = [0, 1, 129, 64] * 80
    a, b, ends, ref = ragged_problem(rows, 392, 200)
    ok = True
    for cluster_m in (1, 2):
        ok &= run_poisoned(a, b, ends, ref, torch.bfloat16,
                           f"{len(rows)} groups, N=392 K=200 cluster_m={cluster_m}, claimed tiles",
                           tile_n=256, cluster_m=cluster_m, schedule="cooperative", claimed_tiles=True)
    return ok


def ragged_rows(rows, only: str = "") -> bool:
    """2D x 3D in every configuration of the kernel with ragged rows (or only those with
    option `only`)."""
    torch.manual_seed(0)
    ok = True
    for n, k in ((392, 200), (328, 136)):  # 128x256 and 128x128 tiles (gcdsl.ops.grouped_mm_rules.pick_tile_n)
        a, b, ends, ref = ragged_problem(rows, n, k)
        for out_dtype in (torch.bfloat16, torch.float32):
            for cluster_m, schedule, order, options in RAGGED_CONFIGURATIONS:
                if only and only not in options:
                    continue
                if (cluster_m, schedule) == (2, "pingpong") and not pairs_fit(n, 192):
                    continue  # (392 mod 192 = 8: each CTA's half of the last B tile must start inside B)
                tile_n = pick_tile_n(n) if schedule == "cooperative" else None  # ping-pong: 192 here
                extra = "".join(f", {name}" for name in options)
                ok &= run_poisoned(a, b, ends, ref, out_dtype,
                                   f"N={n} K={k} out={out_dtype} cluster_m={cluster_m} {schedule} {order}-order{extra}",
                                   tile_n=tile_n, cluster_m=cluster_m, schedule=schedule, tile_order=order, **options)
    return ok


def other_cases(rows) -> bool:
    """B N-major, 3D x 2D, 2D x 2D (ragged K) and 3D x 3D, each once."""
    import gcdsl.ops

    ends = torch.tensor(rows).cumsum(0).to(torch.int32).cuda()
    bounds = [0] + ends.tolist()
    t, m, n, k, groups = -(-(bounds[-1] + 3) // 8) * 8, 136, 264, 72, len(rows)

    def rand(*shape):
        return torch.randn(*shape, device="cuda", dtype=torch.bfloat16)

    def grouped(x, y):  # float32, group by group along T
        if x.dim() == 2 and y.dim() == 3:
            return torch.cat([x[s:e].float() @ y[g].float() for g, (s, e) in enumerate(zip(bounds, bounds[1:]))])
        if x.dim() == 3:
            return torch.cat([x[g].float() @ y[:, s:e].float() for g, (s, e) in enumerate(zip(bounds, bounds[1:]))], 1)
        return torch.stack([x[:, s:e].float() @ y[s:e].float() for s, e in zip(bounds, bounds[1:])])

    cases = {
        "2D x 3D, b N-major": (rand(t, k), rand(groups, k, n), ends, lambda out: out[:bounds[-1]]),
        "3D x 2D": (rand(groups, m, k), rand(t, k).t(), ends, lambda out: out[:, :bounds[-1]]),
        "2D x 2D (ragged K)": (rand(t, m).t(), rand(t, n), ends, lambda out: out),
        "3D x 3D": (rand(groups, m, k), rand(groups, n, k).transpose(-2, -1), None, lambda out: out),
    }
    ok = True
    # ping-pong with at least two tiles a CTA (the grid stops at one CTA an SM): both
    # consumer warpgroups take turns, on the mainloop and on their epilogues
    sms = torch.cuda.get_device_properties(0).multi_processor_count
    rows_many = (700, 0, 128 * 2 * sms // 8 - 700)  # tiles: 2 x SMs of 128 x 128 (N = 1032: 9 N-tiles)
    many = torch.tensor(rows_many).cumsum(0).to(torch.int32).cuda()
    end = int(many[-1])
    x, w = rand(end + 4, 264), rand(3, 264, 1032)
    out = torch.full((end + 4, 1032), float("nan"), device="cuda", dtype=torch.bfloat16)
    grouped_mm_into(x, w, many, out, tile_n=128, schedule="pingpong")
    ref = torch.cat([x[:700].float() @ w[0].float(), x[700:end].float() @ w[2].float()])
    err = ((out[:end].float() - ref).abs().max() / ref.abs().max()).item()
    good = err <= 1e-2 and bool(torch.isnan(out[end:]).all())
    ok &= good
    tiles = sum(-(-r // 128) for r in rows_many) * 9
    print(f"ping-pong, both warpgroups ({tiles} tiles on {sms} SMs): rel err {err:.1e} "
          f"{'PASS' if good else 'FAIL'}", flush=True)
    ok &= swiglu_epilogues(rows)
    for name, (x, y, offs, owned) in cases.items():
        out = owned(gcdsl.ops.grouped_mm(x, y, offs).float())
        ref = x.float() @ y.float() if offs is None else grouped(x, y)
        err = ((out - ref).abs().max() / ref.abs().max()).item()
        good = err <= 1e-2
        ok &= good
        print(f"{name}: rel err {err:.1e} {'PASS' if good else 'FAIL'}", flush=True)
    ok &= grouped_reductions()
    ok &= experts_in_one_kernel()
    ok &= decode_kernel()
    return ok


def swiglu_epilogues(rows) -> bool:
    """The SwiGLU epilogue in its configurations, pairs among them (one CTA of a pair
    loads the gate rows, the other the up rows; the group of 64 rows leaves a CTA idle)."""
    import torch.nn.functional as F

    ends = torch.tensor(rows).cumsum(0).to(torch.int32).cuda()
    bounds = [0] + ends.tolist()
    t, k, groups = bounds[-1] + 3, 72, len(rows)
    x = torch.randn(t, k, device="cuda", dtype=torch.bfloat16)
    w13 = torch.randn(groups, 256, k, device="cuda", dtype=torch.bfloat16)  # (G, 2I, K), I = 128
    ref = torch.cat([F.silu(x[s:e].float() @ w13[g, :128].float().t()) * (x[s:e].float() @ w13[g, 128:].float().t())
                     for g, (s, e) in enumerate(zip(bounds, bounds[1:]))])
    ok = True
    for schedule, tile_n, cluster_m in (("cooperative", 256, 1), ("cooperative", 256, 2), ("pingpong", 128, 1),
                                        ("cooperative", 64, 1)):
        out = torch.full((t, 128), float("nan"), device="cuda", dtype=torch.bfloat16)
        grouped_mm_into(x, w13.transpose(-2, -1), ends, out, tile_n=tile_n, cluster_m=cluster_m, schedule=schedule,
                        activation="swiglu")
        err = ((out[:bounds[-1]].float() - ref).abs().max() / ref.abs().max()).item()
        good = err <= 1e-2 and bool(torch.isnan(out[bounds[-1]:]).all())
        ok &= good
        print(f"SwiGLU, {schedule} {tile_n}{', pairs' if cluster_m == 2 else ''}: rel err {err:.1e} "
              f"{'PASS' if good else 'FAIL'}", flush=True)
    return ok


def grouped_reductions() -> bool:
    """2D x 2D with T contiguous in both operands (groups on multiples of 8 columns, whose
    first k-tiles start before them: columns zeroed in shared memory) and with T strided,
    an empty group; single CTAs and pairs sharing B by multicast, in both schedules."""
    from gcdsl.ops.grouped_mm import grouped_mm_into

    rows = [8, 0, 136, 64]
    ends = torch.tensor(rows).cumsum(0).to(torch.int32).cuda()
    bounds = [0] + ends.tolist()
    m, n, t = 136, 360, bounds[-1] + 8  # N ends in the second half of a 128- and of a 192-wide tile
    ok = True
    for t_contiguous in (True, False):
        a = torch.randn(m, t, device="cuda", dtype=torch.bfloat16)  # row-major: T contiguous
        b = torch.randn(n, t, device="cuda", dtype=torch.bfloat16).t()  # column-major: T contiguous
        if not t_contiguous:
            a, b = a.t().contiguous().t(), b.contiguous()
        ref = torch.stack([a[:, s:e].float() @ b[s:e].float() for s, e in zip(bounds, bounds[1:])])
        for schedule, tile_n, cluster_m in (("cooperative", 128, 1), ("pingpong", 192, 1),
                                            ("cooperative", 128, 2), ("pingpong", 192, 2)):
            out = torch.full((len(rows), m, n), float("nan"), device="cuda", dtype=torch.bfloat16)
            grouped_mm_into(a, b, ends, out, tile_n=tile_n, schedule=schedule, cluster_m=cluster_m)
            err = ((out.float() - ref).abs().max() / ref.abs().max()).item()
            good = err <= 1e-2 and bool((out[1] == 0).all())
            ok &= good
            print(f"2D x 2D, T {'contiguous' if t_contiguous else 'strided'}, {schedule} {tile_n}"
                  f"{', pairs' if cluster_m == 2 else ''}: rel err {err:.1e} {'PASS' if good else 'FAIL'}", flush=True)
    return ok


def experts_in_one_kernel() -> bool:
    """Both GEMMs of an expert layer in one kernel (`fused_moe_megakernel`): the down tiles
    wait on counts of gate-up tiles other CTAs store and add their K splits' sums into
    the output, the tiles' k-tiles in order and staggered; an expert without tokens."""
    import importlib

    from benchmarks.moe_layer import moe_experts_reference

    fm = importlib.import_module("gcdsl.ops.fused_moe")
    experts, hidden, inter, tokens, k = 8, 264, 128, 200, 2
    w1 = (torch.randn(experts, 2 * inter, hidden, device="cuda") / hidden ** 0.5).to(torch.bfloat16)
    w2 = (torch.randn(experts, hidden, inter, device="cuda") / inter ** 0.5).to(torch.bfloat16)
    x = torch.randn(tokens, hidden, device="cuda").to(torch.bfloat16)
    ids = torch.randint(0, experts - 1, (tokens, k), device="cuda")  # the last expert: no tokens
    weights = torch.rand(tokens, k, device="cuda")
    ref = moe_experts_reference(x, w1, w2, weights, ids)
    good = True
    for tile_n, split_k, stagger_k in ((128, 1, False), (256, 1, False), (128, 2, False), (128, 2, True)):
        out = fm.fused_moe_megakernel(x, w1, w2, weights, ids, tile_n=tile_n, split_k=split_k,
                                      stagger_k=stagger_k).float()
        err = ((out - ref).abs().max() / ref.abs().max()).item()
        good &= err <= 2e-2
        print(f"expert layer in one kernel, tiles {tile_n} wide, {split_k} K split(s) of the down tiles"
              f"{', k-tiles staggered' if stagger_k else ''}: rel err {err:.1e} {'PASS' if err <= 2e-2 else 'FAIL'}",
              flush=True)
    return good


def decode_kernel() -> bool:
    """The decode kernel (`fused_moe_decode`): CTAs that meet at a grid barrier between
    the GEMVs; an expert with several slots, one with none; both
    prefetch orders, the streamed build (`decode_ring`) and the build with phase stamps
    (`decode_phases`)."""
    import importlib

    from benchmarks.moe_layer import moe_experts_reference

    fm = importlib.import_module("gcdsl.ops.fused_moe")
    experts, hidden, inter, tokens, k = 8, 256, 512, 3, 4
    w1 = (torch.randn(experts, 2 * inter, hidden, device="cuda") / hidden ** 0.5).to(torch.bfloat16)
    w2 = (torch.randn(experts, hidden, inter, device="cuda") / inter ** 0.5).to(torch.bfloat16)
    x = torch.randn(tokens, hidden, device="cuda").to(torch.bfloat16)
    ids = torch.tensor([[0, 1, 2, 3], [0, 0, 4, 5], [6, 0, 1, 2]], device="cuda")  # expert 7: no slot
    weights = torch.rand(tokens, k, device="cuda")
    ref = moe_experts_reference(x, w1, w2, weights, ids)
    good = True
    for early in (True, False):
        out = fm.fused_moe_decode(x, w1, w2, weights, ids, early_prefetch=early).float()
        err = ((out - ref).abs().max() / ref.abs().max()).item()
        good &= err <= 2e-2
        print(f"expert layer in the decode kernel, down rows prefetched {'first' if early else 'at the barrier'}: "
              f"rel err {err:.1e} {'PASS' if err <= 2e-2 else 'FAIL'}", flush=True)
    out = fm.fused_moe_decode(x, w1, w2, weights, ids, streamed=True).float()
    err = ((out - ref).abs().max() / ref.abs().max()).item()
    good &= err <= 2e-2
    print(f"expert layer in the decode kernel, every weight through its ring: rel err {err:.1e} "
          f"{'PASS' if err <= 2e-2 else 'FAIL'}", flush=True)
    out, phases = fm.decode_phases(x, w1, w2, weights, ids)
    err = ((out.float() - ref).abs().max() / ref.abs().max()).item()
    stamped = all(bool((values == values).any()) for values in phases.values())  # each phase reached by a CTA
    good &= err <= 2e-2 and stamped
    print(f"expert layer in the decode kernel with phase stamps: rel err {err:.1e}, every phase stamped: {stamped} "
          f"{'PASS' if err <= 2e-2 and stamped else 'FAIL'}", flush=True)
    return good


if __name__ == "__main__":
    if sys.argv[1:] == ["ragged"]:  # 2D x 3D alone, every configuration
        sys.exit(0 if ragged_rows([0, 1, 129, 64]) else 1)
    if sys.argv[1:2] == ["only"]:  # the configurations with one option, e.g. `only claimed_tiles`
        sys.exit(0 if ragged_rows([0, 1, 129, 64], only=sys.argv[2])
                 and (sys.argv[2] != "claimed_tiles" or many_claims()) else 1)
    if sys.argv[1:] == ["reductions"]:  # the grouped reductions alone
        sys.exit(0 if grouped_reductions() else 1)
    if sys.argv[1:] == ["swiglu"]:  # the SwiGLU epilogue alone
        sys.exit(0 if swiglu_epilogues([0, 1, 129, 64]) else 1)
    if sys.argv[1:] == ["decode"]:
        sys.exit(0 if decode_kernel() else 1)
    sys.exit(main())
