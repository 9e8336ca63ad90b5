"""CUDA threads simulated on the CPU, for tests that run a kernel's code as plain Python.

The plain Python function the DSL traces for a `@cute.jit` function or a
`@gcdsl.kernel` (`plain`) runs once a simulated thread, with stand-ins for the DSL
names it reads (`dsl_shims`) set as its module's globals:

    threads = Threads(32)                      # a warp; Threads(n) a CTA of n threads
    install(monkeypatch, schedule, threads)    # the module's cutlass, cute, trap_unless
    body = plain(schedule.Schedule.build_schedule)
    results = threads.run(lambda: body(...))   # body's threads call cute.arch.lane_idx(), ...

- `Threads`: n threads of one CTA, a Python thread each, in step at each barrier
  (`sync_threads`) and, in a warp of 32, at each shuffle or ballot; every thread must
  reach the same ones in the same order, as the hardware asks. A thread that raises
  stops the others (`run` raises its error); threads that part ways are an error too,
  after STEP_TIMEOUT_S. Atomics under a lock.
- `Shared(n)`: an array of shared or global memory, bounds-checked, that atomics can
  address (`.iterator + i`).
- `VectorRows`: a 2-D numpy array seen as (rows, (vector, columns / vector)), as the
  combine kernels view theirs; `rows[(r, (None, c))]` is vector c of row r, and
  `rows[(r, (e, c))]` its element e.
- `Matrix`: a 2-D numpy array indexed `[(i, j)]`, bounds-checked.
- A failed `trap_unless` raises `Trap` with its message: the kernel ends there.
"""
from __future__ import annotations

import threading
import types
from typing import Any, Callable, List, Tuple

import numpy as np

STEP_TIMEOUT_S = 20.0


class Threads:
    def __init__(self, count: int = 32, block: Tuple[int, int, int] = (0, 0, 0)) -> None:
        self.count, self.block = count, block
        self._thread = threading.local()
        self._slots: List[Any] = [None] * count
        self._step = threading.Barrier(count, timeout=STEP_TIMEOUT_S)
        self._atomics = threading.Lock()

    def index(self) -> int:
        return self._thread.index

    def exchange(self, value: Any) -> List[Any]:
        """Every thread's `value`, by thread: the step each collective below takes."""
        self._slots[self.index()] = value
        self._step.wait()
        values = list(self._slots)
        self._step.wait()  # every thread has read before a next step writes
        return values

    def sync(self) -> None:
        """`bar.sync` of the whole CTA."""
        self._step.wait()

    def shuffle_up(self, value: Any, delta: int) -> Any:
        """`shfl.sync.up`: lane l gets lane l - delta's value; lanes below delta keep their own."""
        lane = self.index()
        values = self.exchange(value)
        return values[lane - delta] if lane >= delta else value

    def shuffle(self, value: Any, source: int) -> Any:
        """`shfl.sync.idx`: every lane gets lane `source`'s value."""
        return self.exchange(value)[source]

    def ballot(self, predicate: Any) -> int:
        """`vote.ballot.sync`: bit l set where lane l's predicate holds."""
        return sum(1 << lane for lane, holds in enumerate(self.exchange(bool(predicate))) if holds)

    def atomic_add(self, pointer: "Pointer", value: Any) -> Any:
        with self._atomics:
            old = pointer.array[pointer.offset]
            pointer.array[pointer.offset] = old + value
        return old

    def run(self, body: Callable[[], Any]) -> List[Any]:
        """`body()` in each thread; what each returned, by thread."""
        results: List[Any] = [None] * self.count
        errors: List[BaseException] = []
        stranded: List[int] = []

        def thread(index: int) -> None:
            self._thread.index = index
            try:
                results[index] = body()
            except threading.BrokenBarrierError:
                stranded.append(index)  # another thread failed first, or the threads parted ways
            except BaseException as exc:  # noqa: BLE001 - reported below
                errors.append(exc)
                self._step.abort()

        threads = [threading.Thread(target=thread, args=(index,)) for index in range(self.count)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        if errors:
            raise errors[0]
        if stranded:
            raise AssertionError(f"threads {sorted(stranded)} waited at a barrier or shuffle that the others "
                                 "never reached")
        return results


class Pointer:
    def __init__(self, array: list, offset: int = 0) -> None:
        self.array, self.offset = array, offset

    def __add__(self, offset: int) -> "Pointer":
        return Pointer(self.array, self.offset + offset)


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


class Matrix:
    def __init__(self, array: np.ndarray) -> None:
        self.array = array

    def __getitem__(self, coordinate: Tuple[int, int]) -> Any:
        return self.array[self._checked(coordinate)]

    def __setitem__(self, coordinate: Tuple[int, int], value: Any) -> None:
        self.array[self._checked(coordinate)] = value

    def _checked(self, coordinate: Tuple[int, int]) -> Tuple[int, int]:
        if not all(0 <= i < n for i, n in zip(coordinate, self.array.shape)):
            raise IndexError(f"{coordinate} outside {self.array.shape}")
        return coordinate


class Vector:
    """A register vector of fp32 values (float64 here: sums of small integers stay exact)."""

    def __init__(self, values: np.ndarray) -> None:
        self.values = np.asarray(values, dtype=np.float64)

    def __add__(self, other: Any) -> "Vector":
        return Vector(self.values + (other.values if isinstance(other, Vector) else other))

    __radd__ = __add__

    def __mul__(self, other: Any) -> "Vector":
        return Vector(self.values * (other.values if isinstance(other, Vector) else other))

    __rmul__ = __mul__

    def to(self, dtype: Any) -> "Vector":
        return self


class Registers:
    """`cute.make_rmem_tensor`: a thread's registers, indexed or loaded as a vector."""

    def __init__(self, shape: Tuple[int, ...]) -> None:
        self.values = np.zeros(shape, dtype=np.float64)

    def __getitem__(self, index: int) -> Any:
        return self.values[index]

    def __setitem__(self, index: int, value: Any) -> None:
        self.values[index] = value

    def fill(self, value: Any) -> None:
        self.values.fill(value)

    def load(self) -> Vector:
        return Vector(self.values.copy())

    def store(self, vector: Vector) -> None:
        self.values[...] = vector.values


class VectorRows:
    """A (rows, columns) numpy array as a (rows, (vector, columns / vector)) tensor."""

    element_type = float

    def __init__(self, array: np.ndarray, vector: int) -> None:
        self.array, self.vector = array, vector

    def __getitem__(self, coordinate: Tuple[int, Tuple[None, int]]) -> "VectorRows._Slice":
        row, (_, column) = self._checked(coordinate)
        return VectorRows._Slice(self.array, row, slice(column * self.vector, (column + 1) * self.vector))

    def __setitem__(self, coordinate: Tuple[int, Tuple[int, int]], value: Any) -> None:
        """Element `element` of vector `column` of row `row`: `rows[(row, (element, column))] = value`."""
        row, (element, column) = self._checked(coordinate)
        if not 0 <= element < self.vector:
            raise IndexError(f"element {element} of a vector of {self.vector}")
        self.array[row, column * self.vector + element] = value

    def _checked(self, coordinate: Tuple[int, Tuple[Any, int]]) -> Tuple[int, Tuple[Any, int]]:
        row, (_, column) = coordinate
        if not (0 <= row < self.array.shape[0] and 0 <= column < self.array.shape[1] // self.vector):
            raise IndexError(f"vector ({row}, {column}) outside {self.array.shape} in vectors of {self.vector}")
        return coordinate

    class _Slice:
        def __init__(self, array: np.ndarray, row: int, columns: slice) -> None:
            self.array, self.row, self.columns = array, row, columns

        def load(self) -> Vector:
            return Vector(self.array[self.row, self.columns].copy())

        def store(self, vector: Vector) -> None:
            self.array[self.row, self.columns] = vector.values


def plain(function: Any) -> Callable:
    """The Python function the DSL traces for `function`: under a `@cute.jit` its body;
    for a `@gcdsl.kernel` the desugared one (`Kernel.desugared_source`), as it runs."""
    traced = getattr(function, "_cute_kernel", function)  # (a gcdsl Kernel: what it gave `cute.kernel`)
    return traced.__wrapped__


class Trap(Exception):
    """A kernel's `trap_unless` that failed: its message."""


def trap_unless(ok: Any, message: str) -> None:
    if not ok:
        raise Trap(message)


def install(monkeypatch: Any, module: Any, threads: Threads) -> None:
    """`dsl_shims(threads)` as `module`'s globals, each that the module has."""
    for name, shim in dsl_shims(threads).items():
        if hasattr(module, name):
            monkeypatch.setattr(module, name, shim)


def dsl_shims(threads: Threads) -> dict:
    """Module globals standing in for `cutlass`, `cute` and `trap_unless` in plain kernel
    code: Python's numbers for the DSL's, its min and max, ranges as loops, registers,
    `threads`' indices, barriers, shuffles, ballots and atomics, and traps that raise."""
    cutlass = types.SimpleNamespace(
        Int32=int, Int64=int, Float32=float, min=min, max=max, range_constexpr=range,
        range=lambda *bounds, unroll=None: range(*bounds), const_expr=lambda value: value)
    arch = types.SimpleNamespace(
        lane_idx=threads.index, thread_idx=lambda: (threads.index(), 0, 0), block_idx=lambda: threads.block,
        sync_threads=threads.sync, shuffle_sync_up=threads.shuffle_up, shuffle_sync=threads.shuffle,
        vote_ballot_sync=threads.ballot, popc=lambda bits: bin(bits).count("1"), atomic_add=threads.atomic_add,
        griddepcontrol_launch_dependents=lambda: None)
    cute = types.SimpleNamespace(arch=arch, make_layout=lambda *args, **kwargs: None,
                                 make_rmem_tensor=lambda shape, dtype: [0] * shape[0] if dtype is int
                                 else Registers(shape))
    return {"cutlass": cutlass, "cute": cute, "trap_unless": trap_unless}
