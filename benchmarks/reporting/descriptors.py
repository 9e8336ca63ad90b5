"""W1 (latency) and W2 (bandwidth): a descriptor picked per load, against the floor and the alternatives;
and gcdsl relative to the floor before and after a runtime-indexed list was packed into one parameter."""
from __future__ import annotations

from typing import Any, Dict, List, Optional

from .fmt import (Results, f0, listing, md_table, ns_of, ok, overlap, pct, per_n, ratio, rows_by, signed_pct, span,
                  spread, status_of)

W1_FLOOR_TARGET = 1.03  # gcdsl within 3% of the floor
W2_CEILING_TARGET = 0.90  # at least 90% of one big device-to-device copy

# The last committed W1/W2 results from before a runtime-indexed list became one packed parameter
# (it was N adjacent 128-byte parameters then): read from git, never copied into the tree.
PACKING_BASELINE = "41741e98825d0bbef508a4879d6c92a04b985ec8"


# ---------------------------------------------------------------------------------------
# W1: latency
# ---------------------------------------------------------------------------------------
W1_COLUMNS = (("floor", "floor (1 stacked desc)"), ("gcdsl", "gcdsl `param[k]`"), ("chain", "if/elif chain"),
              ("gmem", "gmem desc + fence"), ("cpp", "C++ `__grid_constant__[k]`"))


def _w1(results: Results, variant: str, n: int) -> Optional[Dict[str, Any]]:
    row = rows_by(results, "W1", "variant", "n").get((variant, n))
    return row if ok(row) else None


def w1_ratio(results: Results, a: str, b: str) -> Dict[int, float]:
    """median(a) / median(b) per N where both ran."""
    out = {}
    for n in ns_of(results, "W1"):
        ra, rb = _w1(results, a, n), _w1(results, b, n)
        if ra and rb:
            out[n] = ra["ns_per_load"]["median"] / rb["ns_per_load"]["median"]
    return out


def w1_vs_cpp(results: Results) -> Dict[str, Any]:
    """gcdsl against the C++ anchor: median difference per N, and where the ranges overlap."""
    diff, overlapping, apart = {}, [], []
    for n in ns_of(results, "W1"):
        g, c = _w1(results, "gcdsl", n), _w1(results, "cpp", n)
        if g and c:
            diff[n] = g["ns_per_load"]["median"] / c["ns_per_load"]["median"] - 1
            (overlapping if overlap(g["ns_per_load"], c["ns_per_load"]) else apart).append(n)
    return {"diff": diff, "overlap": overlapping, "apart": apart}


def region_w1(results: Results) -> str:
    cfg = results["W1"]["config"]
    ns = ns_of(results, "W1")
    rows = []
    for n in ns:
        cells = [str(n)]
        for variant, _ in W1_COLUMNS:
            row = rows_by(results, "W1", "variant", "n").get((variant, n))
            cells.append(spread(row["ns_per_load"]) if ok(row) else status_of(row))
        rows.append(cells)
    out = [
        f"{cfg['grid']} CTAs x {cfg['k_loads']} dependent {cfg['tile']} TMA loads, the descriptor chosen per load "
        f"from N.",
        "",
        f"ns per dependent load, median [min-max] over {cfg['reps']} launches:",
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
                    f"{per_n([signed_pct(vs['diff'][n]) for n in vs['diff']], list(vs['diff']))}. ")
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
    row = rows_by(results, "W2", "variant", "n").get((variant, n))
    return row if ok(row) else None


def w2_of_ceiling(results: Results, variant: str = "gcdsl") -> Dict[int, float]:
    ceiling = _w2(results, "ceiling", None)
    if not ceiling:
        return {}
    return {n: r["gbps"]["median"] / ceiling["gbps"]["median"]
            for n in ns_of(results, "W2") if (r := _w2(results, variant, n))}


def region_w2(results: Results) -> str:
    cfg = results["W2"]["config"]
    ns = ns_of(results, "W2")
    gb = cfg["bytes_moved_per_launch"] / 1e9
    ceiling = _w2(results, "ceiling", None)
    frac = w2_of_ceiling(results)
    rows = []
    for n in ns:
        cells = [str(n)]
        for variant in ("floor", "gcdsl", "chain", "gmem", "torch"):
            r = _w2(results, variant, n)
            cell = f0(r["gbps"]["median"]) if r else status_of(rows_by(results, "W2", "variant", "n").get((variant, n)))
            if variant == "gcdsl" and n in frac:
                cell += f" ({frac[n]:.3f})"
            cells.append(cell)
        rows.append(cells)
    out = [
        f"A grouped TMA copy, {gb:.2f} GB moved per launch (read + write), {cfg['grid']} persistent CTAs, "
        f"{cfg['stages']} x 32 KiB stages.",
        "",
        (f"GB/s, median over {cfg['reps']} launches; ceiling (one `dst.copy_(src)` of {gb / 2:.2f} GB): "
         f"{spread(ceiling['gbps'], f0)}." if ceiling else "GB/s, median; the ceiling did not run."),
        "",
        md_table(["N", "floor", "gcdsl (of ceiling)", "if/elif", "gmem desc + fence", "torch `copy_` x N"], rows),
        "",
    ]
    if frac:
        lo, hi = min(frac.values()), max(frac.values())
        state = "met" if lo >= W2_CEILING_TARGET else "missed"
        out.append(f"- **At least {pct(W2_CEILING_TARGET)} of the device-to-device ceiling: {state}** "
                   f"({pct(lo)} to {pct(hi)} over N = {listing(list(frac))}).")
    vs_torch = {n: g["gbps"]["median"] / t["gbps"]["median"]
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
        out.append(f"- The floor reaches {span(list(floor.values()), pct)} of the ceiling, "
                   f"the if/elif chain {span(list(chain.values()), pct)}.")
    return "\n".join(out)


# ---------------------------------------------------------------------------------------
# Before and after packing
# ---------------------------------------------------------------------------------------
def gcdsl_over_floor(results: Results, workload: str) -> Dict[int, float]:
    """gcdsl's cost relative to the floor per N: time ratio for W1, inverse bandwidth ratio for W2."""
    metric = {"W1": "ns_per_load", "W2": "gbps"}[workload]
    rows = rows_by(results, workload, "variant", "n")
    out = {}
    for n in ns_of(results, workload):
        g, f = rows.get(("gcdsl", n)), rows.get(("floor", n))
        if ok(g) and ok(f):
            r = g[metric]["median"] / f[metric]["median"]
            out[n] = r if workload == "W1" else 1 / r
    return out


def region_packing(results: Results) -> Optional[str]:
    """None where the baseline is not reachable (no git history): the region keeps its text."""
    before = results.get("previous")
    if not before:
        return None
    out = [f"gcdsl's time relative to the floor, in the run committed as `{PACKING_BASELINE[:7]}` (before) "
           f"and in this run (after):", ""]
    rows: List[List[str]] = []
    changes = []
    for workload, what in (("W1", "W1 time per load"), ("W2", "W2 time per byte")):
        old, new = gcdsl_over_floor(before, workload), gcdsl_over_floor(results, workload)
        for n in [n for n in ns_of(results, workload) if n in old and n in new]:
            rows.append([what, str(n), f"{old[n]:.3f}x", f"{new[n]:.3f}x", signed_pct(new[n] / old[n] - 1)])
            changes.append(new[n] / old[n] - 1)
    out.append(md_table(["", "N", "before", "after", "change"], rows))
    if changes:
        worst = max(changes, key=abs)
        out += ["", f"Largest change: {signed_pct(worst)}."]
    return "\n".join(out)
