"""Expert parallelism: tokens to their experts' ranks and back, around a grouped GEMM.

    y = expert_parallel_moe(x, w1, w2, topk_weights, topk_ids, num_experts, group)

Each of the P ranks of `group` holds E / P consecutive experts (rank r: experts
r E/P ... (r + 1) E/P - 1) and its own tokens `x` (T, H) with their routing. The
layer exchanges them with `torch.distributed.all_to_all_single` on the engine the
group runs (NCCL on GPUs, gloo on CPUs):

    dispatch   token slots sorted by expert (stable), so each destination's rows are
               contiguous and in expert order; per-expert counts exchanged first
               (one all_to_all of E integers), then the rows (variable splits). The
               received rows, by source rank then expert, are put in expert order
               (by expert, then source rank) with their `offs` built on the device.
    experts    the caller's grouped GEMM on them: gate-up, SwiGLU, down.
    combine    the rows back to their ranks (the same splits, swapped) and summed
               into their tokens with the routing weights, in float32.

Host synchronization: `all_to_all_single` takes its split sizes as Python integers,
so a dispatch reads 2 P integers (the rows this rank sends to and receives from each
rank) on the host, once, after the counts' exchange: one device-to-host copy and
wait per layer. Combine reuses them and adds none. Nothing else reads the routing on
the host: the permutations and `offs` are computed on the device.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Callable, List, Optional

import torch
import torch.distributed as dist
import torch.nn.functional as F

from .grouped_cases import fail


@dataclass
class Dispatched:
    """This rank's share of a dispatch, and what its combine needs."""

    rows: torch.Tensor  # (R, H): the rows of every rank's tokens routed to this rank's experts, by expert
    offs: torch.Tensor  # (E / P,) int32 cumulative row ends per local expert, on rows' device
    order: torch.Tensor  # (T k,) this rank's token slots sorted by expert: the order rows were sent in
    to_expert_order: torch.Tensor  # (R,) where each received row went in `rows`
    send_splits: List[int]  # rows sent to each rank
    recv_splits: List[int]  # rows received from each rank
    tokens: int
    top_k: int


def dispatch(x: torch.Tensor, topk_ids: torch.Tensor, num_experts: int,
             group: Optional[dist.ProcessGroup] = None) -> Dispatched:
    """Send every token slot's row of `x` to the rank of its expert (see the module docstring)."""
    ranks = dist.get_world_size(group)
    _check(x, topk_ids, num_experts, ranks)
    local = num_experts // ranks
    tokens, top_k = topk_ids.shape
    experts = topk_ids.reshape(-1).long()
    order = experts.argsort(stable=True)
    counts = torch.zeros(num_experts, dtype=torch.int64, device=x.device)
    counts.scatter_add_(0, experts, torch.ones_like(experts))
    received = torch.empty_like(counts)
    dist.all_to_all_single(received, counts, group=group)  # [source rank, local expert], row-major
    received = received.view(ranks, local)
    sizes = torch.cat([counts.view(ranks, local).sum(1), received.sum(1)]).tolist()  # the one host sync
    send_splits, recv_splits = sizes[:ranks], sizes[ranks:]

    rows_in = x.new_empty(sum(recv_splits), x.shape[1])
    dist.all_to_all_single(rows_in, x[order // top_k], recv_splits, send_splits, group=group)
    # Received by (source, expert) blocks; wanted by (expert, source): each row keeps its
    # place within its block, and blocks move to their place in expert order.
    blocks = received.reshape(-1)
    start_received = blocks.cumsum(0) - blocks
    by_expert = received.t().reshape(-1)
    start_by_expert = (by_expert.cumsum(0) - by_expert).view(local, ranks).t().reshape(-1)
    block = torch.repeat_interleave(torch.arange(blocks.numel(), device=x.device), blocks,
                                    output_size=rows_in.shape[0])
    within = torch.arange(rows_in.shape[0], device=x.device) - start_received[block]
    to_expert_order = start_by_expert[block] + within
    rows = torch.empty_like(rows_in)
    rows[to_expert_order] = rows_in
    offs = received.sum(0).cumsum(0).to(torch.int32)
    return Dispatched(rows, offs, order, to_expert_order, send_splits, recv_splits, tokens, top_k)


def combine(y: torch.Tensor, dispatched: Dispatched, topk_weights: torch.Tensor,
            group: Optional[dist.ProcessGroup] = None) -> torch.Tensor:
    """The experts' rows `y` (in `dispatched.rows`' order) back to their tokens' ranks,
    weighted and summed per token in float32; (T, H) in y's dtype."""
    d = dispatched
    if y.shape[0] != d.rows.shape[0]:
        fail(f"y has {y.shape[0]} rows; the dispatch delivered {d.rows.shape[0]}", param="y",
             hint="pass the experts' output for dispatched.rows, row for row")
    if tuple(topk_weights.shape) != (d.tokens, d.top_k) or topk_weights.device != y.device:
        fail(f"topk_weights is {tuple(topk_weights.shape)} on {topk_weights.device}; the dispatch routed "
             f"{d.tokens} tokens to {d.top_k} experts each, on {y.device}", param="topk_weights",
             hint="pass the router's weights that go with the topk_ids given to dispatch")
    back = y.new_empty(sum(d.send_splits), y.shape[1])
    dist.all_to_all_single(back, y[d.to_expert_order].contiguous(), d.send_splits, d.recv_splits, group=group)
    weights = topk_weights.reshape(-1)[d.order].float()
    out = torch.zeros(d.tokens, y.shape[1], dtype=torch.float32, device=y.device)
    out.index_add_(0, d.order // d.top_k, back.float() * weights[:, None])
    return out.to(y.dtype)


def expert_parallel_moe(x: torch.Tensor, w1: torch.Tensor, w2: torch.Tensor, topk_weights: torch.Tensor,
                        topk_ids: torch.Tensor, num_experts: int, group: Optional[dist.ProcessGroup] = None,
                        grouped_mm: Optional[Callable] = None) -> torch.Tensor:
    """An MoE expert layer over the ranks of `group`: `w1` (E / P, 2I, H) gate then up and
    `w2` (E / P, H, I) are this rank's experts; `grouped_mm(a, b, offs)` is
    `torch._grouped_mm`'s 2D x 3D case (default `gcdsl.ops.grouped_mm`)."""
    if grouped_mm is None:
        from .grouped_mm import grouped_mm
    d = dispatch(x, topk_ids, num_experts, group)
    gate, up = grouped_mm(d.rows, w1.transpose(-2, -1), d.offs).chunk(2, dim=-1)
    y = grouped_mm((F.silu(gate) * up).contiguous(), w2.transpose(-2, -1), d.offs)
    return combine(y, d, topk_weights, group)


def _check(x: torch.Tensor, topk_ids: torch.Tensor, num_experts: int, ranks: int) -> None:
    if num_experts < ranks or num_experts % ranks:
        fail(f"{num_experts} experts do not split evenly over {ranks} ranks", param="num_experts",
             hint="use a number of experts that is a multiple of the group's size")
    if x.dim() != 2 or topk_ids.dim() != 2 or topk_ids.shape[0] != x.shape[0]:
        fail(f"x is {tuple(x.shape)} and topk_ids {tuple(topk_ids.shape)}: expected (T, H) and (T, k)",
             param="topk_ids", hint="route every token of x: topk_ids[t] holds token t's experts")
    if topk_ids.dtype.is_floating_point or topk_ids.device != x.device:
        fail(f"topk_ids is {topk_ids.dtype} on {topk_ids.device}; expected integers on {x.device}",
             param="topk_ids", hint="pass the router's top-k indices as they come (int64 or int32)")
