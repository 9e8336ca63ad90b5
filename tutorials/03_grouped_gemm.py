"""Tutorial 03: an MoE layer on `gcdsl.ops.grouped_mm`, routing made on the GPU.

A mixture-of-experts layer routes each token to `--top-k` of `--experts` experts,
so every expert multiplies its own ragged block of rows by its own weights:

    h[rows of e] = x[rows of e] @ w13[e].T,   y[rows of e] = swiglu(h)[rows of e] @ w2[e].T

The router makes `offs` (where each expert's rows end) on the GPU, and it changes
with every batch of tokens. `gcdsl.ops.grouped_mm(x, w.transpose(-2, -1), offs)`
never reads `offs` on the host: the kernel's persistent scheduler reads it from
global memory and derives each expert's tiles itself. Its four TMA descriptors (x in
whole tiles and in the short boxes of an expert's last, partial tile, the weights, and
one ragged descriptor that clips every expert's output at its last row) depend only on addresses and shapes, and sit in the kernel's grid-constant
parameter space. Nothing waits for the GPU, so the whole layer can be captured in a
CUDA graph and replayed on new tokens.

The layer itself is `benchmarks/moe_layer.py` (router, top-k, permutation, the two
grouped GEMMs, SwiGLU, weighted combine); only its `grouped_mm` is swapped here.

On a GPU: the layer verified against float32, then timed eager (new tokens every
call) and replayed from a CUDA graph, beside the same layer on torch._grouped_mm.
Without one: the kernel compiled for sm_90a, its desugared source and its PTX.

    python tutorials/03_grouped_gemm.py [--experts 128] [--tokens 512] [--top-k 8]
                                         [--hidden 2048] [--intermediate 768]
    python tutorials/03_grouped_gemm.py --small     # a tiny layer (for compute-sanitizer)
"""
import argparse
import sys

from _machine import ON_HOPPER, show_compile, time_calls  # before cutlass: it configures the DSL

from benchmarks.moe_layer import GROUPED_MMS, MoEShape, MoEWeights, moe_forward, moe_reference


def run_on_gpu(args, shape: MoEShape) -> bool:
    import torch

    w = MoEWeights.random(shape, torch.bfloat16)
    inputs = [torch.randn(args.tokens, shape.hidden, device="cuda").to(torch.bfloat16) for _ in range(4)]
    print(f"{shape.experts} experts, hidden {shape.hidden}, intermediate {shape.intermediate}, top-{shape.top_k}; "
          f"{args.tokens} tokens; bf16 in and out, fp32 accumulation\n")
    ok = True
    rows = []
    for name in ("gcdsl", "torch"):
        gmm = GROUPED_MMS[name]
        # correctness: eager on input 0, then a captured graph replayed on input 1
        ref0, ref1 = (moe_reference(x, w, shape.top_k) for x in inputs[:2])
        err = ((moe_forward(inputs[0], w, shape.top_k, gmm).float() - ref0).abs().max() / ref0.abs().max()).item()
        x = inputs[0].clone()
        graph = torch.cuda.CUDAGraph()
        with torch.cuda.graph(graph):
            out = moe_forward(x, w, shape.top_k, gmm)
        x.copy_(inputs[1])  # new tokens: new routing, new offs, inside the same graph
        graph.replay()
        torch.cuda.synchronize()
        graph_err = ((out.float() - ref1).abs().max() / ref1.abs().max()).item()
        ok &= err <= 2e-2 and graph_err <= 2e-2
        row = [name, f"{err:.1e}", f"{graph_err:.1e}"]
        if not args.small:
            eager = time_calls(lambda i: moe_forward(inputs[i % 4], w, shape.top_k, gmm))
            replay = time_calls(lambda i: (x.copy_(inputs[i % 4]), graph.replay()))
            row += [f"{eager:.1f}", f"{replay:.1f}"]
        rows.append(row)
    headers = ["grouped_mm", "rel. err (eager)", "rel. err (graph, new tokens)"]
    if not args.small:
        headers += ["eager us/layer", "graph us/layer"]
    widths = [max(len(str(r[i])) for r in rows + [headers]) for i in range(len(headers))]
    for r in [headers] + rows:
        print("  ".join(str(c).rjust(wd) for c, wd in zip(r, widths)))
    print(f"\nverify against float32: {'PASS' if ok else 'FAIL'} (relative error <= 2e-2)")
    if not args.small:
        print("(median of 5 rounds of 20 layer calls, new tokens every call; "
              "benchmarks/w6_moe_layer.py measures more shapes and quack-kernels)")
    return ok


def compile_only(args, shape: MoEShape) -> bool:
    import cutlass
    import cutlass.cute as cute

    from gcdsl.ops import hopper_grouped_gemm as hgg
    from gcdsl.ops.grouped_mm_rules import pick_tile_n

    n, k = 2 * shape.intermediate, shape.hidden  # the gate-up GEMM
    gemm = hgg.HopperGroupedGemm(hgg.GemmConfig(cutlass.BFloat16, cutlass.BFloat16, shape.experts, n, k,
                                                 pick_tile_n(n)))

    cute.compile(gemm, *gemm.trace_args())
    show_compile(hgg.HopperGroupedGemm.kernel)
    print(f"  ({shape.experts} experts: four descriptors in parameter space whatever the expert count; "
          f"offs read from global memory into a {gemm.header_bytes}-byte shared-memory schedule; "
          f"tile 128x{gemm.tile_mnk[1]}x64, {gemm.stages} stages)")
    return True


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--experts", type=int, default=128)
    parser.add_argument("--tokens", type=int, default=512)
    parser.add_argument("--top-k", type=int, default=8)
    parser.add_argument("--hidden", type=int, default=2048)
    parser.add_argument("--intermediate", type=int, default=768)
    parser.add_argument("--small", action="store_true", help="8 experts of width 256, 16 tokens; no timing")
    args = parser.parse_args()
    if args.small:
        args.tokens = 16
        shape = MoEShape("small", 8, 256, 128, 2)
    else:
        shape = MoEShape("layer", args.experts, args.hidden, args.intermediate, args.top_k)
    ok = run_on_gpu(args, shape) if ON_HOPPER else compile_only(args, shape)
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
