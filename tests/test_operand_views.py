"""The grouped GEMM's views of B and of its output, read at trace time without a GPU.

The descriptors are encoded from these views (`HopperGroupedGemm.operands`), and a tile's
stores address the output through `output_sub_tiles`; a wrong stride or coordinate there
puts a whole tile in the wrong place. Each view is checked against the tensors' memory as
torch lays them out:
- B in either major: each group's element (k, n) where torch keeps it;
- B of the SwiGLU gate-up GEMM: N-tile j's first half the gate rows j h ... j h + h - 1,
  its second half the up rows I further on (h = tile_n / 2);
- the ragged output (the package docstring's descriptor C): a tile's stores land on the
  rows of its own M-tile of its group, each once, and TMA's clipping at the descriptor's
  extents drops every row past the group's end;
- the grouped reduction (ragged K): the columns of T a group's k-tiles load, and in a
  pair the two halves of each B tile, one a CTA;
- ragged M in pairs: the two halves of each B tile, one a CTA; with SwiGLU, the gate
  rows and their up rows.
"""
import random
import warnings

import pytest

cutlass = pytest.importorskip("cutlass")
torch = pytest.importorskip("torch")

import cutlass.cute as cute  # noqa: E402

from gcdsl.ops import hopper_grouped_gemm as hgg  # noqa: E402


def _traced(body) -> None:
    """Runs `body()` inside a traced function (the DSL's layouts need one), all static."""

    @cute.jit
    def probe():
        body()

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        probe()


def _b_offsets(gemm, coordinates) -> list:
    """The element offsets of B's view at (n, k, group) coordinates, from B's start."""
    offsets = []

    def body():
        pointer = cute.make_ptr(gemm.ab_dtype, 1 << 20, cute.AddressSpace.gmem, assumed_align=16)
        b = gemm.operands(pointer, pointer, pointer, 64)[1]
        offsets.extend(int(cute.crd2idx(coordinate, b.layout)) for coordinate in coordinates)

    _traced(body)
    return offsets


def _offset(tensor, *index) -> int:
    return sum(i * s for i, s in zip(index, tensor.stride()))


@pytest.mark.parametrize("b_major", ["k", "n"])
def test_b_view_addresses_each_groups_weights_in_either_major(b_major):
    """b is (G, K, N) as torch._grouped_mm takes it, K or N contiguous."""
    groups, n, k = 3, 256, 192
    gemm = hgg.HopperGroupedGemm(hgg.GemmConfig(cutlass.BFloat16, cutlass.BFloat16, groups, n, k, 128,
                                                b_major=b_major))
    b = torch.empty(groups, n, k).transpose(1, 2) if b_major == "k" else torch.empty(groups, k, n)
    rng = random.Random(0)
    points = [(rng.randrange(groups), rng.randrange(k), rng.randrange(n)) for _ in range(64)]
    points.append((groups - 1, k - 1, n - 1))
    assert _b_offsets(gemm, [(nn, kk, g) for g, kk, nn in points]) == [_offset(b, *point) for point in points]


@pytest.mark.parametrize("tile_n", [128, 256])
def test_swiglu_b_tile_holds_gate_rows_then_their_up_rows(tile_n):
    """w1 is (G, 2I, K), gate rows first; the GEMM's b is its transpose (G, K, 2I). Column p
    of N-tile j is gate row j h + p for p < h, up row I + j h + p - h otherwise."""
    groups, inter, k = 2, 384, 128
    half = tile_n // 2
    gemm = hgg.HopperGroupedGemm(hgg.GemmConfig(cutlass.BFloat16, cutlass.BFloat16, groups, 2 * inter, k, tile_n,
                                                activation="swiglu"))
    w1 = torch.empty(groups, 2 * inter, k)
    rng = random.Random(1)
    points = [(g, j, p, rng.randrange(k)) for g in range(groups) for j in range(inter // half) for p in range(tile_n)
              if rng.random() < 0.1] + [(groups - 1, inter // half - 1, tile_n - 1, k - 1)]
    wanted = [_offset(w1, g, j * half + p if p < half else inter + j * half + p - half, kk) for g, j, p, kk in points]
    assert _b_offsets(gemm, [(j * tile_n + p, kk, g) for g, j, p, kk in points]) == wanted


def _stored(gemm, total: int, start: int, rows: int, m_tile: int, n_tile: int) -> tuple:
    """(rows, columns) of the output that a tile's stores write: its coordinates from
    `output_sub_tiles`, each clipped to the extents of the output's view from `operands`
    (as TMA clips a box), its address through the view's strides from the view's base,
    `total` rows before the output (package docstring, descriptor C)."""
    facts = {}

    def body():
        pointer = cute.make_ptr(gemm.c_dtype, 1 << 20, cute.AddressSpace.gmem, assumed_align=16)
        view = gemm.operands(pointer, pointer, pointer, total)[2].layout
        extents, strides = view.shape, view.stride
        gC = gemm.output_sub_tiles(cute.make_identity_tensor(extents), total, 0, start, rows, m_tile, n_tile)
        (tile_rows, sub_n), (_, subs) = cute.shape(gC)
        # Rows along each sub-tile's first column, columns along the first row, and random
        # points that must agree with both (the coordinates are affine in row and column).
        facts["row_coordinates"] = [tuple(gC[((r, 0), (0, 0))]) for r in range(tile_rows)]
        facts["column_coordinates"] = [tuple(gC[((0, c), (0, s))]) for s in range(subs) for c in range(sub_n)]
        rng = random.Random(total + start + rows)
        facts["points"] = [((r, c, s), tuple(gC[((r, c), (0, s))]))
                           for r, c, s in [(rng.randrange(tile_rows), rng.randrange(sub_n), rng.randrange(subs))
                                           for _ in range(16)]]
        facts["view"] = tuple(int(e) for e in extents), tuple(int(s) for s in strides)
        facts["sub_n"] = sub_n

    _traced(body)
    extents, strides = facts["view"]
    for (r, c, s), point in facts["points"]:
        x, _, z = facts["row_coordinates"][r]
        assert point == (x, facts["column_coordinates"][s * facts["sub_n"] + c][1], z), (r, c, s)
    assert len({point[2] for point in facts["row_coordinates"] + facts["column_coordinates"]}) == 1  # one group
    width = strides[0]

    def inside(point):  # TMA writes no element whose coordinate is past an extent
        return all(0 <= v < e for v, e in zip(point, extents))

    def address(point):  # from the view's base, `total` rows before the output
        return -total * width + sum(v * stride for v, stride in zip(point, strides))

    written_rows = [address(p) // width for p in facts["row_coordinates"] if inside(p)]
    written_columns = [address(p) % width for p in facts["column_coordinates"] if inside(p)]
    return written_rows, written_columns, width


@pytest.mark.parametrize("total, start, rows", [
    (700, 37, 300),   # a group in the middle: two full M-tiles and a partial one
    (700, 0, 700),    # one group of every row
    (700, 699, 1),    # the last row alone
    (700, 500, 200),  # the last group, ending at the extent
    (256, 0, 128),    # a group of exactly one M-tile
    (129, 1, 128),    # ... not at row 0
])
@pytest.mark.parametrize("activation", ["none", "swiglu"])
def test_a_tiles_store_reaches_exactly_its_groups_rows_through_the_ragged_view(total, start, rows, activation):
    n, tile_n = 512, 128
    gemm = hgg.HopperGroupedGemm(hgg.GemmConfig(cutlass.BFloat16, cutlass.BFloat16, 8, n, 256, tile_n,
                                                activation=activation))
    tile_m, out_tile_n = gemm.tile_m, gemm.out_tile_n
    out_n = n // 2 if activation == "swiglu" else n
    for m_tile in range(-(-rows // tile_m)):
        for n_tile in (0, out_n // out_tile_n - 1):
            written_rows, written_columns, width = _stored(gemm, total, start, rows, m_tile, n_tile)
            assert width == out_n
            first = start + m_tile * tile_m
            assert written_rows == list(range(first, min(first + tile_m, start + rows))), (m_tile, written_rows[:3])
            assert written_columns == list(range(n_tile * out_tile_n, (n_tile + 1) * out_tile_n)), n_tile


def _group_columns_read(gemm, operand: int, total: int, start: int, length: int) -> list:
    """Ragged K: the columns of T that a group's k-tiles load from operand 0 (A) or 1 (B),
    each k-tile's columns in order (None where TMA reads zeros: a coordinate past the
    view's extents). The producer's view: `group_k_tiles`, then `group_columns` of the
    operand's view from `operands`."""
    read = []

    def body():
        pointer = cute.make_ptr(gemm.ab_dtype, 1 << 20, cute.AddressSpace.gmem, assumed_align=16)
        view = gemm.operands(pointer, pointer, pointer, total)[operand].layout
        extents, strides = tuple(int(e) for e in view.shape), tuple(int(s) for s in view.stride)
        k_tiles, k_first = gemm.group_k_tiles(length)
        tile_k = gemm.tile_mnk[2]
        columns = cute.local_tile(gemm.group_columns(cute.make_identity_tensor(view.shape), start, k_first),
                                  (gemm.tile_m, tile_k), (0, None))
        for kk in range(k_tiles):
            for c in range(tile_k):
                point = tuple(int(v) for v in columns[(0, c, kk)])
                inside = all(0 <= v < e for v, e in zip(point, extents))
                # row 0: the address is the column's times T's stride (mode 1 in either view)
                read.append(sum(v * s for v, s in zip(point, strides)) // strides[1] if inside else None)

    _traced(body)
    return read


@pytest.mark.parametrize("majors", [("m", "n"), ("k", "k")])
@pytest.mark.parametrize("start, length", [(0, 64), (64, 200), (136, 8), (512, 1000)])
def test_grouped_reduction_loads_each_groups_columns_once_ending_at_its_end(majors, start, length):
    """With T strided (M- or N-major) the group's view starts at its first column: the k-tiles
    read exactly its columns, and zeros before them. With T contiguous (K-major) the plain
    view: the k-tiles read the columns before the group that fill the first k-tile out,
    which the consumers zero in shared memory, then the group's own."""
    a_major, b_major = majors
    total = 1600
    gemm = hgg.HopperGroupedGemm(hgg.GemmConfig(cutlass.BFloat16, cutlass.Float32, 4, 256, 0, 128, ragged="k",
                                                a_major=a_major, b_major=b_major, m=256))
    tile_k = gemm.tile_mnk[2]
    before = -length % tile_k
    for operand, major in ((0, a_major), (1, b_major)):
        read = _group_columns_read(gemm, operand, total, start, length)
        group = list(range(start, start + length))
        if major == "k":
            assert read == list(range(start - before, start)) + group, (operand, read[:4])
        else:
            assert read == [None] * before + group, (operand, read[:4])


def _pair_b_boxes(gemm, total: int, start: int, length: int, n_tile: int) -> dict:
    """Ragged K in pairs: rank: the origin of each k-tile's TMA box of B that the CTA of
    that rank loads (`group_b_boxes`, through the atom of `tma_atoms`)."""
    origins = {}

    def body():
        pointer = cute.make_ptr(gemm.ab_dtype, 1 << 20, cute.AddressSpace.gmem, assumed_align=16)
        out = cute.make_ptr(gemm.c_dtype, 1 << 20, cute.AddressSpace.gmem, assumed_align=16)
        a, b, c = gemm.operands(pointer, pointer, out, total)
        _, a_smem, b_smem, c_smem = gemm.mma_and_smem_layouts()
        tma_b, mB = gemm.tma_atoms(a, b, c, a_smem, b_smem, c_smem)[2:4]
        sB = cute.make_tensor(cute.make_ptr(gemm.ab_dtype, 1024, cute.AddressSpace.smem, assumed_align=1024),
                              b_smem.outer)
        k_tiles, k_first = gemm.group_k_tiles(length)
        for rank in range(gemm.cluster_m):
            boxes = gemm.group_b_boxes(tma_b, mB, sB, start, k_first, n_tile, rank)
            origins[rank] = [tuple(int(v) for v in boxes[(0, kk)]) for kk in range(k_tiles)]

    _traced(body)
    return origins


@pytest.mark.parametrize("b_major", ["n", "k"])
def test_a_pairs_ctas_load_the_two_halves_of_each_b_tile_in_the_grouped_reduction(b_major):
    """In a pair both CTAs need the same B tile; each loads half of it and multicasts it to
    both: rank 0's box at the tile's origin, rank 1's half a tile further along N or K."""
    tile_n, total, start, length, n_tile = 256, 1600, 136, 200, 1
    gemm = hgg.HopperGroupedGemm(hgg.GemmConfig(cutlass.BFloat16, cutlass.Float32, 4, 512, 0, tile_n, ragged="k",
                                                a_major="m", b_major=b_major, m=512, cluster_m=2))
    tile_k = gemm.tile_mnk[2]
    k_tiles, k_first = gemm.group_k_tiles(length)
    origins = _pair_b_boxes(gemm, total, start, length, n_tile)
    # TMA coordinates, the contiguous mode first: (n, column from the group's start, the
    # start) through the T-strided view, (column of T, n) through the plain one.
    if b_major == "n":
        tile_at, halves = (lambda column: (n_tile * tile_n, column, start)), ((tile_n // 2, 0, 0), (0, tile_k // 2, 0))
    else:
        tile_at, halves = (lambda column: (start + column, n_tile * tile_n)), ((0, tile_n // 2), (tile_k // 2, 0))
    for kk in range(k_tiles):
        assert origins[0][kk] == tile_at(k_first + kk * tile_k), (kk, origins[0][kk])
        step = tuple(b - a for a, b in zip(origins[0][kk], origins[1][kk]))
        assert step in halves, (kk, step)


def _pair_b_origins(gemm, n_tile: int, k_tile: int, group: int) -> dict:
    """Ragged M in pairs: rank: the origin of the TMA box of B that the CTA of that rank
    loads for (n_tile, k_tile, group) (`b_boxes`, through the atom of `tma_atoms`)."""
    origins = {}

    def body():
        pointer = cute.make_ptr(gemm.ab_dtype, 1 << 20, cute.AddressSpace.gmem, assumed_align=16)
        a, b, c = gemm.operands(pointer, pointer, pointer, 640)
        _, a_smem, b_smem, c_smem = gemm.mma_and_smem_layouts()
        tma_b, mB = gemm.tma_atoms(a, b, c, a_smem, b_smem, c_smem)[2:4]
        sB = cute.make_tensor(cute.make_ptr(gemm.ab_dtype, 1024, cute.AddressSpace.smem, assumed_align=1024),
                              b_smem.outer)
        for rank in range(gemm.cluster_m):
            _, boxes = gemm.b_boxes(tma_b, mB, sB, rank)
            origins[rank] = tuple(int(v) for v in boxes[(0, n_tile, k_tile, group)])

    _traced(body)
    return origins


@pytest.mark.parametrize("activation", ["none", "swiglu"])
def test_a_pairs_ctas_load_the_two_halves_of_each_b_tile_with_ragged_rows(activation):
    """Ragged M in pairs: rank 0 loads the first half of the B tile (its first tile_n / 2
    rows of w, N-tile j's), rank 1 the second. With SwiGLU the tile's first half is its
    gate rows j h ... and its second their up rows I + j h ... (h = tile_n / 2): each CTA
    loads one of the two, and the tile's columns pair as the epilogue reads them."""
    groups, n, k, tile_n = 3, 2048, 256, 256
    gemm = hgg.HopperGroupedGemm(hgg.GemmConfig(cutlass.BFloat16, cutlass.BFloat16, groups, n, k, tile_n,
                                                cluster_m=2, activation=activation))
    tile_k, half = gemm.tile_mnk[2], tile_n // 2
    for n_tile, k_tile, group in [(0, 0, 0), (2, 3, 1), (n // tile_n - 1, k // tile_k - 1, groups - 1)]:
        origins = _pair_b_origins(gemm, n_tile, k_tile, group)
        if activation == "swiglu":  # TMA coordinates (k, row in the half, half, N-tile, group)
            rows = {rank: half_ * (n // 2) + tile * half + row for rank, (_, row, half_, tile, _) in origins.items()}
            wanted = {0: n_tile * half, 1: n // 2 + n_tile * half}
        else:  # (k, n, group)
            rows = {rank: origin[1] for rank, origin in origins.items()}
            wanted = {0: n_tile * tile_n, 1: n_tile * tile_n + half}
        assert rows == wanted, (n_tile, origins)
        assert all((origin[0], origin[-1]) == (k_tile * tile_k, group) for origin in origins.values()), origins
