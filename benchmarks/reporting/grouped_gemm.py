"""W5: `gcdsl.ops.grouped_mm` beside torch and upstream CuTe DSL; its targets, and for each missed one
what the JSON and the Nsight Compute reports (results/ncu_<shape>_<dtype>.txt) say about it."""
from __future__ import annotations

from typing import Any, Dict, List, Optional

from . import ncu
from .fmt import (Results, f0, f1, f2, kept_run, listing, md_table, ok, pct, ratio, rows_by, signed_pct, span,
                  status_of)

VARIANTS = ("gcdsl_bf16", "gcdsl_fp16", "torch_bf16", "torch_fp16", "mm_loop_bf16", "upstream_fp16")
LABELS = {"gcdsl_bf16": "gcdsl bf16", "gcdsl_fp16": "gcdsl fp16", "torch_bf16": "`torch._grouped_mm` bf16",
          "torch_fp16": "`torch._grouped_mm` fp16", "mm_loop_bf16": "`torch.mm` loop bf16",
          "upstream_fp16": "upstream CuTe DSL fp16"}
ELEMENT_BYTES = 2  # bf16 or fp16 in, the same type out

# the same targets as benchmarks/w5_grouped_gemm.py
VS_UPSTREAM = 1.00  # gcdsl fp16 time against upstream CuTe DSL fp16, every shape ...
VS_UPSTREAM_HIGH = {"S5": 1.10, "S6": 1.10}  # ... and more on these
VS_TORCH = 1.00  # gcdsl bf16 against torch._grouped_mm bf16, every shape
HBM_FRACTION = 0.90  # gcdsl bf16's bytes of B per second against the copy bandwidth, on the B-streaming shapes

KINDS = {"upstream": "against upstream", "torch": "against torch", "hbm": "bandwidth"}
SAME_CYCLES = 0.01  # two profiles within 1% of each other's cycle count did the same work
SOL = "GPU Speed Of Light Throughput"
MEMORY = "Memory Workload Analysis"


# ---------------------------------------------------------------------------------------
# Access
# ---------------------------------------------------------------------------------------
def shapes(results: Results) -> List[str]:
    return list(results["W5"]["config"]["shapes"])


def row(results: Results, shape: str, variant: str) -> Optional[Dict[str, Any]]:
    r = rows_by(results, "W5", "shape", "variant").get((shape, variant))
    return r if ok(r) else None


def copy_gbps(results: Results) -> Optional[float]:
    r = row(results, "copy", "hbm_copy_2GiB")
    return r["gbps"] if r else None


def explored(results: Results) -> List[str]:
    """The forced schedule/tile/cluster variants in the order they ran."""
    names = [r["variant"] for r in results["W5"]["results"]
             if r["variant"].startswith(("gcdsl_bf16_t", "gcdsl_bf16_pingpong_t"))]
    return list(dict.fromkeys(names))


def config_label(name: str) -> str:
    """"gcdsl_bf16_t256_c2" or "t256_c2" as "128x256, pairs"; the ping-pong schedule's
    "gcdsl_bf16_pingpong_t192_c1" as "ping-pong 128x192, 1 CTA"."""
    tile, cluster = name.split("_")[-2:]
    schedule = "ping-pong " if "pingpong_" in name else ""
    return f"{schedule}128x{tile[1:]}, {'1 CTA' if cluster == 'c1' else 'pairs'}"


def problem(results: Results, shape: str) -> Dict[str, float]:
    """Rows, FLOPs and the bytes of A, B and C that one call must move at least."""
    s = results["W5"]["config"]["shapes"][shape]
    m, n, k, g = sum(s["rows"]), s["n"], s["k"], len(s["rows"])
    return {"m": m, "n": n, "k": k, "groups": g, "flops": 2 * m * n * k, "a": m * k * ELEMENT_BYTES,
            "b": g * k * n * ELEMENT_BYTES, "c": m * n * ELEMENT_BYTES}


def seconds(r: Dict[str, Any]) -> float:
    return r["ms"]["median"] / 1e3


# ---------------------------------------------------------------------------------------
# Targets
# ---------------------------------------------------------------------------------------
def targets(results: Results) -> List[Dict[str, Any]]:
    """Every target the data allow, per shape: kind, what was measured, the limit, met."""
    out = []
    for s in shapes(results):
        ours, up = row(results, s, "gcdsl_fp16"), row(results, s, "upstream_fp16")
        if ours and up:
            limit = VS_UPSTREAM_HIGH.get(s, VS_UPSTREAM)
            speed = up["ms"]["median"] / ours["ms"]["median"]
            out.append({"shape": s, "kind": "upstream", "what": "gcdsl fp16 against upstream CuTe DSL fp16",
                        "value": speed, "text": ratio(speed), "limit": limit, "limit_text": ratio(limit),
                        "met": speed >= limit})
        ours, theirs = row(results, s, "gcdsl_bf16"), row(results, s, "torch_bf16")
        if ours and theirs:
            speed = theirs["ms"]["median"] / ours["ms"]["median"]
            out.append({"shape": s, "kind": "torch", "what": "gcdsl bf16 against `torch._grouped_mm` bf16",
                        "value": speed, "text": ratio(speed), "limit": VS_TORCH, "limit_text": ratio(VS_TORCH),
                        "met": speed >= VS_TORCH})
        if ours and "hbm_fraction" in ours:
            frac = ours["hbm_fraction"]
            out.append({"shape": s, "kind": "hbm", "what": "gcdsl bf16: bytes of B per second / copy bandwidth",
                        "value": frac, "text": pct(frac), "limit": HBM_FRACTION, "limit_text": f"{HBM_FRACTION:.0%}",
                        "met": frac >= HBM_FRACTION})
    return out


# ---------------------------------------------------------------------------------------
# Region: the tables
# ---------------------------------------------------------------------------------------
def region_w5(results: Results) -> str:
    cfg = results["W5"]["config"]
    names = shapes(results)
    out = [f"{len(names)} MoE shapes (a: rows x K, b: groups x K x N):", "", _shape_table(results), ""]
    variants = [v for v in VARIANTS if any(rows_by(results, "W5", "shape", "variant").get((s, v)) for s in names)]
    rows = []
    for s in names:
        cells = [s]
        for v in variants:
            r = row(results, s, v)
            cells.append(f"{f1(r['us'])} ({f0(r['tflops'])})" if r else
                         status_of(rows_by(results, "W5", "shape", "variant").get((s, v))))
        rows.append(cells)
    out += [f"Microseconds (TFLOP/s), median device time of {cfg['reps']} calls, every output checked against "
            f"float32 first (relative error at most {cfg['tolerance']:g}):", "",
            md_table(["shape"] + [LABELS.get(v, v) for v in variants], rows), ""]
    out += _upstream_tiles(results, names)
    out += _forced_table(results, names)
    out += _hbm_table(results, names)
    out += _call_table(results, names)
    return "\n".join(out).rstrip("\n")


def _upstream_tiles(results: Results, names: List[str]) -> List[str]:
    tried = {"x".join(map(str, t["tile"])) for s in names if (r := row(results, s, "upstream_fp16"))
             for t in r.get("tiles_tried", [])}
    best: Dict[str, List[str]] = {}
    for s in names:
        if (r := row(results, s, "upstream_fp16")) and "tile" in r:
            best.setdefault(r["tile"], []).append(s)
    if not best:
        return []
    where = "; ".join(f"{tile} on {'every shape' if len(ss) == len(names) else listing(ss)}"
                      for tile, ss in best.items())
    return [f"Upstream ran with each of its tiles {listing(sorted(tried))}; the table shows the faster: {where}.", ""]


def _shape_table(results: Results) -> str:
    rows = []
    for s in shapes(results):
        p = problem(results, s)
        group_rows = results["W5"]["config"]["shapes"][s]["rows"]
        each = f"{p['groups']} x {group_rows[0]}" if len(set(group_rows)) == 1 else f"{p['groups']} ragged"
        rows.append([s, each, str(p["m"]), str(p["n"]), str(p["k"]), f0(p["flops"] / 1e9), f2(p["b"] / 1e9)])
    return md_table(["shape", "groups x rows", "rows", "N", "K", "GFLOP", "B (GB)"], rows)


def _forced_table(results: Results, names: List[str]) -> List[str]:
    forced = explored(results)
    if not forced:
        return []
    rows = []
    for s in names:
        times = {v: r["us"] for v in forced if (r := row(results, s, v))}
        picked = (row(results, s, "gcdsl_bf16") or {}).get("picked")
        cells = [s] + [f"**{f1(times[v])}**" if v in times and times[v] == min(times.values()) else
                       f1(times[v]) if v in times else
                       status_of(rows_by(results, "W5", "shape", "variant").get((s, v))) for v in forced]
        best = min(times, key=times.get) if times else None
        mine = f"gcdsl_bf16_{picked}" if picked else None
        if mine in times and best:
            note = "fastest" if mine == best else f"{signed_pct(times[mine] / times[best] - 1)} on the fastest"
            cells.append(f"{config_label(mine)} ({note})")
        else:
            cells.append(picked or "-")
        rows.append(cells)
    return ["gcdsl bf16 with the schedule, tile and cluster forced (the cooperative schedule where no other is "
            "named; pairs: 2x1 clusters sharing B by multicast), microseconds; the fastest in bold; what "
            "`grouped_mm` picks by itself:", "",
            md_table(["shape"] + [config_label(v) for v in forced] + ["picked"], rows), ""]


def _hbm_table(results: Results, names: List[str]) -> List[str]:
    gbps = copy_gbps(results)
    hbm = [s for s in names if any("hbm_fraction" in (row(results, s, v) or {}) for v in VARIANTS)]
    if not gbps or not hbm:
        return []
    variants = [v for v in VARIANTS if any("hbm_fraction" in (row(results, s, v) or {}) for s in hbm)]
    rows = [[s, f2(problem(results, s)["b"] / 1e9)]
            + [pct(r["hbm_fraction"]) if (r := row(results, s, v)) and "hbm_fraction" in r else "-" for v in variants]
            for s in hbm]
    return [f"Bytes of B per second as a fraction of a 2 GiB device-to-device copy in the same run "
            f"({f0(gbps)} GB/s, read + write):", "",
            md_table(["shape", "B (GB)"] + [LABELS[v] for v in variants], rows), ""]


def ready_first(results: Results) -> Dict[str, List[str]]:
    """The shapes where one bf16 call waited on from Python is ready first, gcdsl's or torch's."""
    first: Dict[str, List[str]] = {"gcdsl": [], "torch": []}
    for s in shapes(results):
        ours, theirs = (row(results, s, v) or {} for v in ("gcdsl_bf16", "torch_bf16"))
        if "host" in ours and "host" in theirs:
            mine, other = ours["host"]["wall_us"]["median"], theirs["host"]["wall_us"]["median"]
            first["gcdsl" if mine <= other else "torch"].append(s)
    return first


def _call_table(results: Results, names: List[str]) -> List[str]:
    rows = []
    for s in names:
        cells = [s]
        for v in ("gcdsl_bf16", "torch_bf16"):
            r = row(results, s, v)
            host = (r or {}).get("host")
            cells += [f0(host["host_us"]["median"]), f0(host["wall_us"]["median"])] if host else ["-", "-"]
        rows.append(cells)
    if all(c == "-" for r in rows for c in r[1:]):
        return []
    out = ["The whole call from Python, microseconds (median): until it returns, and until its result is ready:", "",
           md_table(["shape", "gcdsl bf16 returns", "gcdsl bf16 ready", "torch bf16 returns", "torch bf16 ready"],
                    rows), ""]
    first = ready_first(results)
    if first["gcdsl"] or first["torch"]:
        parts = [f"{who} on {listing(ss)}" for who, ss in first.items() if ss]
        out += [f"One call waited on is ready first with {' and with '.join(parts)}.", ""]
    return out


# ---------------------------------------------------------------------------------------
# Region: targets, and the evidence for each missed one
# ---------------------------------------------------------------------------------------
def region_w5_targets(results: Results) -> str:
    found = targets(results)
    rows = [[t["shape"], t["what"], t["text"], f"at least {t['limit_text']}", "met" if t["met"] else "**MISSED**"]
            for t in found]
    out = [md_table(["shape", "target", "measured", "limit", ""], rows), ""]
    missed = [t for t in found if not t["met"]]
    if not missed:
        out.append("Every target is met.")
        return "\n".join(out)
    names = listing([f"{t['shape']} {KINDS[t['kind']]}" for t in missed])
    out += [f"Missed: {names}. What the data say about each:", ""]
    for t in missed:
        explain = {"hbm": _why_hbm, "upstream": _why_upstream, "torch": _why_torch}[t["kind"]]
        out.append(f"- **{t['shape']}, {t['what']}, {t['text']}:** " + " ".join(explain(results, t)))
    return "\n".join(out)


def region_w5_h100(results: Results) -> Optional[str]:
    """W5 in full on an H100 (`--json W5_h100`), its tables and targets, beside the headline run."""
    kept = kept_run(results, "W5_h100", "W5", "w5_grouped_gemm.py")
    if kept is None:
        return None
    run, command, where = kept
    return f"Command: `{command}`{where}.\n\n{region_w5(run)}\n\nTargets:\n\n{region_w5_targets(run)}"


def _ncu_busiest(report: Dict[str, object]) -> str:
    dram, sm = ncu.percent(report, SOL, "DRAM Throughput"), ncu.percent(report, SOL, "Compute (SM) Throughput")
    unit = "DRAM is" if dram >= sm else "the SMs are"
    return f"{unit} the busier unit (DRAM throughput {pct(dram)} of peak, SM throughput {pct(sm)})"


def _why_hbm(results: Results, t: Dict[str, Any]) -> List[str]:
    s = t["shape"]
    p = problem(results, s)
    r = row(results, s, "gcdsl_bf16")
    moved = p["a"] + p["b"] + p["c"]
    share = p["b"] / moved
    all_frac = moved / seconds(r) / 1e9 / copy_gbps(results)
    out = [f"the kernel also reads A and writes C: B is {pct(share)} of the {f2(moved / 1e9)} GB it must move at "
           f"least, and all of them move at {pct(all_frac)} of the copy bandwidth; the target would need "
           f"{pct(t['limit'] / share)} for all of them."]
    report = results.get("ncu", {}).get((s, "bf16"))
    if report:
        tbps = ncu.bytes_per_second(report, MEMORY, "Memory Throughput")
        duration = ncu.scaled(report, SOL, "Duration")
        out.append(f"`ncu` on this kernel (one launch): {_ncu_busiest(report)}; {f2(tbps / 1e12)} TB/s from DRAM "
                   f"({pct(tbps / 1e9 / copy_gbps(results))} of the copy bandwidth) over {f1(duration * 1e6)} us, "
                   f"{f2(tbps * duration / 1e9)} GB, {ratio(tbps * duration / moved)} the bytes it must move.")
    else:
        out.append("Not profiled (no `results/ncu_" + s.lower() + "_bf16.txt`).")
    return out


def _why_upstream(results: Results, t: Dict[str, Any]) -> List[str]:
    s = t["shape"]
    out = []
    up, fp16, bf16 = row(results, s, "upstream_fp16"), row(results, s, "gcdsl_fp16"), row(results, s, "gcdsl_bf16")
    forced = {v: r["us"] for v in explored(results) if (r := row(results, s, v))}
    mine = f"gcdsl_bf16_{(bf16 or {}).get('picked')}"
    if forced and mine in forced:
        best = min(forced, key=forced.get)
        out.append(f"`grouped_mm` picked {config_label(mine)}, "
                   + ("the fastest of the forced configurations (bf16)." if mine == best else
                      f"{signed_pct(forced[mine] / forced[best] - 1)} on the fastest forced configuration (bf16), "
                      f"{config_label(best)}."))
    if bf16:
        out.append(f"gcdsl fp16 / gcdsl bf16 time: {ratio(fp16['us'] / bf16['us'])}; upstream fp16 / gcdsl bf16 time: "
                   f"{ratio(up['us'] / bf16['us'])}.")
    if "hbm_fraction" in up and "hbm_fraction" in fp16:
        out.append(f"Upstream moves B at {pct(up['hbm_fraction'])} of the copy bandwidth, gcdsl fp16 at "
                   f"{pct(fp16['hbm_fraction'])}: {ratio(t['limit'])} upstream's speed would take "
                   f"{pct(t['limit'] * up['hbm_fraction'])}.")
    pair = [results.get("ncu", {}).get((s, d)) for d in ("fp16", "bf16")]
    if all(pair):
        cycles = [ncu.metric(x, SOL, "Elapsed Cycles")[1] for x in pair]
        clocks = [ncu.scaled(x, SOL, "SM Frequency") for x in pair]
        sm = [ncu.percent(x, SOL, "Compute (SM) Throughput") for x in pair]
        dram = [ncu.percent(x, SOL, "DRAM Throughput") for x in pair]
        line = (f"`ncu`, gcdsl's kernel in fp16 and in bf16: SM throughput {pct(sm[0])} and {pct(sm[1])} of peak "
                f"(DRAM {pct(dram[0])} and {pct(dram[1])}), "
                f"{cycles[0]:,.0f} and {cycles[1]:,.0f} cycles ({signed_pct(cycles[0] / cycles[1] - 1)}), SM clock "
                f"{f2(clocks[0] / 1e9)} and {f2(clocks[1] / 1e9)} GHz ({signed_pct(clocks[0] / clocks[1] - 1)})")
        if abs(cycles[0] / cycles[1] - 1) < SAME_CYCLES and abs(clocks[0] / clocks[1] - 1) >= SAME_CYCLES:
            line += (f": the same work in cycles, fp16 at the {'lower' if clocks[0] < clocks[1] else 'higher'} "
                     "clock")
        out.append(line + ".")
    if not forced and not all(pair):
        out.append("Neither forced configurations nor `ncu` profiles of this shape are in the results.")
    return out


def _why_torch(results: Results, t: Dict[str, Any]) -> List[str]:
    s = t["shape"]
    forced = {v: r["us"] for v in explored(results) if (r := row(results, s, v))}
    theirs = row(results, s, "torch_bf16")
    if not forced:
        return ["No forced configurations of this shape are in the results."]
    best = min(forced, key=forced.get)
    return [f"the fastest forced configuration ({config_label(best)}) takes {f1(forced[best])} us against torch's "
            f"{f1(theirs['us'])} us."]


# ---------------------------------------------------------------------------------------
# One sentence for the README
# ---------------------------------------------------------------------------------------
def readme_sentences(results: Results) -> List[str]:
    found = targets(results)
    torch_ = [t["value"] for t in found if t["kind"] == "torch"]
    up = [t["value"] for t in found if t["kind"] == "upstream"]
    if not torch_:
        return []
    missed = [t for t in found if not t["met"]]
    text = (f"`gcdsl.ops.grouped_mm` on {len(shapes(results))} MoE shapes runs at {span(torch_, ratio)} the speed of "
            "`torch._grouped_mm` in bf16")
    if up:
        text += f" and {span(up, ratio)} that of upstream CuTe DSL's Hopper grouped GEMM in fp16"
    text += f" (device time); {len(found) - len(missed)} of its {len(found)} targets are met"
    names = [f"{t['shape']} {KINDS[t['kind']]}" for t in missed]
    text += f" (missed: {listing(names)})." if missed else "."
    out = [text]
    first = ready_first(results)
    timed = len(first["gcdsl"]) + len(first["torch"])
    host = {v: [r["host"]["host_us"]["median"] for s in shapes(results) if "host" in (r := row(results, s, v) or {})]
            for v in ("gcdsl_bf16", "torch_bf16")}
    if timed and all(host.values()):
        out.append(f"One call waited on from Python is ready first with torch on {len(first['torch'])} of the {timed} "
                   f"shapes: gcdsl's call returns after {span(host['gcdsl_bf16'], f0)} us of host work, torch's after "
                   f"{span(host['torch_bf16'], f0)} us.")
    return out
