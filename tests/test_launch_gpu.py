"""GPU tier: the descriptor-table launch path end to end. Skipped without a GPU.

One compiled function, called again and again while the tensors behind the table
change in every way torch allows; outputs are poisoned (NaN) before each call and
compared bit-exactly. Also through TVM-FFI (skipped without apache-tvm-ffi) and
through CUDA-graph replay.
"""
import pytest

torch = pytest.importorskip("torch")

pytestmark = pytest.mark.gpu

N = 6


@pytest.fixture(scope="module")
def kernel():
    from tests.kernels import launch_table as lt

    return lt


def _sources(lt):
    return [torch.randn(lt.TILE, device="cuda") for _ in range(N)]


def _assert_first_tiles(lt, out, srcs):
    bad = [b for b, t in enumerate(srcs) if not torch.equal(out[b], lt.expected(t))]
    assert not bad, f"CTAs {bad} read a stale or wrong descriptor"


def test_table_launch_follows_every_change_of_the_tensors(kernel):
    import cutlass.cute as cute
    from cutlass.cute.runtime import from_dlpack

    import gcdsl
    import gcdsl.launch

    lt = kernel
    compiled = cute.compile(lt.first_tiles, *lt.fake_args(N))
    maps = gcdsl.TensorMapTable(box=lt.TILE)
    srcs = _sources(lt)
    out = torch.empty((N, *lt.TILE), device="cuda")
    first, out_c = from_dlpack(srcs[0], assumed_align=16), from_dlpack(out, assumed_align=16)
    big = torch.randn(128, 64, device="cuda")

    steps = [
        ("first call", lambda: None, N),
        ("unchanged", lambda: None, N),
        ("contents written in place", lambda: srcs[0].mul_(2.0), N),
        ("one tensor swapped in the list", lambda: srcs.__setitem__(2, torch.randn(lt.TILE, device="cuda")), N + 1),
        ("set_ to new storage", lambda: srcs[4].set_(torch.randn(lt.TILE, device="cuda")), N + 2),
        ("resize_ to fewer rows (TMA fills zeros)", lambda: srcs[1].resize_(40, lt.TILE[1]), N + 3),
        ("a strided view swapped in", lambda: srcs.__setitem__(3, big[::2, :lt.TILE[1]]), N + 4),
        (".data = a tensor elsewhere", lambda: setattr(srcs[5], "data", torch.randn(lt.TILE, device="cuda")), N + 5),
    ]
    for name, change, encodes in steps:
        change()
        out.fill_(float("nan"))
        compiled(maps.encode(srcs), first, out_c, gcdsl.launch.current_stream())
        torch.cuda.synchronize()
        _assert_first_tiles(lt, out, srcs)
        assert maps.encodes == encodes, f"{name}: {maps.encodes} descriptors encoded, expected {encodes}"


def test_table_through_tvm_ffi(kernel):
    pytest.importorskip("tvm_ffi")
    import gcdsl
    import gcdsl.launch

    lt = kernel
    compiled = gcdsl.launch.compile_tvm_ffi(lt.first_tiles, *lt.fake_args(N, tvm_ffi=True))
    maps = gcdsl.TensorMapTable(box=lt.TILE)
    srcs = _sources(lt)
    out = torch.empty((N, *lt.TILE), device="cuda")
    for step in range(3):
        if step == 2:
            srcs[1] = torch.randn(lt.TILE, device="cuda")
        out.fill_(float("nan"))
        compiled(maps.encode(srcs), srcs[0], out)  # torch tensors directly; torch's current stream
        torch.cuda.synchronize()
        _assert_first_tiles(lt, out, srcs)
    raw = compiled.__tvm_ffi_object__()  # the tvm_ffi.Function itself
    out.fill_(float("nan"))
    raw(maps.encode(srcs), srcs[0], out)
    torch.cuda.synchronize()
    _assert_first_tiles(lt, out, srcs)
    assert maps.encodes == N + 1


def test_graph_replay_keeps_the_descriptors_of_its_capture(kernel):
    import cutlass.cute as cute
    from cutlass.cute.runtime import from_dlpack

    import gcdsl
    import gcdsl.launch

    lt = kernel
    compiled = cute.compile(lt.first_tiles, *lt.fake_args(N))
    maps = gcdsl.TensorMapTable(box=lt.TILE)
    srcs = _sources(lt)
    out = torch.empty((N, *lt.TILE), device="cuda")
    first, out_c = from_dlpack(srcs[0], assumed_align=16), from_dlpack(out, assumed_align=16)

    def launch(stream):
        compiled(maps.encode(srcs), first, out_c, stream)

    graph = gcdsl.launch.capture_graph(launch)
    for _ in range(2):
        out.fill_(float("nan"))
        graph.replay()
        torch.cuda.synchronize()
        _assert_first_tiles(lt, out, srcs)

    captured = list(srcs)
    srcs[0] = torch.randn(lt.TILE, device="cuda")
    maps.encode(srcs)  # the table's bytes change; the graph holds a copy from its capture
    out.fill_(float("nan"))
    graph.replay()
    torch.cuda.synchronize()
    _assert_first_tiles(lt, out, captured)

    graph = gcdsl.launch.capture_graph(launch)  # capture again to pick up the change
    out.fill_(float("nan"))
    graph.replay()
    torch.cuda.synchronize()
    _assert_first_tiles(lt, out, srcs)
