"""Tutorial 03: an MoE layer's grouped GEMMs with per-group descriptors in parameter space.

A mixture-of-experts layer routes each token to `--top-k` of `--experts` experts,
so every expert multiplies its own ragged block of rows by its own weight:

    out[rows of e] = x[rows of e] @ w[e].T          for every expert e

`gcdsl.ops.grouped_mm(x, w.transpose(-2, -1), offs)` does that in one persistent
Hopper kernel (torch._grouped_mm's 2D x 3D case). Each expert's output rows get
their own TMA store descriptor, encoded on the host and kept in the kernel's
grid-constant parameter space (one 128-byte entry per expert); the epilogue picks
entry `e` with a runtime index, so the store clips at the expert's last row. No
descriptor is rewritten on the device, no fence, no workspace.

On a GPU: both GEMMs of the layer (up-projection, down-projection), verified
against a float32 reference and timed beside torch._grouped_mm. Without one: the
kernel compiled for sm_90a, its desugared source and what the PTX shows.

    python tutorials/03_grouped_gemm.py [--experts 128] [--tokens 4096] [--top-k 8]
                                         [--hidden 2048] [--intermediate 768]
    python tutorials/03_grouped_gemm.py --small     # a tiny problem (for compute-sanitizer)
"""
import argparse
import sys

from _machine import HAS_GPU, show_compile, time_launches  # before cutlass: it configures the DSL

import gcdsl


def routed_rows(experts: int, tokens: int, top_k: int, seed: int):
    """Rows per expert of a skewed top-k routing: some experts get many tokens, some none."""
    import torch

    g = torch.Generator().manual_seed(seed)
    popularity = torch.rand(experts, generator=g) ** 4 + 1e-3
    picks = torch.stack([torch.multinomial(popularity, top_k, generator=g) for _ in range(tokens)])
    return torch.bincount(picks.flatten(), minlength=experts).tolist()


def run_on_gpu(args) -> bool:
    import torch

    import gcdsl.ops

    if args.small:
        rows, shapes = [0, 1, 129, 64], [("small", 256, 128)]
    else:
        rows = routed_rows(args.experts, args.tokens, args.top_k, args.seed)
        shapes = [("up-projection", 2 * args.intermediate, args.hidden),
                  ("down-projection", args.hidden, args.intermediate)]
    offs = torch.tensor(rows).cumsum(0).to(torch.int32)  # on the CPU: no device-to-host copy per call
    m = int(offs[-1])
    print(f"{len(rows)} experts, {m} routed rows (min {min(rows)}, max {max(rows)}, "
          f"{rows.count(0)} experts without tokens), bf16 in, bf16 out, fp32 accumulation\n")

    ok, table = True, []
    for name, n, k in shapes:
        x = torch.randn(m, k, device="cuda", dtype=torch.bfloat16)
        w = torch.randn(len(rows), n, k, device="cuda", dtype=torch.bfloat16) / k ** 0.5
        b = w.transpose(-2, -1)  # (E, K, N), K-major: how torch keeps expert weights
        out = gcdsl.ops.grouped_mm(x, b, offs)
        ref = torch.cat([x[s:e].float() @ b[i].float()
                         for i, (s, e) in enumerate(zip([0] + offs[:-1].tolist(), offs.tolist()))])
        err = ((out.float() - ref).abs().max() / ref.abs().max()).item()
        ok &= err <= 1e-2
        row = [name, f"{m}x{n}x{k}", f"{err:.1e}"]
        if not args.small:
            flops = 2 * m * n * k
            ours, _, _ = time_launches(lambda: gcdsl.ops.grouped_mm(x, b, offs), args.reps)
            offs_gpu = offs.cuda()
            theirs, _, _ = time_launches(lambda: torch._grouped_mm(x, b, offs=offs_gpu), args.reps)
            row += [f"{ours:.0f}", f"{flops / ours / 1e6:.0f}", f"{theirs:.0f}", f"{flops / theirs / 1e6:.0f}",
                    f"{theirs / ours:.2f}x"]
        table.append(row)

    headers = ["GEMM", "M x N x K", "rel. err"]
    if not args.small:
        headers += ["gcdsl us", "TFLOP/s", "torch us", "TFLOP/s", "speed-up"]
    widths = [max(len(str(r[i])) for r in table + [headers]) for i in range(len(headers))]
    for r in [headers] + table:
        print("  ".join(str(c).rjust(w) for c, w in zip(r, widths)))
    print(f"\nverify against float32: {'PASS' if ok else 'FAIL'} (relative error <= 1e-2)")
    if not args.small:
        print(f"(median of {args.reps} calls each, CUDA events around the whole Python call)")
    return ok


def compile_only(args) -> bool:
    import numpy as np

    import cutlass
    import cutlass.cute as cute

    from gcdsl.ops import hopper_grouped_gemm as hgg
    from gcdsl.ops.grouped_mm import pick_tile_n

    experts, n, k = (4, 256, 128) if args.small else (args.experts, 2 * args.intermediate, args.hidden)
    gemm = hgg.HopperGroupedGemm(cutlass.BFloat16, cutlass.BFloat16, experts, n, k, pick_tile_n(n))
    ptr = cute.runtime.make_ptr(cutlass.BFloat16, 0, cute.AddressSpace.gmem, assumed_align=16)
    descs = gcdsl.TensorMapTable(box=hgg.EPI_TILE, swizzle=hgg.output_swizzle(cutlass.BFloat16))
    sched = gcdsl.grid_constant(np.zeros((experts, hgg.SCHED_COLUMNS), dtype=np.int32))
    cute.compile(gemm, ptr, ptr, ptr, cutlass.Int32(1), descs.placeholder(experts, cutlass.BFloat16), sched,
                 cutlass.Int32(1), cute.runtime.make_fake_stream())
    show_compile(hgg.HopperGroupedGemm.kernel)
    print(f"  ({experts} experts: {experts} x 128 B output descriptors + {experts} x 12 B scheduler rows "
          f"in parameter space; tile 128x{gemm.tile_mnk[1]}x64, {gemm.stages} stages)")
    return True


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--experts", type=int, default=128)
    parser.add_argument("--tokens", type=int, default=4096)
    parser.add_argument("--top-k", type=int, default=8)
    parser.add_argument("--hidden", type=int, default=2048)
    parser.add_argument("--intermediate", type=int, default=768)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--reps", type=int, default=50)
    parser.add_argument("--small", action="store_true", help="4 experts of 0, 1, 129 and 64 rows; no timing")
    args = parser.parse_args()
    ok = run_on_gpu(args) if HAS_GPU else compile_only(args)
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
