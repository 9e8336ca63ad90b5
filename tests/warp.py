"""A warp simulated on the CPU: one Python function run by 32 lanes, a thread each, in
step at every shuffle, for kernel code whose lanes talk only through warp shuffles.

    warp = Warp()
    tables = warp.run(lambda: schedule_code())   # schedule_code calls warp.lane_idx(), warp.shuffle_up(...)

Every lane must reach the same shuffles in the same order, as `shfl.sync` with a full
mask asks of a real warp; a lane that raises stops the others (`run` raises its error),
and lanes that part ways at a shuffle are an error too, after STEP_TIMEOUT_S.
The tests pass the kernel's plain Python body (`__wrapped__` of a `@cute.jit` method)
stand-ins for the DSL names it reads (`dsl_shims`), so that it runs as ordinary Python.
"""
from __future__ import annotations

import threading
import types
from typing import Any, Callable, List

LANES = 32
STEP_TIMEOUT_S = 20.0


class Warp:
    def __init__(self) -> None:
        self._lane = threading.local()
        self._slots: List[Any] = [None] * LANES
        self._step = threading.Barrier(LANES, timeout=STEP_TIMEOUT_S)

    def lane_idx(self) -> int:
        return self._lane.index

    def exchange(self, value: Any) -> List[Any]:
        """Every lane's `value`, by lane: the step every warp-wide operation below takes."""
        self._slots[self.lane_idx()] = value
        self._step.wait()
        values = list(self._slots)
        self._step.wait()  # every lane has read before a next step writes
        return values

    def shuffle_up(self, value: Any, delta: int) -> Any:
        """`shfl.sync.up`: lane l gets lane l - delta's value; lanes below delta keep their own."""
        lane = self.lane_idx()
        values = self.exchange(value)
        return values[lane - delta] if lane >= delta else value

    def shuffle(self, value: Any, source: int) -> Any:
        """`shfl.sync.idx`: every lane gets lane `source`'s value."""
        return self.exchange(value)[source]

    def ballot(self, predicate: Any) -> int:
        """`vote.ballot.sync`: bit l set where lane l's predicate holds."""
        return sum(1 << lane for lane, holds in enumerate(self.exchange(bool(predicate))) if holds)

    def run(self, body: Callable[[], Any]) -> List[Any]:
        """`body()` in each lane; what each lane returned, by lane."""
        results: List[Any] = [None] * LANES
        errors: List[BaseException] = []
        stranded: List[int] = []

        def lane(index: int) -> None:
            self._lane.index = index
            try:
                results[index] = body()
            except threading.BrokenBarrierError:
                stranded.append(index)  # another lane failed first, or the lanes parted ways
            except BaseException as exc:  # noqa: BLE001 - reported below
                errors.append(exc)
                self._step.abort()

        threads = [threading.Thread(target=lane, args=(index,)) for index in range(LANES)]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()
        if errors:
            raise errors[0]
        if stranded:
            raise AssertionError(f"lanes {sorted(stranded)} waited at a shuffle that the others never reached")
        return results


def dsl_shims(warp: Warp) -> dict:
    """Module globals standing in for `cutlass` and `cute` in plain kernel code: ints for
    the DSL's integers, Python's min and max, ranges unrolled as loops, registers as lists,
    and `warp`'s lanes and shuffles."""
    cutlass = types.SimpleNamespace(Int32=int, Int64=int, min=min, max=max, range_constexpr=range,
                                    const_expr=lambda value: value)
    arch = types.SimpleNamespace(lane_idx=warp.lane_idx, shuffle_sync_up=warp.shuffle_up, shuffle_sync=warp.shuffle,
                                 vote_ballot_sync=warp.ballot, popc=lambda bits: bin(bits).count("1"))
    cute = types.SimpleNamespace(arch=arch, make_rmem_tensor=lambda shape, dtype: [0] * shape[0])
    return {"cutlass": cutlass, "cute": cute}
