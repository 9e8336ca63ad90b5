"""Compile named kernels without a GPU and keep their PTX (and SASS where nvdisasm exists).

The CuTe DSL reads `CUTE_DSL_*` when `cutlass` is imported, so each target
architecture and each choice of decorator needs its own process:

    python -m tests.compile_cases --arch sm_90a --decorator gcdsl --out DIR CASE...

writes DIR/CASE.ptx (and DIR/CASE.sass) for every CASE in `CASES` (or another table
below). With `--keep-going` a case that fails writes DIR/CASE.error (its exception)
instead, and the others still compile.
"""
from __future__ import annotations

import argparse
import importlib.metadata
import json
import os
import shutil
import sys
import tempfile
import traceback


def _batch_copy(n, kernel="runtime"):
    def build():
        from tests.kernels import batch_copy as bc

        fn = {"runtime": bc.batch_copy, "reduce": bc.batch_add, "chain": bc.batch_copy_constant_chain}[kernel]
        return fn, bc.fake_args(n)

    return build


def _crossed(n):
    def build():
        import cutlass
        import cutlass.cute as cute
        from tests.kernels import batch_copy as bc

        srcs, dsts, pick = bc.fake_args(n)
        return bc.crossed_copy, (srcs, dsts, pick, cute.runtime.make_fake_compact_tensor(cutlass.Int32, (n,), assumed_align=4))

    return build


def _gemm():
    from tests.kernels import wgmma_gemm

    return wgmma_gemm.gemm, wgmma_gemm.fake_args()


def _table_gather():
    import numpy as np

    import cutlass
    import cutlass.cute as cute
    import gcdsl
    from tests.kernels import table_lookup as tl

    table = gcdsl.grid_constant(np.arange(40, dtype=np.int32).reshape(10, 4))
    out = cute.runtime.make_fake_compact_tensor(cutlass.Int32, (8, tl.THREADS), stride_order=(1, 0), assumed_align=4)
    return tl.gather, (table, out)


def _descriptor_table(box):
    def build():
        import cutlass
        import cutlass.cute as cute
        import gcdsl
        from tests.kernels import desc_table as dt

        fake = cute.runtime.make_fake_compact_tensor
        n = 5
        descs = gcdsl.TensorMapTable(box=box).placeholder(n, cutlass.Float32)
        first = fake(cutlass.Float32, (256, 96), stride_order=(1, 0), assumed_align=16)
        pick = fake(cutlass.Int32, (n,), assumed_align=4)
        out = fake(cutlass.Float32, (n * 12, 64, 32), stride_order=(2, 1, 0), assumed_align=16)
        return dt.table_load, (descs, first, pick, out)

    return build


def _checked():
    import cutlass
    import cutlass.cute as cute
    from tests.kernels import batch_copy as bc

    fake = cute.runtime.make_fake_compact_tensor
    srcs = [fake(bc.DTYPE, (256, 128), stride_order=(1, 0), assumed_align=16) for _ in range(4)]
    return bc.checked, (srcs, fake(cutlass.Int32, (8,), assumed_align=4), fake(cutlass.Int32, (8,), assumed_align=4))


def _multicast():
    import cutlass
    import cutlass.cute as cute
    from tests.kernels import multicast as mc

    fake = cute.runtime.make_fake_compact_tensor
    srcs = [fake(mc.DTYPE, (256, 128), stride_order=(1, 0), assumed_align=16) for _ in range(4)]
    return mc.multicast, (srcs, fake(cutlass.Int32, (8,), assumed_align=4),
                          fake(mc.DTYPE, (16, *mc.TILE), stride_order=(2, 1, 0), assumed_align=16))


def _grouped(groups):
    def build():
        import cutlass.cute as cute
        import gcdsl
        from tests.kernels import grouped as gr

        fake = cute.runtime.make_fake_compact_tensor
        shapes, tasks = gr.make_problem(groups)
        srcs = [fake(gr.DTYPE, s, stride_order=(1, 0), assumed_align=16) for s in shapes]
        outs = [fake(gr.DTYPE, s, stride_order=(1, 0), assumed_align=16) for s in shapes]
        return gr.grouped, (gcdsl.grid_constant(tasks), srcs, outs)

    return build


def _param_kinds():
    from tests.kernels import param_kinds

    return param_kinds.launch_every_kind, param_kinds.fake_args()


def _grouped_gemm(ab, c, groups, tile_n, n=4096, k=7168, cluster_m=1, **layout):
    def build():
        import cutlass
        from gcdsl.ops import hopper_grouped_gemm as hgg

        ab_dtype, c_dtype = getattr(cutlass, ab), getattr(cutlass, c)
        gemm = hgg.HopperGroupedGemm(hgg.GemmConfig(ab_dtype, c_dtype, groups, n, k, tile_n, cluster_m, **layout))
        return gemm, gemm.trace_args()

    return build


# The kernel's layout fields (`GemmConfig`) of the cases that are not ragged M with both operands K-major.
GROUPED_GEMM_LAYOUTS = {
    "grouped_gemm_bf16_t256_g8_bn": dict(b_major="n"),
    "grouped_gemm_bf16_t256_g8_am_pairs": dict(a_major="m"),
    "grouped_gemm_bf16_t256_f32_g128_rk": dict(ragged="k", a_major="m", b_major="n"),
    # the grouped reduction with T contiguous in A, in B, in both (first k-tiles zeroed)
    "grouped_gemm_bf16_t256_f32_g128_rk_ak": dict(ragged="k", a_major="k", b_major="n"),
    "grouped_gemm_bf16_t128_g64_rk_bk": dict(ragged="k", a_major="m", b_major="k"),
    "grouped_gemm_bf16_t192_g128_rk_akbk_pingpong": dict(ragged="k", a_major="k", b_major="k", schedule="pingpong"),
    "grouped_gemm_fp16_t128_g8_batch": dict(ragged="batch", a_major="m", b_major="n"),
    # the grouped reduction in pairs: B multicast, in both schedules (with A's first k-tiles zeroed)
    "grouped_gemm_bf16_t256_g128_rk_pairs": dict(ragged="k", a_major="m", b_major="n"),
    "grouped_gemm_bf16_t192_g128_rk_ak_pingpong_pairs": dict(ragged="k", a_major="k", b_major="n",
                                                             schedule="pingpong"),
    # the ping-pong schedule: each consumer warpgroup a 128-row tile of its own
    "grouped_gemm_bf16_t192_g128_pingpong": dict(schedule="pingpong"),
    "grouped_gemm_bf16_t192_f32_g128_rk_pingpong": dict(ragged="k", a_major="m", b_major="n", schedule="pingpong"),
    "grouped_gemm_fp16_t128_g8_batch_pingpong": dict(ragged="batch", a_major="m", b_major="n", schedule="pingpong"),
    # SwiGLU in the epilogue: an MoE's gate-up GEMM storing silu(gate) * up
    "grouped_gemm_bf16_t256_g128_swiglu": dict(activation="swiglu"),
    "grouped_gemm_bf16_t128_g128_swiglu_pingpong": dict(activation="swiglu", schedule="pingpong"),
    # ... in pairs: one CTA loads the tile's gate rows, the other its up rows, each multicast to both
    "grouped_gemm_bf16_t256_g8_swiglu_pairs": dict(activation="swiglu"),
    # 64-wide tiles, for decode: one output sub-tile with SwiGLU
    "grouped_gemm_bf16_t64_g128_swiglu": dict(activation="swiglu"),
    # a group's N-tiles fastest (DeepSeek-V3's gate-up forward, in pairs)
    "grouped_gemm_bf16_t256_g32_norder_pairs": dict(tile_order="n"),
    # a group's full M-steps' tiles, then its partial step's (Mixtral's down GEMM, in pairs)
    "grouped_gemm_bf16_t256_g8_partial_last_pairs": dict(tile_order="m_partial_last"),
    # a group's M-steps fastest in blocks of them (DeepSeek-V3's gate-up forward, in pairs)
    "grouped_gemm_bf16_t256_g32_mblocks_pairs": dict(tile_order="m_blocks"),
    # ... its N-tiles fastest with its loads asking L2 for EVICT_NORMAL (`L2_POLICIES`)
    "grouped_gemm_bf16_t256_g32_norder_evict_normal_pairs": dict(tile_order="n", load_policy="evict_normal"),
    # ... B N-major (DeepSeek-V3's gate-up input gradient), its stores asking L2 for EVICT_FIRST
    "grouped_gemm_bf16_t256_g32_bn_evict_first_store_pairs": dict(b_major="n", store_policy="evict_first"),
    # ... its N-tiles fastest with every warpgroup's WGMMAs run, rows or not (`mma_without_rows`)
    "grouped_gemm_bf16_t256_g32_norder_mma_without_rows_pairs": dict(tile_order="n", mma_without_rows=True),
    # ... its clusters claiming their tiles from a counter (`claimed_tiles`), in pairs and alone
    "grouped_gemm_bf16_t256_g32_norder_claimed_pairs": dict(tile_order="n", claimed_tiles=True),
    "grouped_gemm_bf16_t256_g8_claimed": dict(claimed_tiles=True),
    "grouped_gemm_bf16_t64_g128_pingpong": dict(schedule="pingpong"),
    # ping-pong at wide N, where experts average one to four M-tiles of rows: Mixtral's
    # gate-up forward, and DeepSeek-V3's gate-up input gradient (B N-major)
    "grouped_gemm_bf16_t192_g8_pingpong_wide": dict(schedule="pingpong"),
    "grouped_gemm_bf16_t192_g32_bn_pingpong": dict(b_major="n", schedule="pingpong"),
    # ping-pong in pairs with ragged rows: Qwen3-30B-A3B's gate-up forward, and an input
    # gradient (B N-major) of Mixtral-8x7B's down weights
    "grouped_gemm_bf16_t192_g128_pingpong_pairs": dict(schedule="pingpong"),
    "grouped_gemm_bf16_t192_g8_bn_pingpong_pairs": dict(b_major="n", schedule="pingpong"),
}

GROUPED_GEMM_CASES = {
    "grouped_gemm_bf16_t256_g8": _grouped_gemm("BFloat16", "BFloat16", 8, 256),
    "grouped_gemm_fp16_t128_f32_g64": _grouped_gemm("Float16", "Float32", 64, 128, n=2048, k=7168),
    "grouped_gemm_fp16_t256_f16_g128": _grouped_gemm("Float16", "Float16", 128, 256, n=7168, k=2048),
    "grouped_gemm_bf16_t256_g8_pairs": _grouped_gemm("BFloat16", "BFloat16", 8, 256, cluster_m=2),
    "grouped_gemm_bf16_t128_f32_g16_pairs": _grouped_gemm("BFloat16", "Float32", 16, 128, n=4096, k=4096,
                                                          cluster_m=2),
    # the layouts of training: the input gradient (B N-major), A M-major, and the
    # weight gradient (ragged K, both operands MN-major, a 3-D output); a batch
    **{name: _grouped_gemm(*args, **kwargs, **GROUPED_GEMM_LAYOUTS[name]) for name, (args, kwargs) in {
        "grouped_gemm_bf16_t256_g8_bn": (("BFloat16", "BFloat16", 8, 256), dict(n=2048, k=4096)),
        "grouped_gemm_bf16_t256_g8_am_pairs": (("BFloat16", "BFloat16", 8, 256), dict(n=4096, k=2048, cluster_m=2)),
        "grouped_gemm_bf16_t256_f32_g128_rk": (("BFloat16", "Float32", 128, 256), dict(n=4096, k=0, m=2048)),
        "grouped_gemm_bf16_t256_f32_g128_rk_ak": (("BFloat16", "Float32", 128, 256), dict(n=4096, k=0, m=2048)),
        "grouped_gemm_bf16_t128_g64_rk_bk": (("BFloat16", "BFloat16", 64, 128), dict(n=1536, k=0, m=2048)),
        "grouped_gemm_bf16_t192_g128_rk_akbk_pingpong": (("BFloat16", "BFloat16", 128, 192),
                                                         dict(n=2048, k=0, m=1536)),
        "grouped_gemm_fp16_t128_g8_batch": (("Float16", "Float16", 8, 128), dict(n=1536, k=1024)),
        "grouped_gemm_bf16_t256_g128_rk_pairs": (("BFloat16", "BFloat16", 128, 256),
                                                 dict(n=2048, k=0, m=1536, cluster_m=2)),
        "grouped_gemm_bf16_t192_g128_rk_ak_pingpong_pairs": (("BFloat16", "BFloat16", 128, 192),
                                                             dict(n=2048, k=0, m=1536, cluster_m=2)),
        "grouped_gemm_bf16_t192_g128_pingpong": (("BFloat16", "BFloat16", 128, 192), dict(n=2048, k=768)),
        "grouped_gemm_bf16_t192_f32_g128_rk_pingpong": (("BFloat16", "Float32", 128, 192), dict(n=2048, k=0, m=1536)),
        "grouped_gemm_fp16_t128_g8_batch_pingpong": (("Float16", "Float16", 8, 128), dict(n=1536, k=1024)),
        "grouped_gemm_bf16_t256_g128_swiglu": (("BFloat16", "BFloat16", 128, 256), dict(n=1536, k=2048)),
        "grouped_gemm_bf16_t128_g128_swiglu_pingpong": (("BFloat16", "BFloat16", 128, 128), dict(n=1536, k=2048)),
        "grouped_gemm_bf16_t256_g8_swiglu_pairs": (("BFloat16", "BFloat16", 8, 256),
                                                   dict(n=28672, k=4096, cluster_m=2)),
        "grouped_gemm_bf16_t64_g128_swiglu": (("BFloat16", "BFloat16", 128, 64), dict(n=1536, k=2048)),
        "grouped_gemm_bf16_t256_g32_norder_pairs": (("BFloat16", "BFloat16", 32, 256),
                                                    dict(n=4096, k=7168, cluster_m=2)),
        "grouped_gemm_bf16_t256_g8_partial_last_pairs": (("BFloat16", "BFloat16", 8, 256),
                                                         dict(n=4096, k=14336, cluster_m=2)),
        "grouped_gemm_bf16_t256_g32_mblocks_pairs": (("BFloat16", "BFloat16", 32, 256),
                                                     dict(n=4096, k=7168, cluster_m=2)),
        "grouped_gemm_bf16_t256_g32_norder_evict_normal_pairs": (("BFloat16", "BFloat16", 32, 256),
                                                                 dict(n=4096, k=7168, cluster_m=2)),
        "grouped_gemm_bf16_t256_g32_bn_evict_first_store_pairs": (("BFloat16", "BFloat16", 32, 256),
                                                                  dict(n=7168, k=4096, cluster_m=2)),
        "grouped_gemm_bf16_t256_g32_norder_mma_without_rows_pairs": (("BFloat16", "BFloat16", 32, 256),
                                                                     dict(n=4096, k=7168, cluster_m=2)),
        "grouped_gemm_bf16_t256_g32_norder_claimed_pairs": (("BFloat16", "BFloat16", 32, 256),
                                                            dict(n=4096, k=7168, cluster_m=2)),
        "grouped_gemm_bf16_t256_g8_claimed": (("BFloat16", "BFloat16", 8, 256), dict(n=4096, k=7168)),
        "grouped_gemm_bf16_t64_g128_pingpong": (("BFloat16", "BFloat16", 128, 64), dict(n=2048, k=768)),
        "grouped_gemm_bf16_t192_g8_pingpong_wide": (("BFloat16", "BFloat16", 8, 192), dict(n=28672, k=4096)),
        "grouped_gemm_bf16_t192_g32_bn_pingpong": (("BFloat16", "BFloat16", 32, 192), dict(n=7168, k=4096)),
        "grouped_gemm_bf16_t192_g128_pingpong_pairs": (("BFloat16", "BFloat16", 128, 192),
                                                       dict(n=1536, k=2048, cluster_m=2)),
        "grouped_gemm_bf16_t192_g8_bn_pingpong_pairs": (("BFloat16", "BFloat16", 8, 192),
                                                        dict(n=14336, k=4096, cluster_m=2)),
    }.items()},
    "grouped_gemm_bf16_t64_g128": _grouped_gemm("BFloat16", "BFloat16", 128, 64, n=2048, k=768),
}


def _grouped_gemm_max_groups():
    from gcdsl.ops import MAX_GROUPS

    return _grouped_gemm("BFloat16", "BFloat16", MAX_GROUPS, 256)()


GROUPED_GEMM_CASES["grouped_gemm_max_groups"] = _grouped_gemm_max_groups


def _moe_experts(experts, hidden, inter, tile_n=128, split_k=1, stagger_k=False, trace=False, down_lead=0):
    def build():
        import cutlass
        from gcdsl.ops.hopper_grouped_gemm.experts import MoeExperts

        kernel = MoeExperts(cutlass.BFloat16, experts, hidden, inter, 8, tile_n, split_k, stagger_k, trace, down_lead)
        return kernel, kernel.trace_args()

    return build


# Both GEMMs of an expert layer in one kernel (tests/test_fused_moe.py holds them):
# Qwen3-30B-A3B's experts, a small layer whose H is not a multiple of the tile, and
# Mixtral's at decode: tiles 256 wide, each down tile in four K splits, each tile's
# k-tiles read from a different one on (as fused_moe runs it at one token); Qwen3's with
# the down tiles' first two rounds dealt to the CTAs a gate-up tile short (as fused_moe
# runs it).
MOE_EXPERTS_CASES = {
    "moe_experts_e128_h2048_i768": _moe_experts(128, 2048, 768),
    "moe_experts_e128_h2048_i768_lead2": _moe_experts(128, 2048, 768, down_lead=2),
    "moe_experts_e8_h200_i64": _moe_experts(8, 200, 64),
    "moe_experts_e8_h4096_i14336_t256_split4": _moe_experts(8, 4096, 14336, 256, 4),
    "moe_experts_e8_h4096_i14336_t256_split4_stagger": _moe_experts(8, 4096, 14336, 256, 4, stagger_k=True),
    "moe_experts_e128_h2048_i768_trace": _moe_experts(128, 2048, 768, trace=True),
}


def _route_slots(experts, id_dtype):
    def build():
        import cutlass
        from gcdsl.ops.route_kernel import RouteSlots

        kernel = RouteSlots(experts, getattr(cutlass, id_dtype))
        return kernel, kernel.trace_args()

    return build


MOE_EXPERTS_CASES.update({  # the routing of a decode step in one kernel
    "route_slots_e128_i64": _route_slots(128, "Int64"),
    "route_slots_e1024_i32": _route_slots(1024, "Int32"),
})


def _decode(experts, hidden, inter, top_k, slots, early_prefetch=False, trace=False, streamed=False):
    def build():
        import cutlass
        from gcdsl.ops.decode_kernel import MoeDecode

        kernel = MoeDecode(cutlass.BFloat16, experts, hidden, inter, top_k, slots, cutlass.Int64, 132, early_prefetch,
                           trace=trace, streamed=streamed)
        return kernel, kernel.trace_args()

    return build


MOE_EXPERTS_CASES.update({  # the decode kernel: Qwen3's experts at one and two tokens, DeepSeek-V3's at four, Mixtral's at one
    "decode_e128_h2048_i768_s8": _decode(128, 2048, 768, 8, 8),
    "decode_e128_h2048_i768_s16": _decode(128, 2048, 768, 8, 16),
    "decode_e32_h7168_i2048_s32": _decode(32, 7168, 2048, 8, 32),
    "decode_e8_h4096_i14336_s2": _decode(8, 4096, 14336, 2, 2),
    "decode_e128_h2048_i768_s8_early_prefetch": _decode(128, 2048, 768, 8, 8, early_prefetch=True),
    "decode_e128_h2048_i768_s8_trace": _decode(128, 2048, 768, 8, 8, trace=True),
})
MOE_EXPERTS_CASES.update({  # the decode kernel with every weight through its ring (`decode_ring`)
    "decode_e128_h2048_i768_s8_streamed": _decode(128, 2048, 768, 8, 8, streamed=True),
    "decode_e128_h2048_i768_s16_streamed": _decode(128, 2048, 768, 8, 16, streamed=True),
    "decode_e32_h7168_i2048_s8_streamed": _decode(32, 7168, 2048, 8, 8, streamed=True),
    "decode_e8_h4096_i14336_s2_streamed": _decode(8, 4096, 14336, 2, 2, streamed=True),
})


def _combine(y_dtype, weight_dtype, out_dtype, hidden, top_k):
    def build():
        import cutlass
        from gcdsl.ops.combine_kernel import WeightedCombine

        kernel = WeightedCombine(getattr(cutlass, y_dtype), getattr(cutlass, weight_dtype), getattr(cutlass, out_dtype),
                                 hidden, top_k)
        return kernel, kernel.trace_args()

    return build


MOE_EXPERTS_CASES.update({  # the weighted sum of each token's k rows (Qwen3's; Mixtral's fp32 K-split rows)
    "combine_bf16_h2048_k8": _combine("BFloat16", "Float32", "BFloat16", 2048, 8),
    "combine_f32_h4096_k2": _combine("Float32", "Float32", "BFloat16", 4096, 2),
})


def _dropin(case):
    """The drop-in kernels of tests/kernels/dropin.py, by case name."""

    def build():
        import cutlass
        import cutlass.cute as cute
        from tests.kernels import dropin as di

        fake = cute.runtime.make_fake_compact_tensor
        vector = fake(cutlass.Float32, (di.THREADS,), assumed_align=16)
        if case in ("dropin_method", "dropin_keywords"):
            src, dst = (fake(cutlass.Float32, (64, di.THREADS * 2), stride_order=(1, 0), assumed_align=16)
                        for _ in range(2))
            return (di.ScaledCopy() if case == "dropin_method" else di.KeywordCopy()), (src, dst)
        if case == "dropin_staticmethod":
            return di.Fills().static, (vector,)
        if case == "dropin_classmethod":
            return di.Fills().klass, (vector,)
        if case == "dropin_name_prefix":
            return di.named_fill, (vector,)
        if case.startswith("dropin_atoms_"):
            kernel, extra = {
                "dropin_atoms_range_constexpr": (di.load_all_kernel, ()),
                "dropin_atoms_constexpr_param": (di.load_one_kernel, (1,)),
                "dropin_atoms_const_expr": (di.load_last_kernel, ()),
                "dropin_atoms_module_int": (di.load_global_index_kernel, ()),
                "dropin_atoms_closure_int": (di.make_load_closure_kernel(1), ()),
            }[case]
            return di.atom_load(kernel, *extra), (di.atom_sources(),)
        if case == "dropin_uniform_atoms_range_constexpr":
            return (di.atom_load(di.load_all_kernel, specs=di.UNIFORM_SPECS),
                    (di.atom_sources(di.UNIFORM_SPECS),))
        if case == "dropin_tensors_range_constexpr":
            return di.tiles_host(di.sum_tiles_kernel, 3), di.tile_sources(3)
        if case == "dropin_tensors_constexpr_param":
            return di.tiles_host(di.pick_tile_kernel, 2), di.tile_sources(3)
        if case == "dropin_flat_tensors_range_constexpr":
            return di.sum_rows, di.tile_sources(3, (16, di.THREADS))
        if case == "dropin_tensors_store_in_dynamic_loop":
            return di.spread_rows, (*di.tile_sources(3, (16, di.THREADS)), cutlass.Int32(4))
        raise KeyError(case)

    return build


def _runtime(case):
    """The runtime-indexed kernels of tests/kernels/dropin_runtime.py (gcdsl only)."""

    def build():
        from tests.kernels import dropin_runtime as rt

        host, make_args = {
            "runtime_tensors_in_loop": (rt.gather, rt.tensor_args),
            "runtime_tensors_in_if": (rt.guarded, rt.tensor_args),
            "runtime_tensors_store_in_loop": (rt.scatter, rt.tensor_args),
            "runtime_atom_carried_by_loop": (rt.prefetch_ahead, rt.prefetch_ahead_args),
            "runtime_atoms_in_loops": (rt.task_loop, rt.task_loop_args),
            "grid_constant_in_loop": (rt.table_loop, rt.table_loop_args),
        }[case]
        return host, make_args()

    return build


RUNTIME_CASES = ("runtime_tensors_in_loop", "runtime_tensors_in_if", "runtime_tensors_store_in_loop",
                 "runtime_atoms_in_loops", "runtime_atom_carried_by_loop", "grid_constant_in_loop")

DROPIN_CASES = (
    "dropin_method", "dropin_keywords", "dropin_staticmethod", "dropin_classmethod", "dropin_name_prefix",
    "dropin_atoms_range_constexpr", "dropin_atoms_constexpr_param", "dropin_atoms_const_expr",
    "dropin_atoms_module_int", "dropin_atoms_closure_int",
    "dropin_uniform_atoms_range_constexpr",
    "dropin_tensors_range_constexpr", "dropin_tensors_constexpr_param", "dropin_flat_tensors_range_constexpr",
    "dropin_tensors_store_in_dynamic_loop",
)

# Drop-in and runtime-control-flow cases: some fail under gcdsl today (tests/test_dropin.py
# marks those), so they are compiled with --keep-going and kept out of CASES, whose PTX
# is pinned and whose every case must compile.
COMPAT_CASES = {
    **{case: _dropin(case) for case in DROPIN_CASES},
    **{case: _runtime(case) for case in RUNTIME_CASES},
}

CASES = {
    "param_kinds": _param_kinds,
    "grouped_n40": _grouped(40),
    "multicast": _multicast,
    "bounds_checked": _checked,
    "descriptor_table": _descriptor_table((64, 32)),
    "table_gather": _table_gather,
    **{f"batch_copy_n{n}": _batch_copy(n) for n in (1, 3, 16, 64)},
    "batch_add_n16": _batch_copy(16, kernel="reduce"),
    "crossed_n4": _crossed(4),
    "constant_chain_n3": _batch_copy(3, kernel="chain"),
    "wgmma_gemm": _gemm,
}


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--arch", default="sm_90a")
    parser.add_argument("--decorator", choices=["cute", "gcdsl"], default="gcdsl")
    parser.add_argument("--out", required=True)
    parser.add_argument("--keep-going", action="store_true", help="record a failing case in CASE.error and go on")
    parser.add_argument("--no-sass", action="store_true", help="keep PTX only (SASS makes a compile ~4x slower)")
    parser.add_argument("cases", nargs="+")
    args = parser.parse_args()

    os.makedirs(args.out, exist_ok=True)
    scratch = tempfile.mkdtemp(prefix="gcdsl-dump-")
    os.environ.update(
        CUTE_DSL_ARCH=args.arch,
        # SASS needs nvdisasm; in 4.8.1 it is only dumped when `ir` is kept too.
        CUTE_DSL_KEEP="ptx,ir,sass" if has_nvdisasm() and not args.no_sass else "ptx",
        CUTE_DSL_DUMP_DIR=scratch,
        CUTE_DSL_NO_CACHE="1",
        GCDSL_TEST_DECORATOR=args.decorator,
    )
    from gcdsl import config

    config.reload()  # GCDSL_TEST_DECORATOR just changed
    import cutlass.cute as cute  # only now: the DSL reads the variables above on import

    budgets = _record_parameter_budgets()
    mutation = config.get().test_mutation
    if mutation:  # a seeded bug (tests/mutations.py)
        from tests import mutations

        mutations.apply(mutation)

    for case in args.cases:
        # Dump names are cut to a fixed length, so cases can collide: one at a time.
        for stale in os.listdir(scratch):
            os.remove(os.path.join(scratch, stale))
        budgets.clear()
        try:
            # The grouped GEMM cases (sm_90a only, large) are kept out of CASES, which the
            # PTX fingerprints and the sm_100a runs iterate over; tests/test_grouped_mm_ptx.py
            # holds them.
            fn, fn_args = {**CASES, **GROUPED_GEMM_CASES, **MOE_EXPERTS_CASES, **COMPAT_CASES}[case]()
            cute.compile(fn, *fn_args)
        except Exception as err:
            if not args.keep_going:
                raise
            with open(os.path.join(args.out, case + ".error"), "w") as f:
                f.write(f"{type(err).__name__}: {err}\n\n{traceback.format_exc()}")
            print(f"FAILED {case} for {args.arch} under {args.decorator}: {type(err).__name__}", flush=True)
            continue
        with open(os.path.join(args.out, case + ".param_bytes.json"), "w") as f:
            json.dump(budgets, f)
        for path in os.listdir(scratch):
            for ext in (".ptx", ".sass"):
                if path.endswith(ext):
                    shutil.copy(os.path.join(scratch, path), os.path.join(args.out, case + ext))
        print(f"compiled {case} for {args.arch} under {args.decorator}", flush=True)
    shutil.rmtree(scratch, ignore_errors=True)
    return 0


def _record_parameter_budgets() -> dict:
    """The parameter bytes gcdsl's budget check computed last for each kernel (a launch
    that lowers a list checks again), so that tests can hold them against the PTX."""
    from gcdsl.lower import param_budget

    recorded: dict = {}
    check = param_budget.check

    def recording(arguments, *, kernel, **kwargs):
        recorded[kernel] = param_budget.layout(arguments)[1]
        return check(arguments, kernel=kernel, **kwargs)

    param_budget.check = recording
    return recorded


def has_nvdisasm() -> bool:
    """On PATH, or from the nvidia-cuda-nvdisasm wheel (which the DSL also finds)."""
    if shutil.which("nvdisasm"):
        return True
    try:
        files = importlib.metadata.files("nvidia-cuda-nvdisasm") or []
    except importlib.metadata.PackageNotFoundError:
        return False
    return any(str(f).endswith("bin/nvdisasm") for f in files)


if __name__ == "__main__":
    sys.exit(main())
