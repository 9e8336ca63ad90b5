"""gcdsl.ops.grouped_mm on a Hopper GPU (skipped without one).

Outputs are poisoned with NaN before every launch. Each result is checked against a
float32 reference (relative error <= 1e-2: max |out - ref| / max |ref| over the
groups' rows) and, for bf16, against torch._grouped_mm. Rows past offs[-1] must
still hold the poison: the last group's descriptor clips the store there.

    python -m pytest -q tests/test_grouped_mm.py
"""
import importlib

import pytest

torch = pytest.importorskip("torch")

pytestmark = pytest.mark.gpu

SPECIAL_ROWS = (0, 1, 127, 129, 2000)  # empty, one row, one short of a tile, one past, many tiles
TAIL = 5  # rows of `a` after offs[-1]


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


def run_poisoned(a, b, ends, out_dtype=None, cluster_m=None):
    from gcdsl.ops.grouped_mm import grouped_mm_into

    out = torch.full((a.shape[0], b.shape[2]), float("nan"), device="cuda", dtype=out_dtype or a.dtype)
    grouped_mm_into(a, b, ends, out, cluster_m=cluster_m)
    torch.cuda.synchronize()
    return out


def check(out, a, b, ends, tol=1e-2):
    end = int(ends[-1])
    ref = reference(a, b, ends)
    err = rel_err(out[:end], ref[:end])
    assert err <= tol, f"relative error {err:.3e}"
    assert torch.isnan(out[end:]).all(), "rows past offs[-1] were written"
    return err


@pytest.mark.parametrize("groups", [1, 8, 64, 128])
@pytest.mark.parametrize("n, k", [(392, 200), (328, 1000)])  # 128x256 and 128x128 tiles; K % 64 != 0
@pytest.mark.parametrize("cluster_m", [1, 2])  # single CTAs; pairs sharing B by multicast
def test_ragged_groups_against_fp32_and_torch(groups, n, k, cluster_m):
    rows = ragged_rows(groups, seed=groups)
    a, b, ends = make_problem(rows, n, k)
    out = run_poisoned(a, b, ends, cluster_m=cluster_m)
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
        check(run_poisoned(a, b, ends, cluster_m=cluster_m), a, b, ends)


def test_public_op_allocates_and_accepts_cuda_offsets():
    import gcdsl.ops

    rows = ragged_rows(8, seed=5)
    a, b, ends = make_problem(rows, 512, 256)
    out_cpu_offs = gcdsl.ops.grouped_mm(a, b, ends)
    out_cuda_offs = gcdsl.ops.grouped_mm(a, b, ends.cuda())
    end = int(ends[-1])
    assert torch.equal(out_cpu_offs[:end], out_cuda_offs[:end])
    assert rel_err(out_cpu_offs[:end], reference(a, b, ends)[:end]) <= 1e-2


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


def test_repeated_calls_reuse_the_output_memory_and_its_descriptors():
    """Each call allocates its output; with the same `offs` the allocator hands back the
    same memory (nothing of gcdsl's may hold the last output), so nothing is re-encoded."""
    import gcdsl.ops

    gm = importlib.import_module("gcdsl.ops.grouped_mm")
    a, b, ends = make_problem(ragged_rows(16, seed=9), 256, 128)
    first = gcdsl.ops.grouped_mm(a, b, ends)
    address = first.data_ptr()
    del first
    (plan,) = [p for key, p in gm._PLANS.items() if key[:5] == (torch.bfloat16, torch.bfloat16, 16, 256, 128)]
    encodes = plan.descs.encodes
    for _ in range(3):
        out = gcdsl.ops.grouped_mm(a, b, ends)
        assert out.data_ptr() == address
        del out
    assert plan.descs.encodes == encodes


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
    assert torch.equal(compiled(a, b, ends)[:end], moe_layer(a, b, ends)[:end])


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
