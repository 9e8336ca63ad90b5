"""CUDA threads simulated on the CPU, for tests that run a kernel's code as plain Python.

The plain Python function the DSL traces for a `@cute.jit` function or a
`@gcdsl.kernel` (`plain`) runs once a simulated thread, with stand-ins for the DSL
names it reads (`dsl_shims`) set as its module's globals:

    threads = Threads(32)                      # a warp; Threads(n) a CTA of n threads
    install(monkeypatch, schedule)             # the module's cutlass, cute, trap_unless, ...
    body = plain(schedule.Schedule.build_schedule)
    results = threads.run(lambda: body(...))   # body's threads call cute.arch.lane_idx(), ...

- `Threads`: n threads of one CTA, a Python thread each, in step at each barrier
  (`sync_threads`) and, within each warp of 32, at each shuffle, ballot or warp sum;
  every thread must reach the same ones in the same order, as the hardware asks. A
  thread that raises stops the others (`run` raises its error); threads that part
  ways are an error too, after STEP_TIMEOUT_S; atomics are under one lock. `run_grid` runs
  several CTAs at once, for kernels whose CTAs wait for each other.
- `Shared(n)`: a 1-D array of shared or global memory, a list, bounds-checked, that
  atomics can address (`.iterator + i`).
- `Tensor`: a numpy array seen through a CuTe layout (shape and stride, nested
  tuples): `t[(r, (None, c))]` slices (a sub-tensor whose `load()` is a `Vector`), a
  full coordinate reads or writes an element, every coordinate bounds-checked. Its
  `iterator` is a pointer with an address (`Memory`), so that kernel code may move it
  and build tensors on it (`cute.make_ptr`, `cute.make_tensor`).
- `SharedField`: a field of a CTA's shared memory (`Threads.storage` holds the CTA's,
  what the shared-memory allocator hands out).
- mbarriers (`mbarrier_init`, `mbarrier_arrive_and_expect_tx`, `mbarrier_expect_tx`,
  `mbarrier_wait`): a phase completes once its arrivals are in and the bytes they
  expect have come by bulk copies (`cute.copy` with `mbar_ptr`, done at once); a wait
  for a parity lasts while the current phase has it, as on the GPU.
- `elect_one()`: its block runs in every lane, as Python cannot skip it; the mbarrier
  calls in it act once, in lane 0 (the bulk-group waits, no-ops here, in every lane).
- A failed `trap_unless` raises `Trap` with its message: the kernel ends there.
"""
from __future__ import annotations

import contextlib
import math
import threading
import time
import types
from typing import Any, Callable, List, Optional, Sequence, Tuple

import numpy as np

STEP_TIMEOUT_S = 20.0
WARP = 32
_CURRENT = threading.local()  # the simulated thread a Python thread runs: (its CTA, its index)


class Threads:
    """One CTA of `count` threads (a multiple of 32, or fewer than 32 for one part-warp),
    run once."""

    def __init__(self, count: int = 32, block: Tuple[int, int, int] = (0, 0, 0), first: int = 0) -> None:
        """`first`: the first thread's index in the CTA (a multiple of 32), where the
        threads run are some of its warps: `thread_idx` and `warp_idx` count from it."""
        self.count, self.block, self.first = count, block, first
        self._cta = threading.Barrier(count, timeout=STEP_TIMEOUT_S)
        warps = -(-count // WARP)
        self._warps = [threading.Barrier(min(WARP, count - WARP * w), timeout=STEP_TIMEOUT_S) for w in range(warps)]
        self._slots: List[List[Any]] = [[None] * count, [None] * count]  # (a warp's steps take turns)
        self.storage: Any = None  # the CTA's shared memory, where a test gives it one

    # -- the running thread ---------------------------------------------------------
    @staticmethod
    def current() -> "Threads":
        return _CURRENT.threads

    def index(self) -> int:
        return _CURRENT.index

    def lane(self) -> int:
        return _CURRENT.index % WARP

    # -- collectives ------------------------------------------------------------------
    def exchange(self, value: Any) -> List[Any]:
        """Every lane's `value` in this thread's warp, by lane: the step each warp
        collective below takes. Steps write two sets of slots in turn: a lane that
        writes step k + 1's has passed step k's wait, which every lane had reached after
        reading step k - 1's, the set it overwrites."""
        index = self.index()
        first = index - index % WARP
        step = self._warps[index // WARP]
        slots = self._slots[_CURRENT.exchanges % 2]
        _CURRENT.exchanges += 1
        slots[index] = value
        step.wait()
        return slots[first:first + step.parties]

    def sync(self) -> None:
        """`bar.sync` of the whole CTA."""
        self._cta.wait()

    def shuffle_up(self, value: Any, delta: int) -> Any:
        """`shfl.sync.up`: lane l gets lane l - delta's value; lanes below delta keep their own."""
        lane = self.lane()
        values = self.exchange(value)
        return values[lane - delta] if lane >= delta else value

    def shuffle(self, value: Any, source: int) -> Any:
        """`shfl.sync.idx`: every lane gets lane `source`'s value."""
        return self.exchange(value)[source]

    def shuffle_xor(self, value: Any, mask: int) -> Any:
        """`shfl.sync.bfly`: lane l gets lane l ^ mask's value."""
        return self.exchange(value)[self.lane() ^ mask]

    def ballot(self, predicate: Any) -> int:
        """`vote.ballot.sync`: bit l set where lane l's predicate holds."""
        return sum(1 << lane for lane, holds in enumerate(self.exchange(bool(predicate))) if holds)

    def warp_sum(self, value: Any) -> Any:
        """The warp's sum of `value`, in every lane (summed in lane order)."""
        total = 0.0
        for v in self.exchange(value):
            total = total + v
        return total

    # -- running ------------------------------------------------------------------------
    def run(self, body: Callable[[], Any]) -> List[Any]:
        """`body()` in each thread; what each returned, by thread."""
        return run_grid([self], body)[0]


def run_grid(ctas: Sequence[Threads], body: Callable[[], Any]) -> List[List[Any]]:
    """`body()` in every thread of every CTA at once; what each returned, by CTA and thread."""
    results: List[List[Any]] = [[None] * cta.count for cta in ctas]
    errors: List[BaseException] = []
    stranded: List[Tuple[int, int]] = []
    failed = threading.Event()  # (ends the spin waits on other CTAs too)

    def thread(c: int, index: int) -> None:
        _CURRENT.threads, _CURRENT.index, _CURRENT.failed, _CURRENT.exchanges = ctas[c], index, failed, 0
        try:
            results[c][index] = body()
        except threading.BrokenBarrierError:
            stranded.append((c, index))  # another thread failed first, or the threads parted ways
        except BaseException as exc:  # noqa: BLE001 - reported below
            errors.append(exc)
            failed.set()
            for cta in ctas:
                cta._cta.abort()
                for step in cta._warps:
                    step.abort()

    old_stack = threading.stack_size(256 * 1024)  # (thousands of threads for a grid)
    try:
        threads = [threading.Thread(target=thread, args=(c, i)) for c, cta in enumerate(ctas) for i in range(cta.count)]
    finally:
        threading.stack_size(old_stack)
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    if errors:
        raise errors[0]
    if stranded:
        raise AssertionError(f"threads (CTA, thread) {sorted(stranded)[:8]}... waited at a barrier or shuffle "
                             "that the others never reached")
    return results


# -- memory ------------------------------------------------------------------------------
class Pointer:
    """An element of an array (a list or a numpy array); with `memory`, also an address."""

    def __init__(self, array: Any, offset: int = 0, memory: Optional["Memory"] = None) -> None:
        self.array, self.offset, self.memory = array, offset, memory

    def __add__(self, offset: int) -> "Pointer":
        return Pointer(self.array, self.offset + offset, self.memory)

    def toint(self) -> int:
        return self.memory.address_of(self.array, self.offset)


class Address:
    """`cute.make_ptr`'s: an address, resolved to its array when a tensor is made on it."""

    def __init__(self, memory: "Memory", address: int) -> None:
        self.memory, self.address = memory, address


class Memory:
    """Arrays at addresses of their own (each 2^40 bytes apart), so that kernel code may
    compute addresses (`iterator.toint() + bytes`) and make tensors on them."""

    SPAN = 1 << 40

    def __init__(self) -> None:
        self._arrays: List[Tuple[np.ndarray, int]] = []  # (array, bytes an element)

    def tensor(self, array: np.ndarray, layout: Tuple[Any, Any], element_bytes: int) -> "Tensor":
        """`array` (flat, its elements as the kernel's type holds them) seen through `layout`."""
        self._arrays.append((array, element_bytes))
        return Tensor(Pointer(array, 0, self), layout)

    def address_of(self, array: np.ndarray, offset: int) -> int:
        for i, (known, element_bytes) in enumerate(self._arrays):
            if known is array:
                return (i + 1) * self.SPAN + offset * element_bytes
        raise AssertionError("an address of an array the memory does not hold")

    def pointer_at(self, address: int) -> Pointer:
        i, byte = divmod(address, self.SPAN)
        array, element_bytes = self._arrays[i - 1]
        if byte % element_bytes:
            raise AssertionError(f"address {address:#x} is not on an element of its array")
        return Pointer(array, byte // element_bytes, self)


def make_layout(shape: Any, stride: Any = None) -> Tuple[Any, Any]:
    """(shape, stride), compact and column-major (CuTe's default) where no stride is given."""
    return (shape, _compact(shape, 1)[0] if stride is None else stride)


def _compact(shape: Any, step: int) -> Tuple[Any, int]:
    if isinstance(shape, tuple):
        strides = []
        for mode in shape:
            stride, step = _compact(mode, step)
            strides.append(stride)
        return tuple(strides), step
    return step, step * shape


def _size(shape: Any) -> int:
    return math.prod(_size(mode) for mode in shape) if isinstance(shape, tuple) else shape


def _slice(shape: Any, stride: Any, coordinate: Any) -> Tuple[int, list]:
    """(offset, [(shape, stride) of each mode the coordinate leaves open]) of a coordinate:
    None keeps a mode, an int picks in it (colexicographically in a nested mode)."""
    if coordinate is None:
        return 0, [(shape, stride)]
    if isinstance(shape, tuple):
        if not isinstance(coordinate, tuple):  # an int for a nested mode
            if not 0 <= coordinate < _size(shape):
                raise IndexError(f"coordinate {coordinate} outside a mode of {_size(shape)}")
            parts = []
            for mode in shape:
                parts.append(coordinate % _size(mode))
                coordinate //= _size(mode)
            coordinate = tuple(parts)
        if len(coordinate) != len(shape):
            raise IndexError(f"coordinate {coordinate} for a mode of shape {shape}")
        offset, kept = 0, []
        for mode, mode_stride, c in zip(shape, stride, coordinate):
            o, k = _slice(mode, mode_stride, c)
            offset, kept = offset + o, kept + k
        return offset, kept
    if not 0 <= coordinate < shape:
        raise IndexError(f"coordinate {coordinate} outside a mode of {shape}")
    return coordinate * stride, []


def _offsets(kept: list) -> List[int]:
    """The offsets of every element of the kept modes, colexicographically."""
    offsets = [0]
    for shape, stride in kept:
        if isinstance(shape, tuple):
            inner = _offsets(list(zip(shape, stride)))
        else:
            inner = [i * stride for i in range(shape)]
        offsets = [o + i for i in inner for o in offsets]
    return offsets


class Tensor:
    """A numpy array (behind `pointer`) through a layout; see the module docstring."""

    def __init__(self, pointer: Pointer, layout: Tuple[Any, Any]) -> None:
        self.pointer, self.layout = pointer, layout

    element_type = float  # (what a store's conversion names: the values stay float64)

    @property
    def iterator(self) -> Pointer:
        return self.pointer

    def _at(self, coordinate: Any) -> Tuple[int, list]:
        offset, kept = _slice(*self.layout, coordinate)
        return self.pointer.offset + offset, kept

    def __getitem__(self, coordinate: Any) -> Any:
        offset, kept = self._at(coordinate)
        if kept:
            shape = tuple(s for s, _ in kept)
            return Tensor(Pointer(self.pointer.array, offset, self.pointer.memory),
                          (shape if len(shape) > 1 else shape[0],
                           tuple(d for _, d in kept) if len(kept) > 1 else kept[0][1]))
        return self._element(offset)

    def __setitem__(self, coordinate: Any, value: Any) -> None:
        offset, kept = self._at(coordinate)
        if kept:
            raise IndexError(f"a store of one value through the slice {coordinate}")
        self._check(offset)
        self.pointer.array[offset] = value

    def _check(self, offset: int) -> None:
        if not 0 <= offset < len(self.pointer.array):
            raise IndexError(f"element {offset} outside an array of {len(self.pointer.array)}")

    def _element(self, offset: int) -> Any:
        self._check(offset)
        return self.pointer.array[offset]

    def _all(self) -> List[int]:
        base = self.pointer.offset
        offsets = [base + o for o in _offsets([self.layout])]
        for o in offsets:
            self._check(o)
        return offsets

    def load(self) -> "Vector":
        return Vector(np.array([self.pointer.array[o] for o in self._all()], dtype=np.float64))

    def store(self, vector: "Vector") -> None:
        for o, value in zip(self._all(), vector.values, strict=True):
            self.pointer.array[o] = value

    def fill(self, value: Any) -> None:
        for o in self._all():
            self.pointer.array[o] = value


class Vector:
    """A register vector of fp32 values (float64 here)."""

    def __init__(self, values: np.ndarray) -> None:
        self.values = np.asarray(values, dtype=np.float64)

    def __getitem__(self, index: int) -> float:
        return self.values[index]

    def __add__(self, other: Any) -> "Vector":
        return Vector(self.values + (other.values if isinstance(other, Vector) else other))

    __radd__ = __add__

    def __mul__(self, other: Any) -> "Vector":
        return Vector(self.values * (other.values if isinstance(other, Vector) else other))

    __rmul__ = __mul__

    def to(self, dtype: Any) -> "Vector":
        return self

    def reduce(self, op: Any, init: float, mode: int) -> float:
        assert op == "add", op  # (the only reduction the kernels here make)
        total = init
        for v in self.values:
            total = total + v
        return total


def registers(shape: Any, dtype: Any) -> Any:
    """`cute.make_rmem_tensor`: a list for integers, a `Tensor` of zeros otherwise."""
    if dtype is int:
        return [0] * shape[0]
    return Tensor(Pointer(np.zeros(_size(shape))), make_layout(shape))


def vector_rows(array: np.ndarray, vector: int, memory: Optional[Memory] = None, element_bytes: int = 2) -> Tensor:
    """A (rows, columns) array as the (rows, (vector, columns / vector)) tensor the kernels
    view rows through: `t[(r, (None, c))]` is vector c of row r."""
    rows, columns = array.shape
    layout = make_layout((rows, (vector, columns // vector)), stride=(columns, (1, vector)))
    flat = array.reshape(-1)  # (a view: writes land in `array`)
    return (memory or Memory()).tensor(flat, layout, element_bytes)


def matrix(array: np.ndarray) -> Tensor:
    """A (rows, columns) array, row-major, indexed `[(i, j)]`."""
    rows, columns = array.shape
    return Memory().tensor(array.reshape(-1), make_layout((rows, columns), stride=(columns, 1)), 8)


class SharedField:
    """A field of a CTA's shared-memory struct: `get_tensor(layout)` and `data_ptr()`."""

    def __init__(self, size: int, dtype: Any = np.float64) -> None:
        self.array = np.zeros(size, dtype=dtype)

    def get_tensor(self, layout: Tuple[Any, Any]) -> Tensor:
        return Tensor(Pointer(self.array), layout)

    def data_ptr(self) -> Pointer:
        return Pointer(self.array)


class Shared(list):
    """A memory array (shared or global), its elements set as the threads write them. An
    index outside it raises IndexError, a negative one too (where a list would wrap
    round), as compute-sanitizer's memcheck would report the access."""

    def __init__(self, size: int, fill: Any = None) -> None:
        super().__init__([fill] * size)

    @classmethod
    def of(cls, values: Any) -> "Shared":
        array = cls(0)
        array.extend(values)
        return array

    def _checked(self, index: Any) -> Any:
        if not isinstance(index, slice) and not 0 <= index < len(self):
            raise IndexError(f"index {index} outside [0, {len(self)})")
        return index

    def __getitem__(self, index: Any) -> Any:
        return super().__getitem__(self._checked(index))

    def __setitem__(self, index: Any, value: Any) -> None:
        super().__setitem__(self._checked(index), value)

    @property
    def iterator(self) -> Pointer:
        return Pointer(self)

    def get_tensor(self, layout: Any) -> "Shared":  # (a shared-memory field of a struct)
        return self


# -- the DSL's names ----------------------------------------------------------------------
def plain(function: Any) -> Callable:
    """The Python function the DSL traces for `function`: under a `@cute.jit` its body;
    for a `@gcdsl.kernel` the desugared one (`Kernel.desugared_source`), as it runs."""
    traced = getattr(function, "_cute_kernel", function)  # (a gcdsl Kernel: what it gave `cute.kernel`)
    return _as_written(traced.__wrapped__)


def _as_written(function: Callable) -> Callable:
    """`function` with the code it was written with: once the DSL has traced a function in
    this process, it has replaced the function's code with its own rewrite (loops and
    branches as DSL regions), keeping the original as `_original_code`."""
    code = getattr(function, "_original_code", None)
    if code is None or code is function.__code__:
        return function
    written = types.FunctionType(code, function.__globals__, function.__name__, function.__defaults__,
                                 function.__closure__)
    written.__kwdefaults__ = function.__kwdefaults__
    return written


def plain_methods(instance: Any) -> None:
    """Every `@cute.jit` method of `instance`'s class and of the classes it derives from,
    as its plain function, on the instance: kernel code calling `self.method(...)` runs
    it as Python too."""
    for klass in reversed(type(instance).__mro__):  # (a class's own methods over its bases')
        for name, member in vars(klass).items():
            if isinstance(member, types.FunctionType) and hasattr(member, "__wrapped__"):
                setattr(instance, name, types.MethodType(_as_written(member.__wrapped__), instance))


class Trap(Exception):
    """A kernel's `trap_unless` that failed: its message."""


def trap_unless(ok: Any, message: str) -> None:
    if not ok:
        raise Trap(message)


def install(monkeypatch: Any, module: Any, memory: Optional[Memory] = None) -> None:
    """`dsl_shims(memory)` as `module`'s globals, each that the module has."""
    for name, shim in dsl_shims(memory or Memory()).items():
        if hasattr(module, name):
            monkeypatch.setattr(module, name, shim)


def _spin_load(pointer: Pointer, dtype: Any, **order: Any) -> Any:
    """A load that other CTAs' stores change (a spin wait's): it gives the other threads
    time, and ends the wait once a thread of the grid has failed."""
    time.sleep(0.0005)
    if _CURRENT.failed.is_set():
        raise threading.BrokenBarrierError
    return pointer.array[pointer.offset]


def dsl_shims(memory: Memory) -> dict:
    """Module globals standing in for `cutlass`, `cute`, `trap_unless` and the shared
    memory allocator in plain kernel code: Python's numbers for the DSL's, its min and
    max, ranges as loops, registers, the running thread's indices, barriers, shuffles,
    ballots and atomics, tensors through layouts on `memory`, bulk copies done at once
    and counted on their mbarriers (whose waits wait), and traps that raise."""
    current = Threads.current
    cutlass = types.SimpleNamespace(
        Int32=int, Int64=int, Float32=float, min=min, max=max, range_constexpr=range,
        range=lambda *bounds, unroll=None: range(*bounds), const_expr=lambda value: value,
        select_=lambda pick, a, b: a if pick else b, Int8="Int8")  # (Int8: a pointer's type, unread)
    arch = types.SimpleNamespace(
        lane_idx=lambda: current().lane(), thread_idx=lambda: (current().first + current().index(), 0, 0),
        block_idx=lambda: current().block, warp_idx=lambda: (current().first + current().index()) // WARP,
        make_warp_uniform=lambda value: value, sync_threads=lambda: current().sync(),
        shuffle_sync_up=lambda value, delta: current().shuffle_up(value, delta),
        shuffle_sync=lambda value, source: current().shuffle(value, source),
        shuffle_sync_bfly=lambda value, mask: current().shuffle_xor(value, mask),
        vote_ballot_sync=lambda predicate: current().ballot(predicate),
        warp_reduction_sum=lambda value: current().warp_sum(value),
        popc=lambda bits: bin(bits).count("1"),
        atomic_add=lambda pointer, value, **order: _atomic_add(pointer, value),
        load=_spin_load, globaltimer=time.monotonic_ns, rcp_approx=lambda value: 1.0 / value,
        griddepcontrol_launch_dependents=lambda: None, griddepcontrol_wait=lambda: None,
        fence_acq_rel_gpu=lambda: None, fence_proxy=lambda kind, space=None: None,
        sync_warp=lambda: current().exchange(None),
        elect_one=_elect_one, cp_async_bulk_wait_group=lambda count, read=False: None,
        mbarrier_init=_mbarrier_init, mbarrier_init_fence=lambda: None,
        mbarrier_arrive_and_expect_tx=_mbarrier_arrive_and_expect_tx, mbarrier_expect_tx=_mbarrier_expect_tx,
        mbarrier_wait=_mbarrier_wait)

    def make_tensor(pointer: Any, layout: Tuple[Any, Any]) -> Tensor:
        return Tensor(pointer.memory.pointer_at(pointer.address) if isinstance(pointer, Address) else pointer, layout)

    def copy(atom: Any, source: Tensor, destination: Tensor, mbar_ptr: Any = None) -> None:
        destination.store(source.load())  # (a bulk copy, done at once, its bytes then counted)
        if mbar_ptr is not None:
            _mbarrier(mbar_ptr).transfer(-atom.bytes)

    cute = types.SimpleNamespace(
        arch=arch, make_layout=make_layout, make_rmem_tensor=registers, make_tensor=make_tensor,
        make_ptr=lambda dtype, address, space=None, assumed_align=None: Address(memory, address),
        copy=copy, make_copy_atom=lambda op, dtype, num_bits_per_copy: types.SimpleNamespace(
            bytes=num_bits_per_copy // 8),
        nvgpu=types.SimpleNamespace(cpasync=types.SimpleNamespace(CopyBulkG2SOp=lambda: None)),
        AddressSpace=types.SimpleNamespace(gmem="gmem"), ReductionOp=types.SimpleNamespace(ADD="add"),
        math=types.SimpleNamespace(exp=lambda value, fastmath=False: math.exp(value)))
    smem = types.SimpleNamespace(allocate=lambda struct: current().storage)
    return {"cutlass": cutlass, "cute": cute, "trap_unless": trap_unless, "SmemAllocator": lambda: smem,
            "prefetch_to_l2_evict_last": lambda line: None,
            # (the named barrier of a CTA's store warps: the simulated threads are those warps)
            "STORE_WARPS_BARRIER": types.SimpleNamespace(arrive_and_wait=lambda: current().sync())}


_ATOMICS = threading.Lock()  # (one for every CTA's atomics: global memory's are seen by all)


class _Mbarrier:
    """A shared-memory mbarrier: a phase completes once its `count` arrivals are in and
    the bytes they expect have been copied (bulk copies count theirs); a wait for the
    phase of a parity lasts while the current phase has that parity, as on the GPU."""

    def __init__(self, count: int) -> None:
        self.count, self.arrivals, self.bytes, self.completed = count, 0, 0, 0

    def transfer(self, bytes_: int, arrivals: int = 0) -> None:
        with _ATOMICS:
            self.arrivals, self.bytes = self.arrivals + arrivals, self.bytes + bytes_
            if self.arrivals == self.count and self.bytes == 0:
                self.arrivals, self.completed = 0, self.completed + 1


_MBARRIERS: dict = {}  # (array's id, offset): its state, for the mbarriers of the running test


def _mbarrier(pointer: Pointer) -> _Mbarrier:
    barrier = _MBARRIERS.get((id(pointer.array), pointer.offset))
    if barrier is None:
        raise AssertionError("an mbarrier used before mbarrier_init")
    return barrier


def _mbarrier_init(pointer: Pointer, count: int) -> None:
    _MBARRIERS[(id(pointer.array), pointer.offset)] = _Mbarrier(count)


@contextlib.contextmanager
def _elect_one():
    _CURRENT.elected = Threads.current().lane() == 0
    try:
        yield
    finally:
        _CURRENT.elected = True


def _acts() -> bool:
    """Whether this thread's mbarrier call acts: outside `elect_one`, or its elected lane."""
    return getattr(_CURRENT, "elected", True)


def _mbarrier_arrive_and_expect_tx(pointer: Pointer, bytes_: int) -> None:
    if _acts():
        _mbarrier(pointer).transfer(bytes_, arrivals=1)


def _mbarrier_expect_tx(pointer: Pointer, bytes_: int) -> None:
    if _acts():
        _mbarrier(pointer).transfer(bytes_)


def _mbarrier_wait(pointer: Pointer, parity: int) -> None:
    started = time.monotonic()
    while _mbarrier(pointer).completed % 2 == parity:
        time.sleep(0.0005)
        if _CURRENT.failed.is_set():
            raise threading.BrokenBarrierError
        if time.monotonic() - started > STEP_TIMEOUT_S:
            raise AssertionError(f"an mbarrier wait for the phase of parity {parity} never ended")


def _atomic_add(pointer: Pointer, value: Any) -> Any:
    with _ATOMICS:
        old = pointer.array[pointer.offset]
        pointer.array[pointer.offset] = old + value
    return old
