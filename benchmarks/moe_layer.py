"""A mixture-of-experts layer as models write it, with the grouped GEMM as a parameter.

    y = moe_forward(x, weights, top_k, grouped_mm)

Everything runs on the GPU and nothing waits for it: the router's logits, top-k,
tokens per expert (a scatter-add, not `torch.bincount`, which synchronises to size
its result) and their cumulative sum `offs`, the token permutation, the gate-up
grouped GEMM, SwiGLU, the down grouped GEMM and the weighted combine. So the layer
can be captured in a CUDA graph and replayed with new tokens, hence new `offs`.

`grouped_mm(a, b, offs)` is `torch._grouped_mm`'s 2D x 3D case: `a` (M, K) with
group g's rows at offs[g-1]:offs[g], `b` (G, K, N). The expert weights are kept as
torch keeps them, `w13` (E, 2I, H) with gate rows before up rows and `w2` (E, H, I),
and passed transposed (K-major), so no copy is made. The variants the benchmarks
compare are `GROUPED_MMS`.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Callable, Dict

if TYPE_CHECKING:
    import torch


@dataclass(frozen=True)
class MoEShape:
    name: str
    experts: int
    hidden: int
    intermediate: int
    top_k: int

    def weight_bytes(self, experts: int, itemsize: int = 2) -> int:
        """Bytes of `experts` experts' gate, up and down weights."""
        return experts * 3 * self.intermediate * self.hidden * itemsize


SHAPES = {
    "qwen3-30b-a3b": MoEShape("qwen3-30b-a3b", 128, 2048, 768, 8),
    "deepseek-v3-ep8": MoEShape("deepseek-v3-ep8", 32, 7168, 2048, 8),  # 256 experts over 8 GPUs
    "mixtral-8x7b": MoEShape("mixtral-8x7b", 8, 4096, 14336, 2),
}


@dataclass
class MoEWeights:
    router: "torch.Tensor"  # (E, H)
    w13: "torch.Tensor"  # (E, 2I, H): gate, then up
    w2: "torch.Tensor"  # (E, H, I)

    @staticmethod
    def random(shape: MoEShape, dtype, seed: int = 0) -> "MoEWeights":
        import torch

        g = torch.Generator(device="cuda").manual_seed(seed)
        e, h, i = shape.experts, shape.hidden, shape.intermediate

        def randn(*size, fan_in):
            return (torch.randn(*size, device="cuda", generator=g) / fan_in ** 0.5).to(dtype)

        return MoEWeights(randn(e, h, fan_in=h), randn(e, 2 * i, h, fan_in=h), randn(e, h, i, fan_in=i))


def route(x, router, top_k: int):
    """Top-k routing on the GPU: (weights (T, k) fp32, expert ids (T, k), offs (E,) int32)."""
    experts = router.shape[0]
    scores = (x @ router.t()).float().softmax(dim=-1)
    weights, ids = scores.topk(top_k, dim=-1)
    weights = weights / weights.sum(dim=-1, keepdim=True)
    return weights, ids, expert_ends(ids, experts)


def expert_ends(ids, experts: int):
    """`offs`: each expert's cumulative slot count, by a scatter-add (no host sync)."""
    import torch

    counts = torch.zeros(experts, dtype=torch.int32, device=ids.device)
    counts.scatter_add_(0, ids.flatten(), torch.ones_like(ids.flatten(), dtype=torch.int32))
    return counts.cumsum(0, dtype=torch.int32)


def moe_forward(x, w: MoEWeights, top_k: int, grouped_mm: Callable):
    """The layer: route, permute, gate-up GEMM, SwiGLU, down GEMM, weighted combine."""
    weights, ids, offs = route(x, w.router, top_k)
    return moe_experts(x, w.w13, w.w2, weights, ids, grouped_mm, offs)


def moe_experts(x, w13, w2, weights, ids, grouped_mm: Callable, offs=None):
    """The layer after the router (what `fused_moe` computes): permute, gate-up GEMM,
    SwiGLU, down GEMM, weighted combine. `offs` is made from `ids` unless given."""
    import torch
    import torch.nn.functional as F

    top_k = ids.shape[1]
    offs = expert_ends(ids, w13.shape[0]) if offs is None else offs
    order = ids.flatten().argsort(stable=True)  # token slots, grouped by expert
    token = order // top_k
    h = grouped_mm(x[token], w13.transpose(-2, -1), offs)  # (T k, 2I)
    gate, up = h.chunk(2, dim=-1)
    y = grouped_mm(F.silu(gate) * up, w2.transpose(-2, -1), offs)  # (T k, H)
    y = y.float() * weights.flatten()[order, None]
    return torch.zeros(x.shape, dtype=torch.float32, device=x.device).index_add_(0, token, y).to(x.dtype)


def moe_reference(x, w: MoEWeights, top_k: int):
    """The same layer in float32, expert by expert (reads the routing on the host)."""
    weights, ids, _ = route(x, w.router, top_k)
    return moe_experts_reference(x, w.w13, w.w2, weights, ids)


def moe_experts_reference(x, w13, w2, weights, ids):
    """The layer after the router in float32, expert by expert (reads the routing on the host)."""
    import torch
    import torch.nn.functional as F

    out = torch.zeros(x.shape, dtype=torch.float32, device=x.device)
    for e in ids.unique().tolist():
        tokens, slot = (ids == e).nonzero(as_tuple=True)
        gate, up = (x[tokens].float() @ w13[e].float().t()).chunk(2, dim=-1)
        y = (F.silu(gate) * up) @ w2[e].float().t()
        out.index_add_(0, tokens, y * weights[tokens, slot, None].float())
    return out


def torch_grouped_mm(a, b, offs):
    import torch

    return torch._grouped_mm(a, b, offs=offs)


def gcdsl_grouped_mm(a, b, offs):
    import gcdsl.ops

    return gcdsl.ops.grouped_mm(a, b, offs)


# quack-kernels' configuration in every benchmark: its default (tuned False), or what its
# autotuner picks from each of its Hopper configurations per problem (`--quack-tuned`: it
# compiles every one of them, minutes per problem).
QUACK = {"tuned": False}


def add_quack_flag(parser) -> None:
    """`--quack-tuned` on a benchmark's command line; its `run` sets QUACK from it."""
    parser.add_argument("--quack-tuned", action="store_true",
                        help="quack-kernels autotuned over each of its configurations (minutes of compiles a problem)")


def quack_note(call: str) -> str:
    """How quack ran, for a benchmark's JSON: `call` with the configuration."""
    return f"{call}, tuned={QUACK['tuned']}"


def quack_grouped_mm(a, b, offs):
    """quack-kernels' varlen-M GEMM: `cu_seqlens_m` is offs with a leading 0."""
    import torch
    from quack.gemm_interface import gemm

    return gemm(a, b, cu_seqlens_m=torch.nn.functional.pad(offs, (1, 0)), tuned=QUACK["tuned"])


GROUPED_MMS: Dict[str, Callable] = {"torch": torch_grouped_mm, "gcdsl": gcdsl_grouped_mm, "quack": quack_grouped_mm}
