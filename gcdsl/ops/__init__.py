"""Ready-made operators built on gcdsl (torch and the CuTe DSL are imported here, on demand).

    import gcdsl.ops
    out = gcdsl.ops.grouped_mm(a, b, offs)   # torch._grouped_mm, every case, with autograd (Hopper)
    act = gcdsl.ops.grouped_mm_swiglu(x, w13.transpose(-2, -1), offs)  # silu(gate) * up, one kernel
    y = gcdsl.ops.fused_moe(x, w1, w2, topk_weights, topk_ids)  # an MoE expert layer after the router
    y = gcdsl.ops.expert_parallel_moe(x, w1, w2, topk_weights, topk_ids, num_experts, group)
"""
from .expert_parallel import Dispatched, combine, dispatch, expert_parallel_moe
from .fused_moe import fused_moe
from .grouped_mm import MAX_GROUPS, grouped_mm, grouped_mm_swiglu

__all__ = ["MAX_GROUPS", "Dispatched", "combine", "dispatch", "expert_parallel_moe", "fused_moe", "grouped_mm",
           "grouped_mm_swiglu"]
