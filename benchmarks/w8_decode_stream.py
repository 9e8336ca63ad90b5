"""The decode kernel's weight stream alone: per-thread 16-byte loads against bulk copies.

At one token on Qwen3-30B-A3B's experts the decode kernel (`gcdsl/ops/decode_kernel.py`)
streams about 590 KB of weights a CTA over 128 CTAs: its gate-up rows by per-thread
16-byte loads (512 threads, a few loads in flight each) and its down rows by bulk copies
into shared memory. This probe times each way of streaming alone, on 512-thread CTAs
that compute nothing but a sum of what they read (so that the reads stay):

    loads    each thread loads `in flight` 16-byte vectors, consecutive threads
             consecutive vectors, then adds them up (the gate-up GEMVs' loads, less
             their arithmetic)
    bulk     thread 0 keeps `stages` bulk copies (cp.async.bulk, the copy engine) of
             `chunk` contiguous bytes in flight into a ring of shared-memory buffers,
             each on an mbarrier; every thread waits for the next buffer, adds up its
             vectors of it, and after a CTA barrier thread 0 refills it

over CTAs (128: the decode kernel's at Qwen3's one token; 132: every SM) and bytes a CTA
(512 KiB: about the decode kernel's at one token; 4 MiB: a long stream). Every launch
reads other weights than the launches before it (a pool of L2's size many times over),
as a decode step reads other experts than the step before. `benchmarks/w8_stream.py`
times the tensor-core kernel's TMA boxes the same way.

    python -m benchmarks.w8_decode_stream     # table + results/W8_decode_stream.json

GB/s is the weight bytes over the launch's device time (CUDA events, median).
"""
import argparse  # (no postponed annotations: the kernel classes below read their own at definition)
import itertools
import sys
from typing import Any, Dict, List

from .harness import OK, Report, main_on_gpu, print_header, table, time_device_ms

THREADS = 512
VECTOR = 8  # bf16 elements of a 16-byte load
CTAS = (128, 132)
KIB_PER_CTA = (512, 4096)
LOADS_IN_FLIGHT = (4, 8, 16)
CHUNKS = (4096, 16384)  # bytes of a bulk copy
RING_BYTES = (32768, 65536, 131072)  # bulk copies' bytes in flight a CTA (stages x chunk)
POOL_BYTES = 2 * 1024**3


def _kernel_module():
    import cutlass
    import cutlass.cute as cute
    from cutlass.memory import SmemAllocator

    def sum_of(vector):
        return vector.to(cutlass.Float32).reduce(cute.ReductionOp.ADD, 0.0, 0)

    def ptr(dtype, align):
        return cute.runtime.make_ptr(dtype, 0, cute.AddressSpace.gmem, assumed_align=align)

    class Loads:
        """CTA c sums elements [c n, (c + 1) n) of a bf16 weight, n = `per_cta`, each
        thread `in_flight` 16-byte loads at once."""

        def __init__(self, ctas: int, per_cta: int, in_flight: int) -> None:
            self.ctas, self.per_cta, self.in_flight = ctas, per_cta, in_flight
            assert per_cta % (VECTOR * THREADS * in_flight) == 0

        def trace_args(self):
            return ptr(cutlass.BFloat16, 16), ptr(cutlass.Float32, 4), cute.runtime.make_fake_stream()

        @cute.jit
        def __call__(self, w_ptr: cute.Pointer, out_ptr: cute.Pointer, stream):
            vectors = self.ctas * self.per_cta // VECTOR
            w = cute.make_tensor(w_ptr, cute.make_layout((VECTOR, vectors), stride=(1, VECTOR)))
            out = cute.make_tensor(out_ptr, cute.make_layout(self.ctas * THREADS))
            self.kernel(w, out).launch(grid=(self.ctas, 1, 1), block=(THREADS, 1, 1), stream=stream)

        @cute.kernel
        def kernel(self, w: cute.Tensor, out: cute.Tensor):
            tidx, _, _ = cute.arch.thread_idx()
            bidx, _, _ = cute.arch.block_idx()
            first = bidx * (self.per_cta // VECTOR)
            total = cutlass.Float32(0.0)
            for start in cutlass.range(first + tidx, first + self.per_cta // VECTOR, THREADS * self.in_flight,
                                       unroll=1):
                loaded = [w[(None, start + THREADS * i)].load() for i in range(self.in_flight)]
                for vector in loaded:
                    total += sum_of(vector)
            out[bidx * THREADS + tidx] = total

    class Bulk:
        """CTA c sums the same elements as `Loads`, copied into shared memory `chunk` bytes
        a bulk copy, `stages` of them in flight."""

        def __init__(self, ctas: int, per_cta: int, chunk: int, stages: int) -> None:
            self.ctas, self.per_cta, self.chunk, self.stages = ctas, per_cta, chunk, stages
            self.chunks = per_cta * 2 // chunk
            assert per_cta * 2 % chunk == 0 and self.chunks >= stages

        def trace_args(self):
            return ptr(cutlass.BFloat16, 16), ptr(cutlass.Float32, 4), cute.runtime.make_fake_stream()

        @cute.jit
        def __call__(self, w_ptr: cute.Pointer, out_ptr: cute.Pointer, stream):
            w = cute.make_tensor(w_ptr, cute.make_layout(self.ctas * self.per_cta))
            out = cute.make_tensor(out_ptr, cute.make_layout(self.ctas * THREADS))

            @cute.struct
            class Storage:
                full: cute.struct.MemRange[cutlass.Int64, self.stages]
                ring: cute.struct.Align[cute.struct.MemRange[cutlass.BFloat16, self.stages * self.chunk // 2], 128]

            self.storage = Storage
            self.kernel(w, out).launch(grid=(self.ctas, 1, 1), block=(THREADS, 1, 1), stream=stream)

        @cute.kernel
        def kernel(self, w: cute.Tensor, out: cute.Tensor):
            tidx, _, _ = cute.arch.thread_idx()
            bidx, _, _ = cute.arch.block_idx()
            storage = SmemAllocator().allocate(self.storage)
            elements = self.chunk // 2
            ring = storage.ring.get_tensor(cute.make_layout((VECTOR, self.stages * elements // VECTOR),
                                                            stride=(1, VECTOR)))
            flat_ring = storage.ring.get_tensor(cute.make_layout(self.stages * elements))
            bulk = cute.make_copy_atom(cute.nvgpu.cpasync.CopyBulkG2SOp(), cutlass.BFloat16,
                                       num_bits_per_copy=self.chunk * 8)
            first = bidx * self.per_cta
            if tidx == 0:
                for stage in cutlass.range_constexpr(self.stages):
                    cute.arch.mbarrier_init(storage.full.data_ptr() + stage, 1)
                cute.arch.mbarrier_init_fence()
                for stage in cutlass.range_constexpr(self.stages):
                    self.issue(bulk, w, flat_ring, storage.full.data_ptr(), first, stage, stage)
            cute.arch.sync_threads()
            total = cutlass.Float32(0.0)
            for i in cutlass.range(self.chunks, unroll=1):
                stage = i % self.stages
                cute.arch.mbarrier_wait(storage.full.data_ptr() + stage, (i // self.stages) % 2)
                for vector in cutlass.range(tidx, elements // VECTOR, THREADS, unroll=1):
                    total += sum_of(ring[(None, stage * (elements // VECTOR) + vector)].load())
                cute.arch.sync_threads()  # every thread done with the buffer before it is refilled
                if tidx == 0 and i + self.stages < self.chunks:
                    self.issue(bulk, w, flat_ring, storage.full.data_ptr(), first, i + self.stages, stage)
            out[bidx * THREADS + tidx] = total

        @cute.jit
        def issue(self, bulk: cute.CopyAtom, w: cute.Tensor, flat_ring: cute.Tensor, full_barriers: cute.Pointer,
                  first: cutlass.Int32, i: cutlass.Int32, stage: cutlass.Int32):
            """Chunk i of the CTA's elements (from `first`) into ring buffer `stage`, on its mbarrier."""
            elements = self.chunk // 2
            full = full_barriers + stage
            cute.arch.mbarrier_arrive_and_expect_tx(full, self.chunk)
            source = cute.make_tensor(w.iterator + first + i * elements, cute.make_layout(elements))
            target = cute.make_tensor(flat_ring.iterator + stage * elements, cute.make_layout(elements))
            cute.copy(bulk, source, target, mbar_ptr=full)

    return Loads, Bulk


def variants() -> List[Dict[str, Any]]:
    out = []
    for ctas, kib in itertools.product(CTAS, KIB_PER_CTA):
        for in_flight in LOADS_IN_FLIGHT:
            out.append(dict(method="loads", ctas=ctas, kib_per_cta=kib, in_flight=in_flight))
        for chunk, ring in itertools.product(CHUNKS, RING_BYTES):
            if ring >= chunk and kib * 1024 >= ring:
                out.append(dict(method="bulk", ctas=ctas, kib_per_cta=kib, chunk=chunk, stages=ring // chunk))
    return out


def build(v: Dict[str, Any]):
    """The kernel object of variant `v` (CTAs, bytes a CTA, method and its parameters)."""
    Loads, Bulk = _kernel_module()
    per_cta = v["kib_per_cta"] * 1024 // 2
    if v["method"] == "loads":
        return Loads(v["ctas"], per_cta, v["in_flight"])
    return Bulk(v["ctas"], per_cta, v["chunk"], v["stages"])


def run(args, machine) -> Report:
    import torch

    import gcdsl.launch

    report = Report("W8_decode_stream", "The decode kernel's weight stream alone: per-thread loads against bulk "
                    "copies", config={"reps": args.reps, "threads": THREADS})
    largest = max(CTAS) * max(KIB_PER_CTA) * 1024
    copies = max(4, POOL_BYTES // largest)
    pool = torch.empty(copies * largest // 2, dtype=torch.bfloat16, device="cuda").normal_()
    out = torch.empty(max(CTAS) * THREADS, dtype=torch.float32, device="cuda")
    stream = torch.cuda.current_stream().cuda_stream
    for v in variants():
        size = v["ctas"] * v["kib_per_cta"] * 1024
        kernel = build(v)
        compiled = gcdsl.launch.compile_tvm_ffi(kernel, *kernel.trace_args())
        starts = [pool[i * size // 2:].data_ptr() for i in range(copies * largest // size)]
        out.fill_(float("nan"))
        compiled(starts[0], out.data_ptr(), stream)  # (checked before it is timed)
        expected = pool[:size // 2].float().view(v["ctas"], -1).sum(1)
        got = out[:v["ctas"] * THREADS].view(v["ctas"], THREADS).sum(1)
        if not torch.allclose(got, expected, rtol=1e-3, atol=1.0):
            raise AssertionError(f"{v}: the CTAs' sums are not the weights'")
        turn = itertools.count()
        stats = time_device_ms(lambda: compiled(starts[next(turn) % len(starts)], out.data_ptr(), stream), args.reps, 3)
        gbps = size / (stats["median"] * 1e-3) / 1e9
        report.add(status=OK, gbps=gbps, per_cta_gbps=gbps / v["ctas"], ms=stats, **v)
        print(f"  {_name(v):<28} ctas {v['ctas']:>3}  {v['kib_per_cta']:>5} KiB a CTA: {gbps:7.0f} GB/s", flush=True)
    _print(report)
    return report


def _name(v: Dict[str, Any]) -> str:
    if v["method"] == "loads":
        return f"loads, {v['in_flight']} in flight"
    return f"bulk, {v['stages']} x {v['chunk'] // 1024} KiB"


def _print(report: Report) -> None:
    print_header("GB/s of weights streamed, median")
    rows = sorted(report.rows, key=lambda r: (r["kib_per_cta"], r["ctas"], -r["gbps"]))
    print(table(["KiB a CTA", "CTAs", "method", "GB/s", "per CTA"],
                [[r["kib_per_cta"], r["ctas"], _name(r), f"{r['gbps']:.0f}", f"{r['per_cta_gbps']:.1f}"]
                 for r in rows]))


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--reps", type=int, default=20)
    return main_on_gpu("W8_decode_stream", run, parser.parse_args(argv))


if __name__ == "__main__":
    sys.exit(main())
