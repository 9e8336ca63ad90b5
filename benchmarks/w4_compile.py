"""W4, compile cost: `cute.compile` seconds and PTX size against N, three ways to carry N descriptors.

The W3 kernels (`launch_kernels.py`: one CTA loads one tile by TMA from source `k` of N):

- ``atoms0``: plain `@cute.kernel` given the N atoms the jit function builds, using atoms[0]
  only: what the DSL itself costs for N atom parameters (the reference);
- ``list``: `@gcdsl.kernel` with `loads[k]` over the N atoms (runtime-indexed list);
- ``table``: a `gcdsl.TensorMapTable` of N descriptors (encoded on the host, outside the
  jit function: one grid-constant parameter of N x 128 bytes) and one template atom.

Fake tensors (`cute.runtime.make_fake_compact_tensor`): no GPU is needed; without one,
run.py sets `CUTE_DSL_ARCH=sm_90a` before `cutlass` is imported. `CUTE_DSL_NO_CACHE=1`, so
every compile is a real one. A warm-up compile runs first and is not reported. Per N, the
variants take turns, one compile each per round, each after a full garbage collection,
so that a slow stretch of the host or a collection falls on all of them alike.

First compiles: the compiles above after the first are of a kernel that has traced
before (a gcdsl kernel remembers which lists to lower). A kernel's first compile is
timed apart, each in a fresh Python process, after one compile of an unrelated kernel
there (the DSL's and MLIR's start-up, not reported), for `atoms0` and `list` at
N = 1 and 200, in alternating rounds.

Targets (computed): `list` PTX bytes at N=200 at most 1.5x those at N=1; `list` compile at
N=200 at most 1.1x `atoms0` at N=200; `list` first compile at most 1.1x `atoms0`'s at N=1
and N=200; `table` compile at N=200 at most 1.5x that at N=1.
"""
from __future__ import annotations

import gc
import time
import traceback
from typing import Any, Dict, List, Optional

from .harness import ERROR, OK, Report, fmt_range, print_header, summarize, table

NS = (1, 16, 64, 200)
VARIANTS = ("atoms0", "list", "table")
LABELS = {"atoms0": "@cute.kernel, N atoms, uses [0]", "list": "@gcdsl.kernel loads[k]",
          "table": "TensorMapTable + template"}
FIRST_NS = (1, 200)
FIRST_VARIANTS = ("atoms0", "list")
# A first compile at N = 1 takes about 0.1 s in a fresh process and varies by a third from one
# process to the next: its median needs more samples than the in-process compiles.
FIRST_COMPILES = 11
TARGETS = (  # (name, (variant, n, metric), (variant, n, metric), limit)
    ("list PTX bytes N=200 <= 1.5x N=1", ("list", 200, "ptx_bytes"), ("list", 1, "ptx_bytes"), 1.5),
    ("list compile N=200 <= 1.1x atoms0 N=200", ("list", 200, "compile_s"), ("atoms0", 200, "compile_s"), 1.1),
    ("list first compile N=1 <= 1.1x atoms0", ("list", 1, "first_compile_s"), ("atoms0", 1, "first_compile_s"), 1.1),
    ("list first compile N=200 <= 1.1x atoms0", ("list", 200, "first_compile_s"), ("atoms0", 200, "first_compile_s"),
     1.1),
    ("table compile N=200 <= 1.5x N=1", ("table", 200, "compile_s"), ("table", 1, "compile_s"), 1.5),
)


def compile_one(variant: str, n: int):
    """(seconds, PTX text) of one fresh `cute.compile`."""
    import cutlass.cute as cute

    from . import launch_kernels as L

    fn, args = L.fake_args(variant, n)
    gc.collect()
    t0 = time.perf_counter()
    compiled = cute.compile(fn, *args)
    return time.perf_counter() - t0, compiled.__ptx__ or ""


_FIRST_COMPILE = """
import gc, sys, time
from benchmarks import launch_kernels as L
import cutlass.cute as cute
cute.compile(*(lambda f, a: (f, *a))(*L.fake_args("plain", 1)))  # start-up, not timed
fn, args = L.fake_args(sys.argv[1], int(sys.argv[2]))
gc.collect()
t0 = time.perf_counter()
cute.compile(fn, *args)
print(time.perf_counter() - t0)
"""


def first_compile(variant: str, n: int) -> float:
    """Seconds of `variant`'s first compile at N, in a fresh process (see the docstring)."""
    import os
    import subprocess
    import sys

    from .harness import ROOT

    env = {**os.environ, "CUTE_DSL_NO_CACHE": "1", "PYTHONPATH": ROOT + os.pathsep + os.environ.get("PYTHONPATH", "")}
    proc = subprocess.run([sys.executable, "-c", _FIRST_COMPILE, variant, str(n)], cwd=ROOT, env=env,
                          capture_output=True, text=True, timeout=600)
    if proc.returncode != 0:
        raise RuntimeError(f"first compile of {variant} at N={n} failed: {proc.stderr.strip()[-500:]}")
    return float(proc.stdout.strip().splitlines()[-1])


def run(args, machine: Dict[str, Any]) -> Report:
    from . import common

    reps = 1 if args.quick else 5
    report = Report("W4", "W4 compile cost: cute.compile seconds and PTX size against N")
    report.config = {"ns": NS, "compiles_per_point": reps, "kernel": "launch_kernels.py (1-CTA TMA load)",
                     "arch": machine.get("compute_capability") or machine.get("cute_dsl_arch_env")}
    print_header(f"W4 compile cost: {reps} fresh compile(s) per point")
    compile_one("plain", 1)  # warm-up: DSL and MLIR start-up, not reported
    results: Dict[str, Dict[int, Dict[str, Any]]] = {v: {} for v in VARIANTS}
    for n in NS:
        times: Dict[str, List[float]] = {v: [] for v in VARIANTS}
        ptx: Dict[str, str] = {}
        failed: Dict[str, Exception] = {}
        for _ in range(reps):
            for variant in VARIANTS:
                if variant in failed:
                    continue
                try:
                    seconds, ptx[variant] = compile_one(variant, n)
                    times[variant].append(seconds)
                except Exception as exc:  # noqa: BLE001 - reported as the result
                    failed[variant] = exc
                    traceback.print_exc()
        for variant in VARIANTS:
            row = report.add(variant=variant, n=n)
            results[variant][n] = row
            if variant in failed:
                row.update(status=ERROR, detail=common.short_error(failed[variant]))
            else:
                text = ptx[variant]
                row.update(status=OK, compile_s=summarize(times[variant]), ptx_bytes=len(text.encode()),
                           ptx_code_bytes=common.code_bytes(text), tma_instructions=common.count_tma(text),
                           descriptor_params=common.descriptor_params(text))
            print(f"  N={n:<4} {variant:<7} {_cell(row)}", flush=True)
    firsts: Dict[tuple, List[float]] = {(v, n): [] for n in FIRST_NS for v in FIRST_VARIANTS}
    for _ in range(1 if args.quick else FIRST_COMPILES):
        for n in FIRST_NS:
            for variant in FIRST_VARIANTS:
                try:
                    firsts[(variant, n)].append(first_compile(variant, n))
                except Exception:  # noqa: BLE001 - the point reports what it has
                    traceback.print_exc()
    for (variant, n), times in firsts.items():
        row = results[variant].get(n)
        if row is not None and row.get("status") == OK and times:
            row["first_compile_s"] = summarize(times)
    print("\nfirst compile of a kernel, fresh process per compile (seconds, median [min-max]):")
    print(table(["N"] + [LABELS[v] for v in FIRST_VARIANTS],
                [[str(n)] + [fmt_range(results[v][n].get("first_compile_s"), digits=3) for v in FIRST_VARIANTS]
                 for n in FIRST_NS]))
    _print_table(results, reps)
    report.config["verdicts"] = _verdicts(results)
    report.config["first_compile"] = {"ns": FIRST_NS, "variants": FIRST_VARIANTS,
                                      "method": "fresh process each, after one unrelated compile",
                                      "compiles_per_point": 1 if args.quick else FIRST_COMPILES}
    return report


def _value(results, variant: str, n: int, metric: str) -> Optional[float]:
    r = results[variant].get(n, {})
    if r.get("status") != OK:
        return None
    if metric in ("compile_s", "first_compile_s"):
        return r[metric]["median"] if metric in r else None
    return r[metric]


def _verdicts(results) -> List[Dict[str, Any]]:
    print("\nTargets:")
    out = []
    for name, num_key, den_key, limit in TARGETS:
        num, den = _value(results, *num_key), _value(results, *den_key)
        if num is None or den is None:
            verdict = {"target": name, "status": "NOT MEASURED"}
            text = ""
        else:
            verdict = {"target": name, "ratio": round(num / den, 3), "limit": limit, "numerator": num,
                       "denominator": den, "status": "MET" if num / den <= limit else "MISSED"}
            text = f"{num / den:.2f}x ({num:.3g} / {den:.3g})"
        out.append(verdict)
        print(f"  {name:<42} {verdict['status']:<12} {text}")
    return out


def _cell(row: Dict[str, Any]) -> str:
    if row.get("status") != OK:
        return f"{row.get('status')}: {row.get('detail', '')}"
    return (f"{fmt_range(row['compile_s'], digits=2)} s, PTX {row['ptx_bytes']} B "
            f"({row['ptx_code_bytes']} B without parameter lines), "
            f"{row['tma_instructions']} TMA instr, {row['descriptor_params']} desc params")


def _print_table(results, reps: int) -> None:
    headers = ["N"]
    for v in VARIANTS:
        headers += [f"{LABELS[v]}: compile s", "PTX B", "code B"]
    rows: List[List[str]] = []
    for n in NS:
        cells = [str(n)]
        for v in VARIANTS:
            r = results[v].get(n, {})
            if r.get("status") == OK:
                cells += [fmt_range(r["compile_s"], digits=2) if reps > 1 else f"{r['compile_s']['median']:.2f}",
                          str(r["ptx_bytes"]), str(r["ptx_code_bytes"])]
            else:
                cells += [str(r.get("status", "-")), "-", "-"]
        rows.append(cells)
    print(f"\ncute.compile seconds ({'median [min-max] of ' + str(reps) if reps > 1 else 'one compile'}), "
          "PTX bytes, PTX bytes without parameter lines (code)")
    print(table(headers, rows))
