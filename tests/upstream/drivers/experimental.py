"""`experimental/primitives`: one primitive per example, each with its own compile helper that
builds fake arguments; the driver takes the `cute.compile` call that helper makes.
Tensor-core (tcgen05) and TMEM examples target sm_100a, the rest sm_90a."""
from ..catalogue import SM90, SM100, example, skipped
from ..fakes import captured_compile

P = "experimental/primitives/"


def _own(helper_name: str, *args, **kwargs):
    return lambda m: captured_compile(getattr(m, helper_name), *args, **kwargs)


SM90_PRIMITIVES = {
    # name: (path under primitives/, helper, args...)
    "async_pipeline": ("async_pipeline.py", "compile"),
    "bar_warp_sync[full]": ("bar_warp_sync.py", "compile_full_mask"),
    "bar_warp_sync[partial]": ("bar_warp_sync.py", "compile_partial_mask"),
    "barrier_cta_red": ("barrier_cta_red.py", "compile"),
    "barrier_cta_sync": ("barrier_cta_sync.py", "compile"),
    "basic_types[masked_load_store]": ("basic_types.py", "compile", "masked_load_store"),
    "cp_async_bulk": ("cp_async_bulk.py", "compile"),
    "cp_async_bulk_prefetch": ("cp_async_bulk_prefetch.py", "compile"),
    "cp_async_mbarrier_arrive_cluster": ("cp_async_mbarrier_arrive_cluster.py", "compile"),
    "cp_async_mbarrier_arrive_cta": ("cp_async_mbarrier_arrive_cta.py", "compile"),
    "cp_async_shared_global": ("cp_async_shared_global.py", "compile"),
    "cp_async_shared_global_swizzled": ("cp_async_shared_global_swizzled.py", "compile"),
    "elect_sync": ("elect_sync.py", "compile"),
    "ldmatrix_stmatrix": ("ldmatrix_stmatrix.py", "compile"),
    "mapa": ("mapa.py", "compile"),
    "mbarrier": ("mbarrier.py", "compile"),
    "mbarrier_lifecycle": ("mbarrier_lifecycle.py", "compile"),
    "pipeline_software_fill": ("pipeline_software_fill.py", "compile"),
    "red": ("red.py", "compile"),
    "reduction/block_smem_reduce": ("reduction/block_smem_reduce.py", "compile"),
    "reduction/cluster_smem_reduce": ("reduction/cluster_smem_reduce.py", "_compile_cached", (2, 1), 256, "add",
                                      "f32"),
    "reduction/thread_vector_reduce": ("reduction/thread_vector_reduce.py", "compile"),
    "reduction/warp_vector_reduce": ("reduction/warp_vector_reduce.py", "compile"),
    "redux_sync[integer]": ("redux_sync.py", "compile_integer_reductions"),
    "shfl_sync[broadcast]": ("shfl_sync.py", "compile_broadcast"),
    "shfl_sync[bfly_sum]": ("shfl_sync.py", "compile_bfly_sum"),
    "shfl_sync[down_shift_segmented]": ("shfl_sync.py", "compile_down_shift_segmented"),
    "tma/tma_1cta_mbarrier": ("tma/tma_1cta_mbarrier.py", "compile"),
    "tma/tma_load_to_ldmatrix": ("tma/tma_load_to_ldmatrix.py", "compile"),
    "tma/tma_pipeline_count2": ("tma/tma_pipeline_count2.py", "compile"),
    "tma/tma_pipeline_pingpong": ("tma/tma_pipeline_pingpong.py", "compile"),
    "tma/tma_pipeline_single_warp": ("tma/tma_pipeline_single_warp.py", "compile"),
    "tma/tma_pipeline_warpspec": ("tma/tma_pipeline_warpspec.py", "compile"),
    "tma/tma_store": ("tma/tma_store.py", "compile"),
    "tma/tma_swizzle_modes": ("tma/tma_swizzle_modes.py", "compile"),
    "tma/tma_tensormap_replace": ("tma/tma_tensormap_replace.py", "compile"),
    "vote_sync[pred]": ("vote_sync.py", "compile_pred"),
    "vote_sync[ballot]": ("vote_sync.py", "compile_ballot"),
    "warp_named_barrier": ("warp_named_barrier.py", "compile"),
}

SM100_PRIMITIVES = {
    "tma/tma_multicast": ("tma/tma_multicast.py", "compile", 2),
    "redux_sync[absmax_quantize]": ("redux_sync.py", "compile_absmax_quantize"),
    "redux_sync[float]": ("redux_sync.py", "compile_float_reductions"),
    "reduction/cluster_tmem_reduce": ("reduction/cluster_tmem_reduce.py", "compile"),
    "tcgen05/1cta_mma_a_from_tmem": ("tcgen05/1cta_mma_a_from_tmem.py", "compile"),
    "tcgen05/1cta_mma_basic": ("tcgen05/1cta_mma_basic.py", "compile"),
    "tcgen05/1cta_mma_mn_major": ("tcgen05/1cta_mma_mn_major.py", "compile"),
    "tcgen05/1cta_mma_pipeline": ("tcgen05/1cta_mma_pipeline.py", "compile"),
    "tcgen05/2cta_mma_basic": ("tcgen05/2cta_mma_basic.py", "compile", 256),
    "tcgen05/2cta_mma_blockscale_m128": ("tcgen05/2cta_mma_blockscale_m128.py", "_compile"),
    "tcgen05/2cta_mma_tma_store": ("tcgen05/2cta_mma_tma_store.py", "compile", 256),
    "tcgen05/clusterMxN_2cta_mma": ("tcgen05/clusterMxN_2cta_mma.py", "compile"),
    "tcgen05/cp_narrow_a_to_tmem_mma": ("tcgen05/cp_narrow_a_to_tmem_mma.py", "compile"),
    "tcgen05/mcast_clusterMxN_1cta_mma": ("tcgen05/mcast_clusterMxN_1cta_mma.py", "compile"),
    "tcgen05/mcast_clusterMxN_2cta_mma": ("tcgen05/mcast_clusterMxN_2cta_mma.py", "compile"),
    "tcgen05/slicek_m32n8k128": ("tcgen05/slicek_m32n8k128.py", "compile"),
    "tcgen05/tmem_ld_st": ("tcgen05/tmem_ld_st.py", "compile"),
    "tcgen05/tmem_ld_to_stmatrix_transpose": ("tcgen05/tmem_ld_to_stmatrix_transpose.py", "compile"),
    "tutorial/10_minimal_tensor_mma_fp8": ("tutorial/10_minimal_tensor_mma_fp8.py", "get_compiled_gemm", 128, 64, 128),
}

for _arch, _table in ((SM90, SM90_PRIMITIVES), (SM100, SM100_PRIMITIVES)):
    for _name, (_path, _helper, *_args) in _table.items():
        example(f"experimental/{_name}", P + _path, _arch)(_own(_helper, *_args))

NEEDS_CUDA = "builds its arguments from CUDA tensors (or runs at import): no driver"
for _name in ("01_hello_world", "02_naive_gemm", "03_gemm_tiled_smem", "04_tma_load", "05_minimal_tensor_mma",
              "06_softmax", "07_vectorized_array", "08_mlir_value_tree_debug", "09_tma_4d_to_2d",
              "gemm_M128_N128_Kany_TN_warpspec_multistage"):
    skipped(f"experimental/tutorial/{_name}", P + f"tutorial/{_name}.py", SM100, NEEDS_CUDA)
skipped("experimental/tma/tma_load_store", P + "tma/tma_load_store.py", SM90,
        "no driver yet: its compile helper takes a dozen layout parameters")

T = "experimental/task_scheduling/blackwell/tutorial/"
for _path in ("01_copy_basics_ts/01_copy_grid_stride.py", "01_copy_basics_ts/02_copy_tma.py",
              "02_gemm_simple_ts/01_fp16_bf16_gemm_3.py",
              "03_persistent_scheduling_dynamic_domain_ts/01_copy_persistent_skip_tile.py",
              "03_persistent_scheduling_dynamic_domain_ts/02_copy_varlen_dynamic_domain.py",
              "04_gemm_bf16_advanced_ts/01_fp16_bf16_gemm_3_cluster.py",
              "04_gemm_bf16_advanced_ts/02_fp16_bf16_gemm_3_cute_cluster.py", "05_gemm_nvfp4_ts/01_gemm_nvfp4.py",
              "06_gemm_split_k_fp16_ts/01_gemm_split_k_fp16.py", "07_group_pipeline_ts/01_merge_copy.py",
              "07_group_pipeline_ts/02_merge_gemm.py", "07_group_pipeline_ts/03_merge_gemm_resadd.py",
              "07_group_pipeline_ts/04_fork_load_gemm_act.py"):
    skipped("task_scheduling/" + _path.split("/")[-1][:-3], T + _path, SM100, NEEDS_CUDA)
