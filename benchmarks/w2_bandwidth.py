"""W2, bandwidth-bound: persistent grouped copy of N mixed-size tensors, gmem -> smem -> gmem by TMA.

One 2 GiB source and one 2 GiB destination (row-major, 4096 fp16 columns) are cut into N
tensors of mixed row counts (multiples of 128 rows, sizes drawn 1x-4x, seeded). Every
variant copies the same 65,536 tiles of 128x128 in the same order with one CTA per SM:
4 GiB moved per launch (read + write). The list variants see N separate tensors (views);
the floor sees the two stacked 2 GiB tensors through one load and one store descriptor.

N stops at 120: loads and stores are two lists of N descriptors each, and 2 x 128 x 128
bytes = 32 KiB already exceeds CUDA's 32,764-byte kernel-parameter limit (W2_MAX_N = 126).
"""
from __future__ import annotations

import os
import traceback
from typing import Any, Callable, Dict, List

from .harness import ERROR, FAILED, OK, RESULTS, Report, fmt_range, plot_lines, print_header, table, time_device_ms

NS = (1, 8, 64, 120)
COLS = 4096
BLOCK_ROWS = 128
TOTAL_BLOCKS = 2048  # x 128 rows x 4096 cols x 2 B = 2 GiB per side
DSL_VARIANTS = ("floor", "gcdsl", "chain", "gmem")
LABELS = {
    "floor": "floor (1+1 stacked desc)",
    "gcdsl": "gcdsl param[k]",
    "chain": "if/elif chain",
    "gmem": "gmem desc + fence",
    "torch": "torch copy_ x N",
}
POISON = -1  # 0xFFFF: a NaN bit pattern, never a value of the sources


class W2Data:
    def __init__(self, seed: int = 4321, device: str = "cuda", total_blocks: int = TOTAL_BLOCKS) -> None:
        import torch

        g = torch.Generator(device=device).manual_seed(seed)
        self.device, self.total_blocks = device, total_blocks
        rows = total_blocks * BLOCK_ROWS
        self.src = torch.randint(-(2**15), 2**15, (rows, COLS), dtype=torch.int16, device=device, generator=g)
        self.dst = torch.empty_like(self.src)
        self.bytes_moved = 2 * self.src.numel() * self.src.element_size()

    def split(self, n: int, seed: int = 99):
        """Row-block counts of n mixed-size tensors summing to TOTAL_BLOCKS, and their tasks."""
        import torch

        g = torch.Generator().manual_seed(seed + n)
        weights = 1 + 3 * torch.rand(n, generator=g, dtype=torch.float64)
        total = self.total_blocks
        blocks = torch.clamp((weights / weights.sum() * total).floor().long(), min=1)
        blocks[int(torch.argmax(blocks))] += total - int(blocks.sum())
        offsets = torch.cumsum(blocks, 0) - blocks
        col_tiles = COLS // 128
        listed, stacked = [], []
        for k in range(n):
            b, o = int(blocks[k]), int(offsets[k])
            r = torch.arange(b, dtype=torch.int32).repeat_interleave(col_tiles)
            c = torch.arange(col_tiles, dtype=torch.int32).repeat(b)
            listed.append((k << 20) | (r << 8) | c)
            stacked.append(((r + o) << 8) | c)  # the same tile, counted in the stack
        as_rows = lambda t: t.view(torch.float16)  # noqa: E731
        srcs = [as_rows(self.src[int(o) * BLOCK_ROWS:int(o + b) * BLOCK_ROWS]) for o, b in zip(offsets, blocks)]
        dsts = [as_rows(self.dst[int(o) * BLOCK_ROWS:int(o + b) * BLOCK_ROWS]) for o, b in zip(offsets, blocks)]
        return {
            "blocks": blocks.tolist(),
            "srcs": srcs,
            "dsts": dsts,
            "tasks": torch.cat(listed).to(self.device),
            "floor_tasks": torch.cat(stacked).to(self.device),
        }

    def verify(self, launch: Callable[[], None]) -> bool:
        import torch

        self.dst.fill_(POISON)
        launch()
        if self.device == "cuda":
            torch.cuda.synchronize()
        return torch.equal(self.dst, self.src)


def launcher(variant: str, data: W2Data, split: Dict[str, Any], n: int, grid: int) -> Callable[[Any], None]:
    import torch

    from . import common
    from . import kernels as K

    st = common.stream()
    g = common.i32(grid)
    if variant == "torch":
        pairs = list(zip(split["dsts"], split["srcs"]))

        def copy_all(_stream):
            for d, s in pairs:
                d.copy_(s)

        return copy_all
    if variant == "floor":
        src, dst = common.wrap(data.src.view(torch.float16)), common.wrap(data.dst.view(torch.float16))
        tasks = common.wrap_dynamic(split["floor_tasks"])
        c = common.compile_once(("w2", "floor"), K.w2_floor, src, dst, tasks, g, st)
        return lambda s: c(src, dst, tasks, g, s)
    srcs = [common.wrap(t) for t in split["srcs"]]
    dsts = [common.wrap(t) for t in split["dsts"]]
    tasks = common.wrap_dynamic(split["tasks"])
    if variant in ("gcdsl", "chain"):
        fn = K.w2_gcdsl if variant == "gcdsl" else K.w2_chain
        c = common.compile_once(("w2", variant, n), fn, srcs, dsts, tasks, g, st)
        return lambda s: c(srcs, dsts, tasks, g, s)
    if variant == "gmem":
        load_t = torch.zeros(n * K.DESC_BYTES, dtype=torch.uint8, device="cuda")
        store_t = torch.zeros(n * K.DESC_BYTES, dtype=torch.uint8, device="cuda")
        split["tables"] = (load_t, store_t)  # keep them alive
        lt, stt = common.wrap(load_t, align=128), common.wrap(store_t, align=128)
        common.compile_once(("w2", "fill_load", n), K.fill_w2_load_table, srcs, lt, st)(srcs, lt, st)
        common.compile_once(("w2", "fill_store", n), K.fill_w2_store_table, dsts, stt, st)(dsts, stt, st)
        torch.cuda.synchronize()
        big = max(range(n), key=lambda i: split["blocks"][i])  # template atoms + coordinates: the largest
        c = common.compile_once(("w2", "gmem", n), K.w2_gmem, srcs[big], dsts[big], lt, stt, tasks, g, st)
        return lambda s: c(srcs[big], dsts[big], lt, stt, tasks, g, s)
    raise ValueError(variant)


def run(args, machine: Dict[str, Any]) -> Report:
    import torch

    from . import common
    from . import kernels as K

    grid = torch.cuda.get_device_properties(0).multi_processor_count
    data = W2Data()
    gb = data.bytes_moved / 1e9
    report = Report("W2", "W2 bandwidth-bound grouped copy: GB/s (read + write) per launch")
    report.config = {"ns": NS, "bytes_moved_per_launch": data.bytes_moved, "cols": COLS, "tile": "128x128 fp16",
                     "stages": K.W2_STAGES, "grid": grid, "threads": K.W2_THREADS, "reps": args.reps,
                     "warmup": args.warmup, "max_n_reason": "2N descriptors (loads + stores) x 128 B must fit "
                     "the 32,764-byte kernel-parameter limit: N <= 126"}
    print_header(f"W2 bandwidth: grouped TMA copy, {gb:.2f} GB moved per launch, {grid} persistent CTAs, "
                 f"{K.W2_STAGES} x 32 KiB stages")

    # The physical ceiling: one device-to-device copy of the same 2 GiB.
    row = report.add(variant="ceiling", n=None)
    try:
        big_copy = lambda: data.dst.copy_(data.src)  # noqa: E731
        if not data.verify(big_copy):
            raise RuntimeError("dst.copy_(src) left the destination different from the source")
        stats = time_device_ms(big_copy, args.reps, args.warmup)
        row.update(status=OK, ms=stats, gbps=_gbps(stats, data.bytes_moved))
        print(f"  ceiling: one dst.copy_(src) of {gb / 2:.2f} GB: {fmt_range(row['gbps'], digits=0)} GB/s", flush=True)
    except Exception as exc:  # noqa: BLE001
        row.update(status=ERROR, detail=common.short_error(exc))
    ceiling = row

    # The floor's tiles and their order do not depend on N (the tensors are consecutive in the
    # stack): one compiled kernel, timed again at every N as that row's reference.
    results: Dict[str, Dict[int, Dict[str, Any]]] = {v: {} for v in (*DSL_VARIANTS, "torch")}
    for n in NS:
        split = data.split(n)
        for variant in results:
            row = report.add(variant=variant, n=n)
            try:
                launch = launcher(variant, data, split, n, grid)
                st = common.stream()
                call = lambda: launch(st)  # noqa: E731
                if not data.verify(call):
                    row.update(status=FAILED, detail="destination differs from the source")
                else:
                    stats = time_device_ms(call, args.reps, args.warmup)
                    row.update(status=OK, ms=stats, gbps=_gbps(stats, data.bytes_moved))
            except Exception as exc:  # noqa: BLE001
                row.update(status=ERROR, detail=common.short_error(exc))
                traceback.print_exc()
            results[variant][n] = row
            print(f"  N={n:<4} {variant:<6} {_cell(row)}", flush=True)
        report.config.setdefault("row_blocks", {})[n] = split["blocks"]
        del split
        torch.cuda.empty_cache()

    _print_table(report, results, ceiling)
    series = {LABELS[v]: {n: r["gbps"]["median"] for n, r in results[v].items() if r.get("status") == OK}
              for v in results}
    hlines = {"ceiling: one big copy_": ceiling["gbps"]["median"]} if ceiling.get("status") == OK else {}
    png = None if args.no_plots else plot_lines(
        os.path.join(RESULTS, "W2.png"), f"W2: grouped TMA copy, {gb:.1f} GB per launch ({machine.get('gpu')})",
        "N tensors", "GB/s, read + write (median)", series, hlines)
    if png:
        report.notes.append(f"plot: {os.path.relpath(png, os.path.dirname(RESULTS))}")
    return report  # the 4 GiB go with `data` when this returns


def _gbps(stats: Dict[str, Any], moved: int) -> Dict[str, float]:
    # The fastest launch gives the highest bandwidth: max <- min time.
    return {"median": moved / stats["median"] / 1e6, "min": moved / stats["max"] / 1e6,
            "max": moved / stats["min"] / 1e6}


def _cell(row: Dict[str, Any]) -> str:
    if row.get("status") == OK:
        return fmt_range(row["gbps"], digits=0) + " GB/s"
    return f"{row.get('status')}: {row.get('detail', '')}"


def _print_table(report: Report, results, ceiling) -> None:
    variants = list(results)
    headers = ["N"] + [LABELS[v] for v in variants]
    rows: List[List[str]] = []
    for n in NS:
        rows.append([str(n)] + [fmt_range(results[v][n]["gbps"], digits=0) if results[v].get(n, {}).get("status") == OK
                                else str(results[v].get(n, {}).get("status", "-")) for v in variants])
    ceil = fmt_range(ceiling["gbps"], digits=0) if ceiling.get("status") == OK else ceiling.get("status")
    print(f"\nGB/s (read + write), median [min-max] over {report.config['reps']} launches; "
          f"ceiling (one dst.copy_(src) of the same bytes): {ceil} GB/s")
    print(table(headers, rows))
    if ceiling.get("status") == OK:
        top = ceiling["gbps"]["median"]
        print("\nfraction of the ceiling (median / ceiling median)")
        print(table(headers, [[str(n)] + [
            f"{results[v][n]['gbps']['median'] / top:.3f}" if results[v].get(n, {}).get("status") == OK else "-"
            for v in variants] for n in NS]))
    for v in variants:
        for n, r in results[v].items():
            if r.get("status") in (FAILED, ERROR):
                print(f"  {r['status']}: {v} N={n}: {r.get('detail')}")
