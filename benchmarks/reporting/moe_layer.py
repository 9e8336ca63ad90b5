"""W6: the MoE layer with torch's, gcdsl's and quack-kernels' grouped GEMM; its targets."""
from __future__ import annotations

from typing import Any, Dict, List, Optional, Tuple

from .fmt import Results, f0, f1, kept_run, listing, md_table, ok, pct, ratio, span, verdict

VARIANTS = ("torch", "gcdsl", "quack")
PEERS = ("torch", "quack")
MODES = {"eager": "eager, new tokens every call", "graph": "replayed from a CUDA graph, new tokens every replay"}


def _rows(results: Results) -> Dict[Tuple, Dict[str, Any]]:
    return {(r["shape"], r["tokens"], r["variant"], r["mode"]): r for r in results["W6"]["results"]}


def _us(results: Results, shape: str, tokens: int, variant: str, mode: str) -> Optional[float]:
    r = _rows(results).get((shape, tokens, variant, mode))
    return r["us"] if ok(r) else None


def points(results: Results) -> List[Tuple[str, int]]:
    return list(dict.fromkeys((r["shape"], r["tokens"]) for r in results["W6"]["results"]))


def ratios(results: Results, peer: str, mode: str) -> Dict[Tuple[str, int], float]:
    """Peer time / gcdsl time per (shape, tokens): above 1, gcdsl's layer is faster."""
    out = {}
    for s, t in points(results):
        ours, theirs = _us(results, s, t, "gcdsl", mode), _us(results, s, t, peer, mode)
        if ours and theirs:
            out[(s, t)] = theirs / ours
    return out


def host_rows(results: Results) -> Dict[Tuple[int, str], float]:
    return {(r["groups"], r["variant"]): r["host_us"]["median"] for r in results["W6"]["config"].get("host", [])}


def targets(results: Results) -> List[Dict[str, Any]]:
    out = []
    for mode in MODES:
        for peer in PEERS:
            for (s, t), x in ratios(results, peer, mode).items():
                out.append({"what": f"{s}, {t} tokens, {mode}: gcdsl against {peer}", "ratio": x, "met": x >= 1.0})
    host = host_rows(results)
    for g in sorted({g for g, _ in host}):
        if (g, "gcdsl") in host and (g, "torch") in host:
            x = host[(g, "torch")] / host[(g, "gcdsl")]
            out.append({"what": f"host time of one call at G = {g}: gcdsl against torch", "ratio": x, "met": x >= 1.0})
    return out


def _layer_table(results: Results, mode: str) -> List[str]:
    rows = []
    for s, t in points(results):
        cells = [s, str(t)] + [f1(u) if (u := _us(results, s, t, v, mode)) else "-" for v in VARIANTS]
        cells += [ratio(x) if (x := ratios(results, p, mode).get((s, t))) else "-" for p in PEERS]
        rows.append(cells)
    config = results["W6"]["config"]
    batch = f"{config.get('calls')} calls"
    if mode == "eager" and config.get("eager_batch_ms"):
        batch = f"at least {batch} and {f0(config['eager_batch_ms'])} ms"
    return [f"Microseconds per layer, {MODES[mode]} (median of {config.get('rounds')} rounds of {batch}); "
            "ratio = peer / gcdsl:", "",
            md_table(["shape", "tokens", "torch", "gcdsl", "quack", "torch / gcdsl", "quack / gcdsl"], rows), ""]


def _gemm_table(results: Results) -> List[str]:
    rows_ = _rows(results)
    gbps = results["W6"]["config"].get("copy_gbps")
    rows = []
    for s, t in points(results):
        gemms = {v: rows_.get((s, t, v, "gemms")) for v in VARIANTS}
        if not any(ok(r) for r in gemms.values()):
            continue
        active = next((r["active_experts"] for r in gemms.values() if ok(r)), "-")
        cells = [s, str(t), str(active)]
        for v in VARIANTS:
            r = gemms[v]
            cells.append("-" if not ok(r) else f1(r["us"]) + (f" ({pct(r['hbm_fraction'])})"
                                                               if r.get("hbm_fraction") else ""))
        rows.append(cells)
    return [f"The layer's two grouped GEMMs alone, device microseconds; at 1 and 64 tokens in brackets the "
            f"active experts' weight bytes per second as a fraction of a 2 GiB device-to-device copy "
            f"({f0(gbps)} GB/s, read + write):", "",
            md_table(["shape", "tokens", "active experts", "torch", "gcdsl", "quack"], rows), ""]


def _host_table(results: Results) -> List[str]:
    host = host_rows(results)
    if not host:
        return []
    groups = sorted({g for g, _ in host})
    names = list(dict.fromkeys(v for _, v in host))
    rows = [[str(g)] + [f1(host[(g, v)]) if (g, v) in host else "-" for v in names] for g in groups]
    return ["Host microseconds of one `grouped_mm` call, the GPU idle before it (N 1536, K 2048, 8 rows a "
            "group; median of interleaved rounds); `offs` on the GPU unless it says otherwise:", "",
            md_table(["G"] + names, rows), ""]


def region_w6(results: Results, name: str = "W6") -> Optional[str]:
    """W6's tables and targets from `name`.json: W6.json, or a run of it kept beside it
    (`--json name`, read alone)."""
    kept = kept_run(results, name, "W6", "w6_moe_layer.py")
    if kept is None:
        return None
    results, command, where = kept
    lines = [f"Command: `{command}`{where}. The layer (`benchmarks/moe_layer.py`: router, top-k, "
             "`offs` on the GPU, permutation, gate-up GEMM, SwiGLU, down GEMM, weighted combine) is the same code "
             "for every variant; only the grouped GEMM differs. quack-kernels runs its default configuration "
             f"(`{results['W6']['config'].get('quack')}`). Every variant's output was checked against a float32 "
             "reference of the layer, eager and after a graph replay on new tokens, before it was timed.", ""]
    for mode in MODES:
        lines += _layer_table(results, mode)
    lines += _gemm_table(results) + _host_table(results)
    checks = targets(results)
    rows = [[c["what"], ratio(c["ratio"]), "at least 1.00x", verdict(c["met"])] for c in checks]
    lines += ["Targets:", "", md_table(["what", "measured", "target", ""], rows), ""]
    missed = [c["what"] for c in checks if not c["met"]]
    lines.append(f"Missed: {listing(missed)}." if missed else "Every target is met.")
    return "\n".join(lines)


def region_w6_h100(results: Results) -> Optional[str]:
    """W6 in full on an H100 (`--json W6_h100`), beside the headline run."""
    return region_w6(results, "W6_h100")


def region_profile_host(results: Results) -> Optional[str]:
    """Every `profile_host*.json` (`benchmarks/profile_host.py`): the eager layer's host
    time per layer, inside its two grouped GEMM calls and elsewhere, torch against gcdsl."""
    runs = [(name, data) for name, data in results.items() if name.startswith("profile_host")]
    if not runs:
        return None
    lines = []
    for name, data in runs:
        rows = {(r["shape"], r["tokens"], r["variant"]): r for r in data["results"] if ok(r)}
        table = []
        for shape, tokens in dict.fromkeys((s, t) for s, t, _ in rows):
            theirs, ours = rows.get((shape, tokens, "torch")), rows.get((shape, tokens, "gcdsl"))
            if not (theirs and ours):
                continue
            cells = [shape, str(tokens)]
            for part in (lambda r: r["wall_us"], lambda r: r["gemm_host_us"],
                         lambda r: r["host_us"] - r["gemm_host_us"]):  # the layer, in the GEMM calls, elsewhere
                cells += [f1(part(theirs)), f1(part(ours)), ratio(part(theirs) / part(ours))]
            table.append(cells)
        config, machine = data["config"], data["machine"]
        flag = " --cprofile" if any(r.get("cprofile") for r in data["results"]) else ""
        flag += "" if name == "profile_host" else f" --json {name}"
        lines += [f"Command: `python -m benchmarks.profile_host --calls {config.get('calls')}{flag}`, run at "
                  f"`{machine.get('gcdsl_git', '?')}` on an {machine.get('gpu', '?')}: microseconds per eager layer, "
                  f"median of {config.get('rounds')} rounds of {config.get('calls')} layers; ratio = torch / gcdsl:",
                  "", md_table(["shape", "tokens", "layer, torch", "layer, gcdsl", "ratio",
                                "host in GEMM calls, torch", "host in GEMM calls, gcdsl", "ratio",
                                "host elsewhere, torch", "host elsewhere, gcdsl", "ratio"], table), ""]
    return "\n".join(lines)


def readme_sentences(results: Results) -> List[str]:
    if "W6" not in results:
        return []
    text = []
    for mode, words in (("eager", "eager"), ("graph", "replayed from a CUDA graph")):
        vs = {p: ratios(results, p, mode) for p in PEERS}
        if vs["torch"]:
            text.append(f"An MoE layer with router-made `offs` ({len(vs['torch'])} points: Qwen3-30B-A3B, DeepSeek-V3 "
                        f"at 8-way EP and Mixtral-8x7B experts, 1 to 4096 tokens), {words}, runs at "
                        f"{span(list(vs['torch'].values()), ratio)} the speed of the same layer on `torch._grouped_mm`"
                        + (f" and {span(list(vs['quack'].values()), ratio)} that on quack-kernels" if vs["quack"] else "")
                        + ".")
    host = host_rows(results)
    ours = [u for (g, v), u in host.items() if v == "gcdsl"]
    theirs = [u for (g, v), u in host.items() if v == "torch"]
    if ours and theirs:
        text.append(f"One call's host time is {span(ours, f1)} us at G = {min(g for g, _ in host)} to "
                    f"{max(g for g, _ in host)} with `offs` on the GPU (torch: {span(theirs, f1)} us).")
        on_cpu = [u for (g, v), u in host.items() if v == "gcdsl, offs on the CPU"]
        if on_cpu:
            text.append(f"With `offs` on the CPU (validated on the host, then copied to the GPU) it is "
                        f"{span(on_cpu, f1)} us.")
    missed = [t for t in targets(results) if not t["met"]]
    if missed:
        text.append(f"{len(missed)} of {len(targets(results))} W6 targets are missed (RESULTS.md lists them).")
    return text
