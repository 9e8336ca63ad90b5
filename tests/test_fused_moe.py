"""gcdsl.ops.fused_moe: the MoE expert layer after the router.

Without a GPU: the routing bookkeeping (on CPU tensors), every check at the caller's
line, and the custom op traced with its fake implementation. On a Hopper GPU: the layer
against a float32 reference of the same layer, over token counts, k and the routings
that break layers (every slot on one expert, experts without tokens, a token naming an
expert twice), and a captured graph replayed after the routing changed in place.
"""
import functools
import importlib
import re
import types
import warnings

import pytest

torch = pytest.importorskip("torch")

import gcdsl.ops  # noqa: E402
from gcdsl import Diag, GcdslError  # noqa: E402
from benchmarks.moe_layer import moe_experts_reference  # noqa: E402  (float32, expert by expert)
from gcdsl.ops.fused_moe import (  # noqa: E402
    _check_ids, combine, fused_moe_decode, fused_moe_megakernel, fused_moe_pair, megakernel_split_k,
    megakernel_tile_n, route_slots,
)
from tests import sass  # noqa: E402
from tests.compile_cases import MOE_EXPERTS_CASES  # noqa: E402


def test_route_slots_sorts_slots_by_expert_stably_and_counts_them():
    ids = torch.tensor([[3, 0], [0, 3], [1, 1], [3, 2]])
    order, offs = route_slots(ids, experts=5)
    assert order.tolist() == [1, 2, 4, 5, 7, 0, 3, 6]  # expert 0: slots 1, 2; 1: 4, 5; 2: 7; 3: 0, 3, 6
    assert offs.dtype == torch.int32 and offs.tolist() == [2, 4, 5, 8, 8]  # expert 4 has none


def _combine_case(device, y_dtype, weight_dtype, tokens=6, k=3, hidden=40, seed=0):
    """Rows in expert order (as the down GEMM leaves them), every one distinct, the weights,
    `route`'s row of each slot, and the float32 sum each token must get from its own k rows."""
    from gcdsl.ops.fused_moe import route

    g = torch.Generator().manual_seed(seed)
    ids = torch.randint(0, 4, (tokens, k), generator=g)
    ids[min(1, tokens - 1)] = 2  # a token naming one expert k times
    weights = torch.rand(tokens, k, generator=g).to(weight_dtype)
    y = torch.randn(tokens * k, hidden, generator=g).to(y_dtype)
    order, _ = route_slots(ids, experts=4)
    slot_row = torch.empty_like(order)
    slot_row[order] = torch.arange(order.numel())
    ref = torch.stack([sum(weights[t, j].float() * y[slot_row[t * k + j]].float() for j in range(k))
                       for t in range(tokens)])
    row_of, _, _ = route(ids.to(device), 4)
    return y.to(device), row_of, weights.to(device), ref.to(device)


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16, torch.float32])
def test_combine_weighs_each_tokens_slots_from_the_rows_that_hold_them(dtype):
    y, row_of, weights, ref = _combine_case("cpu", dtype, torch.float32)
    out = combine(y, row_of, weights, torch.bfloat16)
    assert out.dtype == torch.bfloat16 and out.shape == ref.shape
    assert ((out.float() - ref).abs().max() / ref.abs().max()).item() < 1e-2


@pytest.mark.parametrize("tokens, k, hidden", [(1, 1, 8), (3, 2, 1040), (4, 8, 64)])
def test_combine_kernel_on_simulated_threads_weighs_each_tokens_rows_in_slot_order(tokens, k, hidden, monkeypatch):
    """The combine kernel's code run by simulated threads (`tests/simt.py`), a CTA of 128
    for each token and column chunk (two at H = 1040, the second with two vectors): every
    token's row, every 16-byte vector of it written, each the sum over its slots, in slot
    order, of the slot's weight times the row `row_of` names."""
    import random

    import numpy as np

    cutlass = pytest.importorskip("cutlass")
    from gcdsl.ops import combine_kernel
    from tests.simt import Shared, Threads, install, plain, vector_rows

    rng = random.Random(hidden)
    rows = list(range(tokens * k))
    rng.shuffle(rows)  # row_of: where each slot's row lies (expert order)
    weights = [rng.randint(-4, 4) / 2 for _ in rows]
    y = np.array([[rng.randint(-9, 9) for _ in range(hidden)] for _ in rows], dtype=np.float64)
    out = np.full((tokens, hidden), np.nan)
    kernel = combine_kernel.WeightedCombine(cutlass.BFloat16, cutlass.Float32, cutlass.BFloat16, hidden, k)
    monkeypatch.setattr(combine_kernel, "weigh_and_sum", plain(combine_kernel.weigh_and_sum))
    install(monkeypatch, combine_kernel)
    for token in range(tokens):
        for chunk in range(kernel.chunks):
            threads = Threads(combine_kernel.THREADS, block=(token, chunk, 0))
            threads.run(lambda: plain(combine_kernel.WeightedCombine.kernel)(
                kernel, vector_rows(y, kernel.vector), Shared.of(rows), Shared.of(weights),
                vector_rows(out, kernel.vector)))
    expected = np.zeros((tokens, hidden))
    for t in range(tokens):
        for j in range(k):
            expected[t] = expected[t] + weights[t * k + j] * y[rows[t * k + j]]
    assert (out == expected).all(), np.argwhere(out != expected)[:4]


@pytest.mark.parametrize("seed", range(16))
def test_route_kernel_on_simulated_threads_agrees_with_route_slots(seed, monkeypatch):
    """The routing kernel's code (one CTA, a thread a slot, counts in shared memory) run by
    64 simulated threads (`tests/simt.py`; MAX_SLOTS set to match): each slot's row, each
    row's token and the experts' ends as `route_slots` sorts them, every counter zeroed
    (more of them than threads), an id outside [0, E) trapping."""
    import random

    cutlass = pytest.importorskip("cutlass")
    from gcdsl.ops import route_kernel
    from tests.simt import Shared, Threads, Trap, install, plain

    threads_count = 64
    rng = random.Random(seed)
    k = rng.choice([1, 2, 8])
    tokens = rng.randint(1, threads_count // k)
    experts = rng.choice([1, 4, 16, 64])
    favourites = rng.sample(range(experts), min(experts, rng.choice([1, 2, experts])))
    ids = [rng.choice(favourites) for _ in range(tokens * k)]
    zero_count = rng.choice([1, threads_count, 150])
    install(monkeypatch, route_kernel)
    monkeypatch.setattr(route_kernel, "MAX_SLOTS", threads_count)

    def route(ids):
        threads = Threads(threads_count)
        threads.storage = types.SimpleNamespace(counts=Shared(experts, -5), starts=Shared(experts),
                                                slot_expert=Shared(threads_count))
        row_of, token, offs, zeros = Shared(len(ids)), Shared(len(ids)), Shared(experts), Shared(zero_count, -7)
        kernel = route_kernel.RouteSlots(experts, cutlass.Int64)
        kernel.shared_storage = "the struct `__call__` makes (`threads.storage` stands in for it)"
        threads.run(lambda: plain(route_kernel.RouteSlots.kernel)(
            kernel, Shared.of(ids), row_of, token, offs, zeros, len(ids), k, zero_count))
        return row_of, token, offs, zeros

    row_of, token, offs, zeros = route(ids)
    order, expected_offs = route_slots(torch.tensor(ids).view(tokens, k), experts)
    order = order.tolist()
    assert zeros == [0] * zero_count
    assert row_of == [order.index(slot) for slot in range(len(ids))]
    assert token == [slot // k for slot in order] and offs == expected_offs.tolist()
    bad = list(ids)
    bad[rng.randrange(len(bad))] = rng.choice([-1, experts])
    with pytest.raises(Trap, match="topk_ids holds an id"):
        route(bad)


@pytest.mark.gpu
@pytest.mark.parametrize("y_dtype, weight_dtype, out_dtype", [
    (torch.bfloat16, torch.float32, torch.bfloat16), (torch.float16, torch.float16, torch.float16),
    (torch.float32, torch.float32, torch.bfloat16), (torch.bfloat16, torch.bfloat16, torch.float32)])
@pytest.mark.parametrize("tokens, k, hidden", [(1, 1, 8), (6, 3, 40), (64, 8, 2048), (300, 2, 1032),
                                               (129, 8, 7168)])
def test_combine_kernel_against_float32(y_dtype, weight_dtype, out_dtype, tokens, k, hidden):
    """The kernel (its result NaN until written): a column past every 1024-column chunk
    (1032, 40), H below one chunk, k of 1 to 8, every type pair the layer makes."""
    y, row_of, weights, ref = _combine_case("cuda", y_dtype, weight_dtype, tokens, k, hidden, seed=tokens)
    out = combine(y, row_of, weights, out_dtype)
    assert out.dtype == out_dtype and not out.isnan().any()
    assert ((out.float() - ref).abs().max() / ref.abs().max()).item() < 1e-2


@pytest.fixture(scope="module")
def experts_kernels(compile_cases):
    return compile_cases("sm_90a", "gcdsl", tuple(MOE_EXPERTS_CASES))


@pytest.mark.parametrize("case", ["route_slots_e128_i64", "route_slots_e1024_i32"])
def test_route_kernel_is_one_cta_of_counts_in_shared_memory_that_traps_on_a_bad_id(experts_kernels, case):
    """The routing in one kernel: the slots counted by shared-memory atomics (nothing atomic
    in global memory: the order is each thread's own count, so the sort is stable), three
    barriers between its steps, and a trap for an id below 0 and for one of E or more."""
    from gcdsl import ptx

    text = experts_kernels.ptx(case)
    ptx.single_entry(text)
    assert text.count("atom.shared.add") == 1 and "atom.global" not in text and "red.global" not in text
    assert text.count("bar.sync") == 3 and text.count("trap;") == 2
    formats = " ".join(ptx.format_strings(text))
    assert "an id below 0" in formats and "an id of E or more" in formats


@pytest.mark.parametrize("case, loads, store", [("combine_bf16_h2048_k8", 8, "st.global.v4.b32"),
                                                ("combine_f32_h4096_k2", 2, "st.global.v2.b32")])
def test_combine_kernel_reads_each_row_in_16_byte_loads_all_in_flight(experts_kernels, case, loads, store):
    """A thread: k 16-byte loads of y, all issued before the first sum (no load waits on
    another), one vector store of the result, k fp32 FMAs a column; no local memory."""
    from gcdsl import ptx

    text = experts_kernels.ptx(case)
    ptx.single_entry(text)
    body = text[text.index("ld.global.v4"):]
    assert text.count("ld.global.v4.b32") == loads and re.findall(r"st\.global\.v\d\.b32", text) == [store]
    assert "fma.rn.f32" not in body[:body.rindex("ld.global.v4")], "a sum before the last row's load"
    assert "ld.local" not in text and "st.local" not in text


DECODE_CASES = ["decode_e128_h2048_i768_s8", "decode_e128_h2048_i768_s16", "decode_e32_h7168_i2048_s32",
                "decode_e8_h4096_i14336_s2", "decode_e128_h2048_i768_s8_early_prefetch"]
# the builds that stage their down rows in shared memory (every expert a slot reaches: Qwen3's at one token)
STAGED_DECODE_CASES = ["decode_e128_h2048_i768_s8", "decode_e128_h2048_i768_s8_early_prefetch"]
# ptxas's spills (local stores and loads in SASS) of each build, at most: none in the build
# `fused_moe` runs at Qwen3's two tokens; at one token, where every expert is staged and no
# down row is read through L2, one register kept across the two-row gate-up GEMVs' loop;
# a few in the builds only `fused_moe_decode` reaches
DECODE_SPILLS = {"decode_e128_h2048_i768_s8": 2, "decode_e128_h2048_i768_s16": 0, "decode_e32_h7168_i2048_s32": 6,
                 "decode_e8_h4096_i14336_s2": 6, "decode_e128_h2048_i768_s8_early_prefetch": 2}


@pytest.mark.parametrize("case", DECODE_CASES)
def test_decode_kernel_streams_weights_in_16_byte_loads_and_meets_at_one_barrier(experts_kernels, case):
    """One kernel; its weights in 16-byte loads, no local memory; it waits for the grid
    before it (the router's) before it reads anything; it checks the ids (the routing
    kernel's two traps) before it reads a weight; at the barrier between its GEMVs one
    acq_rel add of the CTA's share, then an acquire spin on the counter's top bit
    (`_assert_one_grid_wait_and_a_flip_barrier`); its down rows asked of L2 to keep
    between the add and the wait (or, early, before its gate-up GEMVs); three traps with messages;
    where they fit, down rows copied into shared memory while the gate-up GEMVs run."""
    from gcdsl import ptx

    text = experts_kernels.ptx(case)
    ptx.single_entry(text)
    assert text.count("ld.global.v4") >= 4 and "ld.local" not in text and "st.local" not in text
    _assert_one_grid_wait_and_a_flip_barrier(text, case)
    assert text.count("trap;") == 3
    formats = " ".join(ptx.format_strings(text))
    assert "an id below 0" in formats and "an id of E or more" in formats and "waited 20 s" in formats
    assert text.index("trap;") < text.index("ld.global.v4")
    add = text.index("atom.global.acq_rel")
    prefetch = text.index("prefetch.global.L2::evict_last")
    if case.endswith("_early_prefetch"):
        assert prefetch < text.index("ld.global.v4")
    else:
        assert add < prefetch < text.index("ld.acquire.gpu")
    # Qwen3's down rows staged: one bulk copy (in a loop over the experts) before the
    # gate-up loads, on an mbarrier the down GEMVs wait on after the grid barrier and
    # before they read shared memory; the others' are more than shared memory holds
    copies = re.findall(r"cp\.async\.bulk\.[^ ]*", text)
    if case in STAGED_DECODE_CASES:
        assert copies == ["cp.async.bulk.shared::cluster.global.mbarrier::complete_tx::bytes"], copies
        wait = text.index("mbarrier.try_wait")
        assert text.index("mbarrier.arrive.expect_tx") < text.index("cp.async.bulk") < text.index("ld.global.v4")
        assert text.rindex("ld.acquire.gpu") < wait < text.index("ld.shared.v4")
    else:
        assert copies == [] and "mbarrier" not in text


# the streamed decode builds (`decode_ring`) and ptxas's spills of each, at most: at
# DeepSeek-V3's one token one 64-bit value stored before the two-row gate-up items and
# loaded after them (outside their loop)
STREAMED_DECODE_SPILLS = {"decode_e128_h2048_i768_s8_streamed": 0, "decode_e128_h2048_i768_s16_streamed": 0,
                          "decode_e32_h7168_i2048_s8_streamed": 2, "decode_e8_h4096_i14336_s2_streamed": 0}


@pytest.mark.parametrize("case", STREAMED_DECODE_SPILLS)
def test_streamed_decode_kernel_reads_its_weights_from_a_ring_refilled_only_after_a_cta_barrier(experts_kernels,
                                                                                               case):
    """The streamed decode build (`decode_ring`): one kernel; its weight rows in bulk
    copies, each counted on a buffer's mbarrier (its bytes expected first), none asked of
    L2; the gate-up items (two copies: gate rows, up rows) and the down items (one) issued
    at the ring's start, after each of the three batch sizes' gate-up items and after
    each group of down items; no buffer refilled between a wait for an item and the CTA
    barrier after it (the buffer would be overwritten while warps still read it); the
    same grid barrier as the default build; spills as STREAMED_DECODE_SPILLS says."""
    from gcdsl import ptx

    text = experts_kernels.ptx(case)
    ptx.single_entry(text)
    assert len(sass.spills(experts_kernels.sass(case))) <= STREAMED_DECODE_SPILLS[case]
    assert "prefetch.global.L2" not in text and text.count("trap;") == 3
    copies = re.findall(r"cp\.async\.bulk\.[^ ]*", text)
    assert copies == ["cp.async.bulk.shared::cluster.global.mbarrier::complete_tx::bytes"] * 15, copies
    assert text.count("mbarrier.arrive.expect_tx") == 10  # (five sites, a gate-up and a down item's each)
    for issue in re.findall(r"mbarrier\.arrive\.expect_tx(?:(?!mbarrier\.arrive).)*", text, re.S):
        assert 1 <= issue.count("cp.async.bulk") <= 2, issue  # (a site's copies, after their bytes are expected)
    for after_wait in re.findall(r"mbarrier\.try_wait(?:(?!mbarrier\.try_wait).)*?cp\.async\.bulk", text, re.S):
        assert "bar.sync" in after_wait, after_wait[-2000:]
    _assert_one_grid_wait_and_a_flip_barrier(text, case)
    assert text.index("mbarrier.try_wait") < text.index("ld.shared.v4")


def _assert_one_grid_wait_and_a_flip_barrier(text: str, case: str) -> None:
    """A decode build's PTX: the wait for the grid before it, first of all (before any
    global load); then at its grid barrier one acq_rel add of the CTA's share (CTA 0's
    2^31 - (CTAs - 1), each other's one: 2^31 in all, the last flipping bit 31 and
    leaving the low bits zero), then acquire loads while bit 31 of what they load is
    that of the counter before the add; no other atomic, and no store to the counter:
    nothing resets it."""
    ctas = MOE_EXPERTS_CASES[case]()[0].ctas
    assert text.count("griddepcontrol.wait;") == 1 and text.index("griddepcontrol.wait;") < text.index("ld.global")
    atoms = re.findall(r"atom\.[^ ]*", text)  # (an atom without a scope is GPU-scoped)
    assert atoms == ["atom.global.acq_rel.add.u32"], atoms
    arrive = re.search(r"selp\.b32\s+(%r\d+), (\d+), 1, %p\d+;\s+"
                       r"atom\.global\.acq_rel\.add\.u32\s+(%r\d+), \[(%rd\d+)\], \1;", text)
    assert arrive and int(arrive.group(2)) == 2**31 - (ctas - 1), (arrive and arrive.group(2), ctas)
    share, before, counter = arrive.group(1), arrive.group(3), arrive.group(4)
    after = re.search(rf"add\.s32\s+(%r\d+), {before}, {share};\s+xor\.b32\s+(%r\d+), \1, {before};"
                      rf"\s+setp\.gt\.s32\s+%p\d+, \2, -1;", text[arrive.end():])
    assert after, "the CTA whose share flips bit 31 passes without a load"
    loads = re.findall(rf"ld\.acquire\.gpu\.global\.b32\s+(%r\d+), \[{counter}\];", text)
    assert len(loads) == 1 and text.index("ld.acquire.gpu") > arrive.end(), loads
    spin = re.search(rf"xor\.b32\s+(%r\d+), {loads[0]}, {before};\s+setp\.gt\.s32\s+(%p\d+), \1, -1;"
                     rf"\s+@\2 bra", text)
    assert spin, "the spin goes on while bit 31 is that of the counter before the add"
    assert not re.search(rf"st\.global\.[^\n]*\[{counter}(\+\d+)?\]", text)


@pytest.mark.parametrize("case", DECODE_CASES)
def test_decode_kernel_spills_no_more_registers_than_its_plan_allows(experts_kernels, case):
    """The register plan (`REGISTERS` of a lane's 128 for its sums and loads in flight)
    holds in SASS: ptxas spills no more than DECODE_SPILLS says. A build that compiles a
    path it cannot run (the down rows through L2 where every expert is staged) spills
    there."""
    spills = sass.spills(experts_kernels.sass(case))
    assert len(spills) <= DECODE_SPILLS[case], "\n".join(spills)


@pytest.mark.parametrize("case", [c for c in MOE_EXPERTS_CASES if not c.startswith("decode_")])
def test_expert_layer_kernels_spill_nothing_and_keep_descriptor_addresses_uniform(experts_kernels, case):
    """The one kernel, the routing kernel and the combine kernel in SASS: no spills, and no
    TMA descriptor address moved by a predicated R2UR (the one kernel's per-lane loads of
    x's rows move their coordinates so, in a loop over the lanes, never the descriptor)."""
    text = experts_kernels.sass(case)
    assert not sass.spills(text)
    assert not sass.predicated_descriptor_moves(text)
    assert bool(sass.tma_instructions(text)) == case.startswith("moe_experts_")


def test_route_falls_back_to_torchs_kernels_off_the_gpu_and_agrees_with_route_slots():
    from gcdsl.ops.fused_moe import route

    ids = torch.tensor([[3, 0], [0, 3], [1, 1], [3, 2]])
    row_of, token, offs = route(ids, experts=5)
    order = route_slots(ids, 5)[0]
    assert row_of.dtype == torch.int32 and row_of[order].tolist() == list(range(8))
    assert token.tolist() == (order // 2).tolist() and offs.tolist() == [2, 4, 5, 8, 8]


@pytest.mark.parametrize("case, wgmmas", [("moe_experts_e128_h2048_i768", 16), ("moe_experts_e8_h200_i64", 12),
                                           ("moe_experts_e8_h4096_i14336_t256_split4", 16),
                                           ("moe_experts_e8_h4096_i14336_t256_split4_stagger", 16)])
def test_megakernel_is_one_kernel_with_seven_descriptors_and_ordered_hand_offs(experts_kernels, case, wgmmas):
    """Both GEMMs and the combine in one kernel: seven TMA descriptors in parameter space (x's rows, w1,
    act stored, act loaded in whole tiles and in short boxes, w2, y), none rewritten, no
    local loads or stores, the WGMMAs of each GEMM's first k-tile and of its loop (none when K is
    one k-tile, I = 64 in the small case). The hand-off between them in order: a gate-up tile's
    storing thread waits for its stores to be written, fences the proxies, then counts
    (release); a down tile's producer spins on acquire loads, then fences, then loads."""
    from gcdsl import ptx

    text = experts_kernels.ptx(case)
    entry = ptx.single_entry(text)
    assert len([p for p in entry.params if p.size == 128 and p.align == 64]) == 7
    assert "tensormap.replace" not in text and "fence.proxy.tensormap" not in text
    # the one local buffer is the empty argument list of the wait's trap message, never read or written
    assert re.findall(r"\.local \.align \d+ \.b8\s+\w+\[(\d+)\]", text) == ["8"]
    assert not re.search(r"\b(?:ld|st)\.local\b", text) and text.count("wgmma.mma_async") == wgmmas
    assert "trap;" in text and "%globaltimer" in text  # a wait that cannot end is a launch error, not a hang
    writer = re.search(r"cp\.async\.bulk\.wait_group\s+0;\s+fence\.proxy\.async\.global;(?:(?!\n\$L)[^;]*;){0,4}?"
                       r"\s*atom\.global\.release\.add", text)
    assert writer, "the count of a stored tile must follow the stores' completion and a proxy fence"
    # the loop: an acquire load, the time limit's check (and its trap), a branch back while short
    spin = re.search(r"(\$L__BB\d+_\d+):\s+ld\.acquire\.gpu\.global\.b32[^;]*;.*?\btrap;.*?bra\s+\1;\s+"
                     r"\$L__BB\d+_\d+:\s+fence\.proxy\.async\.global;", text, re.S)
    assert spin, "a down tile's loads must follow an acquire spin and a proxy fence"
    assert text.count("atom.global.release.add") == 1 and text.count("fence.proxy.async.global") == 3
    # the combine: a down tile's stores written and fenced, then a lane a row counts its token
    # (acquire and release), listing the token in shared memory when its count completes
    combine = re.search(r"cp\.async\.bulk\.wait_group\s+0;(?:(?!\n\$L)[^;]*;){0,3}?\s*(?:\$L__BB\d+_\d+:\s+)?"
                        r"fence\.proxy\.async\.global;.*?atom\.global\.acq_rel\.add\.u32.*?atom\.shared\.cta\.add",
                        text, re.S)
    assert combine and text.count("atom.global.acq_rel.add") == 1, "a token's count follows its row's stores"


@pytest.mark.parametrize("case, sub_tiles", [("moe_experts_e128_h2048_i768", 4),
                                             ("moe_experts_e8_h4096_i14336_t256_split4", 8)])
def test_down_tiles_hand_their_sub_tiles_to_the_store_warps_in_order(experts_kernels, case, sub_tiles):
    """A down tile's consumers hand each output sub-tile to the store warp through a ring of
    buffers (`Epilogue.hand_over_tile`): they wait for the buffer to be empty (an mbarrier),
    write it, fence it for TMA and arrive on its full mbarrier without waiting. The store
    warp waits on that, issues the sub-tile's TMA store (a reduce-add with K splits), waits
    for it to have read shared memory, and only then, the warp's lanes together, arrives
    on the buffer's empty mbarrier. Nothing else synchronises the two: no named barrier
    spans them."""
    text = experts_kernels.ptx(case)
    step = r"(?:(?!\bbar\.|mbarrier\.)[^;])*;"  # one instruction, no barrier
    handed = re.findall(rf"mbarrier\.try_wait\.parity[^;]*;((?:{step})*?)\s*fence\.proxy\.async\.shared::cta;"
                        rf"(?:{step}){{0,2}}?\s*mbarrier\.arrive\.shared\.b64", text)
    handed = [h for h in handed if re.search(r"\bstmatrix|\bst\.shared", h)]
    assert len(handed) == sub_tiles, "consumers: an empty buffer, their writes, a proxy fence, then the hand-off"
    store = r"cp\.(?:reduce\.)?async\.bulk\.tensor\.3d\.global\.shared::cta"
    stored = re.findall(rf"mbarrier\.try_wait\.parity[^;]*;((?:{step})*?)\s*cp\.async\.bulk\.wait_group\.read\s+0;"
                        rf"(?:{step}){{0,3}}?(?:\s*\$L__BB\d+_\d+:)?\s*bar\.warp\.sync\s+-1;(?:{step}){{0,3}}?\s*mbarrier\.arrive\.shared",
                        text)
    assert len(stored) == sub_tiles and all(len(re.findall(store, s)) == 1 for s in stored), \
        "store warp: a full buffer, its store, the store's read done, then the buffer given back"
    assert not re.search(r"bar\.(?:sync|arrive)\s+\d+, 352;", text)


@pytest.mark.parametrize("case", ["moe_experts_e128_h2048_i768", "moe_experts_e8_h200_i64",
                                  "moe_experts_e8_h4096_i14336_t256_split4", "moe_experts_e128_h2048_i768_trace"])
def test_megakernel_waits_for_the_routing_grid_before_it_touches_global_memory(experts_kernels, case):
    """The expert kernel starts while the routing kernel runs (programmatic stream
    serialization; that kernel lets it launch first thing): one `griddepcontrol.wait`, and
    before it nothing reads or writes global memory (the parameters and the descriptors'
    prefetch only; with phase stamps, the start's own stamp, in memory the routing never
    touches)."""
    text = experts_kernels.ptx(case)
    assert text.count("griddepcontrol.wait;") == 1
    before = text[:text.index("griddepcontrol.wait;")]
    touches = re.findall(r"\b(?:ld|st|atom|red)\.(?:\w+\.)*global\b[^;]*;|cp\.async\.bulk\.tensor[^;]*;", before)
    stamps = [t for t in touches if t.startswith("st.global.b64")] if case.endswith("_trace") else []
    assert touches == stamps and len(stamps) <= 1, touches
    route = experts_kernels.ptx("route_slots_e128_i64")
    assert route.count("griddepcontrol.launch_dependents;") == 1
    assert route.index("griddepcontrol.launch_dependents;") < route.index("ld.global")


@pytest.mark.parametrize("case", ["moe_experts_e128_h2048_i768", "moe_experts_e8_h200_i64"])
def test_gate_up_tiles_gather_x_by_rows_each_lane_loading_its_own(experts_kernels, case):
    """The gate-up tiles' A comes from x a row at a time: 2-D loads of one row's k-tile
    through x's descriptor (the first in parameter space), one per 32-row chunk of the
    tile (a 128-row tile: four), each issued by the lane that holds the row's index:
    no lane elected, no index shuffled, the four into rows 32 apart of the stage, all
    counted on one barrier. The token indices are read once a tile, a lane's four 32
    slots apart (Int64: 256 bytes; their low words, all a row index needs)."""
    from gcdsl import ptx

    text = experts_kernels.ptx(case)
    loads = list(re.finditer(r"cp\.async\.bulk\.tensor\.2d\.shared::cta\.global\.tile\.mbarrier::complete_tx::bytes "
                             r"\[(%r\d+)\], \[(%rd\d+), \{%r\d+, %r\d+\}\], \[(%r\d+)\];", text))
    assert len(loads) == 4, [m.group(0) for m in loads]
    assert len({(m.group(2), m.group(3)) for m in loads}) == 1, "one descriptor and one barrier"
    x_param = [p for p in ptx.single_entry(text).params if p.size == 128][0].name
    moved = re.search(rf"mov\.b64\s+(%rd\d+), {x_param};", text).group(1)
    assert re.search(rf"cvta\.param\.u64\s+{re.escape(loads[0].group(2))}, {re.escape(moved)};", text)
    for m in loads:  # the load's own block: no election, no shuffle
        block = text[text.rindex("$L__BB", 0, m.start()):m.start()]
        assert "elect.sync" not in block and "shfl.sync" not in block, block
    offsets = [re.search(rf"add\.s32\s+{re.escape(m.group(1))}, (%r\d+), (\d+);", text).groups() for m in loads]
    assert len({base for base, _ in offsets}) == 1
    row_bytes = 64 * 2
    assert [int(o) - int(offsets[0][1]) for _, o in offsets] == [32 * j * row_bytes for j in range(4)]
    first = re.findall(r"ld\.global\.b32\s+%r\d+, \[(%rd\d+)\];", text)
    assert any(all(f"[{base}+{offset}]" in text for offset in (256, 512, 768)) for base in first)


def test_staggered_k_order_changes_only_the_producers_coordinates(experts_kernels):
    """A staggered tile loads the same boxes through the same descriptors (only their k
    coordinate moves: its first k-tile is the tile's index modulo its k-tiles, a mask for
    the gate-up tiles' 64 and one remainder for a K split's, none per k-tile), and its
    consumers and epilogue are untouched: the same WGMMAs, stores and reduce-adds."""
    plain = experts_kernels.ptx("moe_experts_e8_h4096_i14336_t256_split4")
    text = experts_kernels.ptx("moe_experts_e8_h4096_i14336_t256_split4_stagger")
    for op in ("cp.async.bulk.tensor", "cp.reduce.async.bulk.tensor", "wgmma.mma_async", "elect.sync",
               "mbarrier.try_wait", "atom.global.release.add"):
        assert text.count(op) == plain.count(op), op
    assert text.count("rem.s32") + text.count("rem.u32") == plain.count("rem.s32") + plain.count("rem.u32") + 1


def test_a_traced_build_differs_only_by_its_phase_stamps(experts_kernels):
    """`trace=True` (for `megakernel_phases`) adds one read of the global timer and one
    64-bit store per phase, and nothing else: the same loads, WGMMAs, waits and hand-offs."""
    from gcdsl.ops.hopper_grouped_gemm import PHASES

    plain = experts_kernels.ptx("moe_experts_e128_h2048_i768")
    text = experts_kernels.ptx("moe_experts_e128_h2048_i768_trace")
    for op in ("cp.async.bulk.tensor", "wgmma.mma_async", "mbarrier.try_wait", "ld.acquire.gpu",
               "atom.global.release.add", "fence.proxy.async.global"):
        assert text.count(op) == plain.count(op), op
    assert text.count("%globaltimer") == plain.count("%globaltimer") + len(PHASES)
    stores = r"\bst\.global\.[bsu]64\b"
    assert len(re.findall(stores, text)) == len(re.findall(stores, plain)) + len(PHASES)


def test_a_traced_decode_build_differs_only_by_its_phase_stamps(experts_kernels):
    """The decode kernel with `trace=True` (for `decode_phases`) adds one read of the global
    timer and one 64-bit store per phase, and two CTA barriers (before the gate-up and
    the end stamps), and nothing else: the same loads, copies, atomics and waits."""
    from gcdsl.ops.decode_kernel import PHASES

    plain = experts_kernels.ptx("decode_e128_h2048_i768_s8")
    text = experts_kernels.ptx("decode_e128_h2048_i768_s8_trace")
    for op in ("ld.global.v4", "ld.shared.v4", "cp.async.bulk", "mbarrier.try_wait", "ld.acquire.gpu",
               "atom.global.release.add", "griddepcontrol.wait", "prefetch.global.L2", "trap;"):
        assert text.count(op) == plain.count(op), op
    assert text.count("%globaltimer") == plain.count("%globaltimer") + len(PHASES)
    stores = r"\bst\.global\.[bsu]64\b"
    assert len(re.findall(stores, text)) == len(re.findall(stores, plain)) + len(PHASES)
    assert text.count("bar.sync") == plain.count("bar.sync") + 2


def test_k_splits_add_the_down_tiles_sums_and_store_the_gate_up_tiles(experts_kernels):
    """With K splits the down tiles' sub-tiles (8 of 32 fp32 columns, a 256-wide tile) go out
    as TMA reduce-adds into the output, the gate-up tiles' (4: SwiGLU halves the tile) as
    plain stores; and the K ranges cost no division (the split count is a constant)."""
    text = experts_kernels.ptx("moe_experts_e8_h4096_i14336_t256_split4")
    assert re.findall(r"cp\.reduce\.async\.bulk\.tensor\.\w+\.global\.shared::cta\.add\.tile\.bulk_group", text) == [
        "cp.reduce.async.bulk.tensor.3d.global.shared::cta.add.tile.bulk_group"] * 8
    assert len(re.findall(r"cp\.async\.bulk\.tensor\.3d\.global\.shared::cta", text)) == 4
    # The reduce-add copy elects its lane itself: a second elect around it (as around a
    # plain store) would have one lane wait for the whole warp, and the kernel hang.
    wait = r"(?:bar\.sync|mbarrier\.try_wait)"  # (the store warp waits for its buffer on an mbarrier)
    for barrier_to_store in re.findall(rf"{wait}[^;]*;(?:(?!{wait}).)*?cp\.reduce\.async", text, re.S):
        assert barrier_to_store.count("elect.sync") == 1, "one elect.sync between the barrier and a reduce-add store"
    plain = experts_kernels.ptx("moe_experts_e128_h2048_i768")
    assert text.count("div.s32") + text.count("rem.s32") == plain.count("div.s32") + plain.count("rem.s32")


def _layer(experts=8, hidden=128, inter=128, tokens=16, k=2, device="cuda", dtype=torch.bfloat16):
    return (torch.empty(tokens, hidden, dtype=dtype, device=device),
            torch.empty(experts, 2 * inter, hidden, dtype=dtype, device=device),
            torch.empty(experts, hidden, inter, dtype=dtype, device=device),
            torch.empty(tokens, k, dtype=torch.float32, device=device),
            torch.empty(tokens, k, dtype=torch.int64, device=device))


def test_checks_name_the_callers_line_and_the_parameter():
    from torch._subclasses.fake_tensor import FakeTensorMode

    def empty(*shape, dtype=torch.bfloat16):
        return torch.empty(*shape, dtype=dtype, device="cuda")

    with FakeTensorMode():
        x, w1, w2, weights, ids = _layer()
        cases = {  # parameter: (the call's arguments, what the message says)
            "w2": ((x, w1, empty(8, 128, 64), weights, ids), "w2 (E, H, I)"),
            "w1": ((x, empty(8, 256, 128, dtype=torch.float16), w2, weights, ids), "all must be torch.bfloat16"),
            "topk_ids": ((x, w1, w2, weights, empty(16, 2, dtype=torch.float32)), "expected integers"),
            "topk_weights": ((x, w1, w2, empty(8, 2, dtype=torch.float32), ids), "both must be (T, k)"),
            "x": ((empty(16, 124), empty(8, 256, 124), empty(8, 124, 128), weights, ids), "H a multiple of 8"),
        }
        errors = {}
        for param, (args, _) in cases.items():
            with pytest.raises(GcdslError) as info:
                gcdsl.ops.fused_moe(*args)
            errors[param] = info.value
        with pytest.raises(GcdslError) as info:
            gcdsl.ops.fused_moe(*_layer(experts=2, k=3))
        errors["k"] = info.value
    for param, (_, says) in cases.items():
        err = errors[param]
        assert err.diag is Diag.BAD_OP_INPUT and err.param == param and says in err.message, (param, err)
        assert err.location.filename == __file__
    assert "k = 3 experts a token, more than the E = 2" in errors["k"].message


def test_the_one_kernel_form_refuses_what_it_cannot_read_at_the_callers_line():
    from torch._subclasses.fake_tensor import FakeTensorMode

    with FakeTensorMode():
        x, w1, w2, weights, ids = _layer()
        w1_h_major = torch.empty(8, 128, 256, dtype=w1.dtype, device=w1.device).transpose(1, 2)
        calls = {"w1": ((x, w1_h_major, w2, weights, ids), {}),
                 "tile_n": ((x, w1, w2, weights, ids), {"tile_n": 192}),
                 "split_k": ((x, w1, w2, weights, ids), {"split_k": 3}),  # I = 128: two k-tiles
                 "stagger_k": ((x, w1, w2, weights, ids), {"stagger_k": "yes"}),
                 "down_lead": ((x, w1, w2, weights, ids), {"down_lead": -1})}
        errors = {}
        for param, (args, options) in calls.items():
            with pytest.raises(GcdslError) as info:
                fused_moe_megakernel(*args, **options)
            errors[param] = info.value
    for param, err in errors.items():
        assert err.param == param and err.location.filename == __file__, (param, err)
    assert "contiguous" in errors["w1"].message and "fused_moe_pair" in errors["w1"].hint
    assert "64, 128 or 256" in errors["tile_n"].message
    assert "split I = 128 into 1 to 2 ranges" in errors["split_k"].message
    assert "True, False or None" in errors["stagger_k"].message
    assert "integer of 0 or more" in errors["down_lead"].message


@pytest.mark.parametrize("experts, hidden, inter, slots, tile_n", [
    (128, 2048, 768, 8, 128),      # Qwen3 at one token: at most 48 gate-up tiles of 256 for 132 SMs
    (128, 2048, 768, 64, 128),     # at eight: 384, under three waves
    (128, 2048, 768, 512, 256),    # at 64: 768
    (32, 7168, 2048, 8, 128),      # DeepSeek-V3 at one token: 128
    (32, 7168, 2048, 64, 256),     # at eight: 512
    (8, 4096, 14336, 2, 256),      # Mixtral at one token: 224, but the down tiles in K splits at 256
    (8, 4096, 14336, 16, 256),     # at eight: 896
    (8, 4096, 192, 4096, 128),     # I not a multiple of 128: SwiGLU's 256-wide tile cannot split it
])
def test_the_one_kernels_tile_width_rule(experts, hidden, inter, slots, tile_n):
    assert megakernel_tile_n(experts, hidden, inter, slots, sms=132) == tile_n


def test_one_kernel_each_gemms_producer_consumers_and_store_warps_walk_its_own_schedule(monkeypatch):
    """The one kernel builds a schedule for each GEMM (gate-up tiles 2I wide, down tiles H
    wide: not the same tiles). Traced for sm_90a with each role's entry recorded: the
    gate-up GEMM's producer and consumers take one schedule, and the down GEMM's producer,
    consumers and store warps the other."""
    import cutlass.cute as cute

    from gcdsl.ops.hopper_grouped_gemm import consumers, epilogue, producer
    from gcdsl.ops.hopper_grouped_gemm.experts import MoeExperts

    walks = []
    for klass, role, schedule_argument in ((producer.Producer, "produce", 9), (consumers.Consumers, "consume", 8),
                                           (epilogue.Epilogue, "store_handed_tiles", 5)):
        def recorder(self, *args, _role=role, _original=getattr(klass, role), _at=schedule_argument, **kwargs):
            walks.append((self, _role, id(args[_at])))
            return _original(self, *args, **kwargs)

        monkeypatch.setattr(klass, role, recorder)
    kernel, args = MOE_EXPERTS_CASES["moe_experts_e8_h200_i64"]()
    assert isinstance(kernel, MoeExperts)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        cute.compile(kernel, *args)
    schedules = {}
    for gemm, role, schedule in walks:
        schedules.setdefault(gemm is kernel.down, {})[role] = schedule
    assert set(schedules[False]) == {"produce", "consume"} and len(set(schedules[False].values())) == 1
    assert set(schedules[True]) == {"produce", "consume", "store_handed_tiles"}
    assert len(set(schedules[True].values())) == 1
    assert schedules[False]["produce"] != schedules[True]["produce"]


@pytest.mark.parametrize("lead", [0, 1, 2, 3])
@pytest.mark.parametrize("ctas", [1, 2, 3, 5, 8, 132])
def test_the_one_kernels_down_deal_gives_each_item_to_one_cta_and_evens_out_the_ctas(ctas, lead):
    """CTA c: gate-up items c, c + CTAs, ..., then the down items `DownDeal` gives it, the
    walk the kernel's roles make: each down item dealt once, each CTA's in rising order
    (the schedule's walk needs it), and, once there are down items enough for the lead,
    the CTAs' loads, a gate-up item weighing `lead` down items (1 without a lead),
    differ by one at most."""
    from gcdsl.ops.hopper_grouped_gemm.experts import DownDeal

    def walk(cta, gate_up, down):
        deal, items = DownDeal(cta, ctas, gate_up, lead), []
        item = deal.first
        while item < down:
            items.append(item)
            item = deal.next(item)
        return items

    counts = sorted({0, 1, ctas - 1, ctas, ctas + 1, 2 * ctas + 3, 7 * ctas // 3, 5 * ctas + 2})
    for gate_up in counts:
        for down in counts:
            dealt = [walk(c, gate_up, down) for c in range(ctas)]
            assert sorted(item for items in dealt for item in items) == list(range(down)), (gate_up, down)
            assert all(items == sorted(items) for items in dealt), (gate_up, down)
            if down >= (ctas - gate_up % ctas) * lead:
                loads = [len(range(c, gate_up, ctas)) * max(lead, 1) + len(dealt[c]) for c in range(ctas)]
                assert max(loads) - min(loads) <= 1, (gate_up, down, loads)


def test_the_one_kernels_down_lead_rule():
    from gcdsl.ops.fused_moe import megakernel_down_lead

    assert megakernel_down_lead(128, 2048, 768, 64, 132, 128, 1) == 2     # Qwen3-30B-A3B at 8 tokens: 768 gate-up tiles
    assert megakernel_down_lead(128, 2048, 768, 512, 132, 256, 1) == 2    # at 64
    assert megakernel_down_lead(32, 7168, 2048, 64, 132, 256, 1) == 3     # DeepSeek-V3 at 8 tokens: 512
    assert megakernel_down_lead(32, 7168, 2048, 8, 132, 128, 1) == 0      # at one: 256, under two rounds
    assert megakernel_down_lead(8, 4096, 14336, 16, 132, 256, 1) == 0     # Mixtral-8x7B at 8 tokens: H below I
    assert megakernel_down_lead(8, 4096, 14336, 2, 132, 256, 4) == 0      # at one: 224 gate-up tiles


def test_the_one_kernels_stagger_rule():
    from gcdsl.ops.fused_moe import megakernel_stagger_k

    assert [megakernel_stagger_k(slots) for slots in (1, 2, 8, 16, 64, 65, 128, 512, 32768)] == [True] * 5 + [False] * 4


@pytest.mark.parametrize("experts, hidden, inter, slots, tile_n, split_k", [
    (8, 4096, 14336, 2, 256, 4),    # Mixtral at one token: 32 down tiles for 132 SMs
    (8, 4096, 14336, 16, 256, 1),   # at eight: 128
    (8, 4096, 2048, 2, 256, 1),     # I too short for 32 k-tiles a split
    (128, 2048, 768, 8, 128, 1),    # Qwen3 at one token: 128 tiles, I = 768
    (32, 7168, 2048, 8, 256, 1),    # DeepSeek-V3 at one token: 224 tiles
    (8, 4096, 4096, 2, 256, 2),     # I = 4096: two splits of 32 k-tiles
])
def test_the_one_kernels_k_split_rule(experts, hidden, inter, slots, tile_n, split_k):
    assert megakernel_split_k(experts, hidden, inter, slots, 132, tile_n) == split_k


def test_fused_moe_runs_the_one_kernel_up_to_its_slots_and_the_pair_above(monkeypatch):
    """The form `fused_moe` picks: the one kernel for contiguous weights up to
    ONE_KERNEL_MAX_SLOTS token slots, the pair above them and for other weights."""
    fm = importlib.import_module("gcdsl.ops.fused_moe")
    monkeypatch.setattr(fm, "_one_kernel", lambda *args: "one kernel")
    monkeypatch.setattr(fm, "_pair", lambda *args: "pair")
    w1, w2 = torch.zeros(4, 128, 64), torch.zeros(4, 64, 64)
    for tokens, k, expected in ((1, 8, "one kernel"), (64, 8, "one kernel"), (fm.ONE_KERNEL_MAX_SLOTS, 1, "one kernel"),
                                (65, 8, "pair"), (fm.ONE_KERNEL_MAX_SLOTS + 1, 1, "pair")):
        ids = torch.zeros(tokens, k, dtype=torch.int64)
        assert fm._fused_moe_impl(torch.zeros(tokens, 64), w1, w2, torch.ones(tokens, k), ids) == expected
    ids = torch.zeros(1, 8, dtype=torch.int64)
    assert fm._fused_moe_impl(torch.zeros(1, 64), w1, w2.transpose(1, 2).contiguous().transpose(1, 2),
                              torch.ones(1, 8), ids) == "pair"


def test_fused_moe_runs_the_decode_kernel_up_to_its_slots_where_h_and_i_allow(monkeypatch):
    """Contiguous weights, H and I multiples of 256, at most DECODE_MAX_SLOTS slots whose
    experts hold at most DECODE_MAX_WEIGHT_BYTES: the decode kernel; else the one
    kernel's and the pair's rule. (Qwen3's experts at 1 and 2 tokens: the decode kernel;
    DeepSeek-V3's and Mixtral's at one: the one kernel.)"""
    fm = importlib.import_module("gcdsl.ops.fused_moe")
    monkeypatch.setattr(fm, "_decode", lambda *args: "decode")
    monkeypatch.setattr(fm, "_one_kernel", lambda *args: "one kernel")
    monkeypatch.setattr(fm, "_pair", lambda *args: "pair")
    for hidden, inter, tokens, k, expected in ((256, 256, 1, 8, "decode"), (512, 768, 2, 8, "decode"),
                                               (256, 256, fm.DECODE_MAX_SLOTS, 1, "decode"),
                                               (256, 256, fm.DECODE_MAX_SLOTS + 1, 1, "one kernel"),
                                               (256, 192, 1, 8, "one kernel"), (200, 256, 1, 8, "one kernel")):
        w1, w2 = torch.zeros(8, 2 * inter, hidden), torch.zeros(8, hidden, inter)
        ids = torch.zeros(tokens, k, dtype=torch.int64)
        got = fm._fused_moe_impl(torch.zeros(tokens, hidden), w1, w2, torch.ones(tokens, k), ids)
        assert got == expected, (hidden, inter, tokens, k)
    meta = dict(device="meta", dtype=torch.bfloat16)
    for experts, hidden, inter, tokens, k, expected in ((128, 2048, 768, 1, 8, "decode"),
                                                        (128, 2048, 768, 2, 8, "decode"),
                                                        (32, 7168, 2048, 1, 8, "one kernel"),
                                                        (8, 4096, 14336, 1, 2, "one kernel")):
        w1, w2 = torch.empty(experts, 2 * inter, hidden, **meta), torch.empty(experts, hidden, inter, **meta)
        ids = torch.zeros(tokens, k, dtype=torch.int64, device="meta")
        x = torch.empty(tokens, hidden, **meta)
        assert fm._fused_moe_impl(x, w1, w2, torch.empty(tokens, k, device="meta"), ids) == expected
    w1, w2 = torch.zeros(8, 512, 256), torch.zeros(8, 256, 256)
    assert fm._fused_moe_impl(torch.zeros(1, 256), w1, w2.transpose(1, 2).contiguous().transpose(1, 2),
                              torch.ones(1, 8), torch.zeros(1, 8, dtype=torch.int64)) == "pair"


def test_the_decode_form_refuses_what_it_cannot_take_at_the_callers_line():
    from torch._subclasses.fake_tensor import FakeTensorMode

    with FakeTensorMode():
        x, w1, w2, weights, ids = _layer(hidden=256, inter=256, tokens=1, k=8)
        w2_t = torch.empty(8, 256, 256, dtype=w2.dtype, device="cuda").transpose(1, 2)  # stored (E, I, H)
        cases = [((x, w1, w2_t, weights, ids), "w2", "contiguous"),
                 (_layer(hidden=256, inter=192, tokens=1, k=8), "w1", "steps of 256"),
                 (_layer(hidden=256, inter=256, tokens=5, k=8), "topk_ids", "1 to 32")]
        errors = []
        for args, _, _ in cases:
            with pytest.raises(GcdslError) as info:
                fused_moe_decode(*args)
            errors.append(info.value)
        for staged in (-1, 2.5):
            with pytest.raises(GcdslError) as info:
                fused_moe_decode(x, w1, w2, weights, ids, staged_experts=staged)
            cases.append((None, "staged_experts", "a count of experts"))
            errors.append(info.value)
        for options in ({"streamed": 1}, {"streamed": True, "staged_experts": 2},
                        {"streamed": True, "early_prefetch": True}):
            with pytest.raises(GcdslError) as info:
                fused_moe_decode(x, w1, w2, weights, ids, **options)
            words = "True or False" if type(options["streamed"]) is int else "through the kernel's ring"
            cases.append((None, "streamed", words))
            errors.append(info.value)
    for (_, param, words), err in zip(cases, errors):
        assert err.param == param and words in err.message, err.message
        assert err.location.filename == __file__


def test_each_form_asks_for_a_hopper_gpu_before_it_compiles_or_launches(monkeypatch):
    """The decode kernel, the one kernel and the pair each check x's GPU first (an A100 or
    a B200 gets `require_hopper`'s error at the caller's line, not a failed compile)."""
    fm = importlib.import_module("gcdsl.ops.fused_moe")

    class Asked(Exception):
        pass

    asked = []

    def ask(device, param, op):
        asked.append((device.type, param, op))
        raise Asked

    monkeypatch.setattr(fm, "require_hopper", ask)
    x, w1, w2 = torch.zeros(1, 256), torch.zeros(8, 512, 256), torch.zeros(8, 256, 256)
    for form in (fm._decode, fm._one_kernel, fm._pair):
        with pytest.raises(Asked):
            form(x, w1, w2, torch.ones(1, 8), torch.zeros(1, 8, dtype=torch.int64))
    assert asked == [("cpu", "x", "fused_moe")] * 3


@pytest.mark.parametrize("n", [1, 2, 4, 8, 16, 32])
def test_decode_reduce_scatter_leaves_each_values_warp_total_in_the_lanes_that_store_it(n, monkeypatch):
    """`MoeDecode.reduce_scatter` traced over a warp simulated in numpy, an element a lane
    (`select_` picks lane by lane, a butterfly shuffle reads lane ^ offset): each lane
    ends with the warp's total of the value `held_value` names, and `first_holder` picks
    one lane for each of the n values."""
    import numpy as np

    from gcdsl.ops import decode_kernel

    lane = np.arange(32)
    monkeypatch.setattr(decode_kernel.cutlass, "select_", lambda pick, a, b: np.where(pick, a, b))
    monkeypatch.setattr(decode_kernel.cute.arch, "shuffle_sync_bfly", lambda value, offset: value[lane ^ offset])
    rng = np.random.default_rng(n)
    values = [rng.integers(-999, 999, 32).astype(np.float64) for _ in range(n)]  # (integers: exact sums)
    total = decode_kernel.MoeDecode.reduce_scatter(None, values, lane)
    held = decode_kernel.MoeDecode.held_value(lane, n)
    assert total.tolist() == [values[v].sum() for v in held]
    assert sorted(held[decode_kernel.MoeDecode.first_holder(lane, n)]) == list(range(n))


@pytest.mark.parametrize("seed", range(40))
def test_decode_route_on_a_simulated_warp_sorts_the_slots_by_expert_stably(seed, monkeypatch):
    """`MoeDecode.route`, the decode kernel's own sort of the slots, run by a warp simulated
    with a thread a lane (`tests/simt.py`) on router ids (k in {1, 2, 4, 8}, up to 32
    slots, many on one expert, a token naming one twice): each slot's sorted row, each
    sorted row's token, the experts with a slot in id order with their first row and
    count, against a stable sort; an id outside [0, E) traps."""
    import random

    cutlass = pytest.importorskip("cutlass")
    from gcdsl.ops import decode_kernel
    from tests.simt import Shared, Threads, Trap, install, plain

    rng = random.Random(seed)
    k = rng.choice([1, 2, 4, 8])
    tokens = rng.randint(1, decode_kernel.MAX_SLOTS // k)
    experts = rng.choice([k, 8, 16, 128])
    favourites = rng.sample(range(experts), min(experts, rng.choice([1, 2, 3, experts])))
    ids = [rng.choice(favourites) for _ in range(tokens * k)]
    kernel = decode_kernel.MoeDecode(cutlass.BFloat16, experts, 256, 256, k, tokens * k, cutlass.Int64, 132)
    install(monkeypatch, decode_kernel)

    def route(ids):
        warp = Threads(32)
        tables = [Shared(decode_kernel.MAX_SLOTS) for _ in range(5)] + [Shared(1)]
        warp.run(lambda: plain(decode_kernel.MoeDecode.route)(kernel, Shared.of(ids), *tables, warp.index()))
        return tables

    token, row_of, active_expert, active_first, active_count, active = route(ids)
    order = sorted(range(len(ids)), key=lambda slot: ids[slot])  # (Python's sort is stable)
    used = sorted(set(ids))
    assert row_of[:len(ids)] == [order.index(slot) for slot in range(len(ids))]
    assert token[:len(ids)] == [slot // k for slot in order]
    assert active[0] == len(used) and active_expert[:len(used)] == used
    assert active_count[:len(used)] == [ids.count(e) for e in used]
    assert active_first[:len(used)] == [sorted(ids).index(e) for e in used]
    bad = list(ids)
    bad[rng.randrange(len(bad))] = rng.choice([-1, experts])
    with pytest.raises(Trap, match="topk_ids holds an id"):
        route(bad)


@pytest.mark.parametrize("k", [1, 2, 8])
def test_decode_combine_on_simulated_threads_weighs_each_tokens_slots_in_order(k, monkeypatch):
    """`MoeDecode.combine`, the end of the decode kernel, run by the 512 threads of a CTA
    simulated on the CPU (`tests/simt.py`), in the first CTA and the last: each token's
    value in each of the CTA's rows of H the sum over its slots, in slot order, of the
    slot's weight times its sorted row of y, stored where that row of H lies."""
    import random

    import numpy as np

    cutlass = pytest.importorskip("cutlass")
    from gcdsl.ops import decode_kernel
    from tests.simt import Shared, Threads, install, matrix, plain, vector_rows

    rng = random.Random(k)
    tokens = decode_kernel.MAX_SLOTS // k // 2
    kernel = decode_kernel.MoeDecode(cutlass.BFloat16, 8, 256, 256, k, tokens * k, cutlass.Int64, 132)
    kernel.ab_dtype = float  # (the store's rounding to x's type, left out)
    rows = list(range(tokens * k))
    rng.shuffle(rows)
    weights = [rng.randint(-4, 4) / 2 for _ in rows]
    y = np.array([[rng.randint(-9, 9) for _ in range(kernel.rows)] for _ in rows], dtype=np.float64)
    out = np.full((tokens, 256), np.nan)
    expected = np.zeros((tokens, kernel.rows))  # (each CTA's rows of H: y holds a CTA's)
    for t in range(tokens):
        for j in range(k):
            expected[t] = expected[t] + weights[t * k + j] * y[rows[t * k + j]]
    install(monkeypatch, decode_kernel)
    for block in (0, kernel.blocks - 1):
        threads = Threads(decode_kernel.THREADS)
        threads.run(lambda: plain(decode_kernel.MoeDecode.combine)(
            kernel, matrix(y), Shared.of(rows), Shared.of(weights), vector_rows(out, kernel.vector),
            block * kernel.rows, threads.index()))
        columns = slice(block * kernel.rows, (block + 1) * kernel.rows)
        assert (out[:, columns] == expected).all(), np.argwhere(out[:, columns] != expected)[:4]


def _one_kernel_routing(rng, tokens: int, k: int, experts: int, heavy: int):
    """Ids with expert 0 in `heavy` of the slots (so that its rows span M-tiles) and the
    others' at random; the sorted row of each slot and the token of each sorted row
    (stable, as the route kernel sorts them); each expert's first row and slot count."""
    ids = [0] * heavy + [rng.randrange(experts) for _ in range(tokens * k - heavy)]
    rng.shuffle(ids)
    order = sorted(range(len(ids)), key=lambda slot: ids[slot])
    row_of = [0] * len(ids)
    for row, slot in enumerate(order):
        row_of[slot] = row
    counts = [ids.count(e) for e in range(experts)]
    starts = [sum(counts[:e]) for e in range(experts)]
    return row_of, [slot // k for slot in order], starts, counts


@pytest.mark.parametrize("k, split_k, hidden", [(1, 1, 256), (2, 1, 192), (8, 1, 256), (2, 2, 256)])
def test_one_kernel_combine_on_simulated_store_warps_finishes_each_token_once_all_its_rows_are_in(
        k, split_k, hidden, monkeypatch):
    """`Epilogue.finish_tokens`, the one kernel's combine, run by its three store warps
    simulated on the CPU (`tests/simt.py`) after each down tile's rows of y land, the
    tiles (and their K splits) in a random order as the CTAs would finish them: each
    token's columns of each column tile summed once, over its k slots in slot order, and
    only once every slot's row (every split's part of it) is in y; y's rows poisoned
    (NaN) until their tile stores them, out poisoned until the combine writes it;
    H = 192 leaves the second 128-column tile half outside out."""
    import random

    import numpy as np

    cutlass = pytest.importorskip("cutlass")
    from gcdsl.ops import combine_kernel
    from gcdsl.ops.hopper_grouped_gemm import epilogue
    from gcdsl.ops.hopper_grouped_gemm.config import FIRST_STORE_WARP, STORE_WARPS, TILE_M
    from gcdsl.ops.hopper_grouped_gemm.experts import MoeExperts
    from tests.simt import Shared, Threads, install, plain, vector_rows

    rng = random.Random(k * 10 + split_k)
    experts, tokens = 5, 150 // k
    down = MoeExperts(cutlass.BFloat16, experts, hidden, 128, k, tile_n=128, split_k=split_k).down
    vector = 128 // down.c_dtype.width
    row_of, token, starts, counts = _one_kernel_routing(rng, tokens, k, experts, heavy=140)
    weights = [rng.randint(-4, 4) / 2 for _ in row_of]
    y_final = np.array([[rng.randint(-9, 9) for _ in range(hidden)] for _ in token], dtype=np.float64)
    parts = [y_final] if split_k == 1 else [y_final - (half := np.floor(y_final / 2)), half]
    y = np.full_like(y_final, np.nan if split_k == 1 else 0.0)  # (split: a zeroed fp32 y the splits add into)
    out = np.full((tokens, hidden), np.nan)
    expected = np.zeros((tokens, hidden))
    for slot, row in enumerate(row_of):
        expected[slot // k] += weights[slot] * y_final[row]
    tiles = [(starts[e] + m * TILE_M, min(counts[e] - m * TILE_M, TILE_M), n, split)
             for e in range(experts) for m in range(-(-counts[e] // TILE_M))
             for n in range(down.n_tiles) for split in range(split_k)]
    rng.shuffle(tiles)
    assert any(rows == TILE_M for _, rows, _, _ in tiles)  # (expert 0's rows span two M-tiles)
    install(monkeypatch, epilogue)
    install(monkeypatch, combine_kernel)
    summed = []
    weigh_and_sum = plain(combine_kernel.weigh_and_sum)
    monkeypatch.setattr(epilogue, "weigh_and_sum", lambda *args: (summed.append(args[4:6]), weigh_and_sum(*args)))
    combine = (Shared.of(token), Shared.of(row_of), Shared.of(weights), vector_rows(y, vector),
               vector_rows(out, vector), Shared(tokens * down.n_tiles, fill=0), Shared(TILE_M + 1, fill=0), k)
    finish_tokens = plain(epilogue.Epilogue.finish_tokens)
    for first_row, rows, n_tile, split in tiles:
        columns = slice(n_tile * 128, (n_tile + 1) * 128)
        y[first_row:first_row + rows, columns] = np.nan_to_num(y[first_row:first_row + rows, columns]) \
            + parts[split][first_row:first_row + rows, columns]  # (the tile's TMA stores)
        threads = Threads(32 * STORE_WARPS, first=32 * FIRST_STORE_WARP)
        threads.run(lambda: finish_tokens(down, combine, first_row, rows, n_tile,
                                          FIRST_STORE_WARP + threads.index() // 32))
    assert (out == expected).all(), np.argwhere(out != expected)[:4]
    assert sorted(summed) == sorted((t, c) for t in range(tokens) for c in range(hidden // vector)), \
        "a token's columns summed more than once, or never"
    assert list(combine[5]) == [k * split_k] * (tokens * down.n_tiles) and combine[6][TILE_M] == 0


ROUTED = [[0, 3, 3, 5], [3, 6, 0, 7]]  # expert 3 in three slots (one token naming it twice), 0 in two
FIVE_ON_ONE = [[3, 3, 3, 5], [3, 3, 0, 7]]  # expert 3 in five slots: two batches of x rows


@pytest.mark.parametrize("ids, staged, threads, trace, streamed", [
    ([[3, 6]], None, 512, False, False), (ROUTED, None, 64, False, False), (ROUTED, 2, 64, False, False),
    (ROUTED, None, 64, True, False), ([[3, 6]], None, 512, False, True), (FIVE_ON_ONE, None, 64, False, "small")])
def test_decode_kernel_on_simulated_ctas_against_float64(ids, staged, threads, trace, streamed, monkeypatch):
    """The whole decode kernel run on the CPU by simulated CTAs, all at once
    (`tests/simt.py`; 8 SMs' worth, so 8 CTAs): its sort of the slots, the gate-up GEMVs
    into act, the down rows staged in shared memory (every expert a slot reaches by
    default; with `staged_experts=2` the first two, the others read through L2), the
    barrier (its counter's top bit flipped, its low bits left zero), the down GEMVs (an expert of one, two and three
    slots) and the combine, against the layer in float64 (E 8, H 256, I 256). CTAs of
    512 threads at one token, as the kernel runs; of 64 (two warps, the kernel's THREADS
    and WARPS set so) elsewhere, for time. The values stay float64: act's rounding to x's type is left out.
    With `trace`, the same result, and each CTA's phase stamps after the counter, in the
    order of its work, none before another CTA's gate-up GEMVs ended. `streamed`: every
    weight through the ring (`decode_ring`), at one token and with an expert of five
    slots (two batches of its x rows, each streaming the chunk's gate-up items again)
    through a small ring (three buffers, down items of 8 rows: every buffer refilled
    many times, four down items an expert, waited for three at a time); its bulk
    copies are done at once, so the ring's order is checked, not its waits."""
    import numpy as np

    cutlass = pytest.importorskip("cutlass")
    from gcdsl.ops import decode_kernel, decode_ring
    from tests import simt
    from tests.simt import Memory, Shared, SharedField, Threads, install, make_layout, plain, plain_methods, \
        run_grid, vector_rows

    experts, hidden, inter = 8, 256, 256
    (tokens, k), np_rng = np.shape(ids), np.random.default_rng(len(ids))
    weights = np_rng.uniform(0.1, 1.0, (tokens, k))
    x = np_rng.uniform(-1, 1, (tokens, hidden))
    w1 = np_rng.uniform(-0.1, 0.1, (experts, 2 * inter, hidden))
    w2 = np_rng.uniform(-0.1, 0.1, (experts, hidden, inter))
    expected = np.zeros((tokens, hidden))
    for t in range(tokens):
        for j, e in enumerate(ids[t]):
            gate, up = w1[e, :inter] @ x[t], w1[e, inter:] @ x[t]
            expected[t] += weights[t, j] * (w2[e] @ (gate * up / (1 + np.exp(-gate))))

    monkeypatch.setattr(decode_kernel, "THREADS", threads)
    monkeypatch.setattr(decode_kernel, "WARPS", threads // 32)
    if streamed == "small":
        monkeypatch.setattr(decode_ring, "MAX_STAGES", 3)
        monkeypatch.setattr(decode_ring, "DOWN_ITEM_BYTES", 8 * inter * 2)
    kernel = decode_kernel.MoeDecode(cutlass.BFloat16, experts, hidden, inter, k, tokens * k, cutlass.Int64, 8,
                                     staged_experts=staged, trace=trace, streamed=bool(streamed))
    assert kernel.ctas == 8 and (streamed != "small" or (kernel.plan.stages, kernel.plan.chunk_rows) == (3, 8))
    assert kernel.staged == (0 if streamed else min(experts, tokens * k) if staged is None else staged)

    class Bf16:  # (x's type as the kernel uses it: a width, and a conversion)
        width = 16

        def __new__(cls, value):
            return float(value)

    kernel.ab_dtype = Bf16
    plain_methods(kernel)
    memory = Memory()
    install(monkeypatch, decode_kernel, memory)
    install(monkeypatch, decode_ring, memory)
    monkeypatch.setattr(decode_kernel, "WAIT_LIMIT_NS", 120 * 10**9)  # (Python's threads are slow to meet)
    monkeypatch.setattr(simt, "STEP_TIMEOUT_S", 120.0)
    act = np.full((tokens * k, inter), np.nan)
    out = np.full((tokens, hidden), np.nan)
    # the counter (as a launch before leaves it: top bit set) and a word unused; with `trace`, each
    # CTA's stamps after them (a stamp to an element here)
    counter = np.zeros(2 + 2 * decode_kernel.STAMP_SLOTS * kernel.ctas if trace else 2, dtype=np.int64)
    counter[0] = decode_kernel.FLIP
    args = (vector_rows(x, kernel.vector, memory), Shared.of(sum(ids, [])), Shared.of(weights.reshape(-1)),
            memory.tensor(w1.reshape(-1), kernel._rows_of(2 * inter, hidden), 2),
            memory.tensor(w2.reshape(-1), kernel._rows_of(hidden, inter), 2), vector_rows(act, kernel.vector, memory),
            memory.tensor(counter, make_layout(1), 4), vector_rows(out, kernel.vector, memory))
    ctas = [Threads(threads, block=(b, 0, 0)) for b in range(kernel.ctas)]
    for cta in ctas:
        slots = decode_kernel.MAX_SLOTS
        cta.storage = types.SimpleNamespace(
            token=SharedField(slots, np.int64), row_of=SharedField(slots, np.int64),
            active_expert=SharedField(slots, np.int64), active_first=SharedField(slots, np.int64),
            active_count=SharedField(slots, np.int64), active=SharedField(1, np.int64),
            y=SharedField(kernel.slots * kernel.rows), staged_full=SharedField(1),
            staged=SharedField(kernel._staged_elements()))
        if streamed:
            plan = kernel.plan
            cta.storage.full = SharedField(plan.stages)
            cta.storage.table = SharedField(kernel.columns * 2 * plan.segments * decode_kernel.BATCH)
            cta.storage.ring = SharedField(plan.stages * plan.buffer_bytes // 2)
    kernel.shared_storage = "the struct `__call__` makes (each CTA's `storage` stands in for it)"
    run_grid(ctas, lambda: plain(decode_kernel.MoeDecode.kernel)(kernel, *args))
    assert counter[0] % 2**32 == 0 and counter[1] == 0, counter[:2]  # (top bit flipped back, low bits zero)
    assert np.allclose(out, expected, rtol=1e-9, atol=1e-12), np.abs(out - expected).max()
    if trace:
        phases = len(decode_kernel.PHASES)
        assert phases <= decode_kernel.STAMP_SLOTS
        stamps = counter[2:].reshape(kernel.ctas, 2 * decode_kernel.STAMP_SLOTS)[:, :phases]
        for cta in stamps:  # (every CTA has down rows here)
            assert (cta > 0).all() and (np.diff(cta) >= 0).all(), cta
        barrier_over = decode_kernel.PHASES.index("barrier over")
        assert stamps[:, barrier_over].min() >= stamps[:, decode_kernel.PHASES.index("gate-up GEMVs done")].max()


def test_decode_kernel_splits_the_layer_over_the_sms():
    """Qwen3's experts at one token: 8 experts x 16 chunks of 48 intermediate columns
    (gate-up) and 128 blocks of 16 rows of H (down), 128 CTAs, every expert's 24 KB of
    down rows staged in shared memory; at 32 slots 9 of them would fit, so none are
    staged (unless asked). DeepSeek-V3's (8 x 16 chunks of 128; blocks of 56 rows: one
    expert's 224 KB would fit) and Mixtral's (2 x 64 chunks of 224; blocks of 32: an
    expert's down rows are more than shared memory holds): none."""
    cutlass = pytest.importorskip("cutlass")
    from gcdsl.ops.decode_kernel import MoeDecode

    for (experts, hidden, inter, k, slots), split in (
            ((128, 2048, 768, 8, 8), (16, 48, 128, 16, 128, 8)), ((32, 7168, 2048, 8, 8), (16, 128, 128, 56, 128, 0)),
            ((8, 4096, 14336, 2, 2), (64, 224, 128, 32, 128, 0)), ((128, 2048, 768, 8, 32), (4, 192, 128, 16, 128, 0))):
        kernel = MoeDecode(cutlass.BFloat16, experts, hidden, inter, k, slots, cutlass.Int64, 132)
        assert (kernel.chunks, kernel.columns, kernel.blocks, kernel.rows, kernel.ctas, kernel.staged) == split
        for staged in (None, 0, 32):  # (a CTA's shared memory as launched: within the SM's, staging or not)
            shared = MoeDecode(cutlass.BFloat16, experts, hidden, inter, k, slots, cutlass.Int64, 132,
                               staged_experts=staged).shared_bytes
            assert shared <= 232448 and (staged != 0 or shared < 8192), shared
    for slots, asked, staged in ((8, 3, 3), (32, 16, 9), (32, 2, 2)):
        assert MoeDecode(cutlass.BFloat16, 128, 2048, 768, 8, slots, cutlass.Int64, 132,
                         staged_experts=asked).staged == staged


def test_validate_reads_the_ids_and_names_the_first_bad_slot():
    _check_ids(torch.tensor([[0, 7], [3, 1]]), 8)  # in range: nothing to say
    with pytest.raises(GcdslError) as info:
        _check_ids(torch.tensor([[0, 7], [8, -1]]), 8)
    assert "topk_ids[1, 0] = 8 is not an expert" in info.value.message and "(2 such slots)" in info.value.message


def test_traced_layer_holds_the_custom_op_with_its_fake_shape():
    from torch._subclasses.fake_tensor import FakeTensorMode
    from torch.fx.experimental.proxy_tensor import make_fx

    with FakeTensorMode():
        args = _layer(tokens=5)
        graph = make_fx(lambda *a: gcdsl.ops.fused_moe(*a) + 1)(*args)
        out = torch.ops.gcdsl.fused_moe(*args)
    assert "gcdsl.fused_moe.default" in graph.code
    assert (tuple(out.shape), out.dtype) == ((5, 128), torch.bfloat16)


# ---- on a Hopper GPU ------------------------------------------------------------------

def _weights(experts, hidden, inter, seed=0, dtype=torch.bfloat16):
    g = torch.Generator(device="cuda").manual_seed(seed)
    w1 = (torch.randn(experts, 2 * inter, hidden, device="cuda", generator=g) / hidden ** 0.5).to(dtype)
    w2 = (torch.randn(experts, hidden, inter, device="cuda", generator=g) / inter ** 0.5).to(dtype)
    return w1, w2


def _routing(tokens, experts, k, kind, seed=0):
    g = torch.Generator(device="cuda").manual_seed(seed)
    if kind == "random":
        ids = torch.rand(tokens, experts, device="cuda", generator=g).argsort(dim=1)[:, :k]
    elif kind == "one expert":  # every slot on expert 3: the others get no rows
        ids = torch.full((tokens, k), 3, device="cuda")
    elif kind == "duplicates":  # a token naming one expert twice
        ids = torch.randint(0, experts, (tokens, k), device="cuda", generator=g)
        ids[:, -1] = ids[:, 0]
    weights = torch.rand(tokens, k, device="cuda", generator=g).softmax(dim=-1)
    return weights, ids


def _check_close(out, ref):
    err = ((out.float() - ref).abs().max() / ref.abs().max().clamp_min(1e-6)).item()
    assert err <= 2e-2, err


# The layer in one kernel (as `fused_moe` runs it up to ONE_KERNEL_MAX_SLOTS slots), in
# its two-GEMM form (above), and as `fused_moe` picks.
LAYERS = {"one_kernel": fused_moe_megakernel, "pair": fused_moe_pair, "fused_moe": gcdsl.ops.fused_moe}


@pytest.fixture(autouse=True)
def poisoned_scratch(monkeypatch):
    """The one kernel's intermediate and output rows, and the combine's result, NaN until
    a kernel writes them; the one kernel's counters past every wait until zeroed (a down
    tile would read NaN rows)."""
    fm = importlib.import_module("gcdsl.ops.fused_moe")

    def poisoned(rows, columns, x, dtype=None):
        dtype = dtype or x.dtype
        return torch.full((rows, columns), float("nan") if dtype.is_floating_point else 2**30, dtype=dtype,
                          device=x.device)

    monkeypatch.setattr(fm, "_scratch", poisoned)


@pytest.mark.gpu
@pytest.mark.parametrize("layer", LAYERS)
@pytest.mark.parametrize("tokens", [1, 2, 8, 64, 512, 4096])
@pytest.mark.parametrize("k", [1, 2, 8])
def test_layer_against_float32(tokens, k, layer):
    experts, hidden, inter = 16, 256, 192
    w1, w2 = _weights(experts, hidden, inter)
    x = torch.randn(tokens, hidden, device="cuda").to(torch.bfloat16)
    weights, ids = _routing(tokens, experts, k, "random", seed=tokens + k)
    _check_close(LAYERS[layer](x, w1, w2, weights, ids), moe_experts_reference(x, w1, w2, weights, ids))


@pytest.mark.gpu
@pytest.mark.parametrize("layer", LAYERS)
@pytest.mark.parametrize("kind", ["one expert", "duplicates"])
@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16])
def test_layer_on_the_routings_that_break_layers(kind, dtype, layer):
    experts, hidden, inter, tokens, k = 8, 128, 256, 300, 2
    w1, w2 = _weights(experts, hidden, inter, dtype=dtype)
    x = torch.randn(tokens, hidden, device="cuda").to(dtype)
    weights, ids = _routing(tokens, experts, k, kind)
    out = LAYERS[layer](x, w1, w2, weights, ids)
    assert out.dtype == dtype
    _check_close(out, moe_experts_reference(x, w1, w2, weights, ids))


# The one kernel's options, (E, I, k, options): each tile width, and the down tiles in K
# splits (I = 512: 8 k-tiles, in 3 splits of 2, 3 and 3), their fp32 sums added into
# zeros, each tile's k-tiles read from a different one on, wrapping round, and the down
# tiles dealt round all the CTAs at once or three rounds of them first to the CTAs a
# gate-up tile short (by default one round here). At 300 tokens experts span several M-tiles.
OPTIONS = {"tile 64": (16, 256, 8, {"tile_n": 64}), "tile 128": (16, 256, 8, {"tile_n": 128}),
           "tile 256": (16, 256, 8, {"tile_n": 256}), "k_splits 2": (4, 512, 2, {"split_k": 2}),
           "k_splits 3": (4, 512, 2, {"split_k": 3}), "k_splits 8": (4, 512, 2, {"split_k": 8}),
           "stagger": (16, 256, 8, {"stagger_k": True}),
           "stagger k_splits 3": (4, 512, 2, {"split_k": 3, "stagger_k": True}),
           "down_lead 0": (16, 256, 8, {"down_lead": 0}), "down_lead 3": (16, 256, 8, {"down_lead": 3})}


@pytest.mark.gpu
@pytest.mark.parametrize("option", OPTIONS)
@pytest.mark.parametrize("tokens", [1, 300])
def test_one_kernel_with_each_option(option, tokens):
    experts, inter, k, options = OPTIONS[option]
    hidden = 264
    w1, w2 = _weights(experts, hidden, inter)
    x = torch.randn(tokens, hidden, device="cuda").to(torch.bfloat16)
    weights, ids = _routing(tokens, experts, k, "random", seed=len(option))
    _check_close(fused_moe_megakernel(x, w1, w2, weights, ids, **options),
                 moe_experts_reference(x, w1, w2, weights, ids))


@pytest.mark.gpu
@pytest.mark.parametrize("tokens", [1, 300])
def test_megakernel_phases_come_in_order_and_leave_the_result_as_it_is(tokens):
    """The stamped build computes the same layer, and each CTA's stamps come in the order
    of its work: started, schedule built, gate-up loads, then the first down tile's wait,
    the down loads; its consumers' gate-up tiles stored before its store warps have
    finished its down tiles."""
    from gcdsl.ops.fused_moe import megakernel_phases
    from gcdsl.ops.hopper_grouped_gemm import PHASES

    experts, hidden, inter, k = 16, 264, 256, 8
    w1, w2 = _weights(experts, hidden, inter)
    x = torch.randn(tokens, hidden, device="cuda").to(torch.bfloat16)
    weights, ids = _routing(tokens, experts, k, "random", seed=tokens)
    out, phases = megakernel_phases(x, w1, w2, weights, ids)
    _check_close(out, moe_experts_reference(x, w1, w2, weights, ids))
    assert list(phases) == list(PHASES)
    p = {name: values.tolist() for name, values in phases.items()}
    assert min(p["start"]) == 0 and len(p["start"]) >= min(experts, tokens * k) * (2 * inter // 128)
    waited = 0
    for c in range(len(p["start"])):
        at = {name: p[name][c] for name in PHASES}
        assert all(v == v for name, v in at.items() if name != "first down tile's wait over"), at
        assert 0 <= at["start"] <= at["schedule built"] <= at["gate-up loads issued"] <= at["down loads issued"], at
        assert at["schedule built"] <= at["gate-up tiles stored"] < 10**6 and at["down tiles done"] < 10**6, at
        wait = at["first down tile's wait over"]
        if wait == wait:  # a CTA with down tiles (its store warps end at once without)
            waited += 1
            assert at["gate-up loads issued"] <= wait <= at["down loads issued"], at
            assert at["gate-up tiles stored"] <= at["down tiles done"], at
    assert waited >= 1


@pytest.mark.gpu
def test_down_tiles_wait_for_every_gate_up_tile_of_their_expert():
    """One token, one expert a call: one gate-up tile (2I = the tile width) and four down
    tiles, three of them on CTAs with nothing else to do, which start at once. Loading
    the NaN scratch before that gate-up tile has stored it would show in the result."""
    experts, hidden, inter = 2, 512, 64
    w1, w2 = _weights(experts, hidden, inter)
    for seed in range(8):
        x = torch.randn(1, hidden, device="cuda").to(torch.bfloat16)
        weights, ids = _routing(1, experts, 1, "random", seed=seed)
        _check_close(fused_moe_megakernel(x, w1, w2, weights, ids, tile_n=128),
                     moe_experts_reference(x, w1, w2, weights, ids))


@pytest.mark.gpu
@pytest.mark.parametrize("view", ["strided rows", "unaligned start"])
def test_one_kernel_gathers_rows_of_x_through_any_view(view):
    """The gate-up tiles read x's rows by TMA, from x's address: a view whose rows are
    strided, or one that starts off a 16-byte boundary, is read through a copy."""
    experts, hidden, inter, tokens, k = 8, 256, 128, 40, 2
    w1, w2 = _weights(experts, hidden, inter)
    base = torch.randn(tokens * (hidden + 8) + 8, device="cuda").to(torch.bfloat16)
    if view == "strided rows":
        x = base[:tokens * (hidden + 8)].view(tokens, hidden + 8)[:, :hidden]
    else:
        x = base[1:1 + tokens * hidden].view(tokens, hidden)
    weights, ids = _routing(tokens, experts, k, "random")
    _check_close(fused_moe_megakernel(x, w1, w2, weights, ids), moe_experts_reference(x, w1, w2, weights, ids))


@pytest.mark.gpu
@pytest.mark.parametrize("tokens, inter, kernels", [(1, 128, ["RouteSlots", "MoeExperts"]),
                                                    (64, 128, ["RouteSlots", "MoeExperts"]), (1, 256, ["MoeDecode"])])
def test_decode_layer_is_the_expert_kernel_after_the_routing_kernel_or_alone(tokens, inter, kernels, monkeypatch):
    """At decode `fused_moe` launches the routing kernel and the one tensor-core kernel,
    or (where I is a multiple of 256) the decode kernel alone, nothing else: no gather of
    x, no combine, no fill, no memset of a counter (its scratch as the op allocates it,
    not the NaN-filled tensors of the other tests)."""
    fm = importlib.import_module("gcdsl.ops.fused_moe")
    monkeypatch.setattr(fm, "_scratch", lambda rows, columns, x, dtype=None: torch.empty(
        rows, columns, dtype=dtype or x.dtype, device=x.device))
    experts, hidden, k = 16, 256, 8
    w1, w2 = _weights(experts, hidden, inter)
    x = torch.randn(tokens, hidden, device="cuda").to(torch.bfloat16)
    weights, ids = _routing(tokens, experts, k, "random")
    ids = ids.contiguous()  # as a router's top-k leaves them (a strided slice would be copied first)
    gcdsl.ops.fused_moe(x, w1, w2, weights, ids)  # compiled outside the profile
    torch.cuda.synchronize()
    with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CUDA]) as prof:
        out = gcdsl.ops.fused_moe(x, w1, w2, weights, ids)
        torch.cuda.synchronize()
    launched = [e.name for e in prof.events() if e.device_type == torch.autograd.DeviceType.CUDA]
    assert len(launched) == len(kernels) and all(k in name for k, name in zip(kernels, launched)), launched
    _check_close(out, moe_experts_reference(x, w1, w2, weights, ids))


# The decode kernel: (E, H, I) with H and I multiples of 256 (one or two steps of a
# warp's vectors a row; Qwen3's E), its slot counts up to 32, every routing that breaks
# layers, both dtypes.
DECODE_SHAPES = {"e16_h256_i512": (16, 256, 512), "e128_h768_i256": (128, 768, 256)}


@pytest.mark.gpu
@pytest.mark.parametrize("shape", DECODE_SHAPES)
@pytest.mark.parametrize("tokens, k", [(1, 1), (1, 2), (1, 8), (2, 8), (3, 8), (4, 8), (16, 2), (32, 1)])
@pytest.mark.parametrize("kind", ["random", "one expert", "duplicates"])
def test_decode_against_float32(shape, tokens, k, kind):
    experts, hidden, inter = DECODE_SHAPES[shape]
    w1, w2 = _weights(experts, hidden, inter, seed=tokens)
    x = torch.randn(tokens, hidden, device="cuda").to(torch.bfloat16)
    weights, ids = _routing(tokens, experts, k, kind, seed=tokens * k)
    _check_close(fused_moe_decode(x, w1, w2, weights, ids), moe_experts_reference(x, w1, w2, weights, ids))


@pytest.mark.gpu
@pytest.mark.parametrize("shape", list(DECODE_SHAPES.values()) + [(128, 2048, 768), (32, 7168, 2048), (8, 4096, 14336)])
@pytest.mark.parametrize("tokens, k", [(1, 2), (1, 8), (2, 8), (3, 8), (32, 1)])
@pytest.mark.parametrize("kind", ["random", "one expert", "duplicates"])
def test_decode_streamed_against_float32(shape, tokens, k, kind):
    """`streamed=True`: every weight row through the ring (`decode_ring`), on the small
    shapes and W8's (Qwen3's, DeepSeek-V3's and Mixtral's experts), experts of 1 to 32
    slots (x rows in batches, each batch streaming the chunk's gate-up items again)."""
    experts, hidden, inter = shape
    if hidden * inter > 2048 * 768 and tokens * k > 8:
        pytest.skip("W8's large experts: one token's routing is enough")
    w1, w2 = _weights(experts, hidden, inter, seed=tokens)
    x = torch.randn(tokens, hidden, device="cuda").to(torch.bfloat16)
    weights, ids = _routing(tokens, experts, k, kind, seed=tokens * k)
    _check_close(fused_moe_decode(x, w1, w2, weights, ids, streamed=True),
                 moe_experts_reference(x, w1, w2, weights, ids))


@pytest.mark.gpu
@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16])
@pytest.mark.parametrize("view", ["contiguous", "strided rows", "unaligned start"])
@pytest.mark.parametrize("streamed", [False, True])
def test_decode_in_each_dtype_and_through_any_view_of_x(dtype, view, streamed):
    experts, hidden, inter, tokens, k = 16, 256, 256, 2, 8
    w1, w2 = _weights(experts, hidden, inter, dtype=dtype)
    base = torch.randn(tokens * (hidden + 8) + 8, device="cuda").to(dtype)
    x = {"contiguous": base[:tokens * hidden].view(tokens, hidden),
         "strided rows": base[:tokens * (hidden + 8)].view(tokens, hidden + 8)[:, :hidden],
         "unaligned start": base[1:1 + tokens * hidden].view(tokens, hidden)}[view]
    weights, ids = _routing(tokens, experts, k, "duplicates")
    out = fused_moe_decode(x, w1, w2, weights, ids, streamed=streamed)
    assert out.dtype == dtype
    _check_close(out, moe_experts_reference(x, w1, w2, weights, ids))


@pytest.mark.gpu
@pytest.mark.parametrize("shape", [(16, 256, 512), (16, 2048, 256)])
@pytest.mark.parametrize("staged", [None, 0, 1, 3])
@pytest.mark.parametrize("kind", ["random", "duplicates"])
def test_decode_stages_the_first_experts_down_rows_and_reads_the_others_through_l2(shape, staged, kind):
    """Of about a dozen active experts all, none, the first or the first three have
    their down rows in shared memory: each expert's rows from where they are, a warp's
    2 (H 256) or 8 (H 2048) staged rows of experts of 1, 2 and more slots at once."""
    (experts, hidden, inter), tokens, k = shape, 2, 8
    w1, w2 = _weights(experts, hidden, inter, seed=staged or 0)
    x = torch.randn(tokens, hidden, device="cuda").to(torch.bfloat16)
    weights, ids = _routing(tokens, experts, k, kind, seed=(staged or 0) + 1)
    _check_close(fused_moe_decode(x, w1, w2, weights, ids, staged_experts=staged),
                 moe_experts_reference(x, w1, w2, weights, ids))


@pytest.mark.gpu
@pytest.mark.parametrize("shape, tokens, staged, streamed", [((128, 2048, 768), 1, None, False),
                                                              ((16, 256, 512), 4, 0, False),
                                                              ((128, 2048, 768), 1, None, True)])
def test_decode_phases_come_in_order_and_leave_the_result_as_it_is(shape, tokens, staged, streamed):
    """The stamped decode build computes the same layer, and each CTA's stamps come in the
    order of its work; none is past the barrier before every CTA's gate-up GEMVs ended.
    Qwen3's experts at one token (every down row staged, 128 CTAs), a build that stages
    none, and the streamed build (its down rows through the ring: none staged)."""
    from gcdsl.ops.decode_kernel import PHASES
    from gcdsl.ops.fused_moe import decode_phases

    (experts, hidden, inter), k = shape, 8
    w1, w2 = _weights(experts, hidden, inter, seed=tokens)
    x = torch.randn(tokens, hidden, device="cuda").to(torch.bfloat16)
    weights, ids = _routing(tokens, experts, k, "random", seed=tokens)
    out, phases = decode_phases(x, w1, w2, weights, ids, staged_experts=staged, streamed=streamed)
    staged = 0 if streamed else staged
    _check_close(out, moe_experts_reference(x, w1, w2, weights, ids))
    assert list(phases) == list(PHASES)
    p = torch.stack([phases[name] for name in PHASES], dim=1)  # (CTAs, phases), us
    assert p[:, 0].min() == 0 and p.shape[0] >= min(experts, tokens * k)
    gate_up_ends = p[:, PHASES.index("gate-up GEMVs done")].max()
    down_rows = 0
    for c in range(p.shape[0]):
        reached = p[c][~p[c].isnan()].tolist()
        staged_at = PHASES.index("staged down rows landed")
        if len(reached) > PHASES.index("barrier over") + 1:  # a CTA with down rows
            down_rows += 1
            assert (p[c, staged_at] == p[c, staged_at]) == (staged != 0), p[c]
        assert reached == sorted(reached) and 0 <= reached[0] and reached[-1] < 10**6, p[c]
        assert p[c, PHASES.index("barrier over")] >= gate_up_ends, (c, p[c], gate_up_ends)
    assert down_rows >= 1


@pytest.mark.gpu
@pytest.mark.parametrize("streamed, counters", [(False, "pooled"), (True, "pooled"), (False, "zeroed a call")])
def test_decode_kernel_replays_after_the_routing_changed(streamed, counters, monkeypatch):
    """Captured, its counter is one of its own from `grid_barrier`'s pool, or (`zeroed a
    call`) zeroed by a memset in the graph."""
    from gcdsl.ops import grid_barrier

    if counters == "zeroed a call":
        monkeypatch.setattr(grid_barrier, "counter", lambda device: None)
    layer = functools.partial(fused_moe_decode, streamed=streamed)
    _replays_after_the_routing_changed(layer, experts=16, hidden=256, inter=512, tokens=4, k=8)


@pytest.mark.gpu
@pytest.mark.parametrize("counters", ["pooled", "zeroed a call"])
def test_decode_kernel_leaves_its_counters_low_bits_zero_for_every_launch_after_it(counters, monkeypatch):
    """Launches of the decode kernel in a row on one stream and on two streams at once,
    each checked against float32, one of them a kernel of another CTA count (built for
    16 SMs); after them each stream's counter has its low 31 bits zero and its top bit
    flipped once a launch (`MoeDecode.arrive`). With `zeroed a call`, `grid_barrier` has
    no counter to give, and each call zeroes its own.
    (`test_decode_kernel_replays_after_the_routing_changed`: from a graph.)"""
    from gcdsl.ops import grid_barrier

    if counters == "zeroed a call":
        monkeypatch.setattr(grid_barrier, "counter", lambda device: None)
    experts, hidden, inter, tokens, k = 16, 256, 512, 2, 8
    w1, w2 = _weights(experts, hidden, inter)
    layers = []
    for seed in range(4):
        x = torch.randn(tokens, hidden, device="cuda").to(torch.bfloat16)
        layers.append((x, *_routing(tokens, experts, k, "random", seed=seed)))
    streams = [torch.cuda.Stream(), torch.cuda.Stream()]
    rows_before = {}  # (a stream may have run the kernel in a test before)
    if counters == "pooled":
        for stream in [torch.cuda.current_stream(), *streams]:
            with torch.cuda.stream(stream):
                rows_before[stream] = grid_barrier.counter(x.device).tolist()
    for x, weights, ids in layers[:2]:
        _check_close(fused_moe_decode(x, w1, w2, weights, ids), moe_experts_reference(x, w1, w2, weights, ids))
    with monkeypatch.context() as sms16:  # (the counter as 128 CTAs left it, then as 16 leave it)
        sms16.setattr(importlib.import_module("gcdsl.ops.fused_moe"), "_ctas_at_once", lambda index: 16)
        x, weights, ids = layers[2]
        _check_close(fused_moe_decode(x, w1, w2, weights, ids), moe_experts_reference(x, w1, w2, weights, ids))
    for x, weights, ids in layers[3:] + layers[:1]:  # (five launches: the top bit flipped)
        _check_close(fused_moe_decode(x, w1, w2, weights, ids), moe_experts_reference(x, w1, w2, weights, ids))
    torch.cuda.synchronize()
    outs = []
    for launches in range(7):  # (the two streams' launches overlap: a shared counter would break both)
        for i, stream in enumerate(streams):
            with torch.cuda.stream(stream):
                for layer in layers[2 * i:2 * i + 1 + launches % 2]:  # (a stream's: 10 in all)
                    outs.append((fused_moe_decode(*layer[:1], w1, w2, *layer[1:]), layer))
    torch.cuda.synchronize()
    for out, (x, weights, ids) in outs:
        _check_close(out, moe_experts_reference(x, w1, w2, weights, ids))
    if counters == "pooled":
        for stream, launches in [(torch.cuda.current_stream(), 5), (streams[0], 10), (streams[1], 10)]:
            with torch.cuda.stream(stream):
                row = grid_barrier.counter(x.device).tolist()
            before = rows_before[stream]
            assert before[0] in (0, -2**31) and before[1:] == [0] * (grid_barrier.COUNTER_INTS - 1), before
            top_bit = -2**31 if (before[0] != 0) != (launches % 2 == 1) else 0
            assert row == [top_bit] + before[1:], (launches, before, row)


@pytest.mark.gpu
def test_decode_takes_more_experts_than_the_routing_kernel_counts():
    """The decode kernel sorts the slots itself (no routing kernel before it): E past the
    routing kernel's MAX_SLOTS, ids near the top among them."""
    from gcdsl.ops.route_kernel import MAX_SLOTS

    experts, hidden, inter, tokens, k = MAX_SLOTS + 76, 256, 256, 2, 8
    w1, w2 = _weights(experts, hidden, inter)
    x = torch.randn(tokens, hidden, device="cuda").to(torch.bfloat16)
    weights, ids = _routing(tokens, experts, k, "random")
    ids[0, :2] = torch.tensor([experts - 1, MAX_SLOTS])
    _check_close(gcdsl.ops.fused_moe(x, w1, w2, weights, ids), moe_experts_reference(x, w1, w2, weights, ids))


@pytest.mark.gpu
def test_decode_barrier_holds_every_cta_until_the_last_act_is_written(monkeypatch):
    """Every slot on one expert, the kernel sized for 16 SMs: one chunk of I an expert,
    so one CTA runs all 32 slots' gate-up GEMVs while the 15 others, with no gate-up
    work, reach the barrier at once; each then reads all of act's columns. A barrier
    that let them go before that CTA had written its act reads NaN scratch."""
    fm = importlib.import_module("gcdsl.ops.fused_moe")
    monkeypatch.setattr(fm, "_ctas_at_once", lambda index: 16)
    experts, hidden, inter, tokens, k = 16, 256, 512, 32, 1
    w1, w2 = _weights(experts, hidden, inter)
    for seed in range(4):
        x = torch.randn(tokens, hidden, device="cuda").to(torch.bfloat16)
        weights, ids = _routing(tokens, experts, k, "one expert", seed=seed)
        _check_close(fused_moe_decode(x, w1, w2, weights, ids), moe_experts_reference(x, w1, w2, weights, ids))


@pytest.mark.gpu
def test_fused_moe_takes_the_pair_for_weights_that_are_not_contiguous():
    experts, hidden, inter, tokens, k = 8, 256, 128, 40, 2
    w1, w2 = _weights(experts, hidden, inter)
    w2_t = w2.transpose(1, 2).contiguous().transpose(1, 2)  # the same values, stored (E, I, H)
    x = torch.randn(tokens, hidden, device="cuda").to(torch.bfloat16)
    weights, ids = _routing(tokens, experts, k, "random")
    _check_close(gcdsl.ops.fused_moe(x, w1, w2_t, weights, ids), moe_experts_reference(x, w1, w2, weights, ids))


@pytest.mark.gpu
@pytest.mark.parametrize("id_dtype", [torch.int64, torch.int32])
@pytest.mark.parametrize("tokens, k, experts", [(1, 1, 8), (1, 8, 128), (64, 8, 128), (128, 8, 256), (8, 2, 1024),
                                                (129, 8, 128)])
def test_route_kernel_agrees_with_torchs_kernels(tokens, k, experts, id_dtype):
    """`route` in one kernel (up to 1024 slots; 129 x 8 takes torch's path) against
    `route_slots`: the same stable order, the same tokens and ends; duplicates and
    experts without slots included."""
    from gcdsl.ops.fused_moe import route

    g = torch.Generator(device="cuda").manual_seed(tokens * k)
    ids = torch.randint(0, experts, (tokens, k), device="cuda", generator=g).to(id_dtype)
    ids[0] = ids[0, 0].item()  # one token naming one expert k times
    row_of, token, offs = route(ids, experts)
    ref_order, ref_offs = route_slots(ids.long(), experts)
    assert sorted(row_of.tolist()) == list(range(tokens * k))  # every slot placed once
    assert row_of[ref_order].tolist() == list(range(tokens * k)) and token.tolist() == (ref_order // k).tolist()
    assert offs.dtype == torch.int32 and offs.tolist() == ref_offs.tolist()


@pytest.mark.gpu
def test_route_kernel_traps_with_its_message_on_an_id_out_of_range():
    """A bad id ends the CUDA context (as torch's bounds check does): in a process of its own."""
    import subprocess
    import sys

    code = ("import torch, importlib; fm = importlib.import_module('gcdsl.ops.fused_moe'); "
            "ids = torch.tensor([[0, 1], [2, 8]], device='cuda'); fm.route(ids, 8); torch.cuda.synchronize()")
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300)
    assert proc.returncode != 0 and "topk_ids holds an id of E or more" in proc.stdout + proc.stderr


@pytest.mark.gpu
def test_validate_checks_the_ids_and_changes_nothing_else():
    experts, hidden, inter, tokens, k = 16, 256, 192, 64, 8
    w1, w2 = _weights(experts, hidden, inter)
    x = torch.randn(tokens, hidden, device="cuda").to(torch.bfloat16)
    weights, ids = _routing(tokens, experts, k, "random")
    _check_close(gcdsl.ops.fused_moe(x, w1, w2, weights, ids, validate=True),
                 moe_experts_reference(x, w1, w2, weights, ids))


@pytest.mark.gpu
@pytest.mark.parametrize("layer", LAYERS)
def test_captured_layer_replays_after_the_routing_changed(layer):
    _replays_after_the_routing_changed(LAYERS[layer], experts=16, hidden=256, inter=128, tokens=64, k=4)


def _replays_after_the_routing_changed(layer, experts, hidden, inter, tokens, k):
    """`layer` captured in a graph, replayed after the routing (new, every slot on one
    expert, a token naming one expert twice) and x changed in place, its output NaN."""
    w1, w2 = _weights(experts, hidden, inter)
    x = torch.randn(tokens, hidden, device="cuda").to(torch.bfloat16)
    weights, ids = _routing(tokens, experts, k, "random", seed=1)
    layer(x, w1, w2, weights, ids)  # compile and warm up outside the capture
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        out = layer(x, w1, w2, weights, ids)
    for seed, kind in ((2, "random"), (3, "one expert"), (4, "duplicates"), (5, "random")):
        new_weights, new_ids = _routing(tokens, experts, k, kind, seed=seed)
        weights.copy_(new_weights)
        ids.copy_(new_ids)
        x.copy_(torch.randn_like(x, dtype=torch.float32).to(x.dtype))
        out.fill_(float("nan"))
        graph.replay()
        _check_close(out, moe_experts_reference(x, w1, w2, weights, ids))


@pytest.mark.gpu
def test_validate_refuses_an_id_out_of_range_on_the_gpu():
    w1, w2 = _weights(4, 128, 128)
    x = torch.randn(3, 128, device="cuda").to(torch.bfloat16)
    ids = torch.tensor([[0, 1], [2, 4], [3, 0]], device="cuda")
    with pytest.raises(GcdslError) as info:
        gcdsl.ops.fused_moe(x, w1, w2, torch.ones(3, 2, device="cuda"), ids, validate=True)
    assert "topk_ids[1, 1] = 4 is not an expert" in info.value.message
