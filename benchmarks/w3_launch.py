"""W3, host launch overhead: microseconds per launch from Python, against N descriptors.

The kernel is W1's with one CTA and one load (the GPU work is a few microseconds), so the
numbers are the host's: `compiled(*args)` builds the N TMA descriptors (the DSL's host code
encodes them on every call) and marshals N tensors, then launches. CUDA-graph replay
(`torch.cuda.CUDAGraph` capturing the same call) freezes the parameters, descriptors
included, at capture time.

Per variant and N: `enqueue` = wall time of `calls` back-to-back calls / calls (the host
cost: the GPU is not waited for); `end-to-end` = the same plus the final synchronize.
Median [min-max] over `reps` repetitions of `calls` calls. Wall-clock (time.perf_counter),
not CUDA events: the cost measured here is on the CPU.
"""
from __future__ import annotations

import time
import traceback
from typing import Any, Callable, Dict, List

from .harness import ERROR, FAILED, OK, Report, fmt_range, print_header, summarize, table
from .w1_latency import W1Data, launcher

NS = (1, 16, 64, 200)
VARIANTS = ("gcdsl", "floor", "gmem")
LABELS = {"gcdsl": "gcdsl (N param descs)", "floor": "floor (1 desc)", "gmem": "gmem table (1 template)"}


def host_rate(call: Callable[[], None], calls: int, reps: int) -> Dict[str, Dict[str, Any]]:
    import torch

    for _ in range(3):
        call()
    torch.cuda.synchronize()
    enqueue, e2e = [], []
    for _ in range(reps):
        t0 = time.perf_counter()
        for _ in range(calls):
            call()
        t1 = time.perf_counter()
        torch.cuda.synchronize()
        t2 = time.perf_counter()
        enqueue.append((t1 - t0) / calls * 1e6)
        e2e.append((t2 - t0) / calls * 1e6)
    return {"enqueue_us": summarize(enqueue), "end_to_end_us": summarize(e2e)}


def capture(launch: Callable[[Any], None]):
    """A CUDA graph of one `launch(stream)` on torch's capture stream."""
    import torch

    from . import common

    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):  # torch wants work run on a side stream before capture
        launch(common.stream())
    torch.cuda.current_stream().wait_stream(side)
    torch.cuda.synchronize()
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        launch(common.stream())
    return graph


def run(args, machine: Dict[str, Any]) -> Report:
    import torch

    from . import common

    calls = 100 if args.quick else 200
    reps = args.reps
    report = Report("W3", "W3 host launch overhead: microseconds per launch from Python")
    report.config = {"ns": NS, "calls_per_rep": calls, "reps": reps, "kernel": "W1, grid 1, 1 load",
                     "clock": "time.perf_counter (host)"}
    print_header(f"W3 launch overhead: W1 kernel with 1 CTA x 1 load, {calls} calls x {reps} reps")
    results: Dict[str, Dict[int, Dict[str, Any]]] = {}
    for n in NS:
        data = W1Data(n, grid=1, k_loads=1, seed=77)
        for variant in VARIANTS:
            row = report.add(variant=variant, n=n)
            results.setdefault(variant, {})[n] = row
            try:
                launch = launcher(variant, data, 1)
                st = common.stream()
                direct = lambda: launch(st)  # noqa: E731
                if not data.verify(direct):
                    row.update(status=FAILED, detail="direct call: output differs from the torch reference")
                    print(f"  N={n:<4} {variant:<6} FAILED", flush=True)
                    continue
                row.update(status=OK, call=host_rate(direct, calls, reps))
                try:
                    graph = capture(launch)
                    if not data.verify(graph.replay):
                        row["graph"] = {"status": FAILED, "detail": "graph replay: output differs"}
                    else:
                        row["graph"] = {"status": OK, **host_rate(graph.replay, calls, reps)}
                except Exception as exc:  # noqa: BLE001 - reported as the result
                    row["graph"] = {"status": "CAPTURE FAILED", "detail": common.short_error(exc)}
                    torch.cuda.synchronize()
            except Exception as exc:  # noqa: BLE001
                row.update(status=ERROR, detail=common.short_error(exc))
                traceback.print_exc()
            print(f"  N={n:<4} {variant:<6} call {_us(row, 'call')}   graph {_graph_cell(row)}", flush=True)
        del data
    _print_table(results)
    return report


def _us(row: Dict[str, Any], key: str, what: str = "enqueue_us") -> str:
    if row.get("status") != OK or key not in row:
        return str(row.get("status", "-"))
    return fmt_range(row[key][what], digits=1)


def _graph_cell(row: Dict[str, Any], what: str = "enqueue_us") -> str:
    g = row.get("graph")
    if not g:
        return str(row.get("status", "-"))
    if g["status"] != OK:
        return f"{g['status']}: {g.get('detail', '')}"
    return fmt_range(g[what], digits=1)


def _print_table(results) -> None:
    for what, label in (("enqueue_us", "host enqueue"), ("end_to_end_us", "end to end (incl. synchronize)")):
        headers = ["N"]
        for v in VARIANTS:
            headers += [f"{LABELS[v]}: call", "graph replay"]
        rows: List[List[str]] = []
        for n in NS:
            cells = [str(n)]
            for v in VARIANTS:
                row = results.get(v, {}).get(n, {})
                cells.append(_us(row, "call", what))
                g = row.get("graph")
                cells.append(fmt_range(g[what], digits=1) if g and g.get("status") == OK
                             else (g or {}).get("status", "-"))
            rows.append(cells)
        print(f"\nus per launch, {label}, median [min-max]")
        print(table(headers, rows))
    for v in VARIANTS:
        for n, row in results.get(v, {}).items():
            g = row.get("graph") or {}
            if g.get("status") not in (None, OK):
                print(f"  graph {v} N={n}: {g['status']}: {g.get('detail')}")
            if row.get("status") in (FAILED, ERROR):
                print(f"  {row['status']}: {v} N={n}: {row.get('detail')}")
