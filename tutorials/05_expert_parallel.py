"""Tutorial 05: an MoE layer with its experts spread over ranks (expert parallelism).

Each of the P ranks holds E / P experts and its own tokens. `gcdsl.ops.dispatch`
sends every token's row to the rank of each expert it was routed to
(`torch.distributed.all_to_all_single`: the per-expert counts first, then the rows),
the rank runs its experts as grouped GEMMs with `offs` built on the device, and
`gcdsl.ops.combine` sends the results back and sums them into the tokens with the
routing weights. `gcdsl.ops.expert_parallel_moe` is the three in a row.

The run checks the layer against the same layer on one rank holding every expert
(every rank computes it for its own tokens, from the full weights).

    torchrun --nproc-per-node 2 tutorials/05_expert_parallel.py            # GPUs: NCCL, gcdsl's grouped GEMM
    torchrun --nproc-per-node 2 tutorials/05_expert_parallel.py --cpu      # CPUs: gloo, torch._grouped_mm
"""
import argparse
import os
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.dirname(HERE))


def torch_grouped_mm(a, b, offs):
    """`torch._grouped_mm`, which runs on CPUs too (float32)."""
    import torch

    return torch._grouped_mm(a, b, offs=offs)


def one_rank_layer(x, w1, w2, weights, ids):
    """Every expert here: the reference."""
    import torch
    import torch.nn.functional as F

    out = torch.zeros(x.shape, dtype=torch.float32, device=x.device)
    for e in ids.unique().tolist():
        tokens, slot = (ids == e).nonzero(as_tuple=True)
        gate, up = (x[tokens].float() @ w1[e].float().t()).chunk(2, dim=-1)
        out.index_add_(0, tokens, ((F.silu(gate) * up) @ w2[e].float().t()) * weights[tokens, slot, None].float())
    return out


def main(argv=None) -> int:
    import torch
    import torch.distributed as dist

    import gcdsl.ops

    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--cpu", action="store_true", help="gloo on CPUs, experts on torch._grouped_mm")
    p.add_argument("--experts", type=int, default=16)
    p.add_argument("--tokens", type=int, default=64, help="tokens per rank")
    p.add_argument("--top-k", type=int, default=4)
    p.add_argument("--hidden", type=int, default=256)
    p.add_argument("--intermediate", type=int, default=128)
    args = p.parse_args(argv)

    dist.init_process_group("gloo" if args.cpu else "nccl")
    rank, ranks = dist.get_rank(), dist.get_world_size()
    device = torch.device("cpu") if args.cpu else torch.device("cuda", int(os.environ.get("LOCAL_RANK", 0)))
    if not args.cpu:
        torch.cuda.set_device(device)
    dtype = torch.float32 if args.cpu else torch.bfloat16
    local = args.experts // ranks

    g = torch.Generator().manual_seed(0)  # the same weights on every rank: each keeps its share
    w1 = (torch.randn(args.experts, 2 * args.intermediate, args.hidden, generator=g) / args.hidden ** 0.5)
    w2 = (torch.randn(args.experts, args.hidden, args.intermediate, generator=g) / args.intermediate ** 0.5)
    w1, w2 = w1.to(device, dtype), w2.to(device, dtype)
    g = torch.Generator().manual_seed(1 + rank)  # each rank's own tokens and routing
    x = torch.randn(args.tokens, args.hidden, generator=g).to(device, dtype)
    scores = torch.randn(args.tokens, args.experts, generator=g).softmax(-1)
    weights, ids = scores.topk(args.top_k, dim=-1)
    weights, ids = weights.to(device), ids.to(device)

    mine = gcdsl.ops.expert_parallel_moe(
        x, w1[rank * local:(rank + 1) * local], w2[rank * local:(rank + 1) * local], weights, ids, args.experts,
        grouped_mm=torch_grouped_mm if args.cpu else None)
    ref = one_rank_layer(x, w1, w2, weights, ids)
    err = torch.tensor([((mine.float() - ref).abs().max() / ref.abs().max()).item()], device=device)
    dist.all_reduce(err, op=dist.ReduceOp.MAX)
    tolerance = 1e-5 if args.cpu else 2e-2
    if rank == 0:
        print(f"{ranks} ranks x {local} experts, {args.tokens} tokens a rank, top-{args.top_k}: "
              f"relative error {err.item():.1e} against one rank with every expert: "
              f"{'PASS' if err.item() <= tolerance else 'FAIL'}")
    dist.destroy_process_group()
    return 0 if err.item() <= tolerance else 1


if __name__ == "__main__":
    sys.exit(main())
