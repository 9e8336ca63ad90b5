"""W3 (host cost of a call, per calling convention) and W4 (compile seconds and PTX size)."""
from __future__ import annotations

from typing import Any, Dict, List, Optional, Tuple

from .fmt import Results, f1, f2, listing, md_table, ns_of, ok, per_n, ratio, rows_by, span, status_of, verdict

# W3: the same limits as benchmarks/w3_launch.py (FLAT_LIMIT, REFERENCE_LIMIT)
W3_MANY = 64  # descriptors in the growth target
W3_FLAT_LIMIT = 1.5  # a call with W3_MANY descriptors at most this times the call with 1
W3_PLAIN_LIMIT = 1.5  # the call with 1 descriptor at most this times a plain call with one tensor
W3_TARGET_ROWS = ("table", "table, views of one tensor", "table, encoded once")  # what benchmarks/w3_launch.py judges
W3_CALL_ROWS = ("list",) + W3_TARGET_ROWS  # the ways to pass N descriptors, each judged here
CONVENTION_LABELS = {"dsl": "DSL call", "tvm-ffi": "TVM-FFI", "tvm-ffi raw": "raw `tvm_ffi.Function`", "-": "-"}

# W4: the same targets as benchmarks/w4_compile.py (TARGETS): (name, numerator, denominator, limit)
W4_TARGETS = (
    ("`list` PTX bytes, N = 200 against N = 1", ("list", 200, "ptx_bytes"), ("list", 1, "ptx_bytes"), 1.5),
    ("`list` compile, against `atoms0` at N = 200", ("list", 200, "compile_s"), ("atoms0", 200, "compile_s"), 1.1),
    ("`list` first compile, against `atoms0`'s at N = 1", ("list", 1, "first_compile_s"),
     ("atoms0", 1, "first_compile_s"), 1.1),
    ("`list` first compile, against `atoms0`'s at N = 200", ("list", 200, "first_compile_s"),
     ("atoms0", 200, "first_compile_s"), 1.1),
    ("`table` compile, N = 200 against N = 1", ("table", 200, "compile_s"), ("table", 1, "compile_s"), 1.5),
)  # in the order of benchmarks/w4_compile.py's TARGETS
W4_LABELS = {"atoms0": "`atoms0`", "list": "`list`", "table": "`table`"}


# ---------------------------------------------------------------------------------------
# W3
# ---------------------------------------------------------------------------------------
def w3_us(results: Results, row: str, convention: str, n: int) -> Optional[float]:
    """Median host enqueue microseconds per call, or None where the row did not run."""
    r = rows_by(results, "W3", "variant", "convention", "n").get((row, convention, n))
    return r["enqueue_us"]["median"] if ok(r) else None


def w3_rows(results: Results) -> List[Tuple[str, str]]:
    """(row, convention) in the order the benchmark ran them."""
    seen: List[Tuple[str, str]] = []
    for r in results["W3"]["results"]:
        if (r["variant"], r["convention"]) not in seen:
            seen.append((r["variant"], r["convention"]))
    order = {c: i for i, c in enumerate(CONVENTION_LABELS)}
    return sorted(seen, key=lambda rc: (order.get(rc[1], len(order)), seen.index(rc)))


def w3_verdicts(results: Results) -> List[Dict[str, Any]]:
    """Per convention and call row: N=64 / N=1 and N=1 / plain, each against its limit."""
    out = []
    conventions = [c for c in CONVENTION_LABELS if c != "-"]
    for convention in conventions:
        plain = w3_us(results, "plain", convention, 1)
        for row in W3_CALL_ROWS:
            one, many = w3_us(results, row, convention, 1), w3_us(results, row, convention, W3_MANY)
            if one is None:
                continue
            v = {"convention": convention, "row": row, "judged_by_benchmark": row in W3_TARGET_ROWS}
            if many is not None:
                v["growth"] = many / one
            if plain is not None:
                v["vs_plain"] = one / plain
            out.append(v)
    return out


def region_w3(results: Results) -> str:
    cfg = results["W3"]["config"]
    ns = ns_of(results, "W3")
    table_rows = []
    for row, convention in w3_rows(results):
        cells = [f"`{row}`", CONVENTION_LABELS.get(convention, convention)]
        for n in ns:
            us = w3_us(results, row, convention, n)
            r = rows_by(results, "W3", "variant", "convention", "n").get((row, convention, n))
            cells.append(f1(us) if us is not None else status_of(r))
        table_rows.append(cells)
    out = [
        f"The kernel: {cfg['kernel']}.",
        "",
        f"Microseconds per call from Python (host enqueue), median over {cfg['reps']} "
        + ("interleaved rounds (each round times every point once) " if "order" in cfg else "repetitions ")
        + f"of {cfg['calls_per_rep']} back-to-back calls:",
        "",
        md_table(["row", "convention"] + [f"N = {n}" for n in ns], table_rows),
        "",
        f"Targets: a call with {W3_MANY} descriptors at most {ratio(W3_FLAT_LIMIT)} the call with 1; the call with 1 "
        f"at most {ratio(W3_PLAIN_LIMIT)} a plain `@cute.kernel` call with one tensor (`plain`, same convention). "
        "The benchmark judges the " + ", ".join(f"`{row}`" for row in W3_TARGET_ROWS)
        + " rows; `list` is judged here the same way.",
        "",
    ]
    vrows = []
    for v in w3_verdicts(results):
        growth = f"{ratio(v['growth'])}, {verdict(v['growth'] <= W3_FLAT_LIMIT)}" if "growth" in v else "-"
        plain = f"{ratio(v['vs_plain'])}, {verdict(v['vs_plain'] <= W3_PLAIN_LIMIT)}" if "vs_plain" in v else "-"
        vrows.append([CONVENTION_LABELS[v["convention"]], f"`{v['row']}`", growth, plain])
    out += [md_table(["convention", "row", f"N = {W3_MANY} / N = 1", "N = 1 / `plain`"], vrows), ""]
    out += _w3_comparisons(results, ns)
    return "\n".join(out)


def _w3_comparisons(results: Results, ns: List[int]) -> List[str]:
    lines = []
    speed = {}
    for row in ("plain", "list", "table", "table, views of one tensor", "table, encoded once"):
        r = {n: d / t for n in ns if (d := w3_us(results, row, "dsl", n)) and (t := w3_us(results, row, "tvm-ffi", n))}
        if r:
            speed[row] = r
    if speed:
        parts = [f"`{row}` {span(list(r.values()), ratio)}" for row, r in speed.items()]
        lines.append(f"- TVM-FFI against the DSL's call (DSL time / TVM-FFI time over N = {listing(ns)}): "
                     + "; ".join(parts) + ".")
    plain = {c: [u for n in ns if (u := w3_us(results, "plain", c, n)) is not None]
             for c in ("dsl", "tvm-ffi", "tvm-ffi raw")}
    if all(plain.values()):
        lines.append(f"- A `plain` call costs {span(plain['dsl'], f1)} us through the DSL, "
                     f"{span(plain['tvm-ffi'], f1)} us through TVM-FFI and {span(plain['tvm-ffi raw'], f1)} us "
                     "through the raw function.")
    once = [u for n in ns if (u := w3_us(results, "table, encoded once", "dsl", n)) is not None]
    lst = {n: u for n in ns if (u := w3_us(results, "list", "dsl", n)) is not None}
    if len(lst) >= 2 and once:
        lines.append(f"- Through the DSL's call, `list` costs {per_n([f1(lst[n]) for n in lst], list(lst), 'us')}; "
                     f"`table, encoded once` costs {span(once, f1)} us at every N.")
    unchanged = {n: u for n in ns if (u := w3_us(results, "encode only, unchanged", "-", n)) is not None}
    fresh = {n: u for n in ns if (u := w3_us(results, "encode only, all changed, per descriptor", "-", n)) is not None}
    views = {n: u for n in ns
             if (u := w3_us(results, "encode only, unchanged, views of one tensor", "-", n)) is not None}
    if unchanged and fresh:
        last = max(fresh)
        lines.append(f"- `TensorMapTable.encode` of unchanged tensors: "
                     f"{per_n([f1(unchanged[n]) for n in unchanged], list(unchanged), 'us')} (separate tensors)"
                     + (f", {per_n([f1(views[n]) for n in views], list(views), 'us')} (views of one tensor)"
                        if views else "")
                     + f"; re-encoding costs {f1(fresh[last])} us per descriptor when all {last} changed.")
    graph = {row: [u for n in ns if (u := w3_us(results, f"graph replay: {row}", "dsl", n)) is not None]
             for row in ("plain", "table")}
    if all(graph.values()):
        lines.append(f"- CUDA-graph replay: `plain` {span(graph['plain'], f1)} us, `table` {span(graph['table'], f1)} "
                     "us, at every N.")
    return lines


# ---------------------------------------------------------------------------------------
# W4
# ---------------------------------------------------------------------------------------
def w4_value(results: Results, variant: str, n: int, metric: str) -> Optional[float]:
    r = rows_by(results, "W4", "variant", "n").get((variant, n))
    if not ok(r):
        return None
    if metric in ("compile_s", "first_compile_s"):
        return r[metric]["median"] if metric in r else None
    return r[metric]


def w4_verdicts(results: Results) -> List[Dict[str, Any]]:
    out = []
    for name, num_key, den_key, limit in W4_TARGETS:
        num, den = w4_value(results, *num_key), w4_value(results, *den_key)
        v: Dict[str, Any] = {"target": name, "limit": limit}
        if num is not None and den is not None:
            v.update(ratio=num / den, met=num / den <= limit, numerator=num, denominator=den, metric=num_key[2])
        out.append(v)
    return out


def region_w4(results: Results) -> str:
    cfg = results["W4"]["config"]
    ns = ns_of(results, "W4")
    variants = list(dict.fromkeys(r["variant"] for r in results["W4"]["results"]))
    rows = []
    for n in ns:
        cells = [str(n)]
        for variant in variants:
            r = rows_by(results, "W4", "variant", "n").get((variant, n))
            cells += [f2(r["compile_s"]["median"]), str(r["ptx_bytes"])] if ok(r) else [status_of(r), "-"]
        rows.append(cells)
    headers = ["N"]
    for variant in variants:
        label = W4_LABELS.get(variant, f"`{variant}`")
        headers += [f"{label} s", f"{label} PTX bytes"]
    out = [
        f"`cute.compile` seconds (fresh, median of {cfg['compiles_per_point']}) and PTX bytes, for the W3 kernels:",
        "",
        md_table(headers, rows),
        "",
    ]
    for v in w4_verdicts(results):
        if "ratio" not in v:
            out.append(f"- {v['target']} at most {ratio(v['limit'])}: not measured.")
            continue
        fmt = (lambda x: f"{x:.0f} bytes") if v["metric"] == "ptx_bytes" else (lambda x: f"{x:.3f} s")
        out.append(f"- {v['target']}, at most {ratio(v['limit'])}: **{'met' if v['met'] else 'MISSED'}** "
                   f"({ratio(v['ratio'])}: {fmt(v['numerator'])} against {fmt(v['denominator'])}).")
    first, last = ns[0], ns[-1]
    vs_atoms = {n: lc / ac for n in ns if (lc := w4_value(results, "list", n, "compile_s"))
                and (ac := w4_value(results, "atoms0", n, "compile_s"))}
    if vs_atoms:
        out.append("- `list` / `atoms0` compile time: "
                   f"{per_n([ratio(vs_atoms[n]) for n in vs_atoms], list(vs_atoms))}.")
    a1, an = w4_value(results, "atoms0", first, "ptx_bytes"), w4_value(results, "atoms0", last, "ptx_bytes")
    if a1 and an:
        out.append(f"- `atoms0`'s PTX grows {ratio(an / a1)} from N = {first} to {last}, one parameter per atom.")
    return "\n".join(out)
