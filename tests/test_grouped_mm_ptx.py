"""The Hopper grouped GEMM compiled for sm_90a without a GPU: what its PTX and SASS must show.

- three TMA descriptors (A, B and the output) in grid-constant parameter space, and a
  fourth with ragged M and A K-major (A in short boxes, for partial M-tiles), whatever
  G is, and every TMA store's descriptor is `cvta.param` of the output's; for every
  case of `torch._grouped_mm` and both majors of A and B;
- every change of a full barrier's expected bytes (the producer's arrive, the A bytes
  it adds for short boxes) by one elected lane;
- each TMA load of A and B, and each TMA store of the output, asks L2 for the configured
  policy (`GemmConfig.load_policy`, `GemmConfig.store_policy`; by default `cute.copy`'s own, 0);
- nothing modifies a descriptor in the kernel (no `tensormap.replace`, no tensormap
  proxy fence); the only global loads are those of `offs`, one per group a lane holds,
  all issued before the schedule's first shuffle;
- no local memory (but the unused frame of a printf without values), no spills, no
  descriptor address moved by a predicated R2UR (and no predicated R2UR at all but
  SwiGLU's one of a coordinate);
- 8 WGMMAs (4 k-blocks x 2 call sites), transposed for MN-major operands; TMA loads per
  stage as the operands' majors need (one box per 64 elements of the contiguous mode);
  one TMA store per 32-column sub-tile;
- the parameter bytes are the same at every G, up to MAX_GROUPS;
- a CTA barrier between the schedule warp's writes and the roles' first reads.
"""
import re

import pytest

from gcdsl import ptx
from gcdsl.ops.grouped_mm import MAX_GROUPS
from tests import sass
from tests.compile_cases import GROUPED_GEMM_CASES, GROUPED_GEMM_LAYOUTS

CASES = tuple(GROUPED_GEMM_CASES)
PAIRS = tuple(c for c in CASES if c.endswith("_pairs"))
CLAIMED = tuple(c for c in CASES if "_claimed" in c)  # each with its twin without claims in CASES
# tiled MMA, three atoms, their coordinate tensors, offs, T; the ragged K views of A and
# B carry their runtime extents in their coordinate tensors; ragged M with A K-major adds
# A's short-box atom and its coordinates
PARAM_BYTES = {"m": 532, "batch": 532, "k": 588, "m short A": 708,
               "m short A claimed": 720}  # (claimed tiles: the counter's pointer, 8 bytes at an 8-byte boundary)


def _layout(case):
    return {"ragged": "m", "a_major": "k", "b_major": "k", **GROUPED_GEMM_LAYOUTS.get(case, {})}


def _short_a(case):
    """Ragged M with A K-major: a partial M-tile loads its A rows in short boxes."""
    return (_layout(case)["ragged"], _layout(case)["a_major"]) == ("m", "k")


def _param_key(case):
    key = "m short A" if _short_a(case) else _layout(case)["ragged"]
    return key + " claimed" if _layout(case).get("claimed_tiles") else key


def _groups(case):
    return MAX_GROUPS if case == "grouped_gemm_max_groups" else int(re.search(r"_g(\d+)", case).group(1))


def _wgmmas(case):
    """WGMMAs in the code: 4 k-blocks of a 64-deep k-tile, at the first k-tile and in the loop;
    with ping-pong twice that, a warpgroup's 128 rows being two 64-row WGMMAs."""
    return 16 if _layout(case).get("schedule") == "pingpong" else 8


def _out_tile_n(case):
    """Output columns of a tile: SwiGLU stores half of the tile's."""
    return _tile_n(case) // (2 if _layout(case).get("activation") == "swiglu" else 1)


def _tile_n(case):
    found = re.search(r"_t(\d+)_", case)
    return int(found.group(1)) if found else 256


@pytest.fixture(scope="module")
def compiled(compile_cases):
    return compile_cases("sm_90a", "gcdsl", CASES)


def _entry(compiled, case):
    return ptx.single_entry(compiled.ptx(case))


@pytest.mark.parametrize("case", CASES)
def test_descriptors_in_param_space_at_every_group_count(compiled, case):
    entry = _entry(compiled, case)
    descriptors = [p for p in entry.params if p.size == 128 and p.align == 64]
    assert len(descriptors) == 3 + _short_a(case) and not [p for p in entry.params if p.size > 128], entry.params
    assert entry.param_bytes == PARAM_BYTES[_param_key(case)]
    # gcdsl's own budget check, run when the kernel was launched, agrees with the PTX
    assert compiled.param_bytes(case) == {"kernel": entry.param_bytes}


@pytest.mark.parametrize("case", CASES)
def test_every_tma_store_uses_the_one_ragged_output_descriptor(compiled, case):
    entry = _entry(compiled, case)
    stores = _stores(entry)
    assert len(stores) == _out_tile_n(case) // 32
    params = set()
    for store in stores:
        assert store.startswith("cp.async.bulk.tensor.3d."), store  # rows, columns, the ragged mode
        desc = re.search(r"\[(%rd\d+),\s*\{", store).group(1)
        chain = _trace_back(entry, desc)
        assert "cvta.param" in chain and "mul.wide" not in chain, chain  # no runtime pick, no offset
        params.update(re.findall(r"_param_(\d+)\b", chain))
    assert len(params) == 1, params


@pytest.mark.parametrize("copies", ["load", "store"])
@pytest.mark.parametrize("case", CASES)
def test_every_tma_copy_asks_l2_for_the_configured_policy(compiled, case, copies):
    """`GemmConfig.load_policy` and `store_policy`: each TMA load of A and B, and each TMA
    store of the output, carries the configured `createpolicy` value; by default
    `cute.copy`'s own, 0 (where CUTLASS passes EVICT_NORMAL to its loads and no hint to
    its stores)."""
    from gcdsl.ops.hopper_grouped_gemm import L2_POLICIES

    entry = _entry(compiled, case)
    expected = L2_POLICIES[_layout(case).get(f"{copies}_policy", "default")] or 0
    instructions = _loads(entry) if copies == "load" else _stores(entry)
    assert instructions
    for copy in instructions:
        assert ".L2::cache_hint" in copy, copy
        policy = copy.rstrip(";").rsplit(",", 1)[1].strip()
        assert re.fullmatch(rf"mov\.b64\s+{re.escape(policy)},\s*{expected};", entry.definition(policy) or ""), \
            (copy, entry.definition(policy))


def test_mma_without_rows_tells_the_warpgroups_they_have_rows(compiled):
    """`GemmConfig.mma_without_rows`: the rows a consumer warpgroup goes by are at least
    T, a kernel parameter, so that its WGMMAs run whatever its rows: one `max.s32` more
    than its twin without it, of a value loaded from `.param`; the WGMMAs the same."""
    ours = _entry(compiled, "grouped_gemm_bf16_t256_g32_norder_mma_without_rows_pairs")
    twin = _entry(compiled, "grouped_gemm_bf16_t256_g32_norder_pairs")
    assert len(ours.instructions("wgmma.mma_async")) == len(twin.instructions("wgmma.mma_async"))
    maxima = ours.instructions("max.s32")
    assert len(maxima) == len(twin.instructions("max.s32")) + 1
    operands = [re.findall(r"%r\d+", m)[1:] for m in maxima]
    assert any(any(_trace_back(ours, r, depth=1).startswith("ld.param") for r in regs) for regs in operands)


@pytest.mark.parametrize("case", CASES)
def test_no_descriptor_modification_and_global_loads_only_of_offs(compiled, case):
    text = compiled.ptx(case)
    entry = _entry(compiled, case)
    for forbidden in ("tensormap.replace", "fence.proxy.tensormap", "tensormap.cp_fenceproxy",
                      "cp.fence.proxy.tensormap"):
        assert forbidden not in text, forbidden
    loads = entry.instructions("ld.global")
    if _layout(case)["ragged"] == "batch":
        assert not loads  # no offs, no schedule
        return
    assert len(loads) == -(-_groups(case) // 32), loads[:3]  # G / 32 values a lane, unrolled
    assert all(re.match(r"ld\.global(\.nc)?\.b32\s", i) for i in loads), loads[:3]
    first_shuffle = entry.body.index("shfl.sync.up")
    assert all(entry.body.index(i) < first_shuffle for i in loads)  # every load in flight before the scan
    # at most the frame of the unaligned-group trap's printf, which has no values: never written or read
    assert not entry.uses_local_memory() or (entry.local_memory_is_printf_only() and not entry.count("st.local"))


def _boxes(case):
    """TMA loads of A and of B in the code: one box per 64 contiguous elements, so a
    K-major tile is one box and an MN-major one a box per 64 rows. (In a pair each CTA
    loads half of every box of B: along N when B is K-major, along K when N-major.)"""
    layout = _layout(case)
    return (1 if layout["a_major"] == "k" else 128 // 64), (1 if layout["b_major"] == "k" else _tile_n(case) // 64)


def _t_contiguous_reduction(layout):
    """The grouped reduction with T, its K, contiguous in A or B: first k-tiles zeroed."""
    return layout["ragged"] == "k" and "k" in (layout["a_major"], layout["b_major"])


@pytest.mark.parametrize("case", CASES)
def test_the_schedule_is_written_before_any_role_reads_it(compiled, case):
    """The schedule warp writes the tile table into shared memory (its scan's shuffles
    last), and the roles read it once they are dispatched (`setmaxnreg`). Between the two:
    a barrier of the whole CTA; in pairs after the cluster's wait (the mbarriers ready in
    both CTAs), which alone orders no shared-memory write."""
    body = _entry(compiled, case).body
    if _layout(case)["ragged"] == "batch":
        assert "shfl.sync.up" not in body  # (no schedule: every tile from the block index)
        return
    dispatch = body.index("setmaxnreg")
    between = body[body.rindex("shfl.sync.up", 0, dispatch):dispatch]
    barriers = [" ".join(b.split()) for b in re.findall(r"barrier\.cluster\.wait|bar\.sync\s+0\b", between)]
    assert barriers == (["barrier.cluster.wait"] if case in PAIRS else []) + ["bar.sync 0"], barriers


@pytest.mark.parametrize("case", CASES)
def test_groups_of_a_t_contiguous_operand_are_checked_once_where_offs_is_read(compiled, case):
    """Ragged M with A M-major, and the grouped reduction with T contiguous in an operand:
    the schedule traps at a group whose start (or, in the reduction, end) TMA cannot read
    from (not 16-byte aligned), once per group a lane holds; no other kernel traps."""
    from gcdsl.ops.hopper_grouped_gemm.schedule import UNALIGNED_GROUP_MESSAGE, UNALIGNED_REDUCTION_GROUP_MESSAGE

    entry = _entry(compiled, case)
    layout = _layout(case)
    traps = entry.instructions("trap")
    if (layout["ragged"], layout["a_major"]) == ("m", "m"):
        message = UNALIGNED_GROUP_MESSAGE
    elif _t_contiguous_reduction(layout):
        message = UNALIGNED_REDUCTION_GROUP_MESSAGE
    else:
        assert not traps
        return
    assert len(traps) == -(-_groups(case) // 32)
    found = [f for f in ptx.format_strings(compiled.ptx(case)) if "gcdsl:" in f]
    assert len(found) == 1 and message in found[0], found


@pytest.mark.parametrize("case", CASES)
def test_instruction_counts(compiled, case):
    entry = _entry(compiled, case)
    layout = _layout(case)
    wgmmas = entry.instructions("wgmma.mma_async")
    assert len(wgmmas) == _wgmmas(case)
    # the last two immediates: transpose A, transpose B (MN-major operands)
    transposed = (int(layout["a_major"] == "m"), int(layout["b_major"] == "n"))
    assert all(re.search(r",\s*(\d),\s*(\d);?$", w.rstrip(";")).groups() == tuple(map(str, transposed))
               for w in wgmmas), wgmmas[0][-40:]
    loads = _loads(entry)
    boxes_a, boxes_b = _boxes(case)
    assert len(loads) == boxes_a + boxes_b + _short_a(case), loads  # (a short box of A: one more, 2-D)
    # B has the group mode, and so has A unless ragged M; in the reduction, a K-major
    # operand has its plain 2-D view instead
    three_d = boxes_b + (boxes_a if layout["ragged"] != "m" else 0)
    if layout["ragged"] == "k":
        three_d = boxes_a * (layout["a_major"] == "m") + boxes_b * (layout["b_major"] == "n")
    if layout.get("activation") == "swiglu":  # B's N as (row, half, tile): one 5-D box of gate and up rows
        assert sum(".5d." in i for i in loads) == boxes_b and boxes_a == 1
        three_d = 0
    assert sum(".3d." in i for i in loads) == three_d


@pytest.mark.parametrize("case", CASES)
def test_expected_bytes_are_set_by_one_elected_lane(compiled, case):
    """The producer warp runs with all its lanes: an expect_tx that every lane ran would
    make a stage wait for 32 times its bytes, forever. The arrive's (B's bytes, with
    short A boxes) and the A bytes added per stage (whole tile or short boxes) each
    follow an `elect.sync` whose other lanes branch around it. (A claim's 4 bytes in a
    pair, `claims.py`, are expected by one lane per CTA, on the cluster's addresses: below.)"""
    lines = [line.strip() for line in _entry(compiled, case).body.splitlines()]
    sites = [i for i, line in enumerate(lines) if re.match(r"mbarrier\.(arrive\.)?expect_tx", line)
             and "shared::cluster" not in line]
    assert len(sites) == 1 + 2 * _short_a(case), sites
    for i in sites:
        before = lines[max(0, i - 5):i]
        assert any(line.startswith("elect.sync") for line in before), before
        assert any(re.match(r"@%p\d+ bra", line) for line in before), before


@pytest.mark.parametrize("case", CLAIMED)
def test_claimed_tiles_take_one_atomic_add_on_the_counter_a_tile(compiled, case):
    """`claimed_tiles` (`claims.py`): one `atom.global.add` of 1, on the counter's pointer,
    the kernel's last parameter; in a pair the claim reaches each CTA's slot by one
    `st.async` completing its full barrier's 4 expected bytes, and each reader fences the
    async proxy before it releases the slot, with its one arrive on the first CTA's empty
    barrier; alone, a plain store and arrive. Everything else as its twin without claims:
    WGMMAs, TMA loads and stores."""
    entry = _entry(compiled, case)
    twin = _entry(compiled, case.replace("_claimed", ""))
    adds = entry.instructions("atom.global.add")
    assert len(adds) == 1 and adds[0].rstrip(";").endswith(", 1"), adds
    address = re.search(r"\[(%rd\d+)\]", adds[0]).group(1)
    assert entry.params[-1].name in _trace_back(entry, address), _trace_back(entry, address)
    assert not twin.instructions("atom.global")
    stores = entry.instructions("st.async")
    remote_expects = [i for i in entry.instructions("mbarrier.arrive.expect_tx") if "shared::cluster" in i]
    if case in PAIRS:
        assert len(stores) == 1 and "mbarrier::complete_tx::bytes.b32" in stores[0]
        assert len(remote_expects) == 1
        expected = remote_expects[0].rstrip(";").rsplit(",", 1)[1].strip()
        assert re.fullmatch(r"mov\.b32\s+%r\d+,\s*4;", entry.definition(expected) or ""), entry.definition(expected)
        assert entry.count("fence.proxy.async.shared::cta") > twin.count("fence.proxy.async.shared::cta")
    else:
        assert not stores and not remote_expects
    for kind in ("wgmma.mma_async", "cp.async.bulk.tensor"):
        assert len(entry.instructions(kind)) == len(twin.instructions(kind)), kind


@pytest.mark.parametrize("case", CASES)
def test_pairs_multicast_b_and_release_both_ctas(compiled, case):
    entry = _entry(compiled, case)
    multicast = [i for i in _loads(entry) if "multicast::cluster" in i]
    remote_arrives = [i for i in entry.instructions("mbarrier.arrive") if "shared::cluster" in i]
    if case in PAIRS:
        b_box = ".5d." if _layout(case).get("activation") == "swiglu" else ".3d."  # (SwiGLU's B: row, half, tile)
        assert len(multicast) == _boxes(case)[1] and all(b_box in i for i in multicast)  # B only; A per CTA
        assert remote_arrives and entry.count("barrier.cluster.wait") == 1
    else:
        assert not multicast and not remote_arrives and entry.count("barrier.cluster") == 0


@pytest.mark.parametrize("case", CASES)
def test_sass_has_no_spills_and_no_predicated_r2ur(compiled, case):
    text = compiled.sass(case)
    assert not sass.spills(text)
    assert len(re.findall(r"\bHGMMA\.", text)) == _wgmmas(case)
    assert sass.tma_instructions(text) and not sass.predicated_descriptor_moves(text)
    if _layout(case).get("activation") != "swiglu":
        assert not re.search(r"@!?U?P\w+\s+R2UR\b", text)
    # (SwiGLU: one predicated R2UR of a TMA coordinate in the producer's tile set-up,
    # before the k-loop and outside any elect block; no descriptor address)


@pytest.mark.parametrize("case", CASES)
def test_epilogue_barriers_span_the_warps_that_share_the_sub_tiles(compiled, case):
    """Cooperative: both consumer warpgroups on named barrier 1 (256 threads). Ping-pong:
    each warpgroup on a barrier of its own (1 or 2, in a register), 128 threads."""
    entry = _entry(compiled, case)
    named = [i for i in entry.instructions("bar.sync") if "," in i and not i.rstrip(";").endswith("256")
             or re.fullmatch(r"bar\.sync\s+1,\s*256;?", i)]
    zero_fill = _t_contiguous_reduction(_layout(case))  # and one after zeroing a first k-tile's columns
    if zero_fill and _layout(case).get("schedule") != "pingpong":
        assert [i for i in entry.instructions("bar.sync") if re.fullmatch(r"bar\.sync\s+5,\s*256;?", i)]
    assert named and len(named) == 2 * (_out_tile_n(case) // 32) + (zero_fill and _layout(case).get("schedule") == "pingpong")
    if _layout(case).get("schedule") == "pingpong":
        assert all(re.fullmatch(r"bar\.sync\s+%r\d+,\s*128;?", i) for i in named), named[:2]
        # the mainloop's turn (`consume_pingpong`): one wait for the other warpgroup,
        # and an arrive for it after the last stage, with WGMMAs or without
        turns = [i for i in entry.instructions("bar.sync") if re.fullmatch(r"bar\.sync\s+%r\d+,\s*256;?", i)]
        assert len(turns) == 1 and len(entry.instructions("bar.arrive")) == 2, turns
    else:
        assert all(re.fullmatch(r"bar\.sync\s+1,\s*256;?", i) for i in named), named[:2]


def test_sm100a_is_refused_because_wgmma_is_sm90a_only(tmp_path):
    """The kernel is built from WGMMA and setmaxnreg, which exist on sm_90a only."""
    import os
    import subprocess
    import sys

    from tests.conftest import ROOT

    env = {k: v for k, v in os.environ.items() if not k.startswith("CUTE_DSL_")}
    proc = subprocess.run(
        [sys.executable, "-m", "tests.compile_cases", "--arch", "sm_100a", "--decorator", "gcdsl",
         "--out", str(tmp_path), "grouped_gemm_bf16_t256_g8"],
        cwd=ROOT, env=env, capture_output=True, text=True, timeout=600,
    )
    assert proc.returncode != 0
    assert "expects arch to be sm_90a" in proc.stdout + proc.stderr


def _loads(entry: ptx.Entry):
    """TMA loads (global -> shared), as opposed to the stores (shared -> global)."""
    return [i for i in entry.instructions("cp.async.bulk.tensor")
            if re.match(r"cp\.async\.bulk\.tensor\.\dd\.shared::(cta|cluster)\.global", i)]


def _stores(entry: ptx.Entry):
    """TMA stores of the output (shared -> global)."""
    return [i for i in entry.instructions("cp.async.bulk.tensor") if ".global.shared::cta" in i]


def _trace_back(entry: ptx.Entry, register: str, depth: int = 5) -> str:
    text = entry.definition(register) or ""
    if depth and text:
        for reg in re.findall(r"%rd\d+|%r\d+", text.split(None, 1)[1])[1:]:
            text += "\n" + _trace_back(entry, reg, depth - 1)
    return text
