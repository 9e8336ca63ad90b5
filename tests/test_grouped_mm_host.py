"""The grouped GEMM's host side and layout facts, without a GPU.

- the epilogue's register -> shared-memory copy puts accumulator element `sub * n + v`
  at column `32 * sub` of the tile (the kernel relies on it), and the two consumer
  warpgroups hold rows 0-63 and 64-127 (the skip of an empty half relies on it);
- the grid bound, the tile and cluster heuristics, the shared-memory budget;
- a CUDA `offs` is never read on the host: the call path touches its metadata only;
- every input check is a GcdslError pointing at the caller's line.
"""
import importlib
import inspect
import types
import warnings

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import gcdsl
from gcdsl import Diag, GcdslError
gm = importlib.import_module("gcdsl.ops.grouped_mm")
rules = importlib.import_module("gcdsl.ops.grouped_mm_rules")

torch = pytest.importorskip("torch")


def _epilogue_facts(c_name: str, tile_n: int, coverage: bool, schedule: str = "cooperative") -> dict:
    """Trace-time facts about the consumer's MMA and epilogue partitions: the two warpgroups
    on one 128-row tile (cooperative), or one warpgroup on a 128-row tile (ping-pong), and
    whether the kernel's `sub_tile_accumulators` (read off thread 0) holds for each thread."""
    import cutlass
    import cutlass.cute as cute
    import cutlass.utils.hopper_helpers as sm90
    from cutlass.tensor_utils import LayoutEnum

    from gcdsl.ops import hopper_grouped_gemm as hgg

    c_dtype = getattr(cutlass, c_name)
    facts = {"mismatches": [], "rows": {}, "covered": set()}
    pingpong = schedule == "pingpong"
    tile_m = hgg.PINGPONG_TILE_M if pingpong else hgg.TILE_M
    gemm = hgg.HopperGroupedGemm(hgg.GemmConfig(cutlass.BFloat16, c_dtype, 8, 1024, 512, tile_n, schedule=schedule))
    epi_tile = (tile_m, hgg.EPI_TILE[1])
    threads = (0, 31, 64, 127) if pingpong else (0, 31, 64, 127, 128, 161, 255)

    @cute.jit
    def probe():
        k_major = cute.nvgpu.OperandMajorMode.K
        tiled_mma = sm90.make_trivial_tiled_mma(cutlass.BFloat16, cutlass.BFloat16, k_major, k_major,
                                                cutlass.Float32, (1, 1, 1) if pingpong else (2, 1, 1),
                                                tiler_mn=(64, tile_n))
        tiled_r2s = cute.make_tiled_copy_S(
            sm90.get_smem_store_op(LayoutEnum.ROW_MAJOR, c_dtype, cutlass.Float32),
            cute.make_tiled_copy_C_atom(
                cute.make_copy_atom(cute.nvgpu.warp.StMatrix8x8x16bOp(False, 4), c_dtype), tiled_mma),
        )
        tile_coords = cute.make_identity_tensor((tile_m, tile_n))
        sub_coords = cute.make_identity_tensor((*epi_tile, 1))
        order = gemm.sub_tile_accumulators(tiled_mma, tiled_r2s)
        for ti in cutlass.range_constexpr(len(threads)):
            t = threads[ti]
            acc = tiled_r2s.retile(tiled_mma.get_slice(t).partition_C(tile_coords))
            sub = tiled_r2s.get_slice(t).partition_S(sub_coords)[(None, None, None, 0)]
            n = cute.size(sub)
            facts["rows"][t] = {acc[i][0] for i in range(cute.size(acc))}
            for s in cutlass.range_constexpr(tile_n // hgg.EPI_TILE[1]):
                for v in cutlass.range_constexpr(n):
                    want = (sub[v][0], sub[v][1] + epi_tile[1] * s)
                    if cutlass.const_expr(tuple(acc[order[s][v]]) != want):
                        facts["mismatches"].append((t, s, v))
        for t in cutlass.range_constexpr((128 if pingpong else 256) if coverage else 0):
            sub = tiled_r2s.get_slice(t).partition_S(sub_coords)[(None, None, None, 0)]
            for v in cutlass.range_constexpr(cute.size(sub)):
                facts["covered"].add((sub[v][0], sub[v][1]))

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # the 256-iteration trace-time loop is slow on purpose
        probe()
    return facts


@pytest.mark.parametrize("c_name", ["BFloat16", "Float16", "Float32"])
@pytest.mark.parametrize("tile_n", [128, 256])
def test_epilogue_sub_tiles_and_warpgroup_rows(c_name, tile_n):
    coverage = (c_name, tile_n) == ("BFloat16", 256)  # slow to trace: once (the GPU tests cover all)
    facts = _epilogue_facts(c_name, tile_n, coverage)
    assert not facts["mismatches"], facts["mismatches"][:5]
    if coverage:
        assert len(facts["covered"]) == 128 * 32  # the 256 threads cover the 128 x 32 sub-tile
    for t, rows in facts["rows"].items():
        assert rows <= (set(range(64)) if t < 128 else set(range(64, 128))), (t, sorted(rows))


@pytest.mark.parametrize("c_name", ["BFloat16", "Float32"])
@pytest.mark.parametrize("tile_n", [128, 192])
def test_pingpong_epilogue_sub_tiles_of_one_warpgroups_tile(c_name, tile_n):
    """With ping-pong a warpgroup's 128 threads hold all 128 rows of their own tile, and the
    same flat accumulator order feeds its 128 x 32 sub-tiles."""
    coverage = (c_name, tile_n) == ("BFloat16", 192)
    facts = _epilogue_facts(c_name, tile_n, coverage, schedule="pingpong")
    assert not facts["mismatches"], facts["mismatches"][:5]
    if coverage:
        assert len(facts["covered"]) == 128 * 32
    for t, rows in facts["rows"].items():
        assert rows == set(range(t % 32 // 4 + 16 * (t // 32), 128, 64)) | set(range(t % 32 // 4 + 8 + 16 * (t // 32), 128, 64)), (t, sorted(rows))


@settings(max_examples=300, deadline=None)
@given(st.lists(st.integers(0, 700), min_size=1, max_size=40), st.sampled_from([(392, 256), (4096, 256), (328, 128)]),
       st.sampled_from([1, 2]))
def test_grid_bound_covers_every_offs(rows, n_tile, cluster_m):
    """The CTAs launched (from M and G alone) are never fewer than the tiles of any offs of that
    M and G, up to the device's limit: no tile waits for a CTA to come back around needlessly."""
    n, tile_n = n_tile
    m = sum(rows)
    step = 128 * cluster_m
    tiles = sum(-(-r // step) for r in rows) * -(-n // tile_n)
    bound = rules.cluster_tile_bound(m, len(rows), n, tile_n, cluster_m)
    assert tiles <= bound
    worst = [m - (len(rows) - 1) * 1 if i == 0 else 1 for i in range(len(rows))] if m >= len(rows) else None
    if worst:  # one big group and G - 1 groups of one row: the bound is reached
        assert sum(-(-r // step) for r in worst) * -(-n // tile_n) <= bound


def test_pairs_only_when_groups_average_many_m_tiles():
    pick = rules.pick_cluster_m
    assert pick(8 * 2048, 8, 4096, 256) == 2  # 16 M-tiles a group: an odd last pair costs little
    assert pick(32 * 1024, 32, 4096, 256) == 2  # 8 M-tiles a group
    assert pick(8 * 256, 8, 4096, 256) == 1  # 2 M-tiles a group: routing makes about half of them odd
    assert pick(64 * 64, 64, 7168, 256) == 1
    assert pick(rules.PAIR_ROWS_PER_GROUP * 20, 20, 4096, 256) == 2
    assert pick(rules.PAIR_ROWS_PER_GROUP * 20 - 1, 20, 4096, 256) == 1
    # the second CTA's half of the last B tile must start inside B
    assert pick(8 * 2048, 8, 264, 128) == 1 and pick(8 * 2048, 8, 328, 128) == 2
    assert pick(8 * 2048, 8, 392, 256) == 2 and pick(8 * 2048, 8, 384, 256) == 1


def test_the_default_cluster_of_ragged_rows_by_schedule_and_activation():
    """The default cluster (`default_cluster_m`): ragged rows in the cooperative schedule
    take pairs from PAIR_ROWS_PER_GROUP rows a group, SwiGLU's product from
    SWIGLU_PAIR_ROWS_PER_GROUP; in ping-pong from PINGPONG_PAIR_ROWS_PER_GROUP where its
    192-wide tile suits pairs, SwiGLU's product never."""
    def cluster(rows, activation, schedule="cooperative", n=28672, tile_n=256, k=4096):
        problem = types.SimpleNamespace(ragged="m", total=8 * rows, groups=8, n=n, k=k, activation=activation)
        return rules.default_cluster_m(problem, schedule, tile_m=128, tile_n=tile_n)

    assert rules.SWIGLU_PAIR_ROWS_PER_GROUP == 128 < rules.PAIR_ROWS_PER_GROUP == 512
    assert [cluster(rows, "none", n=1536) for rows in (127, 128, 511, 512)] == [1, 1, 1, 2]  # a narrow N
    # below PAIR_ROWS_PER_GROUP at a wide N, pairs where the average ends in the upper half of a
    # pair's 256-row step (`pairs_pad_no_more`)
    assert [cluster(rows, "none") for rows in (127, 128, 129, 255, 256, 384, 385, 511, 512)] \
        == [1, 1, 2, 2, 1, 1, 2, 2, 2]
    assert cluster(192, "none", tile_n=128) == 1  # measured with the 256-wide tile only
    assert [cluster(rows, "swiglu") for rows in (127, 128, 511, 512)] == [1, 2, 2, 2]
    assert rules.PINGPONG_PAIR_ROWS_PER_GROUP == 512
    assert [cluster(rows, "none", "pingpong", 14336, 192) for rows in (511, 512, 4096)] == [1, 2, 2]
    assert cluster(1024, "none", "pingpong", 28672, 192) == 1  # 28672 mod 192 = 64
    assert cluster(1024, "swiglu", "pingpong", 14336, 128) == 1


def test_device_offsets_are_never_read_on_the_host(monkeypatch):
    """The whole call path with a CUDA `offs`, kernel launch stubbed: every torch function that
    touches `offs` is a metadata read (no .tolist(), .item(), .cpu(), .to(), indexing, copy)."""
    reads = []

    class OnDevice(torch.Tensor):  # a CPU tensor that says it lives on cuda:0
        @property
        def device(self):
            return torch.device("cuda", 0)

        @classmethod
        def __torch_function__(cls, func, types, args=(), kwargs=None):
            if any(arg is offs for arg in args):
                reads.append(getattr(func, "__name__", None) or repr(func))
            with torch._C.DisableTorchFunctionSubclass():
                return func(*args, **(kwargs or {}))

    launches = []

    class StubPlan:
        groups, tile_m, tile_n, pairs_fit = 4, 128, 256, True
        kernels = {1: lambda *args: launches.append(args), 2: lambda *args: launches.append(args)}
        max_clusters = {1: 132, 2: 66}

        def kernel(self, cluster_m):
            return self.kernels[cluster_m]

    monkeypatch.setattr(gm, "_plan_for", lambda *args, **kwargs: StubPlan())
    monkeypatch.setattr(gm, "_current_stream", lambda index: 7)
    monkeypatch.setattr(gm, "_sm_count", lambda index: 132)
    monkeypatch.setattr(gm, "require_hopper", lambda device, param, op: None)
    monkeypatch.setattr(gm.torch.cuda, "current_device", lambda: 0)
    monkeypatch.setattr(gm.torch.cuda, "device", lambda index: __import__("contextlib").nullcontext())
    monkeypatch.setattr(gm, "_LAUNCHES", {})
    a, b, host_offs = _inputs()
    a, b, out = (t.as_subclass(OnDevice) for t in (a, b, torch.empty(64, 256, dtype=torch.bfloat16)))
    offs = host_offs.as_subclass(OnDevice)
    for _ in range(2):  # the first call checks and configures, the second reuses that
        gm.grouped_mm_into(a, b, offs, out)
    assert len(launches) == 2 and launches[0][3] == offs.data_ptr()
    metadata = {"shape", "stride", "dtype", "dim", "data_ptr", "__get__", "size"}
    assert reads and set(reads) <= metadata, sorted(set(reads) - metadata)


def _stubbed_configurations(monkeypatch, plans=None):
    """Kernels stubbed (as above) for `configuration` on CPU tensors: returns a tensor
    subclass that says it lives on cuda:0. `plans`, where given, gets each plan's `Choices`."""
    class StubPlan:
        tile_m, pairs_fit, max_clusters = 128, True, {1: 132, 2: 66}

        def __init__(self, picked):
            self.tile_n = picked.tile_n
            if plans is not None:
                plans.append(picked)

        def kernel(self, cluster_m):
            return lambda *args: None

    monkeypatch.setattr(gm, "_plan_for", lambda problem, dtype, device, picked: StubPlan(picked))
    monkeypatch.setattr(gm, "_sm_count", lambda index: 132)
    monkeypatch.setattr(gm, "require_hopper", lambda device, param, op: None)
    monkeypatch.setattr(gm.torch.cuda, "device", lambda index: __import__("contextlib").nullcontext())
    monkeypatch.setattr(gm, "_LAUNCHES", {})

    class OnDevice(torch.Tensor):  # a CPU tensor that says it lives on cuda:0
        @property
        def device(self):
            return torch.device("cuda", 0)

    return OnDevice


def test_configuration_says_what_a_call_runs(monkeypatch):
    """`configuration`: the schedule, tile, cluster and tile order a call's launch was built
    with, the heuristics' pick or what `forcing` holds; kernels stubbed, as above."""
    OnDevice = _stubbed_configurations(monkeypatch)
    a, b, offs = _inputs(g=8, m=8 * 128, n=4096, k=256)  # one M-tile a group at a wide N: ping-pong
    a, b = a.as_subclass(OnDevice), b.as_subclass(OnDevice)
    picked = gm.configuration(a, b, offs)
    assert picked == ("pingpong", 128, 192, 1, "m", False, False)
    assert str(picked) == "pingpong 128 x 192, single CTAs, m-order"
    with gm.forcing("none", schedule="cooperative", tile_n=256, cluster_m=2):
        assert str(gm.configuration(a, b, offs)) == "cooperative 128 x 256, pairs, m-order"
    assert gm.configuration(a, b, offs) == picked
    empty = torch.zeros(0, 256, dtype=torch.bfloat16).as_subclass(OnDevice)
    assert gm.configuration(empty, b, torch.zeros(8, dtype=torch.int32)) is None  # nothing to compute


def test_tile_heuristic_from_n_and_at_decode_from_m_and_g():
    assert [rules.pick_tile_n(n) for n in (64, 128, 256, 384, 512, 640, 4096, 7168, 1536)] == \
        [128, 128, 256, 128, 256, 128, 256, 256, 256]
    # at most min(G, M) groups have rows: 8 x 6 tiles of 256 would leave most of 132 SMs idle
    assert rules.pick_tile_n(1536, m=8, groups=128) == 128
    assert rules.pick_tile_n(1536, m=512, groups=128) == 256  # 128 groups x 6 tiles
    assert rules.pick_tile_n(4096, m=8, groups=32) == 256  # 8 x 16 = 128 tiles: about one wave already
    assert rules.pick_tile_n(2048, m=8, groups=128, sms=132) == 128 and rules.pick_tile_n(2048, m=9, groups=128) == 256


def test_warpgroups_without_rows_run_their_wgmmas_where_the_plain_products_groups_are_large(monkeypatch):
    """`pick_mma_without_rows`: the plain product with ragged rows whose groups average at
    least MMA_WITHOUT_ROWS_MIN_ROWS_PER_GROUP rows; not SwiGLU's, not ragged K or a batch.
    A call's configuration says so, and what a call forces (`forcing`, as
    `grouped_mm_into`'s argument) overrides it either way."""
    def problem(rows, ragged="m", activation="none", groups=32):
        return types.SimpleNamespace(ragged=ragged, total=rows * groups, groups=groups, activation=activation)

    per_group = rules.MMA_WITHOUT_ROWS_MIN_ROWS_PER_GROUP
    assert rules.pick_mma_without_rows(problem(per_group))  # DeepSeek-V3's GEMMs at 16,384 tokens
    assert not rules.pick_mma_without_rows(problem(per_group - 8))
    assert not rules.pick_mma_without_rows(problem(per_group, activation="swiglu"))
    assert not rules.pick_mma_without_rows(problem(per_group, ragged="k"))
    assert not rules.pick_mma_without_rows(problem(per_group, ragged=None))

    plans = []
    OnDevice = _stubbed_configurations(monkeypatch, plans)
    for rows, expected in ((per_group, True), (per_group // 2, False)):
        a, b, offs = _inputs(g=2, m=2 * rows, n=256, k=64)
        a, b = a.as_subclass(OnDevice), b.as_subclass(OnDevice)
        picked = gm.configuration(a, b, offs)
        assert picked.mma_without_rows is expected
        assert str(picked).endswith(", WGMMAs without rows") is expected
        with gm.forcing("none", mma_without_rows=not expected):
            assert gm.configuration(a, b, offs).mma_without_rows is (not expected)
    assert [plan.mma_without_rows for plan in plans] == [True, False, False, True]


def test_claimed_tiles_are_forced_only_and_on_the_cooperative_schedule_alone(monkeypatch):
    """`claimed_tiles` (`GemmConfig.claimed_tiles`): no default picks it; `forcing` runs it
    where the cooperative schedule runs ragged rows and the configuration says so, and
    `grouped_mm_into` refuses it at the caller's line where the schedule is ping-pong."""
    plans = []
    OnDevice = _stubbed_configurations(monkeypatch, plans)
    a, b, offs = _inputs(g=32, m=32 * 1024, n=4096, k=7168)  # DeepSeek-V3's gate-up forward, 4,096 tokens
    a, b = a.as_subclass(OnDevice), b.as_subclass(OnDevice)
    assert not gm.configuration(a, b, offs).claimed_tiles
    with gm.forcing("none", claimed_tiles=True):
        picked = gm.configuration(a, b, offs)
        assert picked.schedule == "cooperative" and picked.claimed_tiles
        assert str(picked) == "cooperative 128 x 256, pairs, n-order, claimed tiles"
    narrow_a, narrow_b, narrow_offs = _inputs(g=8, m=8 * 128, n=4096, k=256)  # ping-pong (as above)
    narrow_a, narrow_b = narrow_a.as_subclass(OnDevice), narrow_b.as_subclass(OnDevice)
    with gm.forcing("none", claimed_tiles=True):
        assert not gm.configuration(narrow_a, narrow_b, narrow_offs).claimed_tiles
    assert [plan.claimed_tiles for plan in plans] == [False, True, False]
    with pytest.raises(GcdslError) as info:
        gm.grouped_mm_into(narrow_a, narrow_b, narrow_offs, torch.empty(8 * 128, 4096, dtype=a.dtype),
                           claimed_tiles=True)
    assert info.value.param == "claimed_tiles" and info.value.location.filename == __file__
    assert "heuristics picked pingpong" in info.value.message and "schedule='cooperative'" in info.value.hint


def test_tile_order_n_tile_fastest_where_k_exceeds_n_and_groups_are_large():
    """`pick_tile_order`: N-tiles fastest for the plain product with ragged rows, K > N and
    at least N_FASTEST_ROWS_PER_GROUP rows a group on average; M-steps fastest otherwise,
    for SwiGLU's gate-up product, and for ragged K and a batch (their only order)."""
    def problem(rows, n, k, groups=32, ragged="m", activation="none"):  # the fields the choice reads
        return types.SimpleNamespace(ragged=ragged, total=rows * groups, n=n, k=k, groups=groups,
                                     activation=activation)

    per_group = rules.N_FASTEST_ROWS_PER_GROUP
    assert rules.pick_tile_order(problem(per_group, 4096, 7168)) == "n"  # DeepSeek-V3's gate-up forward
    assert rules.pick_tile_order(problem(per_group, 2048, 7168)) == "n"  # ... its down input gradient
    assert rules.pick_tile_order(problem(per_group - 1, 4096, 7168)) == "m"
    assert rules.pick_tile_order(problem(per_group, 7168, 4096)) == "m"  # N > K
    assert rules.pick_tile_order(problem(per_group, 4096, 4096)) == "m"
    assert rules.pick_tile_order(problem(per_group, 4096, 7168, activation="swiglu")) == "m"
    assert rules.pick_tile_order(problem(per_group, 4096, 0, ragged="k")) == "m"
    assert rules.pick_tile_order(problem(per_group, 4096, 7168, ragged="batch")) == "m"


def test_the_configuration_refuses_an_unknown_tile_order_and_the_n_order_without_ragged_rows():
    import cutlass
    from gcdsl.ops import hopper_grouped_gemm as hgg

    assert hgg.TILE_ORDERS == ("m", "n", "m_partial_last", "m_blocks")
    hgg.GemmConfig(cutlass.BFloat16, cutlass.BFloat16, 8, 256, 64, 128, tile_order="n")
    hgg.GemmConfig(cutlass.BFloat16, cutlass.BFloat16, 8, 256, 64, 128, tile_order="m_partial_last")
    hgg.GemmConfig(cutlass.BFloat16, cutlass.BFloat16, 8, 256, 64, 128, tile_order="m_blocks")
    with pytest.raises(ValueError, match="tile order 'k' is not one of"):
        hgg.GemmConfig(cutlass.BFloat16, cutlass.BFloat16, 8, 256, 64, 128, tile_order="k")
    with pytest.raises(ValueError, match="tile orders are built for ragged M"):
        hgg.GemmConfig(cutlass.BFloat16, cutlass.BFloat16, 8, 256, 0, 128, ragged="k", m=256, tile_order="n")
    with pytest.raises(ValueError, match="tile orders are built for ragged M"):
        hgg.GemmConfig(cutlass.BFloat16, cutlass.BFloat16, 8, 256, 0, 128, ragged="k", m=256,
                       tile_order="m_partial_last")


def test_the_configuration_refuses_an_unknown_l2_policy():
    import cutlass
    from gcdsl.ops import hopper_grouped_gemm as hgg

    assert hgg.L2_POLICIES["default"] is None  # cute.copy's own
    assert hgg.L2_POLICIES["evict_normal"] == 0x1000000000000000  # CUTLASS's CacheHintSm90::EVICT_NORMAL
    hgg.GemmConfig(cutlass.BFloat16, cutlass.BFloat16, 8, 256, 64, 128, load_policy="evict_last")
    with pytest.raises(ValueError, match="load policy 'keep' is not one of"):
        hgg.GemmConfig(cutlass.BFloat16, cutlass.BFloat16, 8, 256, 64, 128, load_policy="keep")
    hgg.GemmConfig(cutlass.BFloat16, cutlass.BFloat16, 8, 256, 64, 128, store_policy="evict_first")
    hgg.GemmConfig(cutlass.BFloat16, cutlass.BFloat16, 8, 256, 64, 128, mma_without_rows=True)
    with pytest.raises(ValueError, match="mma_without_rows is built for ragged M"):
        hgg.GemmConfig(cutlass.BFloat16, cutlass.BFloat16, 8, 256, 0, 128, ragged="k", m=256, a_major="m",
                       b_major="n", mma_without_rows=True)
    with pytest.raises(ValueError, match="store policy 'keep' is not one of"):
        hgg.GemmConfig(cutlass.BFloat16, cutlass.BFloat16, 8, 256, 64, 128, store_policy="keep")


def test_the_configuration_claims_tiles_for_ragged_rows_in_the_cooperative_schedule_only():
    import cutlass
    from gcdsl.ops import hopper_grouped_gemm as hgg

    hgg.GemmConfig(cutlass.BFloat16, cutlass.BFloat16, 8, 256, 64, 128, 2, claimed_tiles=True)
    for refused in (dict(schedule="pingpong", tile_n=128), dict(ragged="k", k=0, m=256, a_major="m", b_major="n"),
                    dict(split_k=2)):
        fields = dict(ab_dtype=cutlass.BFloat16, c_dtype=cutlass.BFloat16, groups=8, n=256, k=640, tile_n=128,
                      claimed_tiles=True)
        with pytest.raises(ValueError, match="claimed tiles are built for ragged M, the cooperative schedule"):
            hgg.GemmConfig(**{**fields, **refused})
    assert hgg.header_bytes(8, claimed_tiles=True) == hgg.header_bytes(8) == 1024  # (room to spare in the block)


def test_pick_schedule_pingpong_for_narrow_ragged_m_with_full_tiles():
    """Ping-pong where it measured faster (ragged M, N <= PINGPONG_MAX_N, a full tile of rows
    a group on average); cooperative for wide N (in single CTAs: pairs have a rule of their
    own), decode, the other cases, and whenever the caller asks for a tile or pairs only the
    cooperative schedule has."""
    def problem(m, n, groups=128, offs=True, k=2048):  # the fields of `Problem` the choice reads
        return types.SimpleNamespace(ragged="m" if offs else "batch", total=m, n=n, groups=groups, k=k)

    qwen3_w13, qwen3_w2_dx = problem(32768, 1536), problem(32768, 768)
    assert rules.pick_schedule(qwen3_w13) == rules.pick_schedule(qwen3_w2_dx) == "pingpong"
    assert rules.pick_schedule(problem(65536, 2048), cluster_m=1) == "cooperative"  # past PINGPONG_MAX_N
    assert rules.pick_schedule(problem(65536, 2048, k=768), cluster_m=1) == "pingpong"  # Qwen3's down GEMM: a short K
    assert rules.pick_schedule(problem(65536, 2048, k=1025), cluster_m=1) == "cooperative"
    assert rules.pick_schedule(problem(65536, 2049, k=768), cluster_m=1) == "cooperative"  # past PINGPONG_SHORT_K_MAX_N
    assert rules.pick_schedule(problem(512, 1536)) == "cooperative"  # decode: 4 rows a group
    assert rules.pick_schedule(problem(128 * 128, 1536)) == "pingpong"
    assert rules.pick_schedule(problem(128 * 128 - 1, 1536)) == "cooperative"
    assert rules.pick_schedule(qwen3_w13, tile_n=256) == "cooperative"
    assert rules.pick_schedule(qwen3_w13, cluster_m=2) == "pingpong"  # 1536 = 8 x 192: ping-pong's tile fits pairs
    assert rules.pick_schedule(problem(32768, 1120), cluster_m=2) == "pingpong"  # 1120 mod 192 = 160 ...
    assert rules.pick_schedule(problem(32768, 1056), cluster_m=2) == "cooperative"  # ... but 1056 mod 192 = 96
    assert rules.pick_schedule(problem(512, 2048), tile_n=192) == "pingpong"  # only ping-pong has 192
    assert rules.pick_schedule(problem(256, 1536, groups=8, offs=False)) == "cooperative"  # a batch


def test_pick_schedule_pingpong_at_any_n_where_groups_average_one_to_four_m_tiles():
    """Groups of one to four M-tiles on average (at least PINGPONG_TILE_M rows, fewer than
    PINGPONG_ANY_N_MAX_ROWS_PER_GROUP): ping-pong at every N; past that, the N rule again."""
    def problem(rows, n, groups=32, k=7168, activation="none"):
        return types.SimpleNamespace(ragged="m", total=rows * groups, n=n, groups=groups, k=k, activation=activation)

    assert rules.PINGPONG_ANY_N_MAX_ROWS_PER_GROUP == 512
    deepseek_w13_512, mixtral_w13_512 = problem(128, 4096), problem(128, 28672, groups=8, k=4096)
    assert rules.pick_schedule(deepseek_w13_512) == rules.pick_schedule(mixtral_w13_512) == "pingpong"
    assert rules.pick_schedule(problem(256, 7168, k=2048)) == "pingpong"  # DeepSeek-V3's down GEMM at 1,024 tokens
    assert rules.pick_schedule(problem(384, 7168, k=2048)) == "pingpong"
    assert rules.pick_schedule(problem(512, 7168, k=2048)) == "cooperative"  # ... and at 2,048 tokens
    # but the cooperative pairs where the average ends in the upper half of a pair's 256-row
    # step (`pairs_pad_no_more`): 768, 896 and 1,792 tokens, not 1,024 or 1,536
    for rows in (129, 192, 224, 255, 385, 448, 511):
        assert rules.pick_tiles(problem(rows, 7168, k=2048), None, None, None, 132) == ("cooperative", 256), rows
        assert rules.pick_schedule(problem(rows, 7168, k=2048), cluster_m=1) == "pingpong", rows
        assert rules.pick_schedule(problem(rows, 7168, k=2048), tile_n=192) == "pingpong", rows
    assert rules.pick_schedule(problem(192, 1536, k=2048)) == "pingpong"  # a narrow N keeps ping-pong
    assert rules.pick_schedule(problem(192, 2048, k=768)) == "pingpong"  # ... and a short K's
    assert rules.pick_schedule(problem(192, 2048, k=7168)) == "cooperative"  # DeepSeek-V3's down input gradient
    assert rules.pick_schedule(problem(192, 4000)) == "cooperative"  # 4000 mod 256 = 160: the 256 tile's pairs fit
    assert rules.pick_schedule(problem(192, 3968)) == "pingpong"  # 3968 mod 256 = 128: 128-wide tiles, unmeasured
    # from PINGPONG_PAIR_ROWS_PER_GROUP rows, ping-pong in pairs where N suits its pairs (N mod 192
    # is 0 or more than 96), at any N: DeepSeek-V3's down input gradient (N 2048, K 7168)
    assert rules.pick_schedule(problem(512, 2048)) == rules.pick_schedule(problem(4096, 2048)) == "pingpong"
    assert rules.pick_schedule(problem(512, 2048), cluster_m=1) == "cooperative"
    assert rules.pick_schedule(problem(511, 2048), cluster_m=1) == "pingpong"
    assert rules.pick_schedule(problem(1024, 14336, groups=8, k=4096)) == "pingpong"  # 14336 mod 192 = 128
    assert rules.pick_schedule(problem(1024, 28672, groups=8, k=4096)) == "cooperative"  # ... 28672 mod 192 = 64
    assert rules.pick_schedule(problem(127, 4096)) == "cooperative"  # below a full M-tile: decode's tiles
    assert rules.pick_schedule(deepseek_w13_512, tile_n=256) == rules.pick_schedule(deepseek_w13_512, cluster_m=2) \
        == "cooperative"  # 4096 mod 192 = 64: ping-pong's tile does not fit pairs
    assert rules.pick_tiles(deepseek_w13_512, None, None, None, 132) == ("pingpong", 192)
    # SwiGLU's gate-up product keeps its own tiles (in pairs from one M-tile an expert)
    assert rules.pick_tiles(problem(128, 4096, activation="swiglu"), None, None, None, 132) == ("cooperative", 256)
    batch = types.SimpleNamespace(ragged="batch", total=128 * 32, n=4096, groups=32, k=7168)
    assert rules.pick_schedule(batch) == "cooperative"


def test_pick_schedule_and_pairs_for_the_grouped_reduction_in_their_measured_range():
    """Ragged K (the weight gradient): pairs wherever they fit; ping-pong while groups
    average less than 2,048 columns, in pairs, or at least 512 without them (the W7 points
    where each measured faster); cooperative for longer groups, and for a tile only the
    cooperative schedule has."""
    def reduction(t, groups, m=1536, n=2048):
        return types.SimpleNamespace(ragged="k", total=t, m=m, n=n, groups=groups, k=0)

    qwen3_4096, deepseek_16384 = reduction(4096 * 8, 128), reduction(16384 * 8, 32, m=4096, n=7168)
    assert rules.pick_schedule(qwen3_4096) == "pingpong"  # 256 a group, in pairs
    assert rules.pick_reduction_cluster_m(qwen3_4096, 128, 192) == 2
    assert rules.pick_schedule(qwen3_4096, cluster_m=1) == "cooperative"  # 256 a group, single CTAs
    assert rules.pick_schedule(reduction(4096 * 8, 128, m=1408)) == "cooperative"  # 11 M-tiles: no pairs
    assert rules.pick_schedule(reduction(4096 * 8, 128, n=2000)) == "cooperative"  # 2000 mod 192 = 80: no pairs
    assert rules.pick_schedule(reduction(4096 * 8, 32, m=4096, n=7168)) == "pingpong"  # 1,024 a group
    assert rules.pick_reduction_cluster_m(reduction(4096 * 8, 32, m=4096, n=7168), 128, 192) == 1  # 7168 mod 192 = 64
    assert rules.pick_schedule(deepseek_16384) == "cooperative"  # 4,096 a group
    assert rules.pick_reduction_cluster_m(deepseek_16384, 128, 256) == 2
    for t, schedule in ((512 * 32, "pingpong"), (512 * 32 - 1, "cooperative"), (2048 * 32 - 1, "pingpong"),
                        (2048 * 32, "cooperative")):  # without pairs (11 M-tiles)
        assert rules.pick_schedule(reduction(t, 32, m=1408)) == schedule, t
    assert rules.pick_schedule(reduction(2048 * 32 - 1, 32), cluster_m=2) == "pingpong"
    assert rules.pick_schedule(reduction(2048 * 32, 32)) == "cooperative"
    assert rules.pick_schedule(reduction(4096 * 8, 32), tile_n=256) == "cooperative"


@pytest.mark.parametrize("tile_n", [128, 256])
@pytest.mark.parametrize("c_name", ["BFloat16", "Float32"])
def test_shared_memory_fits_with_room_for_the_pipeline(tile_n, c_name):
    import cutlass

    from gcdsl.ops import hopper_grouped_gemm as hgg

    c_dtype = getattr(cutlass, c_name)
    gemm = hgg.HopperGroupedGemm(hgg.GemmConfig(cutlass.BFloat16, c_dtype, 8, 4096, 7168, tile_n))
    assert gemm.stage_bytes == (128 + tile_n) * 64 * 2
    assert gemm.stages >= 4 and gemm.smem_bytes <= 232448  # 227 KiB per CTA on sm_90
    assert gemm.smem_bytes + gemm.stage_bytes > 232448  # no room left for another stage
    assert (tile_n // hgg.EPI_TILE[1]) % gemm.epi_stages == 0  # sub-tile buffers are static


@pytest.mark.parametrize("tile_n", [128, 192])
def test_pingpong_shared_memory_and_configuration(tile_n):
    """128-row tiles, a set of sub-tile buffers per warpgroup, stages to fill the rest; pairs
    where N suits them."""
    import cutlass

    from gcdsl.ops import hopper_grouped_gemm as hgg

    gemm = hgg.HopperGroupedGemm(hgg.GemmConfig(cutlass.BFloat16, cutlass.BFloat16, 128, 2048, 768, tile_n,
                                                schedule="pingpong"))
    assert gemm.tile_mnk == (128, tile_n, 64) and gemm.stage_consumer_warps == 4
    assert gemm.epi_buffers == 2 * gemm.epi_stages == 4 and gemm.stage_bytes == (128 + tile_n) * 64 * 2
    assert gemm.stages >= 4 and gemm.smem_bytes <= 232448 < gemm.smem_bytes + gemm.stage_bytes
    # pairs with ragged rows, where each CTA's half of the last B tile starts inside B
    hgg.GemmConfig(cutlass.BFloat16, cutlass.BFloat16, 8, 4608, 7168, 192, 2, schedule="pingpong")
    with pytest.raises(ValueError, match="pairs need N mod 192 to be 0 or above 96; N = 4096"):
        hgg.GemmConfig(cutlass.BFloat16, cutlass.BFloat16, 8, 4096, 7168, 192, 2, schedule="pingpong")
    # the grouped reduction has pairs in both schedules, over an even number of M-tiles
    for schedule, tile_n in (("cooperative", 256), ("pingpong", 192)):
        hgg.GemmConfig(cutlass.BFloat16, cutlass.BFloat16, 8, 2048, 0, tile_n, 2, ragged="k", a_major="m",
                       b_major="n", m=1536, schedule=schedule)
        with pytest.raises(ValueError, match="pairs with ragged K need an even number of M-tiles; "
                                             "M = 1408 makes 11 of 128 rows"):
            hgg.GemmConfig(cutlass.BFloat16, cutlass.BFloat16, 8, 2048, 0, tile_n, 2, ragged="k", a_major="m",
                           b_major="n", m=1408, schedule=schedule)
    with pytest.raises(ValueError, match="pairs are built for ragged M and ragged K only"):
        hgg.GemmConfig(cutlass.BFloat16, cutlass.BFloat16, 8, 2048, 1024, 256, 2, ragged="batch")
    with pytest.raises(ValueError, match=r"tile_n = 256 is not one of \(64, 128, 192\) \(pingpong schedule\)"):
        hgg.GemmConfig(cutlass.BFloat16, cutlass.BFloat16, 8, 4096, 7168, 256, schedule="pingpong")
    with pytest.raises(ValueError, match="schedule 'zigzag' is not one of"):
        hgg.GemmConfig(cutlass.BFloat16, cutlass.BFloat16, 8, 4096, 7168, 256, schedule="zigzag")


def test_shared_memory_keeps_four_stages_up_to_256_groups():
    import cutlass

    from gcdsl.ops import hopper_grouped_gemm as hgg

    for groups, stages in ((256, 4), (352, 4), (353, 3), (gm.MAX_GROUPS, 3)):
        gemm = hgg.HopperGroupedGemm(hgg.GemmConfig(cutlass.BFloat16, cutlass.BFloat16, groups, 7168, 2048, 256))
        assert gemm.stages == stages and gemm.smem_bytes <= 232448, (groups, gemm.stages)
    with pytest.raises(ValueError, match="outside 1 to"):
        hgg.GemmConfig(cutlass.BFloat16, cutlass.BFloat16, gm.MAX_GROUPS + 1, 256, 64, 256)
    with pytest.raises(ValueError, match="pairs need N mod 256") as info:  # 264 mod 256 = 8: no half of B left
        hgg.GemmConfig(cutlass.BFloat16, cutlass.Float32, 8, 264, 64, 256, cluster_m=2)
    assert "Float32" not in str(info.value)  # one reason, the real one
    with pytest.raises(ValueError, match="K splits are built for ragged M, the cooperative schedule"):
        hgg.GemmConfig(cutlass.BFloat16, cutlass.Float32, 8, 256, 512, 128, schedule="pingpong", split_k=2)
    with pytest.raises(ValueError, match="split_k = 9 is more than K = 512's 8 k-tiles"):
        hgg.GemmConfig(cutlass.BFloat16, cutlass.Float32, 8, 256, 512, 128, split_k=9)
    with pytest.raises(ValueError) as info:  # every problem at once
        hgg.GemmConfig(cutlass.Float32, cutlass.Int8, 0, 256, 64, 96, cluster_m=4)
    assert str(info.value).count(";") == 4


def test_a_cluster_size_the_plan_lacks_is_an_error_at_the_callers_line():
    """`grouped_mm_into(..., cluster_m=2)` where pairs cannot be built: the configuration's
    reason, naming cluster_m, at this line."""
    import types

    import cutlass
    from gcdsl.ops import hopper_grouped_gemm as hgg

    def plan(**options):
        config = hgg.GemmConfig(cutlass.BFloat16, cutlass.BFloat16, 8, options.pop("n", 264), 64, 64, **options)
        return types.SimpleNamespace(single=config, kernels={1: "the kernel"})

    assert gm._Plan.kernel(plan(), 1) == "the kernel"
    with pytest.raises(GcdslError) as ragged_n:
        gm._Plan.kernel(plan(), 2)  # 264 mod 64 = 8
    with pytest.raises(GcdslError) as batch:
        gm._Plan.kernel(plan(n=256, ragged="batch", a_major="m", b_major="n", schedule="pingpong"), 2)
    for info in (ragged_n, batch):
        assert info.value.param == "cluster_m" and info.value.location.filename == __file__
    assert "cluster_m = 2: pairs need N mod 64 to be 0 or above 32; N = 264" in ragged_n.value.message
    assert "cluster_m = 2: pairs are built for ragged M and ragged K only" in batch.value.message


# ---- input checks: the error names the caller's line -------------------------------------
def _inputs(g=4, m=64, n=256, k=128, dtype=torch.bfloat16):
    a = torch.zeros(m, k, dtype=dtype)
    b = torch.zeros(g, n, k, dtype=dtype).transpose(-2, -1)
    offs = torch.tensor([m // g * (i + 1) for i in range(g)], dtype=torch.int32)
    return a, b, offs


def _refused(a, b, offs, out_dtype=None):
    line = inspect.currentframe().f_lineno + 2
    with pytest.raises(GcdslError) as info:
        gcdsl.ops.grouped_mm(a, b, offs, out_dtype)
    err = info.value
    assert err.diag is Diag.BAD_OP_INPUT
    assert err.location is not None and err.location.filename == __file__ and err.location.line == line
    assert _source_line(line)[err.location.col:].startswith("gcdsl.ops.grouped_mm(a, b"), err.location
    return err


def _source_line(line: int) -> str:
    with open(__file__) as f:
        return f.read().splitlines()[line - 1]


def test_the_caret_sits_under_the_ops_call_inside_an_expression():
    a, b, offs = _inputs()
    line = inspect.currentframe().f_lineno + 2
    with pytest.raises(GcdslError) as info:
        print("out:", gcdsl.ops.grouped_mm(a.float(), b, offs).shape)
    err = info.value
    assert err.location.line == line and _source_line(line)[err.location.col:].startswith("gcdsl.ops.grouped_mm(")
    caret = str(err).splitlines()[2]
    assert caret.strip() == "^" and str(err).splitlines()[1][len(caret) - 1:].startswith("gcdsl.ops.grouped_mm(")


def test_refusals_point_at_the_calling_line():
    a, b, offs = _inputs()
    assert "float32" in str(_refused(a.float(), b, offs))
    assert _refused(a, b.half(), offs).param == "a"
    assert "out_dtype" == _refused(a, b, offs, torch.int8).param
    assert "int32" in str(_refused(a, b, offs.long()))
    assert "must agree" in str(_refused(a[:, :64], b, offs))
    assert "must agree" in str(_refused(a, b, offs[:3]))
    assert "2-D or 3-D" in str(_refused(a, b[0, None, None], offs))
    assert "needs offs" in str(_refused(a, b, None))
    assert "batched" in str(_refused(a[None], b[:1], offs))
    assert "column-major" in str(_refused(a[::2], b, offs))  # neither layout, packed
    assert "group counts" in str(_refused(a.expand(3, 64, 128), b[0], offs))  # 3D x 2D, 3 groups and 4 ends
    a2, b2, offs2 = _inputs(k=100)
    assert "16-byte" in str(_refused(a2, b2, offs2))
    a3, b3, offs3 = _inputs(n=100)
    assert "16-byte" in str(_refused(a3, b3, offs3))
    a4, b4, offs4 = _inputs(k=120)
    shifted = torch.zeros(64 * 120 + 8, dtype=a4.dtype)[1:1 + 64 * 120].view(64, 120)  # 2 bytes off
    assert "aligned" in str(_refused(shifted, b4, offs4))
    on_cpu = _refused(a, b, offs)  # CPU tensors pass everything else
    assert "a is on cpu; grouped_mm runs on a CUDA GPU" in str(on_cpu) and on_cpu.param == "a"


def test_an_unknown_tile_order_is_refused_at_the_callers_line():
    a, b, offs = _inputs()
    with pytest.raises(GcdslError) as info:
        gm.grouped_mm_into(a, b, offs, torch.empty(64, 256, dtype=a.dtype), tile_order="k")
    assert info.value.param == "tile_order" and info.value.location.filename == __file__
    assert "tile_order 'k' is not one of ('m', 'n', 'm_partial_last', 'm_blocks')" in info.value.message


def test_claimed_tiles_is_a_bool_for_ragged_rows_refused_at_the_callers_line():
    a, b, offs = _inputs()
    with pytest.raises(GcdslError) as info:
        gm.grouped_mm_into(a, b, offs, torch.empty(64, 256, dtype=a.dtype), claimed_tiles=1)
    assert info.value.param == "claimed_tiles" and info.value.location.filename == __file__
    x, dy = torch.zeros(128, 64, dtype=torch.bfloat16), torch.zeros(64, 256, dtype=torch.bfloat16)
    with pytest.raises(GcdslError) as info:  # the grouped reduction: its own schedule of tiles
        gm.grouped_mm_into(x, dy, offs, torch.empty(4, 128, 256, dtype=x.dtype), claimed_tiles=True)
    assert info.value.param == "claimed_tiles" and "reduction is ragged" in info.value.message


def test_mma_without_rows_is_a_bool_for_ragged_rows_refused_at_the_callers_line():
    a, b, offs = _inputs()
    with pytest.raises(GcdslError) as info:
        gm.grouped_mm_into(a, b, offs, torch.empty(64, 256, dtype=a.dtype), mma_without_rows="yes")
    assert info.value.param == "mma_without_rows" and info.value.location.filename == __file__
    x, dy = torch.zeros(128, 64, dtype=torch.bfloat16), torch.zeros(64, 256, dtype=torch.bfloat16)
    with pytest.raises(GcdslError) as info:  # the grouped reduction: no rows to be without
        gm.grouped_mm_into(x, dy, offs, torch.empty(4, 128, 256, dtype=x.dtype), mma_without_rows=True)
    assert info.value.param == "mma_without_rows" and "reduction is ragged" in info.value.message


@pytest.mark.parametrize("param", ["load_policy", "store_policy"])
def test_an_unknown_l2_policy_is_refused_at_the_callers_line(param):
    a, b, offs = _inputs()
    with pytest.raises(GcdslError) as info:
        gm.grouped_mm_into(a, b, offs, torch.empty(64, 256, dtype=a.dtype), **{param: "keep"})
    assert info.value.param == param and info.value.location.filename == __file__
    assert f"{param} 'keep' is not one of ('default', 'evict_normal', 'evict_first', 'evict_last')" \
        in info.value.message


def test_the_n_tile_order_without_ragged_rows_is_refused_at_the_callers_line():
    """The grouped reduction (2D x 2D) and the batch (3D x 3D) have one tile order: "n" is
    a gcdsl error naming tile_order at this line, before anything else about the call."""
    x, dy = torch.zeros(128, 64, dtype=torch.bfloat16), torch.zeros(64, 256, dtype=torch.bfloat16)
    offs = torch.tensor([32, 64], dtype=torch.int32)
    with pytest.raises(GcdslError) as reduction:
        gm.grouped_mm_into(x, dy, offs, torch.empty(2, 128, 256, dtype=x.dtype), tile_order="n")
    a, b = torch.zeros(2, 64, 128, dtype=torch.bfloat16), torch.zeros(2, 128, 256, dtype=torch.bfloat16)
    with pytest.raises(GcdslError) as batch:
        gm.grouped_mm_into(a, b, None, torch.empty(2, 64, 256, dtype=a.dtype), tile_order="n")
    for info, what in ((reduction, "reduction is ragged"), (batch, "groups are a batch")):
        assert info.value.param == "tile_order" and info.value.location.filename == __file__
        assert f"this one's {what} and has one order" in info.value.message


def test_a_gpu_other_than_hopper_is_refused_at_the_callers_line(monkeypatch):
    """The kernels are built for sm_90a: an A100 or a B200 gets a gcdsl error naming the GPU
    before anything is compiled, and the launch of every signature asks first."""
    from gcdsl.ops import grouped_cases

    monkeypatch.setattr(grouped_cases, "_capability", lambda index: (10, 0))
    monkeypatch.setattr(torch.cuda, "get_device_name", lambda index=None: "NVIDIA B200")
    line = inspect.currentframe().f_lineno + 2
    with pytest.raises(GcdslError) as info:
        grouped_cases.require_hopper(torch.device("cuda", 1), "a", "grouped_mm")
    err = info.value
    assert (err.param, err.location.filename, err.location.line) == ("a", __file__, line)
    assert "a is on cuda:1, NVIDIA B200 (sm_100); grouped_mm's kernels are built for Hopper GPUs" in err.message
    assert "torch._grouped_mm" in err.hint
    monkeypatch.setattr(grouped_cases, "_capability", lambda index: (9, 0))
    grouped_cases.require_hopper(torch.device("cuda", 1), "a", "grouped_mm")  # an H100 or H200 passes

    class Asked(Exception):
        pass

    asked = []

    def ask(device, param, op):
        asked.append((device, param, op))
        raise Asked  # stop the launch there

    monkeypatch.setattr(gm, "require_hopper", ask)
    monkeypatch.setattr(gm, "describe", lambda *args, **kwargs: types.SimpleNamespace(launchable=True))
    a, b, offs = _inputs()
    with pytest.raises(Asked):
        gm._Launch(a, b, offs, None)
    assert asked == [(a.device, "a", "grouped_mm")]


def test_group_count_limit():
    a, b, offs = _inputs(g=gm.MAX_GROUPS + 1, m=(gm.MAX_GROUPS + 1) * 2, n=8, k=8)
    err = _refused(a, b, offs)
    assert str(gm.MAX_GROUPS) in str(err) and "shared memory" in err.hint
    assert gm.MAX_GROUPS >= 256  # DeepSeek-V3's routed experts without expert parallelism


def _ragged_rows(total, a_major="k"):
    """The Problem of a 2D x 3D call with `total` rows (what check_host_offsets reads of it)."""
    from gcdsl.ops.grouped_cases import Problem

    return Problem(case="2d3d", ragged="m", a_major=a_major, b_major="k", groups=3, m=0, n=8, k=8,
                   total=total, out_dtype=torch.bfloat16, out_shape=(total, 8), swapped=False, c_back=0)


def test_offsets_must_be_cumulative_ends():
    with pytest.raises(GcdslError) as info:
        gm.check_host_offsets(torch.tensor([4, 2], dtype=torch.int32), _ragged_rows(10))
    assert "below" in str(info.value) and info.value.location.filename == __file__
    with pytest.raises(GcdslError) as info:
        gm.check_host_offsets(torch.tensor([4, 12], dtype=torch.int32), _ragged_rows(10))
    assert "exceeds" in str(info.value)
    gm.check_host_offsets(torch.tensor([0, 0, 10], dtype=torch.int32), _ragged_rows(10))
    gm.check_host_offsets(torch.tensor([3, 5, 10], dtype=torch.int32), _ragged_rows(10))  # K-major: anywhere


def test_groups_of_a_column_major_a_start_on_16_bytes():
    """The kernel's A M-major: TMA reads a box only from a 16-byte aligned row."""
    problem = _ragged_rows(40, a_major="m")
    assert problem.group_alignment == 8 and _ragged_rows(40).group_alignment == 1
    gm.check_host_offsets(torch.tensor([8, 8, 40], dtype=torch.int32), problem)
    gm.check_host_offsets(torch.tensor([8, 24, 27], dtype=torch.int32), problem)  # the last may end anywhere
    gm.check_host_offsets(torch.tensor([3, 3, 3], dtype=torch.int32), problem)  # groups with no rows start anywhere
    with pytest.raises(GcdslError) as info:
        gm.check_host_offsets(torch.tensor([8, 9, 16], dtype=torch.int32), problem)
    err = info.value
    assert "group 2 starts at 9, not a multiple of 8" in str(err) and err.param == "offs"
    assert ".contiguous()" in err.hint and err.location.filename == __file__


@pytest.mark.parametrize("majors", [("k", "n"), ("m", "k"), ("k", "k"), ("m", "n")])
def test_grouped_reduction_reads_t_contiguous_operands_whose_groups_start_and_end_on_16_bytes(majors):
    """2D x 2D with T contiguous in `a` (the kernel's A K-major) or `b` (B K-major): the
    kernel's k-tiles end at each group's end and start on 16 bytes, so a group that has
    columns starts and ends at a multiple of 8. (`describe`'s mapping of the layouts is
    the GPU tests'.)"""
    from gcdsl.ops.grouped_cases import Problem

    problem = Problem(case="2d2d", ragged="k", a_major=majors[0], b_major=majors[1], groups=3, m=16, n=24, k=0,
                      total=40, out_dtype=torch.bfloat16, out_shape=(3, 16, 24), swapped=False, c_back=0)
    if majors == ("m", "n"):  # T strided in both: anywhere
        assert problem.group_alignment == 1 and not problem.ends_aligned
        gm.check_host_offsets(torch.tensor([3, 5, 39], dtype=torch.int32), problem)
        return
    assert problem.group_alignment == 8 and problem.ends_aligned
    gm.check_host_offsets(torch.tensor([8, 8, 40], dtype=torch.int32), problem)
    gm.check_host_offsets(torch.tensor([0, 16, 16], dtype=torch.int32), problem)  # empty groups anywhere
    gm.check_host_offsets(torch.tensor([8, 8, 8], dtype=torch.int32), problem)
    operand = "a" if majors[0] == "k" else "b"
    for ends, where in (([8, 13, 40], "group 1 ends at 13"), ([8, 16, 27], "group 2 ends at 27")):
        with pytest.raises(GcdslError) as info:
            gm.check_host_offsets(torch.tensor(ends, dtype=torch.int32), problem)
        err = info.value
        assert f"{where}, not a multiple of 8: `{operand}`" in str(err) and err.param == "offs", str(err)
        assert "column-major `a` and a row-major `b`" in err.hint and err.location.filename == __file__


def test_only_plain_eager_calls_skip_the_dispatcher():
    """The op's code runs directly only for plain tensors without autograd, outside any
    dispatch mode: everything else goes through `torch.ops.gcdsl`, which traces and differentiates."""
    from torch.utils._python_dispatch import TorchDispatchMode

    class Passing(TorchDispatchMode):
        def __torch_dispatch__(self, func, types, args=(), kwargs=None):
            return func(*args, **(kwargs or {}))

    a, b = torch.ones(2, 2), torch.ones(2, 2)
    assert gm.plain_eager_call(a, b, None)
    assert not gm.plain_eager_call(a, b.requires_grad_())
    assert not gm.plain_eager_call(a, torch.nn.Parameter(torch.ones(2, 2), requires_grad=False))
    with Passing():
        assert not gm.plain_eager_call(a, None)


def test_traced_calls_record_the_custom_op_with_its_fake_implementation():
    """make_fx over fake CUDA tensors (no GPU needed): the graph holds gcdsl::grouped_mm, and
    the fake implementation gives the output's shape, dtype and device."""
    from torch._subclasses.fake_tensor import FakeTensorMode
    from torch.fx.experimental.proxy_tensor import make_fx

    with FakeTensorMode():
        a = torch.empty(64, 128, dtype=torch.bfloat16, device="cuda")
        b = torch.empty(4, 256, 128, dtype=torch.bfloat16, device="cuda").transpose(-2, -1)
        offs = torch.empty(4, dtype=torch.int32)
        graph = make_fx(lambda a, b, offs: gcdsl.ops.grouped_mm(a, b, offs, torch.float32) * 2)(a, b, offs)
        out = torch.ops.gcdsl.grouped_mm(a, b, offs, None)
    assert "gcdsl.grouped_mm.default" in graph.code
    assert (tuple(out.shape), out.dtype, out.device.type, out.stride()) == ((64, 256), torch.bfloat16, "cuda", (256, 1))


def test_fake_implementation_refuses_what_the_kernel_cannot_serve():
    from torch._subclasses.fake_tensor import FakeTensorMode

    with FakeTensorMode():
        a = torch.empty(64, 100, dtype=torch.bfloat16, device="cuda")
        b = torch.empty(4, 256, 100, dtype=torch.bfloat16, device="cuda").transpose(-2, -1)
        with pytest.raises(GcdslError) as info:
            torch.ops.gcdsl.grouped_mm(a, b, torch.empty(4, dtype=torch.int32), None)
    assert info.value.diag is Diag.BAD_OP_INPUT and "16-byte" in str(info.value)


def test_every_seeded_kernel_bug_still_applies():
    """tests/grouped_mm_mutations.py edits the kernels' and the rules' text: each edit must
    still find its text exactly once, or a refactor would leave a seeded bug unseeded."""
    import ast

    from tests import grouped_mm_mutations as mutations

    files = mutations.kernel_files()
    for name, (old, new) in {**mutations.MUTATIONS, **mutations.SANITIZER_MUTATIONS,
                             **mutations.RULE_MUTATIONS}.items():
        found = mutations.occurrences(old)
        assert sum(found.values()) == 1, name
        (path,) = found
        ast.parse(files[path].replace(old, new))  # a seeded bug, not a syntax error that fails anything


def test_a_cpu_offs_under_graph_capture_is_refused_at_the_calling_line(monkeypatch):
    launch = object.__new__(gm._Launch)
    launch.host_offs, launch.device = True, torch.device("cuda", 0)
    launch.problem = __import__("types").SimpleNamespace(offs_extent=64, launchable=True)
    monkeypatch.setattr(gm.torch.cuda, "is_current_stream_capturing", lambda: True)
    a, b, offs = _inputs()
    line = inspect.currentframe().f_lineno + 2
    with pytest.raises(GcdslError) as info:
        launch(a, b, offs, None)
    err = info.value
    assert err.diag is Diag.BAD_OP_INPUT and err.param == "offs" and "keep offs on the GPU" in err.hint
    assert err.location.filename == __file__ and err.location.line == line


def test_swiglu_op_traces_with_its_fake_and_checks_at_the_callers_line():
    """gcdsl::grouped_mm_swiglu: (T, N / 2) out from the fake implementation; what the
    epilogue cannot read (another case, b N-major, halves not a multiple of 64) is a gcdsl
    error naming the caller's line."""
    from torch._subclasses.fake_tensor import FakeTensorMode
    from torch.fx.experimental.proxy_tensor import make_fx

    def w13t(groups, n, k, **kw):  # the weights (G, N, K) as models store them, transposed
        return torch.empty(groups, n, k, dtype=torch.bfloat16, device="cuda", **kw).transpose(-2, -1)

    with FakeTensorMode():
        x = torch.empty(64, 128, dtype=torch.bfloat16, device="cuda")
        offs = torch.empty(4, dtype=torch.int32, device="cuda")
        graph = make_fx(lambda x, b, offs: gcdsl.ops.grouped_mm_swiglu(x, b, offs))(x, w13t(4, 256, 128), offs)
        out = torch.ops.gcdsl.grouped_mm_swiglu(x, w13t(4, 256, 128), offs, torch.float32)
        refusals = {  # what the message says: the call
            "its N mode contiguous": lambda: gcdsl.ops.grouped_mm_swiglu(x, torch.empty(4, 128, 256, dtype=torch.bfloat16,
                                                                          device="cuda"), offs),
            "multiple of 64": lambda: gcdsl.ops.grouped_mm_swiglu(x, w13t(4, 192, 128), offs),
            "takes the 2D x 3D case": lambda: gcdsl.ops.grouped_mm_swiglu(torch.empty(4, 64, 128, dtype=torch.bfloat16,
                                                                       device="cuda"), w13t(4, 256, 128), None),
        }
        errors = {}
        for what, call in refusals.items():
            with pytest.raises(GcdslError) as info:
                call()
            errors[what] = info.value
    assert "gcdsl.grouped_mm_swiglu.default" in graph.code
    assert (tuple(out.shape), out.dtype) == ((64, 128), torch.float32)
    for what, err in errors.items():
        assert err.diag is Diag.BAD_OP_INPUT and what in err.message and err.location.filename == __file__, (what, err)


@pytest.mark.parametrize("schedule, tile_n", [("cooperative", 256), ("pingpong", 128)])
def test_swiglu_epilogue_pairs_each_gate_with_its_up_column(schedule, tile_n):
    """For every thread, value v of output sub-tile s comes from the accumulators at (r, c)
    and (r, c + tile_n / 2) of the tile, c = 32 s + the value's column: the gate and the up
    projection of output column c. The kernel reads the pairs off thread 0."""
    import cutlass
    import cutlass.cute as cute
    import cutlass.utils.hopper_helpers as sm90
    from cutlass.tensor_utils import LayoutEnum

    from gcdsl.ops import hopper_grouped_gemm as hgg

    gemm = hgg.HopperGroupedGemm(hgg.GemmConfig(cutlass.BFloat16, cutlass.BFloat16, 8, 1536, 512, tile_n,
                                                schedule=schedule, activation="swiglu"))
    tile_m, out_n = gemm.tile_m, tile_n // 2
    threads = 128 if schedule == "pingpong" else 256
    wrong, seen = [], set()

    @cute.jit
    def probe():
        k_major = cute.nvgpu.OperandMajorMode.K
        tiled_mma = sm90.make_trivial_tiled_mma(cutlass.BFloat16, cutlass.BFloat16, k_major, k_major, cutlass.Float32,
                                                (1, 1, 1) if schedule == "pingpong" else (2, 1, 1),
                                                tiler_mn=(64, tile_n))
        tiled_r2s = cute.make_tiled_copy_S(
            sm90.get_smem_store_op(LayoutEnum.ROW_MAJOR, cutlass.BFloat16, cutlass.Float32),
            cute.make_tiled_copy_C_atom(
                cute.make_copy_atom(cute.nvgpu.warp.StMatrix8x8x16bOp(False, 4), cutlass.BFloat16), tiled_mma))
        pairs = gemm.sub_tile_accumulators(tiled_mma, tiled_r2s)
        assert len(pairs) == out_n // 32
        for t in cutlass.range_constexpr(0, threads, 37):
            acc = tiled_r2s.retile(tiled_mma.get_slice(t).partition_C(cute.make_identity_tensor((tile_m, tile_n))))
            sub = tiled_r2s.get_slice(t).partition_S(cute.make_identity_tensor((tile_m, 32, 1)))[(None, None, None, 0)]
            for s in cutlass.range_constexpr(out_n // 32):
                for v in cutlass.range_constexpr(cute.size(sub)):
                    row, column = sub[v][0], sub[v][1] + 32 * s
                    gate, up = pairs[s][v]
                    seen.add((row, column))
                    if cutlass.const_expr(tuple(acc[gate]) != (row, column)
                                          or tuple(acc[up]) != (row, column + out_n)):
                        wrong.append((t, s, v))

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        probe()
    assert not wrong, wrong[:5]
    assert {c for _, c in seen} == set(range(out_n))  # every output column, from the threads probed


def test_swiglu_backward_runs_through_grouped_mm_cases():
    """The SwiGLU op's backward formula under fake tensors (called as autograd would, without
    its engine, which wants a real GPU): the pre-activation recomputed by the plain op, both
    gradients by its cases, each laid out as its input."""
    import types

    from torch._subclasses.fake_tensor import FakeTensorMode

    with FakeTensorMode():
        x = torch.empty(64, 128, dtype=torch.bfloat16, device="cuda")
        w13 = torch.empty(4, 256, 128, dtype=torch.bfloat16, device="cuda")  # (G, 2I, K) as models keep it
        offs = torch.empty(4, dtype=torch.int32, device="cuda")
        ctx = types.SimpleNamespace(saved_tensors=(x, w13.transpose(-2, -1), offs), needs_input_grad=(True, True))
        grad_x, grad_b, _, _ = gm._swiglu_backward(ctx, torch.empty(64, 128, dtype=torch.bfloat16, device="cuda"))
        facts = (tuple(grad_x.shape), grad_x.stride(), tuple(grad_b.shape), grad_b.stride(), grad_b.dtype)
    # b's gradient as b lies: (G, K, N) K-major, the transpose of a contiguous (G, N, K)
    assert facts == ((64, 128), (128, 1), (4, 128, 256), (256 * 128, 1, 128), torch.bfloat16)


def test_forcing_reaches_the_launch_of_its_activation_only_and_ends_with_the_block(monkeypatch):
    """`forcing` hands its choices (schedule, tile_n, cluster_m, tile_order,
    mma_without_rows) to the launches the op picks itself, for the activation named, nested
    blocks restore the outer one, and nothing stays forced after."""
    seen = []

    class Launch:
        problem = types.SimpleNamespace(make_output=lambda device: None)

        def __call__(self, *args):
            return None

    def launch_for(a, b, offs, out_dtype, activation="none", forced=gm.NOTHING_FORCED):
        seen.append((activation, forced.schedule, forced.tile_n, forced.cluster_m, forced.tile_order,
                     forced.mma_without_rows))
        return Launch()

    monkeypatch.setattr(gm, "_launch_for", launch_for)
    a = types.SimpleNamespace(device="cpu")
    with gm.forcing("swiglu", "pingpong", 64):
        gm._grouped_mm_impl(a, None, None, None, activation="swiglu")
        gm._grouped_mm_impl(a, None, None, None)
        with gm.forcing("swiglu", "cooperative", 128, cluster_m=2):
            gm._grouped_mm_impl(a, None, None, None, activation="swiglu")
        with gm.forcing("none", tile_order="n"):
            gm._grouped_mm_impl(a, None, None, None)
        with gm.forcing("none", mma_without_rows=True):
            gm._grouped_mm_impl(a, None, None, None)
        gm._grouped_mm_impl(a, None, None, None, activation="swiglu")
    gm._grouped_mm_impl(a, None, None, None, activation="swiglu")
    assert seen == [("swiglu", "pingpong", 64, None, None, None), ("none", None, None, None, None, None),
                    ("swiglu", "cooperative", 128, 2, None, None), ("none", None, None, None, "n", None),
                    ("none", None, None, None, None, True),
                    ("swiglu", "pingpong", 64, None, None, None), ("swiglu", None, None, None, None, None)]
    assert gm._FORCED == {}
