"""Calling compiled kernels cheaply: descriptor tables, TVM-FFI, CUDA graphs.

Host cost of one call of a compiled `@cute.jit` function, by what it carries:

- A `List[cute.CopyAtom]` built inside the jit function from `List[cute.Tensor]`
  is re-encoded on every call, one `cuTensorMapEncodeTiled` per atom, and every
  tensor of the list is marshalled: the cost grows with N.
- A `gcdsl.TensorMapTable` encoded outside the jit function travels as ONE
  by-value argument (`GridConstantTensor`), whatever N is. `encode(tensors)`
  re-encodes only entries whose tensor changed; for unchanged tensors it tests
  each entry's identity (not at all for the same tuple again) and reads the
  version counter and data pointer of each distinct root (one for views of one
  tensor). The jit function still builds one template atom.
- TVM-FFI (`cute.compile(fn, *args, options="--enable-tvm-ffi")`, package
  `apache-tvm-ffi`): arguments are converted in C; torch tensors may be passed
  directly, a `GridConstantTensor` goes as an opaque pointer to its bytes and a
  `cute.Pointer` as an integer address. See `compile_tvm_ffi`; the tutorials
  and `gcdsl.ops` call their kernels this way.
- A CUDA graph (`capture_graph`) replays the launch with every parameter frozen
  at capture time, descriptor tables included: re-capture after `encode`
  changes an entry.

    maps = gcdsl.TensorMapTable(box=TILE)
    compiled = cute.compile(run, maps.encode(srcs), first, out, stream)
    compiled(maps.encode(srcs), first, out, gcdsl.launch.current_stream())   # every call

    graph = gcdsl.launch.capture_graph(lambda s: compiled(maps.encode(srcs), first, out, s))
    graph.replay()
"""
from __future__ import annotations

from typing import Any, Callable


def current_stream() -> Any:
    """torch's current CUDA stream as a `cuda.CUstream`, for a jit function's stream argument.

    Launching on it keeps the kernel in torch's stream order, and inside a
    `torch.cuda.graph` capture it is the capturing stream.
    """
    import cuda.bindings.driver as cuda
    import torch

    return cuda.CUstream(torch.cuda.current_stream().cuda_stream)


def capture_graph(launch: Callable[[Any], Any], *, warmup: int = 1) -> Any:
    """A `torch.cuda.CUDAGraph` of `launch(stream)`; replay it with `graph.replay()`.

    `launch` must put its work on the stream it is given (pass it as the jit
    function's `stream` argument). It runs `warmup` times on a side stream first,
    as torch requires before a capture (and the DSL loads its module there), then
    once under capture. The graph keeps the kernel parameters of that call: a
    `TensorMapTable` entry encoded later does not reach it, nor does a new
    `GridConstantTensor` content; capture again for those.
    """
    import torch

    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):
        for _ in range(warmup):
            launch(current_stream())
    torch.cuda.current_stream().wait_stream(side)
    torch.cuda.synchronize()
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        launch(current_stream())
    return graph


def compile_tvm_ffi(fn: Callable, *args: Any, **kwargs: Any) -> Any:
    """`cute.compile(fn, *args, options="--enable-tvm-ffi")`, with a clear error without the package.

    Compile with fake tensors (`cute.runtime.make_fake_compact_tensor`) or
    `from_dlpack(t, enable_tvm_ffi=True)`, and for the stream
    `cute.runtime.make_fake_stream(use_tvm_ffi_env_stream=True)`: the compiled
    function then takes no stream and launches on torch's current stream. Call
    it with torch tensors where the jit function takes `cute.Tensor`, and with
    `GridConstantTensor`s (tables, `TensorMapTable.encode(...)`) as they are.
    """
    import cutlass.cute as cute

    try:
        import tvm_ffi  # noqa: F401
    except ImportError as exc:
        raise ImportError("TVM-FFI calls need the apache-tvm-ffi package: pip install 'apache-tvm-ffi>=0.1.15,<0.2' (a dependency of gcdsl)") from exc
    options = kwargs.pop("options", "")
    return cute.compile(fn, *args, options=f"{options} --enable-tvm-ffi".strip(), **kwargs)
