"""Tutorial 04: an MoE expert layer with `gcdsl.ops.fused_moe`, after the router.

Inference engines call the experts of an MoE layer with what the router produced:

    out = gcdsl.ops.fused_moe(x, w1, w2, topk_weights, topk_ids)

`x` (T, H) the tokens, `w1` (E, 2I, H) each expert's gate rows then up rows, `w2`
(E, H, I), and per token its k experts `topk_ids` with their weights `topk_weights`.
Each token's output is the weighted sum of its experts' SwiGLU MLPs. Everything runs
on the GPU and nothing is read back on the host: the slots are sorted by expert and
counted into `offs` on the device (one small kernel), and then both GEMMs of the layer
run as one persistent kernel. Its tasks are of two kinds:

  gate-up tiles  x's rows of an expert times its gate and up rows; the rows come straight
                 from x, a TMA box per token row (no permuted copy of x), one TMA box
                 brings a tile's gate rows and the matching up rows, and the epilogue stores
                 silu(gate) * up, so the (T k, 2I) intermediate never exists;
  down tiles     those SwiGLU rows times the expert's down projection; a down tile
                 starts once its expert's gate-up tiles are stored (a per-expert count
                 on the device, no second launch).

(At one or two tokens of small experts `fused_moe` runs a decode kernel instead, both
GEMMs as GEMVs on CUDA cores, `gcdsl/ops/decode_kernel.py`; at this tutorial's 64 tokens
it runs the kernel described here.)

Each task picks its TMA descriptors (x's rows, w1, the SwiGLU rows, w2, the output) from
the kernel's parameter space at runtime. The weighted combine runs in the down tiles'
epilogue: the tile that stores the last of a token's rows sums them. So the layer can
be captured in a CUDA graph and replayed after the routing changed.

On a GPU: the layer verified against float32, eager and replayed from a graph on new
routing, and timed beside its two-GEMM form and the same layer on torch._grouped_mm.
Without one: the kernel compiled for sm_90a, its desugared source, its tasks and its
PTX.

    python tutorials/04_fused_moe.py [--experts 128] [--tokens 64] [--top-k 8]
                                      [--hidden 2048] [--intermediate 768]
"""
import argparse
import importlib
import re
import sys

from _machine import DUMP_DIR, ON_HOPPER, show_compile, time_calls  # before cutlass: it configures the DSL

from benchmarks.moe_layer import GROUPED_MMS, MoEShape, MoEWeights, moe_experts, moe_experts_reference, route


def run_on_gpu(args, shape: MoEShape) -> bool:
    import torch

    import gcdsl.ops

    w = MoEWeights.random(shape, torch.bfloat16)
    batches = []
    for _ in range(4):  # tokens and their routing, made on the GPU as the model makes them
        x = torch.randn(args.tokens, shape.hidden, device="cuda").to(torch.bfloat16)
        weights, ids, _ = route(x, w.router, shape.top_k)
        batches.append((x, weights, ids))
    print(f"{shape.experts} experts, hidden {shape.hidden}, intermediate {shape.intermediate}, top-{shape.top_k}; "
          f"{args.tokens} tokens; bf16, fp32 accumulation\n")

    def error(out, batch) -> float:
        ref = moe_experts_reference(batch[0], w.w13, w.w2, *batch[1:])
        return ((out.float() - ref).abs().max() / ref.abs().max()).item()

    layers = {"gcdsl.ops.fused_moe": gcdsl.ops.fused_moe,
              "two GEMMs (fused_moe_pair)": importlib.import_module("gcdsl.ops.fused_moe").fused_moe_pair,
              "torch._grouped_mm": lambda x, w1, w2, weights, ids: moe_experts(x, w1, w2, weights, ids,
                                                                                GROUPED_MMS["torch"])}
    ok, rows = True, []
    for name, layer in layers.items():
        err = error(layer(batches[0][0], w.w13, w.w2, *batches[0][1:]), batches[0])
        captured = [t.clone() for t in batches[0]]
        layer(captured[0], w.w13, w.w2, *captured[1:])  # warm-up before the capture
        graph = torch.cuda.CUDAGraph()
        with torch.cuda.graph(graph):
            out = layer(captured[0], w.w13, w.w2, *captured[1:])

        def replay(i, graph=graph, captured=captured):
            for dst, src in zip(captured, batches[i % 4]):
                dst.copy_(src)  # new tokens and routing, inside the same graph
            graph.replay()

        replay(1)
        torch.cuda.synchronize()
        graph_err = error(out, batches[1])
        ok &= err <= 2e-2 and graph_err <= 2e-2
        eager = time_calls(lambda i, layer=layer: layer(batches[i % 4][0], w.w13, w.w2, *batches[i % 4][1:]))
        rows.append([name, f"{err:.1e}", f"{graph_err:.1e}", f"{eager:.1f}", f"{time_calls(replay):.1f}"])
    headers = ["layer", "rel. err (eager)", "rel. err (graph, new routing)", "eager us", "graph us"]
    widths = [max(len(str(r[i])) for r in rows + [headers]) for i in range(len(headers))]
    for r in [headers] + rows:
        print("  ".join(str(c).rjust(wd) for c, wd in zip(r, widths)))
    print(f"\nverify against float32: {'PASS' if ok else 'FAIL'} (relative error <= 2e-2)")
    print("(median of 5 rounds of 20 calls; benchmarks/w8_fused_moe.py measures the model shapes and quack-kernels)")
    return ok


def compile_only(args, shape: MoEShape) -> bool:
    import glob
    import os

    import cutlass
    import cutlass.cute as cute

    from gcdsl import ptx
    from gcdsl.ops.fused_moe import megakernel_tile_n
    from gcdsl.ops.hopper_grouped_gemm.experts import MoeExperts

    slots = args.tokens * shape.top_k
    tile_n = megakernel_tile_n(shape.experts, shape.hidden, shape.intermediate, slots, sms=132)  # the H200's
    layer = MoeExperts(cutlass.BFloat16, shape.experts, shape.hidden, shape.intermediate, shape.top_k, tile_n)
    cute.compile(layer, *layer.trace_args())
    show_compile(MoeExperts.kernel)
    with open(glob.glob(os.path.join(DUMP_DIR, "*.ptx"))[0]) as f:
        text = f.read()
    entry = ptx.single_entry(text)
    descriptors = len([p for p in entry.params if p.size == 128 and p.align == 64])
    # the row loads of a gate-up tile's stage, each issued by a lane of its own (no cache-hint operand)
    row_loads = len(re.findall(r"cp\.async\.bulk\.tensor\.2d\.[^;]*\[[^]]*\], \[[^]]*\], \[[^]]*\];", text))
    print(f"\nTasks, tiles of 128 rows x {tile_n} columns: an expert with r rows has ceil(r / 128) x "
          f"{layer.up.n_tiles} gate-up tiles ({2 * shape.intermediate} columns of w1, {shape.intermediate} stored) "
          f"and ceil(r / 128) x {layer.down.n_tiles} down tiles ({shape.hidden} columns); at most "
          f"{layer.tile_bound(slots)} tiles of either kind for {slots} slots.")
    print(f"One kernel: {len(ptx.entries(text))} entry, {descriptors} TMA descriptors in parameter space; "
          f"a gate-up tile's A: a 2-D TMA load of one row of x per token, {row_loads} in the code (lane l of the "
          f"producer warp loads rows l, l + 32, ...); gate and up rows: {text.count('cp.async.bulk.tensor.5d')} 5-D TMA load of w1 a stage; "
          f"silu(gate) * up: {text.count('ex2.approx')} ex2 and {text.count('rcp.approx')} rcp a thread; "
          f"a gate-up tile's count {text.count('atom.global.release.add')} release add after its stores, a down "
          f"tile's wait {text.count('ld.acquire.gpu')} acquire loads, a down tile's combine "
          f"{text.count('atom.global.acq_rel.add')} acquire-release add a row, {text.count('fence.proxy.async.global')} "
          "proxy fences")
    return True


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--experts", type=int, default=128)
    parser.add_argument("--tokens", type=int, default=64)
    parser.add_argument("--top-k", type=int, default=8)
    parser.add_argument("--hidden", type=int, default=2048)
    parser.add_argument("--intermediate", type=int, default=768)
    args = parser.parse_args()
    shape = MoEShape("layer", args.experts, args.hidden, args.intermediate, args.top_k)
    ok = run_on_gpu(args, shape) if ON_HOPPER else compile_only(args, shape)
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
