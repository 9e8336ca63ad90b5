"""Every case of `torch._grouped_mm`, both majors of each operand, and autograd, on a Hopper GPU.

Outputs are poisoned with NaN first. Each result is checked against a float32
reference over the rows (or columns) the groups own; what lies past offs[-1] must
still hold the poison, and every group of a grouped reduction that has no rows must
hold zeros. Gradients are checked against float32 autograd and against
`torch._grouped_mm`'s own, and a small MoE layer trains with both to the same losses.

    python -m pytest -q tests/test_grouped_mm_cases.py
"""
import pytest

torch = pytest.importorskip("torch")

pytestmark = pytest.mark.gpu

ROWS = [0, 1, 63, 65, 200, 0, 128, 300]  # empty groups, one row, around 64 (a k-tile) and 128 (an M-tile)
# torch._grouped_mm asserts on the device (a trap that ends the process's CUDA context)
# unless every group is a multiple of 16 bytes along the grouped mode in some layouts:
# comparisons with torch use groups of multiples of 8 rows
ALIGNED_ROWS = [0, 8, 64, 72, 200, 0, 128, 296]
TAIL = 3  # at least this much past offs[-1], up to a multiple of 8 (a column-major operand's rows are 16 bytes)


def laid(t, layout):
    """`t`'s values, row-major or column-major in the last two modes."""
    return t.contiguous() if layout == "row" else t.transpose(-2, -1).contiguous().transpose(-2, -1)


def problem(case, la, lb, rows=ROWS, m=136, n=264, k=200, dtype=torch.bfloat16, seed=0):
    """(a, b, ends): T = sum(rows) + TAIL along the grouped mode; ends on the GPU."""
    g = torch.Generator(device="cuda").manual_seed(seed)
    groups = len(rows)
    ends = torch.tensor(rows).cumsum(0).to(torch.int32).cuda()
    t = -(-(int(ends[-1]) + TAIL) // 8) * 8

    def rand(*shape):
        return torch.randn(*shape, device="cuda", dtype=dtype, generator=g)

    a, b = {
        "2d3d": lambda: (rand(t, k), rand(groups, k, n)),
        "3d2d": lambda: (rand(groups, m, k), rand(k, t)),
        "2d2d": lambda: (rand(m, t), rand(t, n)),
        "3d3d": lambda: (rand(groups, m, k), rand(groups, k, n)),
    }[case]()
    return laid(a, la), laid(b, lb), (None if case == "3d3d" else ends)


def reference(a, b, ends):
    """float32, and a mask of what the groups own (the rest may hold anything)."""
    a, b = a.float(), b.float()
    if ends is None:
        return a @ b, None
    bounds = [0] + ends.tolist()
    if a.dim() == 2 and b.dim() == 3:
        out = torch.zeros(a.shape[0], b.shape[2], device="cuda")
        for g in range(len(bounds) - 1):
            out[bounds[g]:bounds[g + 1]] = a[bounds[g]:bounds[g + 1]] @ b[g]
        owned = torch.zeros_like(out, dtype=torch.bool)
        owned[:bounds[-1]] = True
    elif a.dim() == 3:
        out = torch.zeros(a.shape[1], b.shape[1], device="cuda")
        for g in range(len(bounds) - 1):
            out[:, bounds[g]:bounds[g + 1]] = a[g] @ b[:, bounds[g]:bounds[g + 1]]
        owned = torch.zeros_like(out, dtype=torch.bool)
        owned[:, :bounds[-1]] = True
    else:
        out = torch.stack([a[:, bounds[g]:bounds[g + 1]] @ b[bounds[g]:bounds[g + 1]]
                           for g in range(len(bounds) - 1)])
        owned = None
    return out, owned


def poisoned_output(a, b, ends, out_dtype):
    """NaN everywhere, laid out as grouped_mm's result for these inputs."""
    from gcdsl.ops.grouped_cases import describe

    p = describe(a, b, ends, out_dtype)
    out = torch.full(p.kernel_out_shape, float("nan"), device="cuda", dtype=p.out_dtype)
    return out.t() if p.swapped else out


def run(a, b, ends, out_dtype=None, **variant):
    from gcdsl.ops.grouped_mm import grouped_mm_into

    out = poisoned_output(a, b, ends, out_dtype)
    grouped_mm_into(a, b, ends, out, **variant)
    torch.cuda.synchronize()
    return out


def check(out, a, b, ends, tol=1e-2):
    ref, owned = reference(a, b, ends)
    mine = out.float() if owned is None else out.float()[owned]
    theirs = ref if owned is None else ref[owned]
    err = ((mine - theirs).abs().max() / theirs.abs().max().clamp_min(1e-6)).item()
    assert err <= tol, f"relative error {err:.3e}"
    if owned is not None:
        assert torch.isnan(out[~owned]).all(), "written past offs[-1]"
    return ref


LAYOUTS = [("row", "row"), ("row", "col"), ("col", "row"), ("col", "col")]


def t_contiguous(case, la, lb):
    """Whether the grouped mode T is the contiguous mode of the grouped 2-D operand (the
    kernel's A M-major): then every group with rows starts at a multiple of 8 rows."""
    return (case, la) == ("2d3d", "col") or (case, lb) == ("3d2d", "row")


@pytest.mark.parametrize("la, lb", LAYOUTS)
@pytest.mark.parametrize("case", ["2d3d", "3d2d", "3d3d"])
def test_cases_every_layout_against_fp32_and_torch(case, la, lb):
    if not t_contiguous(case, la, lb):  # groups start anywhere
        a, b, ends = problem(case, la, lb)
        check(run(a, b, ends), a, b, ends)
    a, b, ends = problem(case, la, lb, rows=ALIGNED_ROWS)
    out = run(a, b, ends)
    check(out, a, b, ends)
    ref, owned = reference(a, b, ends)
    theirs = torch._grouped_mm(a, b, offs=ends).float()
    mask = owned if owned is not None else torch.ones_like(ref, dtype=torch.bool)
    assert ((out.float()[mask] - theirs[mask]).abs().max() / theirs[mask].abs().max()).item() <= 1e-2


@pytest.mark.parametrize("case, la, lb", [("2d3d", "col", "row"), ("3d2d", "row", "row")])
def test_cases_with_t_contiguous_refuse_unaligned_groups_from_a_cpu_offs(case, la, lb):
    from gcdsl import GcdslError

    a, b, ends = problem(case, la, lb)  # groups of 1, 63 and 65 rows
    with pytest.raises(GcdslError, match="starts at 1, not a multiple of 8") as info:
        run(a, b, ends.cpu())
    assert info.value.location.filename == __file__ and info.value.param == "offs"


@pytest.mark.parametrize("case, la, lb", [("2d3d", "col", "row"), ("3d2d", "row", "row")])
def test_cases_with_t_contiguous_end_groups_anywhere_and_start_empty_ones_anywhere(case, la, lb):
    """Only a start with rows must be aligned: the last group ends at row 77, and the
    two empty groups after it start there."""
    a, b, ends = problem(case, la, lb, rows=[8, 0, 64, 5, 0, 0])
    check(run(a, b, ends), a, b, ends)
    check(run(a, b, ends.cpu()), a, b, ends)


def trapped_run(problem_args: str) -> "subprocess.CompletedProcess":
    """`run(*problem(<problem_args>))` in a process of its own (a trap ends the process's
    CUDA context): asserts that it failed before finishing, and returns the process."""
    import subprocess
    import sys

    script = ("from tests.test_grouped_mm_cases import problem, run\n"
              f"a, b, ends = problem({problem_args})\n"
              "run(a, b, ends)\n"
              "print('no trap')\n")
    proc = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=600,
                          cwd=__file__.rsplit("/tests/", 1)[0])
    assert proc.returncode != 0 and "no trap" not in proc.stdout, proc.stdout[-2000:]
    return proc


def test_cases_with_t_contiguous_trap_at_unaligned_groups_from_a_cuda_offs():
    """The kernel checks the starts as it reads offs, and traps with the reason (which
    ends the process's CUDA context: in a process of its own), where TMA would fault."""
    proc = trapped_run("'2d3d', 'col', 'row'")
    assert "not a multiple of 16 bytes (8 rows of 16 bits)" in proc.stdout, (proc.stdout + proc.stderr)[-2000:]


T_CONTIGUOUS_REDUCTION = [("row", "row"), ("col", "col"), ("row", "col")]  # T contiguous in a, in b, in both
REDUCTION_VARIANTS = [dict(), dict(schedule="cooperative", tile_n=128), dict(schedule="pingpong", tile_n=192)]


@pytest.mark.parametrize("variant", REDUCTION_VARIANTS)
@pytest.mark.parametrize("la, lb", T_CONTIGUOUS_REDUCTION)
def test_cases_t_contiguous_reduction_against_fp32_and_torch(la, lb, variant):
    """2D x 2D with T contiguous in an operand: groups on multiples of 8, the first k-tile
    of each starting up to 56 columns before it (zeroed in shared memory), empty groups."""
    a, b, ends = problem("2d2d", la, lb, rows=ALIGNED_ROWS)
    out = run(a, b, ends, **variant)
    check(out, a, b, ends)
    for g in (0, 5):
        assert (out[g] == 0).all()
    theirs = torch._grouped_mm(a, b, offs=ends).float()
    assert ((out.float() - theirs).abs().max() / theirs.abs().max()).item() <= 1e-2
    a, b, ends = problem("2d2d", la, lb, rows=[8, 16, 0, 2000, 56, 64, 8], m=200, n=136, seed=3)
    check(run(a, b, ends, torch.float32, **variant), a, b, ends)


@pytest.mark.parametrize("variant", REDUCTION_VARIANTS[:1] + REDUCTION_VARIANTS[2:])
@pytest.mark.parametrize("la, lb", T_CONTIGUOUS_REDUCTION)
def test_cases_t_contiguous_reduction_keeps_an_inf_in_its_own_group(la, lb, variant):
    """Each group's result reads only its own columns: an inf in the last columns of one
    group's T-contiguous operand (which the next group's first k-tile loads) stays there."""
    a, b, ends = problem("2d2d", la, lb, rows=ALIGNED_ROWS)
    bounds = [0] + ends.tolist()
    for g in (2, 6):  # groups of 64 and 128 columns, followed by groups of 72 and 296
        if la == "row":
            a[:, bounds[g + 1] - 1] = float("inf")
        if lb == "col":
            b[bounds[g + 1] - 1, :] = float("inf")
    out = run(a, b, ends, **variant)
    ref = torch.stack([a[:, s:e].float() @ b[s:e].float() for s, e in zip(bounds, bounds[1:])])
    for g in (0, 1, 3, 4, 5, 7):  # every group but those two
        assert torch.isfinite(out[g]).all(), f"group {g} read another group's columns"
        err = ((out[g].float() - ref[g]).abs().max() / ref[g].abs().max().clamp_min(1e-6)).item()
        assert err <= 1e-2, f"group {g}: relative error {err:.3e}"


def test_cases_t_contiguous_reduction_refuses_unaligned_groups_from_a_cpu_offs():
    from gcdsl import GcdslError

    a, b, ends = problem("2d2d", "row", "row")  # a group of 1 row starts at 0 and ends at 1
    with pytest.raises(GcdslError, match="group 1 ends at 1, not a multiple of 8") as info:
        run(a, b, ends.cpu())
    assert info.value.location.filename == __file__ and info.value.param == "offs"


def test_cases_t_contiguous_reduction_traps_at_unaligned_groups_from_a_cuda_offs():
    """A group that ends off 16 bytes (65 columns from an aligned start): the kernel
    traps with the reason, in a process of its own."""
    proc = trapped_run("'2d2d', 'row', 'col', rows=[8, 64, 65, 8]")
    assert "ends at a column that is not a multiple of 16 bytes" in proc.stdout, (proc.stdout + proc.stderr)[-2000:]


@pytest.mark.parametrize("out_dtype", [None, torch.float32])
def test_cases_grouped_reduction_gives_zeros_for_empty_groups(out_dtype):
    a, b, ends = problem("2d2d", "col", "row")
    out = run(a, b, ends, out_dtype)
    check(out, a, b, ends)
    for g in (0, 5):  # groups of no rows: zeros, not the poison
        assert (out[g] == 0).all()
    a, b, ends = problem("2d2d", "col", "row", rows=ALIGNED_ROWS)
    out = run(a, b, ends, out_dtype)
    theirs = torch._grouped_mm(a, b, offs=ends).float()
    assert ((out.float() - theirs).abs().max() / theirs.abs().max()).item() <= 1e-2


@pytest.mark.parametrize("case", ["2d3d", "3d2d", "2d2d", "3d3d"])
@pytest.mark.parametrize("out_dtype", [torch.float16, torch.float32])
def test_cases_fp16_inputs_and_other_outputs(case, out_dtype):
    la, lb = ("col", "row") if case == "2d2d" else ("row", "col")
    a, b, ends = problem(case, la, lb, dtype=torch.float16, seed=1)
    check(run(a, b, ends, out_dtype), a, b, ends)


def test_cases_grouped_reduction_long_groups_and_tiles():
    """Several k-tiles a group, M and N of several tiles, many tiles per CTA: the last
    group, empty, is a CTA's second or third tile (its accumulators held another tile's)."""
    a, b, ends = problem("2d2d", "col", "row", rows=[1000, 0, 777, 64, 2049, 0], m=520, n=1032)
    for variant in ({}, {"tile_n": 128}):
        out = run(a, b, ends, **variant)
        check(out, a, b, ends)
        assert (out[1] == 0).all() and (out[5] == 0).all()


PAIR_REDUCTIONS = [dict(schedule="cooperative", tile_n=256, n=400), dict(schedule="pingpong", tile_n=192, n=296)]


@pytest.mark.parametrize("variant", PAIR_REDUCTIONS)
@pytest.mark.parametrize("la, lb", LAYOUTS)
def test_cases_grouped_reduction_in_pairs(la, lb, variant):
    """2D x 2D in pairs of CTAs sharing B by multicast, in both schedules and every layout:
    4 M-tiles (two pairs a group, the last M-tile of 8 rows), an N that ends in the second
    half of a tile (where pairs can split B), groups that start and end anywhere (or on 8
    with T contiguous), empty ones; and many k-tiles and tiles per CTA."""
    variant = dict(variant)  # (the parameter is shared by every layout)
    n = variant.pop("n")
    t_contiguous_reduction = la == "row" or lb == "col"
    if not t_contiguous_reduction:  # groups start and end anywhere
        a, b, ends = problem("2d2d", la, lb, m=392, n=n)
        check(run(a, b, ends, cluster_m=2, **variant), a, b, ends)
    a, b, ends = problem("2d2d", la, lb, rows=ALIGNED_ROWS, m=392, n=n)
    out = run(a, b, ends, cluster_m=2, **variant)
    check(out, a, b, ends)
    for g in (0, 5):
        assert (out[g] == 0).all()
    theirs = torch._grouped_mm(a, b, offs=ends).float()
    assert ((out.float() - theirs).abs().max() / theirs.abs().max()).item() <= 1e-2
    a, b, ends = problem("2d2d", la, lb, rows=[1000, 0, 776, 64, 2048, 0], m=512, n=n, seed=2)
    check(run(a, b, ends, torch.float32, cluster_m=2, **variant), a, b, ends)


def test_cases_grouped_reduction_pairs_need_an_even_number_of_m_tiles():
    from gcdsl import GcdslError

    a, b, ends = problem("2d2d", "col", "row", m=136 + 128, n=400)  # 3 M-tiles
    with pytest.raises(GcdslError, match="pairs with ragged K need an even number of M-tiles") as info:
        run(a, b, ends, cluster_m=2, tile_n=256)
    assert info.value.location.filename == __file__ and info.value.param == "cluster_m"


def test_cases_batch_of_many_m_tiles():
    a, b, ends = problem("3d3d", "row", "col", rows=[0] * 5, m=1000, n=520, k=1024)
    check(run(a, b, ends), a, b, ends)


def test_cases_offs_is_read_at_every_call_without_recompiling():
    from gcdsl.ops.grouped_mm import compiled_count

    a, b, ends = problem("2d2d", "col", "row")
    check(run(a, b, ends), a, b, ends)
    compiled = compiled_count()
    moved = torch.tensor([100, 100, 300, 320, 320, 600, 700, 757], dtype=torch.int32, device="cuda")
    check(run(a, b, moved), a, b, moved)
    assert compiled_count() == compiled


class _AfterUnmapped:
    """Device memory whose first byte follows a reserved, never-mapped range of addresses
    (the driver's virtual memory API), so whatever reaches before it faults. A descriptor
    whose base lies before a tensor then points into unmapped memory: a TMA load from
    such a base faults even when every element it reads is mapped."""

    def __init__(self, nbytes: int, device: int) -> None:
        from cuda.bindings import driver as cu

        self.cu = cu
        prop = cu.CUmemAllocationProp()
        prop.type = cu.CUmemAllocationType.CU_MEM_ALLOCATION_TYPE_PINNED
        prop.location.type = cu.CUmemLocationType.CU_MEM_LOCATION_TYPE_DEVICE
        prop.location.id = device
        granularity = self._ok(cu.cuMemGetAllocationGranularity(
            prop, cu.CUmemAllocationGranularity_flags.CU_MEM_ALLOC_GRANULARITY_MINIMUM))
        self.size = -(-nbytes // granularity) * granularity
        self.reserved = self._ok(cu.cuMemAddressReserve(2 * self.size, 0, 0, 0))
        self.handle = self._ok(cu.cuMemCreate(self.size, prop, 0))
        self.ptr = int(self.reserved) + self.size  # the first half stays unmapped
        self._ok(cu.cuMemMap(self.ptr, self.size, 0, self.handle, 0))
        access = cu.CUmemAccessDesc()
        access.location = prop.location
        access.flags = cu.CUmemAccess_flags.CU_MEM_ACCESS_FLAGS_PROT_READWRITE
        self._ok(cu.cuMemSetAccess(self.ptr, self.size, [access], 1))
        self.__cuda_array_interface__ = {"shape": (nbytes,), "typestr": "|u1", "data": (self.ptr, False),
                                         "version": 3}

    def _ok(self, result):
        err, *value = result
        assert err == self.cu.CUresult.CUDA_SUCCESS, err
        return value[0] if value else None

    def free(self) -> None:
        self._ok(self.cu.cuMemUnmap(self.ptr, self.size))
        self._ok(self.cu.cuMemRelease(self.handle))
        self._ok(self.cu.cuMemAddressFree(self.reserved, 2 * self.size))


@pytest.fixture
def after_unmapped():
    """copy(t): `t` (same shape and strides) at the start of an `_AfterUnmapped` block."""
    blocks = []

    def copy(t):
        span = sum((size - 1) * stride for size, stride in zip(t.shape, t.stride())) + 1
        blocks.append(_AfterUnmapped(span * t.element_size(), t.device.index))
        raw = torch.as_tensor(blocks[-1], device=t.device)
        placed = raw.view(t.dtype).as_strided(t.shape, t.stride())
        placed.copy_(t)
        return placed

    yield copy
    torch.cuda.synchronize()
    for block in blocks:
        block.free()


@pytest.mark.parametrize("case, la, lb", [("2d3d", "row", "col"), ("3d2d", "col", "col"),
                                          ("2d2d", "col", "row"), ("3d3d", "row", "col")])
def test_cases_operands_right_after_unmapped_memory(case, la, lb, after_unmapped):
    """Every operand and the output at the start of mapped memory, as a fresh cudaMalloc can give them."""
    from gcdsl.ops.grouped_mm import grouped_mm_into

    a, b, ends = problem(case, la, lb)
    a, b = after_unmapped(a), after_unmapped(b)
    out = after_unmapped(poisoned_output(a, b, ends, None))
    grouped_mm_into(a, b, ends, out)
    torch.cuda.synchronize()
    check(out, a, b, ends)


@pytest.mark.parametrize("tile_n", [128, 192])
@pytest.mark.parametrize("case, la, lb", [("2d3d", "row", "col"), ("2d3d", "row", "row"), ("3d2d", "col", "col"),
                                          ("2d2d", "col", "row"), ("3d3d", "row", "col"), ("3d3d", "col", "row")])
def test_cases_pingpong_schedule(case, la, lb, tile_n):
    """The ping-pong consumers (a 128-row tile each, in turn) on every case: the edge rows of
    ROWS, and shapes of many tiles a CTA, so that both warpgroups take turns."""
    a, b, ends = problem(case, la, lb)
    out = run(a, b, ends, tile_n=tile_n, schedule="pingpong")
    check(out, a, b, ends)
    if case == "2d2d":
        assert (out[0] == 0).all() and (out[5] == 0).all()
    many = dict(rows=[3000, 0, 2500, 64, 4000, 0], m=520, n=1032, k=520)
    a, b, ends = problem(case, la, lb, **many)
    check(run(a, b, ends, tile_n=tile_n, schedule="pingpong"), a, b, ends)


@pytest.mark.parametrize("tile_n", [128, 192])
@pytest.mark.parametrize("case, la, lb", [("2d3d", "row", "col"), ("2d3d", "row", "row"), ("3d2d", "col", "col")])
def test_cases_pingpong_pairs_with_ragged_rows(case, la, lb, tile_n):
    """Ping-pong in pairs (two CTAs on consecutive M-tiles of a group, each loading half of
    the B tile for both, each CTA's warpgroups taking its tiles in turn) where rows are
    ragged: the edge rows of ROWS (groups that end on an odd M-tile leave the second CTA of
    their last pair without rows, its warpgroup only releasing stages), and groups of many
    M-steps, so that every warpgroup of both CTAs takes turns; N ends inside a tile, past
    half of it (360 = 128 x 2 + 104 = 192 + 168; 1112 = 128 x 8 + 88 = 192 x 5 + 152; with b
    grouped by columns, the kernel's N is M)."""
    for shape in (dict(m=360, n=360), dict(rows=[3000, 0, 2500, 64, 4000, 0, 129], m=1112, n=1112, k=520)):
        a, b, ends = problem(case, la, lb, **shape)
        check(run(a, b, ends, tile_n=tile_n, schedule="pingpong", cluster_m=2), a, b, ends)


@pytest.mark.parametrize("schedule", ["cooperative", "pingpong"])
@pytest.mark.parametrize("case, la, lb", [("2d3d", "row", "col"), ("2d3d", "row", "row"), ("3d2d", "col", "col"),
                                          ("2d2d", "col", "row"), ("3d3d", "row", "col")])
def test_cases_64_wide_tiles(case, la, lb, schedule):
    """Tiles 64 columns wide (two output sub-tiles, the epilogue's buffers cut to two), on every
    case, with the edge rows of ROWS and an N that ends inside a tile; in pairs too (where
    N's last tile must hold more than half of B's tile: 296 = 4 x 64 + 40)."""
    a, b, ends = problem(case, la, lb, n=264)
    check(run(a, b, ends, tile_n=64, schedule=schedule), a, b, ends)
    if schedule == "cooperative" and case == "2d3d":
        a, b, ends = problem(case, la, lb, n=296)
        check(run(a, b, ends, tile_n=64, cluster_m=2), a, b, ends)


@pytest.mark.parametrize("schedule, cluster_m, tile_n", [("cooperative", 1, 256), ("cooperative", 2, 256),
                                                       ("pingpong", 1, 192)])
@pytest.mark.parametrize("case, la, lb", [("2d3d", "row", "col"), ("2d3d", "row", "row"), ("3d2d", "col", "col")])
@pytest.mark.parametrize("tile_order", ["n", "m_partial_last", "m_blocks"])
def test_cases_tile_orders(case, la, lb, schedule, cluster_m, tile_n, tile_order):
    """A group's N-tiles fastest (`tile_order="n"`), its partial M-step's tiles after the full
    steps' ("m_partial_last"), or its M-steps fastest in blocks ("m_blocks"; the groups of
    3,000 and 4,000 rows span blocks), on the cases with ragged rows: the edge rows of ROWS, and
    groups of many M-steps; N ends inside a tile (past half of it, for pairs)."""
    for shape in (dict(n=392), dict(rows=[3000, 0, 2500, 64, 4000, 0], m=648, n=1160, k=520)):
        a, b, ends = problem(case, la, lb, **shape)
        check(run(a, b, ends, schedule=schedule, cluster_m=cluster_m, tile_n=tile_n, tile_order=tile_order),
              a, b, ends)


# ---- autograd ---------------------------------------------------------------------------
def _grads(fn, a, b, ends, dy):
    a, b = a.detach().requires_grad_(), b.detach().requires_grad_()
    out = fn(a, b, ends)
    out.backward(dy)
    return a.grad, b.grad


@pytest.mark.parametrize("case, la, lb", [
    ("2d3d", "row", "col"),  # an MoE layer's expert GEMMs: weights kept as (G, N, K)
    ("2d3d", "row", "row"), ("3d2d", "col", "col"),
    ("2d2d", "col", "row"), ("2d2d", "row", "col"),
    ("3d3d", "row", "col"), ("3d3d", "col", "row"),
])
def test_cases_gradients_against_fp32_and_torch(case, la, lb):
    import gcdsl.ops

    a, b, ends = problem(case, la, lb, rows=ALIGNED_ROWS, seed=2)
    ref, owned = reference(a, b, ends)
    dy = torch.randn(ref.shape, device="cuda", generator=torch.Generator(device="cuda").manual_seed(5))
    if owned is not None:
        dy = dy * owned  # what past offs[-1] is left undefined carries no gradient
    dy = dy.to(a.dtype)
    mine = _grads(lambda x, y, o: gcdsl.ops.grouped_mm(x, y, o), a, b, ends, dy)
    fp32 = _grads(lambda x, y, o: reference(x, y, o)[0], a.float(), b.float(), ends, dy.float())
    theirs = _grads(lambda x, y, o: torch._grouped_mm(x, y, offs=o), a, b, ends, dy)
    for name, got, want, torch_got in zip("ab", mine, fp32, theirs):
        assert got.shape == want.shape and got.dtype == a.dtype, name
        scale = want.abs().max().clamp_min(1e-6)
        valid = _gradient_owned(case, name, got, ends)
        assert ((got.float() - want)[valid].abs().max() / scale).item() <= 1e-2, name
        assert ((got.float() - torch_got.float())[valid].abs().max() / scale).item() <= 2e-2, name
    if case == "2d3d" and lb == "col":  # the gradient comes back as the weight lies: no copy for the optimizer
        assert mine[1].stride() == b.stride()


def _gradient_owned(case, name, grad, ends):
    """What of a gradient the groups own: rows (columns) past offs[-1] of a grouped mode are undefined."""
    valid = torch.ones_like(grad, dtype=torch.bool)
    if ends is None:
        return valid
    end = int(ends[-1])
    if (case, name) in (("2d3d", "a"), ("2d2d", "b")):
        valid[end:] = False  # T is the first mode
    elif (case, name) in (("3d2d", "b"), ("2d2d", "a")):
        valid[:, end:] = False  # T is the last mode
    return valid


def _moe_layer(grouped_mm, x, w1, w2, router, top_k=2):
    """Router -> top-k -> per-expert counts -> offs on the GPU -> gate-up -> SwiGLU -> down -> combine."""
    experts = w1.shape[0]
    scores = (x @ router).softmax(-1)
    weights, ids = scores.topk(top_k, dim=-1)
    flat = ids.flatten()
    order = flat.argsort(stable=True)
    offs = torch.bincount(flat, minlength=experts).cumsum(0).to(torch.int32)
    tokens = x[order // top_k]
    h = grouped_mm(tokens, w1.transpose(-2, -1), offs)
    gate, up = h.chunk(2, dim=-1)
    y = grouped_mm((torch.nn.functional.silu(gate) * up).contiguous(), w2.transpose(-2, -1), offs)
    combined = torch.zeros_like(x, dtype=torch.float32).index_add_(
        0, order // top_k, y.float() * weights.flatten()[order, None])
    return combined


def test_cases_small_moe_layer_trains_like_torch():
    import gcdsl.ops

    losses = {}
    for name, fn in (("gcdsl", gcdsl.ops.grouped_mm), ("torch", lambda a, b, o: torch._grouped_mm(a, b, offs=o))):
        torch.manual_seed(0)
        h, i, e = 256, 128, 8
        x = torch.randn(512, h, device="cuda", dtype=torch.bfloat16)
        target = torch.randn(512, h, device="cuda")
        w1 = (torch.randn(e, 2 * i, h, device="cuda") / h ** 0.5).bfloat16().requires_grad_()
        w2 = (torch.randn(e, h, i, device="cuda") / i ** 0.5).bfloat16().requires_grad_()
        router = torch.randn(h, e, device="cuda", dtype=torch.bfloat16)
        opt = torch.optim.SGD([w1, w2], lr=0.5)
        losses[name] = []
        for _ in range(5):
            loss = (_moe_layer(fn, x, w1, w2, router) - target).pow(2).mean()
            opt.zero_grad()
            loss.backward()
            opt.step()
            losses[name].append(loss.item())
    assert losses["gcdsl"][-1] < losses["gcdsl"][0]  # it learns
    for mine, theirs in zip(losses["gcdsl"], losses["torch"]):
        assert abs(mine - theirs) <= 2e-3 * abs(theirs), losses


def test_cases_torch_compile_of_a_training_step():
    import gcdsl.ops

    a, b, ends = problem("2d3d", "row", "col", seed=3)
    a.requires_grad_()
    b.requires_grad_()

    end = int(ends[-1])  # what lies past offs[-1] is undefined: the loss reads the groups' rows

    @torch.compile(fullgraph=True)
    def step(a, b, ends):
        return gcdsl.ops.grouped_mm(a, b, ends)[:end].float().square().mean()

    step(a, b, ends).backward()
    a2, b2 = a.detach().clone().requires_grad_(), b.detach().clone().requires_grad_()
    gcdsl.ops.grouped_mm(a2, b2, ends)[:end].float().square().mean().backward()
    assert torch.allclose(a.grad[:end].float(), a2.grad[:end].float(), rtol=1e-2, atol=1e-3)
    assert torch.allclose(b.grad.float(), b2.grad.float(), rtol=1e-2, atol=1e-3)


@pytest.mark.parametrize("schedule, tile_n, cluster_m, tile_order", [
    ("cooperative", 256, 1, "m"), ("cooperative", 128, 1, "m"), ("cooperative", 64, 1, "m"), ("pingpong", 128, 1, "m"),
    ("pingpong", 64, 1, "m"), ("cooperative", 256, 2, "m"), ("cooperative", 128, 2, "m"),
    ("cooperative", 256, 2, "n"), ("pingpong", 128, 1, "n"), ("pingpong", 128, 2, "m")])
@pytest.mark.parametrize("out_dtype", [torch.bfloat16, torch.float32])
def test_swiglu_epilogue_against_float32(schedule, tile_n, cluster_m, tile_order, out_dtype):
    """grouped_mm_swiglu: silu(gate) * up of each group's rows, gate and up the two halves
    of b's N (2I = 768: several N-tiles, each of gate rows and the up rows 384 further on),
    against float32; the edge rows of ROWS and a shape of many tiles a CTA (both ping-pong
    warpgroups at work); rows past offs[-1] keep their poison. In pairs one CTA loads a
    tile's gate rows and the other its up rows, and groups end on odd M-tiles; a group's
    tiles M-steps or N-tiles fastest. The public op's default configuration (pairs on the
    second shape) gives the same."""
    import torch.nn.functional as F

    import gcdsl.ops
    from gcdsl.ops.grouped_cases import describe
    from gcdsl.ops.grouped_mm import grouped_mm_into

    for rows, k in ((ROWS, 200), ([3000, 0, 2500, 64, 4000, 0], 520)):
        g = torch.Generator(device="cuda").manual_seed(len(rows))
        ends = torch.tensor(rows).cumsum(0).to(torch.int32).cuda()
        t = int(ends[-1]) + TAIL
        x = torch.randn(t, k, device="cuda", dtype=torch.bfloat16, generator=g)
        w13 = torch.randn(len(rows), 768, k, device="cuda", dtype=torch.bfloat16, generator=g)  # (G, 2I, K)
        p = describe(x, w13.transpose(-2, -1), ends, out_dtype, activation="swiglu")
        out = torch.full(p.out_shape, float("nan"), device="cuda", dtype=out_dtype)
        grouped_mm_into(x, w13.transpose(-2, -1), ends, out, tile_n=tile_n, cluster_m=cluster_m, schedule=schedule,
                        activation="swiglu", tile_order=tile_order)
        bounds = [0] + ends.tolist()
        ref = torch.cat([F.silu(x[s:e].float() @ w13[i, :384].float().t()) * (x[s:e].float() @ w13[i, 384:].float().t())
                         for i, (s, e) in enumerate(zip(bounds, bounds[1:]))])
        for result in (out, gcdsl.ops.grouped_mm_swiglu(x, w13.transpose(-2, -1), ends, out_dtype)):
            err = ((result[:bounds[-1]].float() - ref).abs().max() / ref.abs().max()).item()
            assert err <= 1e-2, (rows[:3], err)
        assert torch.isnan(out[bounds[-1]:]).all()


def test_swiglu_gradients_against_float32_autograd():
    """grouped_mm_swiglu's backward (the pre-activation recomputed, SwiGLU's derivative, the
    gradients through grouped_mm's cases) against float32 autograd of the same layer,
    groups of ROWS (empty ones give zero weight gradients)."""
    import torch.nn.functional as F

    import gcdsl.ops

    g = torch.Generator(device="cuda").manual_seed(5)
    ends = torch.tensor(ROWS).cumsum(0).to(torch.int32).cuda()
    bounds = [0] + ends.tolist()
    x = torch.randn(bounds[-1], 192, device="cuda", generator=g).to(torch.bfloat16).requires_grad_()
    w13 = (torch.randn(len(ROWS), 512, 192, device="cuda", generator=g) / 14).to(torch.bfloat16).requires_grad_()
    dy = torch.randn(bounds[-1], 256, device="cuda", generator=g)
    (gcdsl.ops.grouped_mm_swiglu(x, w13.transpose(-2, -1), ends).float() * dy).sum().backward()
    x32, w32 = x.detach().float().requires_grad_(), w13.detach().float().requires_grad_()
    ref = torch.cat([F.silu(x32[s:e] @ w32[i, :256].t()) * (x32[s:e] @ w32[i, 256:].t())
                     for i, (s, e) in enumerate(zip(bounds, bounds[1:]))])
    (ref * dy).sum().backward()
    for got, want in ((x.grad, x32.grad), (w13.grad, w32.grad)):
        err = ((got.float() - want).abs().max() / want.abs().max()).item()
        assert err <= 2e-2, err
    assert (w13.grad[0] == 0).all() and (w13.grad[5] == 0).all()  # ROWS' empty groups
