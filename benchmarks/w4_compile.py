"""W4, compile cost: `cute.compile` time and PTX size against N, gcdsl against the if/elif chain.

Compiles the W1 kernels (loads only, so N = 200 fits the parameter limit) with fake tensors
(`cute.runtime.make_fake_compact_tensor`): no GPU is needed; without one, run.py sets
`CUTE_DSL_ARCH=sm_90a` before `cutlass` is imported. `CUTE_DSL_NO_CACHE=1`, so every compile
is a real one. The floor and the gmem-table kernels do not depend on N and are listed for
reference. The first compile of a process pays one-time DSL start-up: a warm-up compile
runs first and is not reported.
"""
from __future__ import annotations

import time
import traceback
from typing import Any, Dict, List

from .harness import ERROR, OK, SKIPPED, Report, fmt_range, print_header, summarize, table

NS = (1, 8, 64, 200)
VARIANTS = ("gcdsl", "chain", "floor", "gmem")
CHAIN_CAP_S = 120.0  # stop growing N for a variant once one compile takes longer than this


def fake_w1_args(variant: str, n: int):
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


def compile_one(variant: str, n: int):
    """(seconds, PTX text) of one fresh `cute.compile`."""
    import cutlass.cute as cute

    fn, args = fake_w1_args(variant, n)
    t0 = time.perf_counter()
    compiled = cute.compile(fn, *args)
    return time.perf_counter() - t0, compiled.__ptx__ or ""


def run(args, machine: Dict[str, Any]) -> Report:
    from . import common

    reps = 1 if args.quick else 3
    report = Report("W4", "W4 compile cost: cute.compile seconds and PTX size against N (W1 kernels)")
    report.config = {"ns": NS, "compiles_per_point": reps, "kernel": "W1 (loads only)",
                     "arch": machine.get("compute_capability") or machine.get("cute_dsl_arch_env"),
                     "chain_cap_s": CHAIN_CAP_S}
    print_header(f"W4 compile cost: W1 kernels, {reps} fresh compile(s) per point")
    compile_one("floor", 1)  # warm-up: DSL and MLIR start-up, not reported
    results: Dict[str, Dict[int, Dict[str, Any]]] = {v: {} for v in VARIANTS}
    for variant in VARIANTS:
        capped = None
        for n in NS:
            row = report.add(variant=variant, n=n)
            results[variant][n] = row
            if capped is not None:
                row.update(status=SKIPPED, detail=f"capped: one compile at N={capped} took > {CHAIN_CAP_S:.0f} s")
                print(f"  N={n:<4} {variant:<6} {row['detail']}", flush=True)
                continue
            try:
                times, ptx = [], ""
                for _ in range(reps):
                    seconds, ptx = compile_one(variant, n)
                    times.append(seconds)
                row.update(status=OK, compile_s=summarize(times), ptx_bytes=len(ptx.encode()),
                           ptx_code_bytes=common.code_bytes(ptx),
                           tma_instructions=common.count_tma(ptx), descriptor_params=common.descriptor_params(ptx))
                if max(times) > CHAIN_CAP_S:
                    capped = n
            except Exception as exc:  # noqa: BLE001
                row.update(status=ERROR, detail=common.short_error(exc))
                traceback.print_exc()
            print(f"  N={n:<4} {variant:<6} {_cell(row)}", flush=True)
    _print_table(results, reps)
    capped_rows = [r for v in results.values() for r in v.values() if r.get("status") == SKIPPED]
    if capped_rows:
        report.notes.append(f"{len(capped_rows)} points skipped by the {CHAIN_CAP_S:.0f} s compile cap")
    return report


def _cell(row: Dict[str, Any]) -> str:
    if row.get("status") != OK:
        return f"{row.get('status')}: {row.get('detail', '')}"
    return (f"{fmt_range(row['compile_s'], digits=2)} s, PTX {row['ptx_bytes'] / 1024:.1f} KiB "
            f"({row['ptx_code_bytes'] / 1024:.1f} KiB without parameter lines), "
            f"{row['tma_instructions']} TMA instr, {row['descriptor_params']} desc params")


def _print_table(results, reps: int) -> None:
    headers = ["N"]
    for v in VARIANTS:
        headers += [f"{v} compile s", "PTX KiB", "code KiB", "TMA"]
    rows: List[List[str]] = []
    for n in NS:
        cells = [str(n)]
        for v in VARIANTS:
            r = results[v].get(n, {})
            if r.get("status") == OK:
                cells += [fmt_range(r["compile_s"], digits=2) if reps > 1 else f"{r['compile_s']['median']:.2f}",
                          f"{r['ptx_bytes'] / 1024:.1f}", f"{r['ptx_code_bytes'] / 1024:.1f}",
                          str(r["tma_instructions"])]
            else:
                cells += [str(r.get("status", "-")), "-", "-", "-"]
        rows.append(cells)
    print(f"\ncute.compile seconds ({'median [min-max] of ' + str(reps) if reps > 1 else 'one compile'}), "
          "PTX size, PTX without parameter lines (code), cp.async.bulk.tensor instructions")
    print(table(headers, rows))
    for v in VARIANTS:
        for n, r in results[v].items():
            if r.get("status") == ERROR:
                print(f"  ERROR: {v} N={n}: {r.get('detail')}")
