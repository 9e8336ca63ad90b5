"""`run.py --compile-check`: compile every kernel variant with fake tensors, run nothing.

Works without a GPU (run.py sets `CUTE_DSL_ARCH=sm_90a` then). Each W1/W2 variant is
compiled at the smallest and the largest N it is benchmarked at, and so are the W3/W4
kernels (`launch_kernels.py`) and `grid_constant.py`'s four kernels. The C++ anchor is built with nvcc (compile and link: it needs no driver or libcuda to build).
"""
from __future__ import annotations

import os
import re
import time
import traceback
from typing import Any, Dict, List

from . import cpp_anchor
from .harness import ERROR, FAILED, OK, SKIPPED, Report, print_header, table

W1_NS = (1, 200)
W2_NS = (1, 120)


def _fake_w1(variant: str, n: int):
    import cutlass
    import cutlass.cute as cute
    from cutlass.runtime import make_fake_stream

    from . import kernels as K

    fake = cute.runtime.make_fake_compact_tensor
    rows, cols = K.W1_SRC_SHAPE
    src = lambda r=rows: fake(cutlass.Float16, (r, cols), stride_order=(1, 0), assumed_align=16)  # noqa: E731
    tasks = fake(cutlass.Int32, (cute.sym_int(),), assumed_align=16)
    out = fake(cutlass.Int32, (cute.sym_int(),), assumed_align=16)
    kl, st = cutlass.Int32(1), make_fake_stream()
    if variant == "gcdsl":
        return K.w1_gcdsl, ([src() for _ in range(n)], tasks, out, kl, st)
    if variant == "chain":
        return K.w1_chain, ([src() for _ in range(n)], tasks, out, kl, st)
    if variant == "floor":
        return K.w1_floor, (src(n * rows), tasks, out, kl, st)
    if variant == "gmem":
        table = fake(cutlass.Uint8, (n * K.DESC_BYTES,), assumed_align=128)
        return K.w1_gmem, (src(), table, tasks, out, kl, st)
    raise ValueError(variant)


def _fake_w2(n: int):
    import cutlass
    import cutlass.cute as cute
    from cutlass.runtime import make_fake_stream

    fake = cute.runtime.make_fake_compact_tensor
    rows = [128 * (1 + (7 * i) % 13) for i in range(n)]  # mixed sizes, as on the GPU
    tensors = lambda: [fake(cutlass.Float16, (r, 4096), stride_order=(1, 0), assumed_align=16) for r in rows]  # noqa: E731
    stacked = lambda: fake(cutlass.Float16, (sum(rows), 4096), stride_order=(1, 0), assumed_align=16)  # noqa: E731
    tasks = fake(cutlass.Int32, (cute.sym_int(),), assumed_align=16)
    table_ = lambda: fake(cutlass.Uint8, (n * 128,), assumed_align=128)  # noqa: E731
    return tensors, stacked, tasks, table_, cutlass.Int32(132), make_fake_stream()


def cases() -> List[Dict[str, Any]]:
    import cutlass
    import cutlass.cute as cute
    from cutlass.runtime import make_fake_stream

    from . import kernels as K
    from . import launch_kernels as L

    out: List[Dict[str, Any]] = []
    for n in W1_NS:
        for variant in ("gcdsl", "floor", "chain", "gmem"):
            out.append({"workload": "W1", "variant": variant, "n": n,
                        "build": (lambda v=variant, n=n: _fake_w1(v, n))})

        def fill(n=n):
            fake = cute.runtime.make_fake_compact_tensor
            srcs = [fake(cutlass.Float16, K.W1_SRC_SHAPE, stride_order=(1, 0), assumed_align=16) for _ in range(n)]
            table_ = fake(cutlass.Uint8, (n * 128,), assumed_align=128)
            return K.fill_w1_load_table, (srcs, table_, make_fake_stream())

        out.append({"workload": "W1", "variant": "gmem table fill", "n": n, "build": fill})
        for variant in ("plain", "atoms0", "list", "table"):
            out.append({"workload": "W3/W4", "variant": variant, "n": n,
                        "build": (lambda v=variant, n=n: L.fake_args(v, n))})
    for n in W2_NS:
        def w2(variant, n=n):
            tensors, stacked, tasks, table_, grid, st = _fake_w2(n)
            if variant == "gcdsl":
                return K.w2_gcdsl, (tensors(), tensors(), tasks, grid, st)
            if variant == "chain":
                return K.w2_chain, (tensors(), tensors(), tasks, grid, st)
            if variant == "floor":
                return K.w2_floor, (stacked(), stacked(), tasks, grid, st)
            if variant == "gmem":
                return K.w2_gmem, (tensors()[0], tensors()[0], table_(), table_(), tasks, grid, st)
            if variant == "gmem load-table fill":
                return K.fill_w2_load_table, (tensors(), table_(), st)
            return K.fill_w2_store_table, (tensors(), table_(), st)

        for variant in ("gcdsl", "floor", "chain", "gmem", "gmem load-table fill", "gmem store-table fill"):
            out.append({"workload": "W2", "variant": variant, "n": n, "build": (lambda v=variant, f=w2: f(v))})
    for per_thread in (False, True):
        for where in ("param", "global"):
            variant = f"{where} table, {'per-thread' if per_thread else 'uniform'} index"
            out.append({"workload": "grid_constant", "variant": variant, "n": 256,
                        "build": (lambda w=where, p=per_thread: _grid_constant(w, p))})
    return out


def _grid_constant(where: str, per_thread: bool):
    import numpy as np

    import cutlass
    import cutlass.cute as cute
    import gcdsl
    from cutlass.runtime import make_fake_stream

    from . import grid_constant as gc

    fake = cute.runtime.make_fake_compact_tensor
    out = fake(cutlass.Int32, (gc.CTAS * gc.THREADS,), assumed_align=4)
    if where == "param":
        table = gcdsl.grid_constant(np.arange(gc.ENTRIES, dtype=np.int32))
        return gc.run_param, (table, out, make_fake_stream(), per_thread)
    return gc.run_global, (fake(cutlass.Int32, (gc.ENTRIES,), assumed_align=4), out, make_fake_stream(), per_thread)


def ptx_name(case: Dict[str, Any]) -> str:
    """`W1-W3-W4.gcdsl.n200.ptx`: one file per compiled case."""
    slug = lambda text: re.sub(r"[^\w]+", "-", str(text)).strip("-")  # noqa: E731
    return f"{slug(case['workload'])}.{slug(case['variant'])}.n{case['n']}.ptx"


def _write_ptx(directory: str, case: Dict[str, Any], ptx: str) -> None:
    os.makedirs(directory, exist_ok=True)
    with open(os.path.join(directory, ptx_name(case)), "w") as f:
        f.write(ptx)


def run(args, machine: Dict[str, Any]) -> Report:
    import cutlass.cute as cute

    from . import common

    report = Report("compile_check", "Compile check: every kernel variant, fake tensors, nothing runs")
    arch = machine.get("cute_dsl_arch_env") or machine.get("compute_capability")
    report.config = {"arch": arch}
    print_header(f"Compile check (target {arch}): every variant compiled with fake tensors")
    rows = []
    for case in cases():
        row = report.add(workload=case["workload"], variant=case["variant"], n=case["n"])
        try:
            fn, fn_args = case["build"]()
            t0 = time.perf_counter()
            compiled = cute.compile(fn, *fn_args)
            seconds = time.perf_counter() - t0
            ptx = compiled.__ptx__ or ""
            if getattr(args, "ptx_dir", None):
                _write_ptx(args.ptx_dir, case, ptx)
            row.update(status=OK, compile_s=round(seconds, 3), ptx_bytes=len(ptx.encode()),
                       tma_instructions=common.count_tma(ptx), descriptor_params=common.descriptor_params(ptx))
        except Exception as exc:  # noqa: BLE001
            row.update(status=FAILED, detail=common.short_error(exc))
            traceback.print_exc()
        rows.append(row)
        print(f"  {row['workload']:<9} {row['variant']:<22} N={row['n']:<4} {row['status']}", flush=True)

    row = report.add(workload="W1", variant="C++ anchor (nvcc build)", n="1,8,16,64,200")
    if cpp_anchor.nvcc() is None:
        row.update(status=SKIPPED, detail="nvcc not found")
    else:
        arch_flag = arch if isinstance(arch, str) and arch.startswith("sm_") else "sm_90a"
        if isinstance(arch, str) and "." in arch:
            arch_flag = "sm_" + arch.replace(".", "") + "a"
        t0 = time.perf_counter()
        binary, message = cpp_anchor.build(arch_flag, force=True)
        row.update(status=OK if binary else FAILED, compile_s=round(time.perf_counter() - t0, 3), detail=message)
    rows.append(row)
    print(f"  {row['workload']:<9} {row['variant']:<22} {row['status']}", flush=True)

    print("\n" + table(
        ["workload", "variant", "N", "status", "compile s", "PTX KiB", "TMA instr", "desc params"],
        [[r["workload"], r["variant"], r["n"], r["status"], r.get("compile_s", "-"),
          f"{r['ptx_bytes'] / 1024:.1f}" if "ptx_bytes" in r else "-",
          r.get("tma_instructions", "-"), r.get("descriptor_params", "-")] for r in rows]))
    for r in rows:
        if r["status"] in (FAILED, ERROR):
            print(f"  {r['status']}: {r['workload']} {r['variant']} N={r['n']}: {r.get('detail')}")
    if rows[-1].get("status") == OK:
        print(f"  C++: {rows[-1]['detail']}")
    return report
