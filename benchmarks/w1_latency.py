"""W1, latency-bound: K dependent TMA loads per CTA, the descriptor picked by a runtime index.

Each CTA (one per SM) issues `k_loads` loads of a 64x64 fp16 tile, each waiting for the
previous one (one mbarrier, phase flipping), from N sources of 128x128 fp16 (all of them
L2-resident, so the chain measures the TMA + descriptor path, not DRAM). The source and tile
of every load come from a random task table. The metric is nanoseconds per dependent load:
median launch time / k_loads.
"""
from __future__ import annotations

import os
import traceback
from typing import Any, Callable, Dict, List

from . import cpp_anchor
from .harness import ERROR, FAILED, OK, SKIPPED, RESULTS, Report, fmt_range, plot_lines, print_header, table, time_device_ms

NS = (1, 8, 64, 200)
DSL_VARIANTS = ("floor", "gcdsl", "chain", "gmem")
LABELS = {
    "floor": "floor (1 stacked desc)",
    "gcdsl": "gcdsl param[k]",
    "chain": "if/elif chain",
    "gmem": "gmem desc + fence",
    "cpp": "C++ __grid_constant__[k]",
}
POISON = 0x5A5A5A5A
W1_SRC_SHAPE = (128, 128)  # = kernels.W1_SRC_SHAPE (kept here so the data needs no DSL import)
W1_TILE_WORDS = 2048  # = kernels.W1_WORDS


class W1Data:
    """Sources (views of one stacked tensor), tasks, output and the reference XOR for one N."""

    def __init__(self, n: int, grid: int, k_loads: int, seed: int = 1234, device: str = "cuda") -> None:
        import torch

        rows, cols = W1_SRC_SHAPE
        g = torch.Generator(device=device).manual_seed(seed + n)
        self.device = device
        self.n, self.grid, self.k_loads = n, grid, k_loads
        bits = torch.randint(-(2**15), 2**15, (n * rows, cols), dtype=torch.int16, device=device, generator=g)
        self.stacked = bits.view(torch.float16)  # random bit patterns: only moved, never computed on
        self.srcs = [self.stacked[i * rows:(i + 1) * rows] for i in range(n)]  # same bytes as the floor
        k = torch.randint(0, n, (grid * k_loads,), dtype=torch.int32, device=device, generator=g)
        t = torch.randint(0, 4, (grid * k_loads,), dtype=torch.int32, device=device, generator=g)
        self.tasks = (k << 2) | t
        self.out = torch.empty(grid * W1_TILE_WORDS, dtype=torch.int32, device=device)
        self.reference = self._reference(bits)

    def _reference(self, bits):
        import torch

        tiles = bits.view(self.n, 2, 64, 2, 64).permute(0, 1, 3, 2, 4)  # [source, tile row, tile col, 64, 64]
        tk = self.tasks.view(self.grid, self.k_loads).long()
        ref = torch.zeros(self.grid, 64, 64, dtype=torch.int16, device=self.device)
        for j in range(self.k_loads):
            col = tk[:, j]
            ref ^= tiles[col >> 2, (col >> 1) & 1, col & 1]
        return ref

    def verify(self, launch: Callable[[], None]) -> bool:
        import torch

        self.out.fill_(POISON)
        launch()
        if self.device == "cuda":
            torch.cuda.synchronize()
        return torch.equal(self.out.view(torch.int16).view(self.grid, 64, 64), self.reference)


def launcher(variant: str, data: W1Data, k_loads: int) -> Callable[[Any], None]:
    """Compile (once per run) the variant for data.n and return `launch(stream)`."""
    import torch

    from . import common
    from . import kernels as K

    n = data.n
    st = common.stream()
    tasks, out, kl = common.wrap_dynamic(data.tasks), common.wrap_dynamic(data.out), common.i32(k_loads)
    if variant == "floor":
        stacked = common.wrap(data.stacked)
        c = common.compile_once(("w1", "floor", n), K.w1_floor, stacked, tasks, out, kl, st)
        return lambda s: c(stacked, tasks, out, kl, s)
    if variant in ("gcdsl", "chain"):
        srcs = [common.wrap(t) for t in data.srcs]
        fn = K.w1_gcdsl if variant == "gcdsl" else K.w1_chain
        c = common.compile_once(("w1", variant, n), fn, srcs, tasks, out, kl, st)
        return lambda s: c(srcs, tasks, out, kl, s)
    if variant == "gmem":
        srcs = [common.wrap(t) for t in data.srcs]
        data.table = torch.zeros(n * K.DESC_BYTES, dtype=torch.uint8, device="cuda")
        table = common.wrap(data.table, align=128)
        fill = common.compile_once(("w1", "fill", n), K.fill_w1_load_table, srcs, table, st)
        fill(srcs, table, st)  # once, outside the timing: the descriptors never change
        torch.cuda.synchronize()
        c = common.compile_once(("w1", "gmem", n), K.w1_gmem, srcs[0], table, tasks, out, kl, st)
        return lambda s: c(srcs[0], table, tasks, out, kl, s)
    raise ValueError(variant)


def run(args, machine: Dict[str, Any]) -> Report:
    import torch

    from . import common

    sms = torch.cuda.get_device_properties(0).multi_processor_count
    k_loads = 256 if args.quick else 512
    grid = sms
    report = Report("W1", "W1 latency-bound: ns per dependent TMA load (launch median / K)")
    report.config = {"ns": NS, "k_loads": k_loads, "grid": grid, "threads": 128, "tile": "64x64 fp16",
                     "source": "128x128 fp16", "reps": args.reps, "warmup": args.warmup}
    print_header(f"W1 latency: {grid} CTAs x {k_loads} dependent 64x64 fp16 TMA loads, N sources of 128x128")
    results: Dict[str, Dict[int, Dict[str, Any]]] = {v: {} for v in (*DSL_VARIANTS, "cpp")}

    for n in NS:
        data = W1Data(n, grid, k_loads)
        for variant in DSL_VARIANTS:
            row = report.add(variant=variant, n=n)
            try:
                launch = launcher(variant, data, k_loads)
                st = common.stream()
                call = lambda: launch(st)  # noqa: E731
                if not data.verify(call):
                    row.update(status=FAILED, detail="output differs from the torch reference")
                else:
                    stats = time_device_ms(call, args.reps, args.warmup)
                    row.update(status=OK, ms=stats, ns_per_load=_scale(stats, 1e6 / k_loads))
                key = ("w1", variant, n)
                if key in common._COMPILED:
                    row["compile_s"] = round(common.compile_seconds(key), 3)
            except Exception as exc:  # noqa: BLE001 - reported, never hidden
                row.update(status=ERROR, detail=common.short_error(exc))
                traceback.print_exc()
            results[variant][n] = row
            print(f"  N={n:<4} {variant:<6} {_cell(row)}", flush=True)
        del data
        torch.cuda.empty_cache()

    _run_cpp(args, report, results, k_loads, grid)
    _print_table(report, results)
    series = {LABELS[v]: {n: r["ns_per_load"]["median"] for n, r in results[v].items() if r.get("status") == OK}
              for v in results}
    png = None if args.no_plots else plot_lines(
        os.path.join(RESULTS, "W1.png"), f"W1: {grid} CTAs x {k_loads} dependent TMA loads ({machine.get('gpu')})",
        "N descriptors", "ns per dependent load (median)", series)
    if png:
        report.notes.append(f"plot: {os.path.relpath(png, os.path.dirname(RESULTS))}")
    return report


def _run_cpp(args, report: Report, results, k_loads: int, grid: int) -> None:
    import torch

    if args.no_cpp:
        for n in NS:
            results["cpp"][n] = report.add(variant="cpp", n=n, status=SKIPPED, detail="--no-cpp")
        return
    major, minor = torch.cuda.get_device_capability(0)
    binary, message = cpp_anchor.build(f"sm_{major}{minor}a")
    report.config["cpp_build"] = message
    if binary is None:
        print(f"  C++ anchor: {message}")
        for n in NS:
            results["cpp"][n] = report.add(variant="cpp", n=n, status=SKIPPED, detail=message.splitlines()[0])
        return
    try:
        out = cpp_anchor.run(binary, NS, k_loads, grid, args.reps, args.warmup)
        by_n = {r["n"]: r for r in out["results"]}
    except Exception as exc:  # noqa: BLE001
        by_n = {}
        report.notes.append(f"C++ anchor failed: {exc}")
        print(f"  C++ anchor failed: {exc}")
    for n in NS:
        r = by_n.get(n)
        row = report.add(variant="cpp", n=n)
        if r is None or "error" in r:
            row.update(status=ERROR, detail=(r or {}).get("error", "no result"))
        elif not r["verified"]:
            row.update(status=FAILED, detail=f"{r['bad_ctas']} CTAs differ from the host reference")
        else:
            stats = {"median": r["median_ms"], "min": r["min_ms"], "max": r["max_ms"], "n": r["reps"]}
            row.update(status=OK, ms=stats, ns_per_load=_scale(stats, 1e6 / k_loads), param_bytes=r["param_bytes"])
        results["cpp"][n] = row
        print(f"  N={n:<4} {'cpp':<6} {_cell(row)}", flush=True)


def _scale(stats: Dict[str, Any], factor: float) -> Dict[str, float]:
    return {k: stats[k] * factor for k in ("median", "min", "max")}


def _cell(row: Dict[str, Any]) -> str:
    if row.get("status") == OK:
        return fmt_range(row["ns_per_load"]) + " ns/load"
    return f"{row.get('status')}: {row.get('detail', '')}"


def _print_table(report: Report, results) -> None:
    variants = list(results)
    headers = ["N"] + [LABELS[v] for v in variants]
    rows: List[List[str]] = []
    for n in NS:
        cells = [str(n)]
        for v in variants:
            r = results[v].get(n, {})
            cells.append(fmt_range(r["ns_per_load"]) if r.get("status") == OK else str(r.get("status", "-")))
        rows.append(cells)
    print("\nns per dependent load, median [min-max] over", report.config["reps"], "launches")
    print(table(headers, rows))
    rel_rows = []
    for n in NS:
        floor = results["floor"].get(n, {})
        base = floor["ns_per_load"]["median"] if floor.get("status") == OK else None
        cells = [str(n)]
        for v in variants:
            r = results[v].get(n, {})
            cells.append(f"{r['ns_per_load']['median'] / base:.3f}x" if base and r.get("status") == OK else "-")
        rel_rows.append(cells)
    print("\nrelative to the floor (median / floor median)")
    print(table(headers, rel_rows))
    for v in variants:
        for n, r in results[v].items():
            if r.get("status") in (FAILED, ERROR):
                print(f"  {r['status']}: {v} N={n}: {r.get('detail')}")
