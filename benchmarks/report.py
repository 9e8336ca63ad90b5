"""Write every measured number in README.md and benchmarks/RESULTS.md from benchmarks/results/*.json.

    python benchmarks/report.py            # rewrite the marked regions of both files
    python benchmarks/report.py --check    # exit 1 with a diff where a file disagrees with the JSON

A region is `<!-- gcdsl:results NAME -->` ... `<!-- /gcdsl:results -->`; NAME picks the
function in `REGIONS` that writes it. Text outside the regions is written by hand and
carries no measured number: comparisons ("faster", "within the spread") are computed
here from the same JSON. Standard library only.
"""
from __future__ import annotations

import argparse
import difflib
import json
import os
import re
import sys
from typing import Any, Callable, Dict, List, Optional, Sequence, Tuple

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
RESULTS_DIR = os.path.join(HERE, "results")
FILES = (os.path.join(ROOT, "README.md"), os.path.join(HERE, "RESULTS.md"))

REGION = re.compile(r"(<!-- gcdsl:results (?P<name>[\w-]+) -->\n)(?P<body>.*?)(<!-- /gcdsl:results -->)", re.S)

# What each workload was asked to reach; each table says whether it did.
W1_FLOOR_TARGET = 1.03  # gcdsl within 3% of the floor
W2_CEILING_TARGET = 0.90  # at least 90% of one big device-to-device copy
W3_LAUNCH_TARGET = (64, 1.5)  # a launch with 64 descriptors at most 1.5x the launch with 1
W4_GROWTH_TARGET = 1.2  # compile time and PTX size from N = 1 to the largest N

Results = Dict[str, Dict[str, Any]]


# ---------------------------------------------------------------------------------------
# Reading the JSON
# ---------------------------------------------------------------------------------------
def load(results_dir: str = RESULTS_DIR) -> Results:
    """Every `<name>.json` under `results_dir`, by name (W1, W2, W3, W4, grid_constant)."""
    out = {}
    for name in sorted(os.listdir(results_dir)):
        if name.endswith(".json"):
            with open(os.path.join(results_dir, name)) as f:
                out[name[:-5]] = json.load(f)
    return out


def _ok(row: Optional[Dict[str, Any]]) -> bool:
    return bool(row) and row.get("status") == "OK"


def _rows(results: Results, workload: str) -> Dict[Tuple[str, Any], Dict[str, Any]]:
    return {(r["variant"], r.get("n")): r for r in results[workload]["results"]}


def _ns(results: Results, workload: str) -> List[int]:
    return list(results[workload]["config"]["ns"])


def _median(row: Dict[str, Any], metric: str) -> float:
    return row[metric]["median"]


# ---------------------------------------------------------------------------------------
# Formatting: one rule per unit, everywhere
# ---------------------------------------------------------------------------------------
def f1(x: float) -> str:
    return f"{x:.1f}"


def f0(x: float) -> str:
    return f"{x:.0f}"


def ratio(x: float) -> str:
    return f"{x:.2f}x"


def pct(x: float) -> str:
    """A fraction as a percentage, one decimal."""
    return f"{100 * x:.1f}%"


def than(speedup: float) -> str:
    """`speedup` (their time / ours) as "1.29x faster" or "6.82x slower"."""
    return f"{ratio(speedup)} faster" if speedup >= 1 else f"{ratio(1 / speedup)} slower"


def spread(stats: Dict[str, float], fmt: Callable[[float], str] = f1) -> str:
    return f"{fmt(stats['median'])} [{fmt(stats['min'])}-{fmt(stats['max'])}]"


def per_n(values: Sequence[str], ns: Sequence[int]) -> str:
    return f"{' / '.join(values)} at N = {' / '.join(map(str, ns))}"


def listing(ns: Sequence[Any]) -> str:
    ns = [str(n) for n in ns]
    return ns[0] if len(ns) == 1 else ", ".join(ns[:-1]) + " and " + ns[-1]


def md_table(headers: Sequence[str], rows: Sequence[Sequence[str]]) -> str:
    lines = ["| " + " | ".join(headers) + " |", "|" + "---|" * len(headers)]
    lines += ["| " + " | ".join(row) + " |" for row in rows]
    return "\n".join(lines)


def overlap(a: Dict[str, float], b: Dict[str, float]) -> bool:
    """Do two [min, max] ranges share any value?"""
    return a["min"] <= b["max"] and b["min"] <= a["max"]


def slope(points: Sequence[Tuple[float, float]]) -> float:
    """Least-squares slope of y against x."""
    n = len(points)
    mx = sum(x for x, _ in points) / n
    my = sum(y for _, y in points) / n
    return sum((x - mx) * (y - my) for x, y in points) / sum((x - mx) ** 2 for x, _ in points)


# ---------------------------------------------------------------------------------------
# The run
# ---------------------------------------------------------------------------------------
def machine_line(machine: Optional[Dict[str, Any]]) -> str:
    if not machine:
        return "machine not recorded"
    torch = machine.get("torch") or "-"
    if machine.get("torch_cuda") and "+" not in torch:
        torch += f" (CUDA {machine['torch_cuda']})"
    parts = [
        f"{machine.get('gpu', 'no GPU')} ({machine.get('sm_count', '?')} SMs)",
        f"driver {machine.get('driver', '?')} (CUDA {machine.get('driver_cuda_version', '?')})",
        f"nvidia-cutlass-dsl {machine.get('nvidia_cutlass_dsl')}",
        f"torch {torch}",
        f"Python {machine.get('python')}",
    ]
    return ", ".join(parts)


def commit_line(machine: Optional[Dict[str, Any]]) -> str:
    commit = (machine or {}).get("gcdsl_git")
    if not commit:
        return "gcdsl commit: not recorded by this run"
    dirty = (machine or {}).get("gcdsl_git_dirty")
    return f"gcdsl commit: `{commit}`" + (" with uncommitted changes" if dirty else "")


def region_run(results: Results) -> str:
    machine = results["W1"].get("machine")
    reps = results["W1"]["config"]["reps"]
    gc = results.get("grid_constant", {})
    gc_reps = gc.get("config", {}).get("reps")
    lines = [
        f"## {machine['date'][:10] if machine else 'undated'}, {machine_line(machine)}",
        "",
        f"{commit_line(machine)}. Medians over {reps} launches"
        + (f" ({gc_reps} for the grid-constant reads)" if gc_reps else "") + ", min-max in brackets.",
    ]
    if gc.get("machine") and machine_line(gc["machine"]) != machine_line(machine):
        lines.append(f"The grid-constant reads ran on: {machine_line(gc['machine'])}.")
    return "\n".join(lines)


# ---------------------------------------------------------------------------------------
# W1: latency
# ---------------------------------------------------------------------------------------
W1_COLUMNS = (("floor", "floor (1 stacked desc)"), ("gcdsl", "gcdsl `param[k]`"), ("chain", "if/elif chain"),
              ("gmem", "gmem desc + fence"), ("cpp", "C++ `__grid_constant__[k]`"))


def _w1(results: Results, variant: str, n: int) -> Optional[Dict[str, Any]]:
    row = _rows(results, "W1").get((variant, n))
    return row if _ok(row) else None


def w1_ratio(results: Results, a: str, b: str) -> Dict[int, float]:
    """median(a) / median(b) per N where both ran."""
    out = {}
    for n in _ns(results, "W1"):
        ra, rb = _w1(results, a, n), _w1(results, b, n)
        if ra and rb:
            out[n] = _median(ra, "ns_per_load") / _median(rb, "ns_per_load")
    return out


def w1_vs_cpp(results: Results) -> Dict[str, Any]:
    """gcdsl against the C++ anchor: median difference per N, and where the ranges overlap."""
    diff, overlapping, apart = {}, [], []
    for n in _ns(results, "W1"):
        g, c = _w1(results, "gcdsl", n), _w1(results, "cpp", n)
        if g and c:
            diff[n] = _median(g, "ns_per_load") / _median(c, "ns_per_load") - 1
            (overlapping if overlap(g["ns_per_load"], c["ns_per_load"]) else apart).append(n)
    return {"diff": diff, "overlap": overlapping, "apart": apart}


def _signed_pct(x: float) -> str:
    return f"{'+' if x >= 0 else '-'}{abs(100 * x):.1f}%"


def region_w1(results: Results) -> str:
    cfg = results["W1"]["config"]
    ns = _ns(results, "W1")
    rows = []
    for n in ns:
        cells = [str(n)]
        for variant, _ in W1_COLUMNS:
            row = _rows(results, "W1").get((variant, n))
            cells.append(spread(row["ns_per_load"]) if _ok(row) else (row or {}).get("status", "-"))
        rows.append(cells)
    out = [
        f"### W1 latency: {cfg['grid']} CTAs x {cfg['k_loads']} dependent {cfg['tile']} TMA loads, "
        "descriptor chosen per load",
        "",
        "ns per dependent load:",
        "",
        md_table(["N"] + [label for _, label in W1_COLUMNS], rows),
        "",
    ]
    rel = []
    for variant, label in (("gcdsl", "gcdsl"), ("cpp", "C++ anchor"), ("chain", "if/elif"), ("gmem", "gmem")):
        r = w1_ratio(results, variant, "floor")
        rel.append(f"{label} {' / '.join(ratio(r[n]) for n in r)}")
    out.append(f"Relative to the floor (N = {' / '.join(map(str, ns))}): " + "; ".join(rel) + ".")
    out.append("")

    vs = w1_vs_cpp(results)
    if vs["diff"]:
        sentence = (f"- gcdsl against the C++ anchor, median: "
                    f"{per_n([_signed_pct(vs['diff'][n]) for n in vs['diff']], list(vs['diff']))}. ")
        if vs["apart"] and vs["overlap"]:
            sentence += (f"The min-max ranges overlap at N = {listing(vs['overlap'])} and are disjoint at "
                         f"N = {listing(vs['apart'])}.")
        elif vs["apart"]:
            sentence += "The min-max ranges are disjoint at every N."
        else:
            sentence += "The min-max ranges overlap at every N: no difference beyond the spread."
        out.append(sentence)
    chain = w1_ratio(results, "chain", "gcdsl")
    gmem = w1_ratio(results, "gmem", "gcdsl")
    out.append(f"- if/elif chain / gcdsl: {per_n([ratio(chain[n]) for n in chain], list(chain))}; "
               f"gmem / gcdsl: {per_n([ratio(gmem[n]) for n in gmem], list(gmem))}.")
    floor = w1_ratio(results, "gcdsl", "floor")
    met = [n for n in floor if floor[n] <= W1_FLOOR_TARGET]
    missed = [n for n in floor if floor[n] > W1_FLOOR_TARGET]
    target = f"within {pct(W1_FLOOR_TARGET - 1)} of the floor"
    if not missed:
        out.append(f"- **Target met: {target}** at every N.")
    else:
        cpp_floor = w1_ratio(results, "cpp", "floor")
        line = (f"- **Target missed: {target}** holds at N = {listing(met) if met else 'none'}; "
                f"gcdsl is {', '.join(f'{pct(floor[n] - 1)} above it at {n}' for n in missed)}.")
        if all(n in cpp_floor for n in missed):
            line += (" The C++ anchor is "
                     f"{', '.join(f'{pct(cpp_floor[n] - 1)} above it at {n}' for n in missed)}.")
        out.append(line)
    return "\n".join(out)


# ---------------------------------------------------------------------------------------
# W2: bandwidth
# ---------------------------------------------------------------------------------------
def _w2(results: Results, variant: str, n: Any) -> Optional[Dict[str, Any]]:
    row = _rows(results, "W2").get((variant, n))
    return row if _ok(row) else None


def w2_of_ceiling(results: Results, variant: str = "gcdsl") -> Dict[int, float]:
    ceiling = _w2(results, "ceiling", None)
    if not ceiling:
        return {}
    return {n: _median(r, "gbps") / _median(ceiling, "gbps")
            for n in _ns(results, "W2") if (r := _w2(results, variant, n))}


def region_w2(results: Results) -> str:
    cfg = results["W2"]["config"]
    ns = _ns(results, "W2")
    gb = cfg["bytes_moved_per_launch"] / 1e9
    ceiling = _w2(results, "ceiling", None)
    frac = w2_of_ceiling(results)
    rows = []
    for n in ns:
        cells = [str(n)]
        for variant in ("floor", "gcdsl", "chain", "gmem", "torch"):
            r = _w2(results, variant, n)
            cell = f0(_median(r, "gbps")) if r else (_rows(results, "W2").get((variant, n)) or {}).get("status", "-")
            if variant == "gcdsl" and n in frac:
                cell += f" ({frac[n]:.3f})"
            cells.append(cell)
        rows.append(cells)
    out = [
        f"### W2 bandwidth: grouped TMA copy, {gb:.2f} GB moved per launch (read + write), {cfg['grid']} "
        f"persistent CTAs, {cfg['stages']} x 32 KiB stages",
        "",
        (f"GB/s, median; ceiling (one `dst.copy_(src)` of {gb / 2:.2f} GB): {spread(ceiling['gbps'], f0)}."
         if ceiling else "GB/s, median; the ceiling did not run."),
        "",
        md_table(["N", "floor", "gcdsl (of ceiling)", "if/elif", "gmem desc + fence", "torch `copy_` x N"], rows),
        "",
    ]
    if frac:
        lo, hi = min(frac.values()), max(frac.values())
        state = "met" if lo >= W2_CEILING_TARGET else "missed"
        out.append(f"- **At least {pct(W2_CEILING_TARGET)} of the device-to-device ceiling: {state}** "
                   f"({pct(lo)} to {pct(hi)} over N = {listing(list(frac))}).")
    vs_torch = {n: _median(g, "gbps") / _median(t, "gbps")
                for n in ns if (g := _w2(results, "gcdsl", n)) and (t := _w2(results, "torch", n))}
    if vs_torch:
        met = [n for n in vs_torch if vs_torch[n] >= 1]
        missed = [n for n in vs_torch if vs_torch[n] < 1]
        state = "met" if not missed else ("missed" if not met else f"met at N = {listing(met)}, missed at "
                                                                   f"N = {listing(missed)}")
        out.append(f"- **At least torch: {state}**; gcdsl / torch: "
                   f"{per_n([ratio(vs_torch[n]) for n in vs_torch], list(vs_torch))}.")
    floor = w2_of_ceiling(results, "floor")
    chain = w2_of_ceiling(results, "chain")
    if floor and chain:
        out.append(f"- The floor reaches {pct(min(floor.values()))} to {pct(max(floor.values()))} of the ceiling, "
                   f"the if/elif chain {pct(min(chain.values()))} to {pct(max(chain.values()))}.")
    return "\n".join(out)


# ---------------------------------------------------------------------------------------
# W3: launch overhead
# ---------------------------------------------------------------------------------------
def _w3(results: Results, variant: str, n: int) -> Optional[Dict[str, Any]]:
    row = _rows(results, "W3").get((variant, n))
    return row if _ok(row) else None


def w3_call(results: Results, variant: str) -> Dict[int, float]:
    return {n: r["call"]["enqueue_us"]["median"] for n in _ns(results, "W3") if (r := _w3(results, variant, n))}


def w3_graph(results: Results, variant: str) -> Dict[int, float]:
    return {n: r["graph"]["enqueue_us"]["median"] for n in _ns(results, "W3")
            if (r := _w3(results, variant, n)) and r.get("graph", {}).get("status") == "OK"}


def region_w3(results: Results) -> str:
    ns = _ns(results, "W3")
    rows = []
    for n in ns:
        cells = [str(n)]
        for variant in ("gcdsl", "floor", "gmem"):
            call, graph = w3_call(results, variant), w3_graph(results, variant)
            cells += [f1(call[n]) if n in call else "-", f1(graph[n]) if n in graph else "-"]
        rows.append(cells)
    out = [
        "### W3 host launch overhead (W1's kernel, 1 CTA x 1 load), us per launch (host enqueue, median)",
        "",
        md_table(["N", "gcdsl call", "gcdsl graph replay", "floor call", "floor graph", "gmem-table call",
                  "gmem-table graph"], rows),
        "",
    ]
    call = w3_call(results, "gcdsl")
    many, limit = W3_LAUNCH_TARGET
    if 1 in call and many in call:
        growth = call[many] / call[1]
        state = "met" if growth <= limit else "missed"
        out.append(f"- **{many} descriptors at most {ratio(limit)} the launch of 1, direct call: {state}** "
                   f"({ratio(growth)}: {f1(call[many])} against {f1(call[1])} us).")
    if len(call) >= 2:
        out.append(f"- Direct calls grow by {f1(slope(sorted(call.items())))} us per descriptor "
                   f"(least-squares slope over N = {listing(list(call))}).")
    graph = w3_graph(results, "gcdsl")
    if graph:
        line = f"- CUDA-graph replay: {f1(min(graph.values()))} to {f1(max(graph.values()))} us at every N"
        if 1 in graph and many in graph:
            growth = graph[many] / graph[1]
            line += f"; the target is **{'met' if growth <= limit else 'missed'}** there ({ratio(growth)})"
        out.append(line + ".")
    return "\n".join(out)


# ---------------------------------------------------------------------------------------
# W4: compile cost
# ---------------------------------------------------------------------------------------
def _w4(results: Results, variant: str, n: int) -> Optional[Dict[str, Any]]:
    row = _rows(results, "W4").get((variant, n))
    return row if _ok(row) else None


def region_w4(results: Results) -> str:
    cfg = results["W4"]["config"]
    ns = _ns(results, "W4")
    kib = lambda b: f"{b / 1024:.1f}"  # noqa: E731
    rows = []
    for n in ns:
        cells = [str(n)]
        for variant in ("gcdsl", "chain"):
            r = _w4(results, variant, n)
            cells += ([f"{r['compile_s']['median']:.2f}", f"{kib(r['ptx_bytes'])} ({kib(r['ptx_code_bytes'])})",
                       str(r["tma_instructions"])] if r else ["-", "-", "-"])
        for variant in ("floor", "gmem"):
            r = _w4(results, variant, n)
            cells.append(f"{r['compile_s']['median']:.2f}" if r else "-")
        rows.append(cells)
    out = [
        f"### W4 compile cost (`cute.compile`, fresh, median of {cfg['compiles_per_point']}) and PTX size",
        "",
        md_table(["N", "gcdsl s", "gcdsl PTX KiB (code only)", "gcdsl TMA instr", "if/elif s",
                  "if/elif PTX KiB (code only)", "if/elif TMA instr", "floor s", "gmem s"], rows),
        "",
    ]
    first, last = ns[0], ns[-1]
    g1, gn = _w4(results, "gcdsl", first), _w4(results, "gcdsl", last)
    if g1 and gn:
        t = gn["compile_s"]["median"] / g1["compile_s"]["median"]
        p = gn["ptx_bytes"] / g1["ptx_bytes"]
        code = gn["ptx_code_bytes"] / g1["ptx_code_bytes"]
        state = "met" if max(t, p) <= W4_GROWTH_TARGET else "missed"
        out.append(f"- **Compile time and PTX size within {ratio(W4_GROWTH_TARGET)} from N = {first} to {last}: "
                   f"{state}** (gcdsl: compile time {ratio(t)}, PTX {ratio(p)}, PTX without parameter "
                   f"declarations {ratio(code)}).")
    c1, cn = _w4(results, "chain", first), _w4(results, "chain", last)
    if c1 and cn and gn:
        out.append(f"- At N = {last} the if/elif chain has {cn['tma_instructions']} TMA instructions against "
                   f"gcdsl's {gn['tma_instructions']}, {ratio(cn['ptx_code_bytes'] / gn['ptx_code_bytes'])} its "
                   f"code and {ratio(cn['compile_s']['median'] / gn['compile_s']['median'])} its compile time.")
    return "\n".join(out)


# ---------------------------------------------------------------------------------------
# Grid-constant tables
# ---------------------------------------------------------------------------------------
def gc_reads(results: Results) -> Dict[Tuple[str, str], Dict[str, Any]]:
    return {(r["index"], r["table"]): r for r in results["grid_constant"]["reads"]}


def gc_encode(results: Results) -> Tuple[List[int], List[float], List[float]]:
    rows = results["grid_constant"]["host_encode"]
    return [r["descriptors"] for r in rows], [r["cached_us"] for r in rows], [r["uncached_us"] for r in rows]


def region_grid_constant(results: Results) -> str:
    gc = results["grid_constant"]
    cfg = gc.get("config", {})
    reads = gc_reads(results)
    rows = [[index, table, f1(r["ns_per_read"]),
             f"{f1(r['us_median'])} [{f1(r['us_min'])}-{f1(r['us_max'])}]", "yes" if r["verified"] else "**NO**"]
            for (index, table), r in reads.items()]
    uniform = reads[("uniform per CTA", "global memory")]["ns_per_read"] / \
        reads[("uniform per CTA", "parameter space")]["ns_per_read"]
    divergent = reads[("per thread", "parameter space")]["ns_per_read"] / \
        reads[("per thread", "global memory")]["ns_per_read"]
    n, cached, uncached = gc_encode(results)
    presleep = all(r.get("presleep") for r in reads.values())
    out = [
        md_table(["index", "table", "ns per read", "median us [min-max]", "verified"], rows),
        "",
        f"A CTA-uniform read from parameter space is {than(uniform)} than from global memory; "
        f"with an index that differs per thread it is {than(1 / divergent)}.",
        "",
    ]
    if not presleep:
        out += ["These reads were timed without a busy stream before each launch: the times include the "
                "Python call.", ""]
    out.append("`TensorMapTable.encode` host cost"
               + (f" (median of {cfg['encode_reps']})" if "encode_reps" in cfg else " (median)") + ": "
               f"{' / '.join(f1(x) for x in cached)} us for {' / '.join(map(str, n))} unchanged tensors (cached), "
               f"{' / '.join(f1(x) for x in uncached)} us when every descriptor is encoded.")
    return "\n".join(out)


# ---------------------------------------------------------------------------------------
# README
# ---------------------------------------------------------------------------------------
def region_readme_reads(results: Results) -> str:
    reads = gc_reads(results)
    ns = {k: f1(r["ns_per_read"]) for k, r in reads.items()}
    gpu = (results["grid_constant"].get("machine") or {}).get("gpu") or results["grid_constant"].get("gpu")
    return (f"Measured on an {gpu.replace('NVIDIA ', '')} (`benchmarks/RESULTS.md`): a dependent read with a "
            f"CTA-uniform index costs {ns[('uniform per CTA', 'parameter space')]} ns against "
            f"{ns[('uniform per CTA', 'global memory')]} ns from global memory, but an index that differs per "
            f"thread costs {ns[('per thread', 'parameter space')]} ns against "
            f"{ns[('per thread', 'global memory')]} ns.")


def region_readme_encode(results: Results) -> str:
    n, cached, uncached = gc_encode(results)
    gpu = (results["grid_constant"].get("machine") or {}).get("gpu") or results["grid_constant"].get("gpu")
    return (f"Host cost of `encode` on the {gpu.replace('NVIDIA ', '')} host: {' / '.join(f1(x) for x in cached)} us "
            f"for {' / '.join(map(str, n))} unchanged tensors, {' / '.join(f1(x) for x in uncached)} us when "
            "every descriptor is encoded.")


def speedup(times: Dict[int, float], what: str) -> str:
    """`times`: their time / gcdsl's, per N, as a phrase with the N of each end."""
    lo, hi = min(times, key=times.get), max(times, key=times.get)
    verb = "faster than" if times[lo] >= 1 else "the speed of"
    return f"{ratio(times[lo])} (N = {lo}) to {ratio(times[hi])} (N = {hi}) {verb} {what}"


def region_readme_measured(results: Results) -> str:
    machine = results["W1"].get("machine") or {}
    gpu = (machine.get("gpu") or "GPU").replace("NVIDIA ", "")
    ns = _ns(results, "W1")
    vs = w1_vs_cpp(results)
    floor = w1_ratio(results, "gcdsl", "floor")
    chain = w1_ratio(results, "chain", "gcdsl")
    gmem = w1_ratio(results, "gmem", "gcdsl")
    if not (vs["diff"] and floor and chain and gmem):
        return "W1 has no complete gcdsl, floor, chain, gmem and C++ results in this run: see RESULTS.md."
    worst = max(vs["diff"].values(), key=abs)
    faster = [n for n, d in vs["diff"].items() if d < 0]
    if len(faster) == len(vs["diff"]):
        direction = "gcdsl faster at every N"
    elif not faster:
        direction = "gcdsl slower at every N"
    else:
        direction = f"gcdsl faster at N = {listing(faster)}"
    frac = w2_of_ceiling(results)
    call = w3_call(results, "gcdsl")
    graph = w3_graph(results, "gcdsl")
    text = [
        f"On an {gpu}, side by side in one run ([benchmarks/RESULTS.md](benchmarks/RESULTS.md)):",
        "a TMA load whose descriptor is picked by a runtime index from grid-constant",
        "parameters is within " + pct(abs(worst)) + " of CUDA C++ with `const __grid_constant__ CUtensorMap",
        f"descs[N]` at N = {ns[0]} to {ns[-1]} ({direction}), {ratio(min(floor.values()))} to "
        f"{ratio(max(floor.values()))} the floor (one stacked",
        f"descriptor), {speedup(chain, 'an if/elif chain')} and",
        f"{speedup(gmem, 'descriptors in global memory with the acquire fence')}.",
    ]
    if frac:
        text.append(f"A grouped copy reaches {pct(min(frac.values()))} to {pct(max(frac.values()))} of the "
                    f"device-to-device copy bandwidth at N = {listing(list(frac))}.")
    if len(call) >= 2:
        text.append(f"Calling a compiled kernel costs the DSL about {f1(slope(sorted(call.items())))} us per "
                    f"descriptor to re-encode its atoms")
        text.append(f"(CUDA-graph replay: {f1(min(graph.values()))} to {f1(max(graph.values()))} us at every N)."
                    if graph else ".")
    return "\n".join(text)


REGIONS: Dict[str, Callable[[Results], str]] = {
    "run": region_run,
    "W1": region_w1,
    "W2": region_w2,
    "W3": region_w3,
    "W4": region_w4,
    "grid-constant": region_grid_constant,
    "readme-reads": region_readme_reads,
    "readme-encode": region_readme_encode,
    "readme-measured": region_readme_measured,
}


def render(text: str, results: Results) -> str:
    """`text` with every marked region rewritten from `results`."""
    def fill(m: "re.Match[str]") -> str:
        name = m.group("name")
        if name not in REGIONS:
            raise KeyError(f"unknown results region {name!r}; known: {', '.join(REGIONS)}")
        return m.group(1) + REGIONS[name](results).rstrip("\n") + "\n" + m.group(4)

    return REGION.sub(fill, text)


def regions_in(text: str) -> List[str]:
    return [m.group("name") for m in REGION.finditer(text)]


def outside_regions(text: str) -> str:
    return REGION.sub("", text)


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--check", action="store_true", help="change nothing; exit 1 where a file differs")
    p.add_argument("--results", default=RESULTS_DIR, help="directory of the JSON files")
    args = p.parse_args(argv)
    results = load(args.results)
    stale = 0
    for path in FILES:
        with open(path) as f:
            old = f.read()
        new = render(old, results)
        rel = os.path.relpath(path, ROOT)
        if new == old:
            print(f"{rel}: up to date")
        elif args.check:
            stale += 1
            sys.stdout.writelines(difflib.unified_diff(old.splitlines(True), new.splitlines(True), rel, rel + " (JSON)"))
        else:
            with open(path, "w") as f:
                f.write(new)
            print(f"{rel}: rewritten ({len(regions_in(new))} regions)")
    return 1 if stale else 0


if __name__ == "__main__":
    sys.exit(main())
