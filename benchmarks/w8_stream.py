"""W8's weight stream alone: how fast CTAs stream weight tiles through a TMA ring, nothing else.

At decode the expert layer's kernel streams each active expert's weights once and does
little else with them, so its speed is the rate at which each CTA can pull tiles of
weight rows through its shared-memory ring. This probe measures that rate without the
GEMM around it: each CTA loads its own tiles of a (rows, K) bf16 weight (row stride K
elements, as w1 and w2 of W8's shapes) into a ring of `stages` buffers, one TMA box per
stage, and a consumer warp releases each stage as it lands. It varies what the expert
kernel could vary:

    box      the rows x k-columns of one stage's load (128 x 64 is the kernel's B tile
             at tile width 128; 256 x 64 at 256)
    stages   the ring's depth: bytes in flight per SM = stages x box bytes
    ctas     how many SMs stream (at one token Qwen3's gate-up GEMM has 96 tiles)
    tiles    weight tiles per CTA (a tile: 128 rows x K), one at decode's smallest
    A rows   0, or a 128-row A box beside each stage's weights over an A of that many
             rows, as the expert kernel loaded for an expert of a few rows before its
             partial tiles took short A boxes (`hopper_grouped_gemm.A_SHORT_BOX_ROWS`)

    python -m benchmarks.w8_stream            # table + results/W8_stream.json

GB/s is the weight bytes over the launch's device time (CUDA events, median).
"""

import argparse  # (no postponed annotations: the kernel class below reads its own at definition)
import itertools
import sys
from typing import Any, Dict, List, Tuple

from .harness import OK, Report, main_on_gpu, print_header, table, time_device_ms

# (name, K): the reduction length of W8's weights, which sets the row stride
SHAPES = (("qwen3 w1", 2048), ("deepseek-v3 w1", 7168))
BOXES = ((128, 64), (64, 128), (256, 64), (128, 128))
# A's rows: 0, no A; else each stage also loads a 128-row box of an (a_rows, K) A from its
# first row, as the expert kernel's A tile of an expert with a_rows rows (TMA zero-fills the rest)
A_ROWS = (0, 8)
STAGES = (4, 6, 8, 12)
CTAS = (96, 132)
TILE_ROWS = 128
SMEM_LIMIT = 200 * 1024  # what the expert kernel leaves for its ring
POOL_BYTES = 2 * 1024**3


def _kernel_module():
    import cutlass
    import cutlass.cute as cute
    import cutlass.pipeline as pipeline
    import cutlass.utils.hopper_helpers as sm90
    from cutlass.cute.nvgpu import cpasync
    from cutlass.memory import SmemAllocator
    from cutlass.tensor_utils import LayoutEnum

    class Stream:
        """CTA c streams weight rows [c T 128, (c + 1) T 128) of `w`, T = `tiles`, box by box."""

        def __init__(self, box: Tuple[int, int], stages: int, k: int, with_a: bool = False) -> None:
            self.box, self.stages, self.k, self.with_a = box, stages, k, with_a
            self.stage_bytes = (box[0] + (TILE_ROWS if with_a else 0)) * box[1] * 2

        @cute.jit
        def __call__(self, w: cute.Tensor, a: cute.Tensor, tiles: cutlass.Int32, stream):
            rows, cols = self.box
            smem = sm90.make_smem_layout_b(LayoutEnum.ROW_MAJOR, (64, rows, cols), cutlass.BFloat16, self.stages)
            tma, coords = cpasync.make_tiled_tma_atom(cpasync.CopyBulkTensorTileG2SOp(), w,
                                                      cute.slice_(smem, (None, None, 0)), (rows, cols))
            a_smem = sm90.make_smem_layout_a(LayoutEnum.ROW_MAJOR, (TILE_ROWS, rows, cols), cutlass.BFloat16,
                                             self.stages)
            tma_a, coords_a = cpasync.make_tiled_tma_atom(cpasync.CopyBulkTensorTileG2SOp(), a,
                                                          cute.slice_(a_smem, (None, None, 0)), (TILE_ROWS, cols))
            ctas = w.shape[0] // (tiles * TILE_ROWS)

            @cute.struct
            class Storage:
                barriers: cute.struct.MemRange[cutlass.Int64, self.stages * 2]
                ring: cute.struct.Align[cute.struct.MemRange[cutlass.BFloat16, cute.cosize(smem)], 1024]
                ring_a: cute.struct.Align[cute.struct.MemRange[cutlass.BFloat16,
                                                               cute.cosize(a_smem) if self.with_a else 8], 1024]

            self.storage = Storage
            self.kernel(tma, coords, smem, tma_a, coords_a, a_smem, tiles).launch(
                grid=(ctas, 1, 1), block=(64, 1, 1), stream=stream)

        @cute.kernel
        def kernel(self, tma: cute.CopyAtom, mW: cute.Tensor, smem: cute.ComposedLayout, tma_a: cute.CopyAtom,
                   mA: cute.Tensor, a_smem: cute.ComposedLayout, tiles: cutlass.Int32):
            rows, cols = self.box
            warp = cute.arch.make_warp_uniform(cute.arch.warp_idx())
            bidx, _, _ = cute.arch.block_idx()
            storage = SmemAllocator().allocate(self.storage)
            ring = pipeline.PipelineTmaAsync.create(
                barrier_storage=storage.barriers.data_ptr(), num_stages=self.stages,
                producer_group=pipeline.CooperativeGroup(pipeline.Agent.Thread),
                consumer_group=pipeline.CooperativeGroup(pipeline.Agent.Thread, 1),
                tx_count=self.stage_bytes, cta_layout_vmnk=cute.make_layout((1, 1, 1, 1)))
            sW = storage.ring.get_tensor(smem.outer, swizzle=smem.inner)
            gW = cute.local_tile(mW, (rows, cols), (None, None))
            tWsW, tWgW = cpasync.tma_partition(tma, 0, cute.make_layout(1), cute.group_modes(sW, 0, 2),
                                               cute.group_modes(gW, 0, 2))
            if cutlass.const_expr(self.with_a):
                sA = storage.ring_a.get_tensor(a_smem.outer, swizzle=a_smem.inner)
                gA = cute.local_tile(mA, (TILE_ROWS, cols), (0, None))
                tAsA, tAgA = cpasync.tma_partition(tma_a, 0, cute.make_layout(1), cute.group_modes(sA, 0, 2),
                                                   cute.group_modes(gA, 0, 2))
            row_boxes = tiles * TILE_ROWS // rows
            k_boxes = self.k // cols
            loads = row_boxes * k_boxes
            if warp == 0:
                state = pipeline.make_pipeline_state(pipeline.PipelineUserType.Producer, self.stages)
                for i in cutlass.range(loads, unroll=1):
                    ring.producer_acquire(state)
                    r = bidx * row_boxes + i // k_boxes
                    cute.copy(tma, tWgW[(None, r, i % k_boxes)], tWsW[(None, state.index)],
                              tma_bar_ptr=ring.producer_get_barrier(state))
                    if cutlass.const_expr(self.with_a):
                        cute.copy(tma_a, tAgA[(None, i % k_boxes)], tAsA[(None, state.index)],
                                  tma_bar_ptr=ring.producer_get_barrier(state))
                    state.advance()
                ring.producer_tail(state)
            else:
                state = pipeline.make_pipeline_state(pipeline.PipelineUserType.Consumer, self.stages)
                for i in cutlass.range(loads, unroll=1):
                    ring.consumer_wait(state)
                    ring.consumer_release(state)
                    state.advance()

    return Stream


def variants(args) -> List[Dict[str, Any]]:
    out = []
    for (name, k), box, stages, ctas, tiles, a_rows in itertools.product(
            SHAPES, BOXES, STAGES, CTAS, args.tiles, A_ROWS):
        stage_bytes = (box[0] + (TILE_ROWS if a_rows else 0)) * box[1] * 2
        if stages * stage_bytes <= SMEM_LIMIT and k % box[1] == 0 and box[0] <= tiles * TILE_ROWS:
            out.append(dict(shape=name, k=k, box=list(box), stages=stages, ctas=ctas, tiles=tiles, a_rows=a_rows))
    return out


def run(args, machine) -> Report:
    import torch
    from cutlass.cute.runtime import from_dlpack

    from . import common

    Stream = _kernel_module()
    report = Report("W8_stream", "W8's weight stream alone: TMA ring rate by box, depth and SMs",
                    config={"reps": args.reps, "tile_rows": TILE_ROWS})
    # Every launch reads weights other than the last few launches' (a pool of L2's size many
    # times over), as a decode step reads other experts than the step before.
    largest = max(k for _, k in SHAPES) * max(CTAS) * max(args.tiles) * TILE_ROWS
    copies = max(4, -(-POOL_BYTES // (2 * largest)))
    pool = torch.empty(copies * largest, dtype=torch.bfloat16, device="cuda").normal_()
    for v in variants(args):
        rows = v["ctas"] * v["tiles"] * TILE_ROWS
        size = rows * v["k"]
        views = [from_dlpack(pool[i * size: (i + 1) * size].view(rows, v["k"]), assumed_align=16)
                 .mark_compact_shape_dynamic(mode=0, divisibility=TILE_ROWS)
                 for i in range(min(copies * largest // size, 64))]
        a = from_dlpack(torch.randn(max(v["a_rows"], 1), v["k"], device="cuda").to(torch.bfloat16), assumed_align=16)
        key = ("stream", tuple(v["box"]), v["stages"], v["k"], v["a_rows"] > 0)
        kernel = Stream(tuple(v["box"]), v["stages"], v["k"], with_a=v["a_rows"] > 0)
        tiles = common.i32(v["tiles"])
        compiled = common.compile_once(key, kernel, views[0], a, tiles, common.stream())
        st = common.stream()
        turn = itertools.count()
        stats = time_device_ms(lambda: compiled(views[next(turn) % len(views)], a, tiles, st), args.reps, 3)
        gbps = size * 2 / (stats["median"] * 1e-3) / 1e9
        row = report.add(status=OK, gbps=gbps, per_cta_gbps=gbps / v["ctas"], ms=stats, **v)
        print(f"  {v['shape']:<15} box {v['box'][0]:>3}x{v['box'][1]:<3} stages {v['stages']:>2} "
              f"in flight {v['stages'] * v['box'][0] * v['box'][1] * 2 // 1024:>3} KiB  ctas {v['ctas']:>3} "
              f"tiles {v['tiles']:>2} A rows {v['a_rows']}: {gbps:7.0f} GB/s ({row['per_cta_gbps']:.1f} per CTA)",
              flush=True)
    _print(report)
    return report


def _print(report: Report) -> None:
    print_header("GB/s of weights streamed, median")
    rows = sorted(report.rows, key=lambda r: (r["shape"], r["ctas"], r["tiles"], r["a_rows"], -r["gbps"]))
    print(table(["shape", "ctas", "tiles", "A rows", "box", "stages", "KiB of weights in flight", "GB/s",
                 "per CTA"],
                [[r["shape"], r["ctas"], r["tiles"], r["a_rows"], f"{r['box'][0]}x{r['box'][1]}", r["stages"],
                  r["stages"] * r["box"][0] * r["box"][1] * 2 // 1024, f"{r['gbps']:.0f}",
                  f"{r['per_cta_gbps']:.1f}"] for r in rows]))


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--reps", type=int, default=20)
    parser.add_argument("--tiles", type=int, nargs="+", default=[1, 8],
                        help="weight tiles (128 rows x K) per CTA")
    return main_on_gpu("W8_stream", run, parser.parse_args(argv))


if __name__ == "__main__":
    sys.exit(main())
