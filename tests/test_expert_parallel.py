"""Expert parallelism's dispatch and combine, on two CPU processes over gloo (no GPU).

Every routing is checked bit for bit against one process holding every token and
every expert: the rows each rank receives, in expert order with their `offs`, and
the combined output through an expert function that is exact in float32 (integer
tokens times small integers, dyadic routing weights). The whole layer runs with
`torch._grouped_mm` (float32, on the CPU) for the experts, against the same layer on one process.

    python -m pytest -q tests/test_expert_parallel.py
"""
import os
import socket
import traceback

import pytest

torch = pytest.importorskip("torch")
dist = torch.distributed

RANKS, EXPERTS, HIDDEN, TOKENS = 2, 4, 8, 6


def _routings(rank):
    """name: (topk_ids (T, k), topk_weights) for this rank."""
    g = torch.Generator().manual_seed(100 + rank)
    uneven = torch.randint(0, EXPERTS, (TOKENS, 2), generator=g)
    uneven[:, 1] = (uneven[:, 0] + 1 + torch.randint(0, EXPERTS - 1, (TOKENS,), generator=g)) % EXPERTS
    return {
        "uneven": uneven,
        "rank 1 receives nothing": torch.randint(0, EXPERTS // RANKS, (TOKENS, 2), generator=g),
        "one expert takes every token": torch.full((TOKENS, 1), 3),
        "no tokens here": torch.zeros((0, 2), dtype=torch.int64) if rank == 0 else uneven,
    }


def _tokens(rank, count):
    g = torch.Generator().manual_seed(rank)
    return torch.randint(-8, 9, (count, HIDDEN), generator=g).float()


def _weights(ids):
    return torch.full(ids.shape, 0.5) if ids.shape[1] == 2 else torch.full(ids.shape, 0.25)


def _exact_experts(rows, offs, first_expert):
    """rows of local expert e times (its global id + 1): exact in float32."""
    factor = torch.repeat_interleave(torch.arange(offs.numel()) + first_expert + 1,
                                     offs.diff(prepend=offs.new_zeros(1)).long())
    return rows * factor[:, None].float()


def _torch_grouped_mm(a, b, offs):
    return torch._grouped_mm(a, b, offs=offs)  # float32 on the CPU too


def _worker(rank, port, failures):
    try:
        dist.init_process_group("gloo", init_method=f"tcp://127.0.0.1:{port}", rank=rank, world_size=RANKS)
        from gcdsl.ops.expert_parallel import combine, dispatch, expert_parallel_moe

        local = EXPERTS // RANKS
        for name, ids in _routings(rank).items():
            x, w = _tokens(rank, ids.shape[0]), _weights(ids)
            everyone = [None] * RANKS
            dist.all_gather_object(everyone, (x, ids, w))
            d = dispatch(x, ids, EXPERTS)
            # the rows this rank should hold: by local expert, then source rank, then slot
            want, ends = [], []
            for e in range(rank * local, (rank + 1) * local):
                for xs, idss, _ in everyone:
                    slots = (idss.reshape(-1) == e).nonzero().flatten()
                    want.append(xs[slots // idss.shape[1]])
                ends.append(sum(len(r) for r in want))
            want = torch.cat(want) if want else x.new_zeros(0, HIDDEN)
            assert torch.equal(d.rows, want), f"{name}: dispatched rows"
            assert d.offs.dtype == torch.int32 and d.offs.tolist() == ends, f"{name}: offs {d.offs.tolist()}"
            out = combine(_exact_experts(d.rows, d.offs, rank * local), d, w)
            ref = (x[:, None, :] * (ids[:, :, None] + 1).float() * w[:, :, None]).sum(1)
            assert torch.equal(out, ref), f"{name}: combined output"

        # the whole layer, float32 experts, against one process with every expert
        g = torch.Generator().manual_seed(7)
        w1 = torch.randn(EXPERTS, 2 * 4, HIDDEN, generator=g)
        w2 = torch.randn(EXPERTS, HIDDEN, 4, generator=g)
        ids = _routings(rank)["uneven"]
        x, w = _tokens(rank, TOKENS), torch.rand(TOKENS, 2, generator=torch.Generator().manual_seed(rank))
        mine = expert_parallel_moe(x, w1[rank * local:(rank + 1) * local], w2[rank * local:(rank + 1) * local],
                                   w, ids, EXPERTS, grouped_mm=_torch_grouped_mm)
        ref = torch.zeros_like(x)
        for t in range(TOKENS):
            for j in range(ids.shape[1]):
                e = int(ids[t, j])
                gate, up = (w1[e] @ x[t]).chunk(2)
                ref[t] += w[t, j] * (w2[e] @ (torch.nn.functional.silu(gate) * up))
        assert torch.allclose(mine, ref, rtol=1e-5, atol=1e-4), f"layer: {(mine - ref).abs().max()}"
        dist.destroy_process_group()
    except BaseException:  # noqa: BLE001 - reported to the parent
        failures.put(f"rank {rank}: {traceback.format_exc()}")


def _free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.mark.skipif(not dist.is_available() or not dist.is_gloo_available(), reason="torch.distributed with gloo")
def test_dispatch_and_combine_over_two_processes():
    import torch.multiprocessing as mp

    ctx = mp.get_context("spawn")
    failures = ctx.Queue()
    port = _free_port()
    procs = [ctx.Process(target=_worker, args=(rank, port, failures)) for rank in range(RANKS)]
    for p in procs:
        p.start()
    for p in procs:
        p.join(timeout=300)
    errors = [failures.get() for _ in range(failures.qsize())] if not failures.empty() else []
    assert not errors, "\n".join(errors)
    assert all(p.exitcode == 0 for p in procs), [p.exitcode for p in procs]


def test_bad_input_is_a_gcdsl_error_at_the_callers_line(monkeypatch):
    from gcdsl import GcdslError
    from gcdsl.ops import expert_parallel

    monkeypatch.setattr(dist, "get_world_size", lambda group=None: 2)
    with pytest.raises(GcdslError, match="do not split evenly") as err:
        expert_parallel.dispatch(torch.zeros(4, 8), torch.zeros(4, 2, dtype=torch.int64), 3)
    assert err.value.location.filename == os.path.abspath(__file__)
    with pytest.raises(GcdslError, match="expected integers"):
        expert_parallel.dispatch(torch.zeros(4, 8), torch.zeros(4, 2), 4)
    d = expert_parallel.Dispatched(torch.zeros(3, 8), torch.zeros(2, dtype=torch.int32), torch.arange(8),
                                   torch.arange(3), [3, 5], [3, 0], tokens=4, top_k=2)
    with pytest.raises(GcdslError, match="topk_weights is"):
        expert_parallel.combine(torch.zeros(3, 8), d, torch.zeros(4, 3))
