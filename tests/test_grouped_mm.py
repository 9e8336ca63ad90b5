"""gcdsl.ops.grouped_mm on a Hopper GPU (skipped without one).

Outputs are poisoned with NaN before every launch. Each result is checked against a
float32 reference (relative error <= 1e-2: max |out - ref| / max |ref| over the
groups' rows) and, for bf16, against torch._grouped_mm. Rows past offs[-1] must
still hold the poison: the ragged store descriptor clips every group at its last row.
`offs` is on the GPU unless a test says otherwise, as an MoE router makes it.

    python -m pytest -q tests/test_grouped_mm.py
"""
import importlib

import pytest

torch = pytest.importorskip("torch")

pytestmark = pytest.mark.gpu

SPECIAL_ROWS = (0, 1, 127, 129, 2000)  # empty, one row, one short of a tile, one past, many tiles
TAIL = 5  # rows of `a` after offs[-1]
TILE_ORDERS = ("m", "n", "m_partial_last", "m_blocks")  # hopper_grouped_gemm.TILE_ORDERS (test_grouped_mm_host checks it)


def ragged_rows(groups: int, seed: int = 0):
    """Row counts: the special sizes first (as many as fit), then random ones up to 300, shuffled."""
    if groups == 1:
        return [2000]
    g = torch.Generator().manual_seed(seed)
    rows = list(SPECIAL_ROWS[:groups]) + torch.randint(0, 300, (max(0, groups - len(SPECIAL_ROWS)),),
                                                       generator=g).tolist()
    order = torch.randperm(groups, generator=g).tolist()
    return [rows[i] for i in order]


def make_problem(rows, n, k, dtype=torch.bfloat16, seed=0):
    g = torch.Generator(device="cuda").manual_seed(seed)
    ends = torch.tensor(rows).cumsum(0).to(torch.int32)
    m = int(ends[-1]) + TAIL
    a = torch.randn(m, k, device="cuda", dtype=dtype, generator=g)
    w = torch.randn(len(rows), n, k, device="cuda", dtype=dtype, generator=g)  # torch's expert layout
    return a, w.transpose(-2, -1), ends


def reference(a, b, ends):
    out = torch.zeros(a.shape[0], b.shape[2], device="cuda", dtype=torch.float32)
    start = 0
    for g, end in enumerate(ends.tolist()):
        out[start:end] = a[start:end].float() @ b[g].float()
        start = end
    return out


def rel_err(out, ref):
    return ((out.float() - ref).abs().max() / ref.abs().max().clamp_min(1e-6)).item()


def run_poisoned(a, b, ends, out_dtype=None, cluster_m=None, offs=None, tile_order=None, mma_without_rows=None,
                 claimed_tiles=None):
    """`offs` (default: `ends` copied to the GPU) is what the kernel reads; `ends` is the truth."""
    from gcdsl.ops.grouped_mm import grouped_mm_into
    from gcdsl.ops.grouped_mm_rules import pick_tile_n

    out = torch.full((a.shape[0], b.shape[2]), float("nan"), device="cuda", dtype=out_dtype or a.dtype)
    # a forced cluster size comes with the tile N alone picks (the shapes are chosen for it),
    # not the 128-wide decode tile a small M would get; pairs in the cooperative schedule
    # (ping-pong's pairs have tests of their own, in test_grouped_mm_cases.py)
    tile_n = pick_tile_n(b.shape[2]) if cluster_m else None
    schedule = "cooperative" if cluster_m == 2 or claimed_tiles else None
    grouped_mm_into(a, b, ends.cuda() if offs is None else offs, out, tile_n=tile_n, cluster_m=cluster_m,
                    schedule=schedule, tile_order=tile_order, mma_without_rows=mma_without_rows,
                    claimed_tiles=claimed_tiles)
    torch.cuda.synchronize()
    return out


def check(out, a, b, ends, tol=1e-2):
    end = int(ends[-1])
    ref = reference(a, b, ends)
    err = rel_err(out[:end], ref[:end])
    assert err <= tol, f"relative error {err:.3e}"
    assert torch.isnan(out[end:]).all(), "rows past offs[-1] were written"
    return err


@pytest.mark.parametrize("groups", [1, 8, 64, 128, 256])
@pytest.mark.parametrize("n, k", [(392, 200), (328, 1000)])  # 128x256 and 128x128 tiles; K % 64 != 0
@pytest.mark.parametrize("cluster_m", [1, 2])  # single CTAs; pairs sharing B by multicast
@pytest.mark.parametrize("tile_order", TILE_ORDERS)
def test_ragged_groups_against_fp32_and_torch(groups, n, k, cluster_m, tile_order):
    rows = ragged_rows(groups, seed=groups)
    a, b, ends = make_problem(rows, n, k)
    out = run_poisoned(a, b, ends, cluster_m=cluster_m, tile_order=tile_order)
    check(out, a, b, ends)
    theirs = torch._grouped_mm(a, b, offs=ends.cuda())
    end = int(ends[-1])
    assert rel_err(out[:end], theirs[:end].float()) <= 1e-2


@pytest.mark.parametrize("ab, out_dtype", [
    (torch.float16, None), (torch.float16, torch.float32), (torch.bfloat16, torch.float32),
    (torch.bfloat16, torch.float16), (torch.float16, torch.bfloat16),
])
@pytest.mark.parametrize("cluster_m", [1, 2])
def test_input_and_output_dtypes(ab, out_dtype, cluster_m):
    rows = ragged_rows(8, seed=3)
    a, b, ends = make_problem(rows, 256, 4096, dtype=ab)  # many k-tiles: the ring wraps many times
    check(run_poisoned(a, b, ends, out_dtype, cluster_m), a, b, ends)


def test_persistent_ctas_walk_many_tiles_in_pairs():
    """More tiles than CTAs (each CTA or pair takes several, across groups), long K."""
    rows = [2000, 0, 1500, 700, 129, 2048, 1]
    a, b, ends = make_problem(rows, 1024, 2048)
    for cluster_m in (1, 2):
        for tile_order in TILE_ORDERS:
            check(run_poisoned(a, b, ends, cluster_m=cluster_m, tile_order=tile_order), a, b, ends)


@pytest.mark.parametrize("rows", [
    [0, 0, 3000, 0, 0], [0] * 63 + [700], [700] + [0] * 63,  # all rows in one group; every group empty but one
    [1, 127, 129, 2000, 1, 0, 128, 256],  # one row, one short of a tile, one past, many tiles, exact tiles
], ids=["middle", "last-of-64", "first-of-64", "edges"])
@pytest.mark.parametrize("cluster_m", [1, 2])
@pytest.mark.parametrize("tile_order", TILE_ORDERS)
def test_one_busy_group_and_tile_edges(rows, cluster_m, tile_order):
    a, b, ends = make_problem(rows, 392, 200)
    check(run_poisoned(a, b, ends, cluster_m=cluster_m, tile_order=tile_order), a, b, ends)


@pytest.mark.parametrize("rows", [[0, 0, 3000, 0, 0], [1, 127, 129, 2000, 1, 0, 128, 256, 64, 65]],
                         ids=["middle", "edges"])
@pytest.mark.parametrize("cluster_m", [1, 2])
def test_warpgroups_without_rows_running_their_wgmmas_store_only_their_groups_rows(rows, cluster_m):
    """`mma_without_rows`: a pair's second CTA past its group, and a tile's second half past
    it, compute on rows they never store; the rows stored are still exact, and none past
    offs[-1] is written."""
    a, b, ends = make_problem(rows, 392, 200)
    check(run_poisoned(a, b, ends, cluster_m=cluster_m, mma_without_rows=True), a, b, ends)


@pytest.mark.parametrize("cluster_m", [1, 2])
@pytest.mark.parametrize("tile_order", ["m", "n"])
@pytest.mark.parametrize("n, k", [(1024, 256), (384, 64)])
def test_claimed_tiles_take_every_tile_once(cluster_m, tile_order, n, k):
    """`claimed_tiles`: each cluster claims its tiles after its first from a counter. Several
    times more tiles than clusters (the claim ring wraps), ragged groups with every edge;
    twice, each call with a counter of its own. With K one k-tile (128 x 128 tiles, six
    stages) the producer runs more tiles ahead of the consumers than the ring has slots,
    so that a claim written before every reader has read the slot's last is seen."""
    rows = ragged_rows(64, seed=5) + [3000, 1, 0, 129]
    a, b, ends = make_problem(rows, n, k)
    for _ in range(2):
        check(run_poisoned(a, b, ends, cluster_m=cluster_m, tile_order=tile_order, claimed_tiles=True), a, b, ends)


@pytest.mark.parametrize("rows_per_group, n, schedule, cluster_m", [
    # a's TAIL rows past offs[-1] count in T, the rules' rows: 256 and 320 a group are in
    # the lower half of a pair's 256-row step, 128 and 192 in the upper half
    (256, 4096, "pingpong", 1), (320, 4096, "pingpong", 1),  # 4096 = 21 x 192 + 64
    (128, 4096, "cooperative", 2), (192, 4096, "cooperative", 2),
    (600, 1112, "pingpong", 2)])  # 1112 = 5 x 192 + 152: pairs fit
def test_default_pick_where_routed_groups_average_one_m_tile_or_more(rows_per_group, n, schedule, cluster_m):
    """Routed rows (many groups spill a few rows past an M-tile) at an N whose last N-tile is
    partial: the configuration `grouped_mm` picks by itself there (ping-pong at any N,
    `PINGPONG_ANY_N_MAX_ROWS_PER_GROUP`, but the cooperative pairs where `pairs_pad_no_more`;
    in pairs from `PINGPONG_PAIR_ROWS_PER_GROUP`) against float32."""
    from gcdsl.ops.grouped_mm import configuration

    groups = 16
    g = torch.Generator().manual_seed(rows_per_group)
    picks = torch.multinomial(torch.ones(groups), rows_per_group * groups, replacement=True, generator=g)
    rows = picks.bincount(minlength=groups).tolist()
    a, b, ends = make_problem(rows, n, 512)
    picked = configuration(a, b, ends.cuda())
    assert (picked.schedule, picked.cluster_m) == (schedule, cluster_m)
    check(run_poisoned(a, b, ends), a, b, ends)


def test_public_op_takes_offsets_on_the_cpu_or_the_gpu():
    import gcdsl.ops

    rows = ragged_rows(8, seed=5)
    a, b, ends = make_problem(rows, 512, 256)
    out_cpu_offs = gcdsl.ops.grouped_mm(a, b, ends)
    out_cuda_offs = gcdsl.ops.grouped_mm(a, b, ends.cuda())
    end = int(ends[-1])
    assert torch.equal(out_cpu_offs[:end], out_cuda_offs[:end])
    assert rel_err(out_cpu_offs[:end], reference(a, b, ends)[:end]) <= 1e-2


def router_offsets(logits, experts, top_k):
    """What an MoE layer does on the GPU: top-k experts per token, tokens per expert, their ends."""
    ids = logits.topk(top_k, dim=-1).indices.flatten()
    counts = torch.zeros(experts, dtype=torch.int32, device=ids.device)
    counts.scatter_add_(0, ids, torch.ones_like(ids, dtype=torch.int32))  # bincount would synchronise
    return counts.cumsum(0, dtype=torch.int32)


def test_router_made_offsets_change_every_call_with_no_host_sync():
    """offs from top-k on the GPU, new routing per call; torch's sync debug mode raises on any
    synchronising call (a device-to-host copy, .item(), .tolist(), a stream synchronize)."""
    import gcdsl.ops

    gm = importlib.import_module("gcdsl.ops.grouped_mm")
    experts, tokens, top_k, n, k = 64, 96, 4, 256, 512
    x = torch.randn(tokens * top_k, k, device="cuda", dtype=torch.bfloat16)
    w = torch.randn(experts, n, k, device="cuda", dtype=torch.bfloat16).transpose(-2, -1)
    gcdsl.ops.grouped_mm(x, w, router_offsets(torch.randn(tokens, experts, device="cuda"), experts, top_k))
    compiled = gm.compiled_count()
    results = []
    torch.cuda.set_sync_debug_mode("error")
    try:
        for seed in range(4):
            logits = torch.randn(tokens, experts, device="cuda", generator=torch.Generator("cuda").manual_seed(seed))
            offs = router_offsets(logits, experts, top_k)
            results.append((offs, gcdsl.ops.grouped_mm(x, w, offs)))
    finally:
        torch.cuda.set_sync_debug_mode(0)
    assert gm.compiled_count() == compiled
    for offs, out in results:
        assert rel_err(out, reference(x, w, offs.cpu())) <= 1e-2


@pytest.mark.parametrize("claimed_tiles", [False, True])
def test_captured_graph_replays_with_new_offsets_and_data(claimed_tiles):
    """One capture; then offs, a and b change in place and every replay computes the new problem
    (with claimed tiles, each replay zeroes the counter the capture allocated)."""
    import gcdsl.ops
    from gcdsl.ops.grouped_mm import configuration, forcing

    rows = ragged_rows(16, seed=21)
    a, b, ends = make_problem(rows, 392, 200)
    offs = ends.cuda()

    def layer():
        return gcdsl.ops.grouped_mm(a, b, offs) * 2  # allocates its output inside the graph's pool

    with forcing("none", schedule="cooperative" if claimed_tiles else None, claimed_tiles=claimed_tiles):
        assert configuration(a, b, offs).claimed_tiles == claimed_tiles
        layer()  # compile outside the capture
        graph = torch.cuda.CUDAGraph()
        with torch.cuda.graph(graph):
            out = layer()
    for seed in range(3):
        new_rows = ragged_rows(16, seed=30 + seed)
        scale = (a.shape[0] - TAIL) / sum(new_rows)  # the same M: the capture froze the shapes
        new_rows = [int(r * scale) for r in new_rows]
        new_ends = torch.tensor(new_rows).cumsum(0).to(torch.int32)
        g = torch.Generator(device="cuda").manual_seed(seed)
        a.copy_(torch.randn(a.shape, device="cuda", generator=g))
        b.copy_(torch.randn(b.shape, device="cuda", generator=g))
        offs.copy_(new_ends)
        out.fill_(float("nan"))
        graph.replay()
        torch.cuda.synchronize()
        end = int(new_ends[-1])
        assert rel_err(out[:end] / 2, reference(a, b, new_ends)[:end]) <= 1e-2


def test_device_offsets_are_clamped_never_written_past_m():
    """An invalid offs on the GPU cannot be refused without a host copy: the kernel clamps each end
    to [previous end, M]. Rows it names are computed as if clamped; nothing lands past M."""
    a, b, ends = make_problem([100, 200, 50], 256, 128)
    m = a.shape[0]
    bad = torch.tensor([100, 60, m + 1000], dtype=torch.int32, device="cuda")  # decreasing, then past M
    backing = torch.full((m + 256, b.shape[2]), float("nan"), device="cuda", dtype=a.dtype)
    out = backing[:m]
    from gcdsl.ops.grouped_mm import grouped_mm_into

    grouped_mm_into(a, b, bad, out)
    torch.cuda.synchronize()
    assert torch.isnan(backing[m:]).all(), "rows past M were written"
    clamped = torch.tensor([100, 100, m], dtype=torch.int32)
    assert rel_err(out, reference(a, b, clamped)) <= 1e-2


def test_new_offsets_and_data_never_recompile():
    import gcdsl.ops

    gm = importlib.import_module("gcdsl.ops.grouped_mm")
    a, b, ends = make_problem(ragged_rows(8, seed=7), 384, 512)
    gcdsl.ops.grouped_mm(a, b, ends)
    compiled = gm.compiled_count()
    for seed in range(3):
        rows = ragged_rows(8, seed=100 + seed)
        a2, b2, ends2 = make_problem(rows, 384, 512, seed=seed)  # new M, new offsets, new data
        check(run_poisoned(a2, b2, ends2), a2, b2, ends2)
    assert gm.compiled_count() == compiled


def test_empty_problems_leave_the_output_alone():
    a, b, ends = make_problem([0, 0, 0], 256, 64)
    out = run_poisoned(a, b, ends)
    assert torch.isnan(out).all()
    a0 = torch.empty(0, 64, device="cuda", dtype=torch.bfloat16)
    assert run_poisoned(a0, b, torch.zeros(3, dtype=torch.int32)).shape == (0, 256)


def test_composes_with_torch_compile():
    import gcdsl.ops

    def moe_layer(x, w, offs):
        return torch.relu(gcdsl.ops.grouped_mm(x, w, offs)) * 2

    a, b, ends = make_problem(ragged_rows(8, seed=11), 256, 128)
    compiled = torch.compile(moe_layer, fullgraph=True)
    end = int(ends[-1])
    offs = ends.cuda()
    assert torch.equal(compiled(a, b, offs)[:end], moe_layer(a, b, offs)[:end])


def test_bad_offsets_are_refused_at_the_calling_line():
    import inspect

    import gcdsl.ops
    from gcdsl import Diag, GcdslError

    a, b, ends = make_problem([4, 4], 256, 64)
    line = inspect.currentframe().f_lineno + 2
    with pytest.raises(GcdslError) as info:
        gcdsl.ops.grouped_mm(a, b, torch.tensor([6, 2], dtype=torch.int32))
    assert info.value.diag is Diag.BAD_OP_INPUT and info.value.location.line == line
    with pytest.raises(GcdslError):
        gcdsl.ops.grouped_mm(a, b, torch.tensor([2, a.shape[0] + 1], dtype=torch.int32))
