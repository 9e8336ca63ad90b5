"""Grid-constant tables on the GPU: read cost against global memory, and host encode cost.

R1  dependent reads (a pointer chase through a 256-entry Int32 permutation), the
    same table in parameter space (`Annotated[cute.Tensor, gcdsl.GridConstant]`)
    and in global memory; index uniform across the CTA (a task id) or different
    per thread. Reported: nanoseconds per dependent read.
R2  host cost of `TensorMapTable.encode` for 1, 16 and 64 descriptors, cached
    (same tensors again) and uncached (a fresh table each time).

    python benchmarks/grid_constant.py        # GPU only; writes benchmarks/results/grid_constant.json

R1 is timed like W1 and W2 (`harness.time_device_ms`: CUDA events, the stream held busy
before each launch, so the events time the kernel and not the Python call); every
argument is built before timing, so the timed call is the compiled launch alone.
"""
import json
import os
import statistics
import sys
import time
from typing import Annotated

import numpy as np

import cuda.bindings.driver as cuda
import cutlass
import cutlass.cute as cute

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
import gcdsl  # noqa: E402
from benchmarks import common, harness  # noqa: E402

REPS, WARMUP = 20, 3
ENCODE_REPS = 50

ENTRIES = 256
THREADS = 128
CTAS = 132
STEPS = 4096


@cute.jit
def chase(table: cute.Tensor, out: cute.Tensor, per_thread: cutlass.Constexpr, steps: cutlass.Constexpr):
    """The pointer chase itself; the two kernels differ only in where `table` lives."""
    tidx, _, _ = cute.arch.thread_idx()
    bidx, _, _ = cute.arch.block_idx()
    i = bidx % ENTRIES
    if cutlass.const_expr(per_thread):
        i = (bidx + tidx) % ENTRIES
    acc = cutlass.Int32(0)
    for _ in cutlass.range(steps):
        i = table[i]
        acc = acc + i
    out[bidx * THREADS + tidx] = acc


@gcdsl.kernel
def chase_param(table: Annotated[cute.Tensor, gcdsl.GridConstant], out: cute.Tensor,
                per_thread: cutlass.Constexpr, steps: cutlass.Constexpr):
    chase(table, out, per_thread, steps)


@gcdsl.kernel
def chase_global(table: cute.Tensor, out: cute.Tensor,
                 per_thread: cutlass.Constexpr, steps: cutlass.Constexpr):
    chase(table, out, per_thread, steps)


@cute.jit
def run_param(table: gcdsl.GridConstantTensor, out: cute.Tensor, stream: cuda.CUstream,
              per_thread: cutlass.Constexpr):
    chase_param(table, out, per_thread, STEPS).launch(grid=(CTAS, 1, 1), block=(THREADS, 1, 1), stream=stream)


@cute.jit
def run_global(table: cute.Tensor, out: cute.Tensor, stream: cuda.CUstream, per_thread: cutlass.Constexpr):
    chase_global(table, out, per_thread, STEPS).launch(grid=(CTAS, 1, 1), block=(THREADS, 1, 1), stream=stream)


def expected(perm: np.ndarray, per_thread: bool) -> np.ndarray:
    b = np.repeat(np.arange(CTAS), THREADS)
    t = np.tile(np.arange(THREADS), CTAS)
    i = ((b + t) if per_thread else b) % ENTRIES
    acc = np.zeros_like(i, dtype=np.int64)
    for _ in range(STEPS):
        i = perm[i]
        acc += i
    return (acc & 0xFFFFFFFF).astype(np.uint32).view(np.int32)


def reads() -> list:
    import torch
    from cutlass.cute.runtime import from_dlpack

    perm = np.random.default_rng(0).permutation(ENTRIES).astype(np.int32)
    table = gcdsl.grid_constant(perm)
    gtable = from_dlpack(torch.from_numpy(perm).cuda(), assumed_align=4)
    out = torch.empty(CTAS * THREADS, dtype=torch.int32, device="cuda")
    out_c = from_dlpack(out, assumed_align=4)
    stream = common.stream()  # torch's: the timer's events and sleep run there too
    rows = []
    for per_thread in (False, True):
        param = cute.compile(run_param, table, out_c, stream, per_thread)
        glob = cute.compile(run_global, gtable, out_c, stream, per_thread)
        want = expected(perm, per_thread)
        for name, fn in (("parameter space", lambda: param(table, out_c, stream)),
                         ("global memory", lambda: glob(gtable, out_c, stream))):
            out.fill_(-1)
            fn()
            torch.cuda.synchronize()
            ok = np.array_equal(out.cpu().numpy(), want)
            stats = harness.time_device_ms(fn, reps=REPS, warmup=WARMUP)
            us = {k: stats[k] * 1e3 for k in ("median", "min", "max")}
            rows.append(dict(index="per thread" if per_thread else "uniform per CTA", table=name,
                             verified=ok, us_median=us["median"], us_min=us["min"], us_max=us["max"],
                             ns_per_read=us["median"] * 1e3 / STEPS, presleep=stats["presleep"],
                             us_samples=[t * 1e3 for t in stats["samples"]]))
    return rows


def host_encode() -> list:
    import torch

    rows = []
    for n in (1, 16, 64):
        tensors = [torch.empty((1024, 256), device="cuda") for _ in range(n)]
        cached = gcdsl.TensorMapTable(box=(64, 64))
        cached.encode(tensors)
        samples_cached, samples_fresh = [], []
        for _ in range(ENCODE_REPS):
            t0 = time.perf_counter()
            cached.encode(tensors)
            samples_cached.append((time.perf_counter() - t0) * 1e6)
            t0 = time.perf_counter()
            gcdsl.TensorMapTable(box=(64, 64)).encode(tensors)
            samples_fresh.append((time.perf_counter() - t0) * 1e6)
        rows.append(dict(descriptors=n, cached_us=statistics.median(samples_cached),
                         uncached_us=statistics.median(samples_fresh)))
    return rows


def main() -> int:
    import torch

    if not torch.cuda.is_available():
        print("grid_constant.py needs a GPU; nothing to do here")
        return 0
    r1, r2 = reads(), host_encode()
    print(f"R1: dependent reads of a {ENTRIES}-entry Int32 table, {STEPS} per thread, "
          f"{CTAS} CTAs x {THREADS} threads (median of {REPS} launches)")
    print(f"{'index':<18}{'table':<18}{'verified':<10}{'ns/read':>9}{'median us':>11}{'min':>9}{'max':>9}")
    for r in r1:
        print(f"{r['index']:<18}{r['table']:<18}{str(r['verified']):<10}{r['ns_per_read']:>9.2f}"
              f"{r['us_median']:>11.1f}{r['us_min']:>9.1f}{r['us_max']:>9.1f}")
    print(f"\nR2: TensorMapTable.encode host cost (median of {ENCODE_REPS}, microseconds)")
    print(f"{'descriptors':<13}{'cached':>10}{'uncached':>10}")
    for r in r2:
        print(f"{r['descriptors']:<13}{r['cached_us']:>10.1f}{r['uncached_us']:>10.1f}")
    os.makedirs(harness.RESULTS, exist_ok=True)
    machine = harness.machine_info()
    config = dict(entries=ENTRIES, threads=THREADS, ctas=CTAS, steps=STEPS, reps=REPS, warmup=WARMUP,
                  encode_reps=ENCODE_REPS)
    with open(os.path.join(harness.RESULTS, "grid_constant.json"), "w") as f:
        json.dump(dict(gpu=machine.get("gpu"), date=machine["date"][:10], machine=machine, config=config,
                       reads=r1, host_encode=r2), f, indent=1)
    return 0 if all(r["verified"] for r in r1) else 1


if __name__ == "__main__":
    sys.exit(main())
