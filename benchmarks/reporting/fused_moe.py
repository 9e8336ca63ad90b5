"""W8: the MoE expert layer after the router (torch, gcdsl, fused_moe, quack); its targets."""
from __future__ import annotations

import statistics
from typing import Any, Dict, List, Optional, Tuple

from .fmt import Results, f1, kept_run, listing, md_table, ok, pct, ratio, span

VARIANTS = ("torch", "gcdsl", "fused_moe", "pair", "quack")  # the region shows those measured
PEERS = ("torch", "quack")
MODES = {"graph": "replayed from a CUDA graph, new routing every replay", "eager": "eager, new routing every call"}
DECODE_TOKENS = 64  # up to here the layer streams its weights: HBM-bound
HBM_FRACTION = 0.80  # decode target: weight-streaming bound / layer time


def target_against(peer: str, tokens: int) -> float:
    """The speed-up fused_moe aims at against `peer` (graph replays) at T = `tokens`."""
    if peer == "quack":
        return 1.0
    return 1.5 if tokens <= DECODE_TOKENS else 1.15 if tokens >= 512 else 1.0


def _rows(results: Results) -> Dict[Tuple, Dict[str, Any]]:
    return {(r["shape"], r["tokens"], r["variant"], r["mode"]): r for r in results["W8"]["results"]}


def points(results: Results) -> List[Tuple[str, int]]:
    return list(dict.fromkeys((r["shape"], r["tokens"]) for r in results["W8"]["results"]))


def _us(rows, shape: str, tokens: int, variant: str, mode: str) -> Optional[float]:
    r = rows.get((shape, tokens, variant, mode))
    return r["us"] if ok(r) else None


def _bound(results: Results, shape: str, tokens: int) -> Optional[float]:
    return next((r["bound_us"] for r in results["W8"]["results"]
                 if (r["shape"], r["tokens"]) == (shape, tokens) and r.get("bound_us")), None)


def ratios(results: Results, peer: str, mode: str = "graph", ours: str = "fused_moe") -> Dict[Tuple[str, int], float]:
    """Peer time / `ours` time per (shape, tokens): above 1, `ours` is faster."""
    rows, out = _rows(results), {}
    for s, t in points(results):
        a, b = _us(rows, s, t, ours, mode), _us(rows, s, t, peer, mode)
        if a and b:
            out[(s, t)] = b / a
    return out


def targets(results: Results) -> List[Dict[str, Any]]:
    """Every W8 target on graph replays: against each peer, and the HBM fraction at decode."""
    out = []
    for peer in PEERS:
        for (s, t), x in ratios(results, peer).items():
            want = target_against(peer, t)
            out.append({"what": f"{s}, {t} tokens: against {peer}", "value": ratio(x), "target": ratio(want),
                        "met": x >= want})
    rows = _rows(results)
    for s, t in points(results):
        ours, bound = _us(rows, s, t, "fused_moe", "graph"), _bound(results, s, t)
        if t <= DECODE_TOKENS and ours and bound:
            out.append({"what": f"{s}, {t} tokens: HBM fraction", "value": pct(bound / ours),
                        "target": pct(HBM_FRACTION), "met": bound >= HBM_FRACTION * ours})
    return out


def region_w8(results: Results, name: str = "W8") -> Optional[str]:
    """W8's tables and targets from `name`.json: W8.json, or a run of it kept beside it
    (`--json name`, read alone)."""
    kept = kept_run(results, name, "W8", "w8_fused_moe.py")
    if kept is None:
        return None
    results, command, _ = kept
    config, machine = results["W8"]["config"], results["W8"]["machine"]
    rows = _rows(results)
    variants = [v for v in VARIANTS if any(r["variant"] == v for r in results["W8"]["results"])]
    lines = [f"Command: `{command}`, run at `{machine.get('gcdsl_git', '?')}` on an {machine.get('gpu', '?')}. "
             "The expert layer after the router, given `x`, `w1`, `w2`, "
             "`topk_weights` and `topk_ids` made on the GPU by a random router, new routing every call. *torch*: "
             "permute, `torch._grouped_mm`, SwiGLU, `torch._grouped_mm`, weighted combine; *gcdsl*: that layer on "
             "`gcdsl.ops.grouped_mm`; *fused_moe*: `gcdsl.ops.fused_moe` (at up to 16 slots of small experts the "
             "decode kernel, both GEMMs as GEMVs on CUDA cores; else up to 512 slots both GEMMs in one persistent "
             "tensor-core kernel, SwiGLU in the gate-up tiles' epilogue); "
             + ("*pair*: its two-GEMM form, `fused_moe_pair` (`grouped_mm_swiglu`, then `grouped_mm`); "
                if "pair" in variants else "")
             + f"*quack*: quack-kernels' fused pieces (`{config.get('quack')}`). Every output was checked against a "
             f"float32 reference (relative error <= {config.get('tolerance')}) before it was timed. *Bound*: the "
             "active experts' weight bytes over the measured device-to-device copy bandwidth "
             f"({f1(config.get('copy_gbps', 0))} GB/s)."
             + (f" *Floor*: a graph of one kernel that zeroes a word, replayed back to back with the host ahead, "
                f"takes {f1(config['graph_floor_us'])} us a replay on the GPU: every graph-replayed time below "
                "includes about that much for the graph's launch, whatever the layer does."
                if config.get("graph_floor_us") else ""), ""]
    captures = config.get("captures", 1)  # graphs per routed batch and variant
    torch_over_bound = {mode: _torch_over_bound(results, mode) for mode in MODES}
    for mode, what in MODES.items():
        table = []
        for s, t in points(results):
            cells = [s, str(t)] + [f1(u) if (u := _us(rows, s, t, v, mode)) else "-" for v in variants]
            bound = _bound(results, s, t)
            ours = _us(rows, s, t, "fused_moe", mode)
            cells.append(f1(bound) if bound else "-")
            for peer in PEERS:
                x = ratios(results, peer, mode).get((s, t))
                cells.append(ratio(x) if x else "-")
            cells.append(pct(bound / ours) if bound and ours else "-")
            over = torch_over_bound[mode].get((s, t))
            cells.append(ratio(over) if over else "-")
            table.append(cells)
        over = (f", each variant captured {captures} times per routed batch"
                if mode == "graph" and captures > 1 else "")
        lines += [f"Microseconds per layer, {what}{over}; median of {config.get('rounds')} rounds of "
                  f"{config.get('calls')} calls. Ratio = peer / fused_moe:", "",
                  md_table(["shape", "tokens", *variants, "bound", "torch / fused_moe", "quack / fused_moe",
                            "HBM fraction", "torch / bound"], table), ""]
    forms = _forms(results)
    if forms:
        lines += [forms, ""]
    lines += _one_kernel_configs(results)
    checks = targets(results)
    missed = [f"{c['what']} {c['value']} (target {c['target']})" for c in checks if not c["met"]]
    beyond = [f"{s}, {t} tokens" for (s, t), x in torch_over_bound["graph"].items()
              if x < target_against("torch", t)]
    lines.append(f"Targets (graph replays): fused_moe at or above 1.50x torch's layer and {pct(HBM_FRACTION)} of the "
                 f"HBM bandwidth for T <= {DECODE_TOKENS}, 1.15x torch's for T >= 512, and at or above quack "
                 f"everywhere; {len(checks) - len(missed)} of {len(checks)} met."
                 + (f" Missed: {listing(missed)}." if missed else "")
                 + (" *torch / bound* is the most any layer can be faster than torch's while it streams its weights "
                    "no faster than the copy bandwidth; it is below 1.50x, so that no layer can meet the target "
                    f"against torch, at {listing(beyond)}." if beyond else ""))
    return "\n".join(lines)


def _torch_over_bound(results: Results, mode: str) -> Dict[Tuple[str, int], float]:
    """torch's time over the weight-streaming bound, for T <= DECODE_TOKENS."""
    rows, out = _rows(results), {}
    for s, t in points(results):
        torch, bound = _us(rows, s, t, "torch", mode), _bound(results, s, t)
        if torch and bound and t <= DECODE_TOKENS:
            out[(s, t)] = torch / bound
    return out


def region_w8_h100(results: Results) -> Optional[str]:
    """W8 in full on an H100 (`--json W8_h100`), beside the headline run."""
    return region_w8(results, "W8_h100")


def _forms(results: Results) -> Optional[str]:
    """The switch point between fused_moe's two forms: pair / fused_moe (the one kernel)
    on graph replays, by token count."""
    x = ratios(results, "pair")
    if not x:
        return None
    by_tokens = {t: [v for (_, tt), v in x.items() if tt == t] for t in sorted({t for _, t in x})}
    spans = [f"{span(v, ratio)} at T = {t}" for t, v in by_tokens.items()]
    return ("The two forms of fused_moe, replayed from CUDA graphs (pair time / one-kernel time; above 1 the one "
            f"kernel is faster): {listing(spans)}.")


def _one_kernel_configs(results: Results) -> List[str]:
    """`--every-config`'s one-kernel rows, from W8.json or else from W8_configs.json (such a
    run kept beside a later W8.json of the defaults): the default's graph time over each
    forced configuration's, the data behind `megakernel_tile_n` and `megakernel_split_k`."""
    source = next((results[name] for name in ("W8", "W8_configs") if name in results
                   and any(r["variant"].startswith("one kernel ") for r in results[name]["results"])), None)
    if source is None:
        return []
    rows = {(r["shape"], r["tokens"], r["variant"]): r for r in source["results"] if r["mode"] == "graph"}
    forced = list(dict.fromkeys(r["variant"] for r in source["results"] if r["variant"].startswith("one kernel ")))
    table = []
    for s, t in dict.fromkeys((r["shape"], r["tokens"]) for r in source["results"]):
        default = rows.get((s, t, "fused_moe"))
        cells = [s, str(t)]
        for v in forced:
            r = rows.get((s, t, v))
            cells.append(ratio(default["us"] / r["us"]) if ok(default) and ok(r) else "-")
        table.append(cells)
    commit = source["machine"].get("gcdsl_git", "?")
    return [f"The one kernel with a configuration forced (`--every-config`, at `{commit}`; fused_moe's time there over "
            "the forced one's, graph replays; above 1 the forced configuration is faster):", "",
            md_table(["shape", "tokens", *(v[len("one kernel "):] for v in forced)], table), ""]


def _forced_times(source: Dict[str, Any], variants) -> List[Tuple[str, int, Dict[str, float]]]:
    """A forced run's points in order, each (shape, tokens, {variant: graph-replay µs}) for
    those of `variants` measured there."""
    rows = {(r["shape"], r["tokens"], r["variant"]): r for r in source["results"] if r["mode"] == "graph"}
    return [(s, t, {v: rows[(s, t, v)]["us"] for v in variants if ok(rows.get((s, t, v)))})
            for s, t in dict.fromkeys((r["shape"], r["tokens"]) for r in source["results"])]


def _forced_cells(shape: str, tokens: int, us: Dict[str, float], forms) -> List[str]:
    """A forced run's table row up to its ratios: the point, then torch's, each of `forms`'
    and fused_moe's graph-replay µs ("-" where not measured)."""
    return [shape, str(tokens)] + [f1(us[v]) if v in us else "-" for v in ("torch", *forms, "fused_moe")]


def _forced_replays(source: Dict[str, Any]) -> str:
    """What a forced run's times are, after its command."""
    config, machine = source["config"], source["machine"]
    return (f" (at `{machine.get('gcdsl_git', '?')}`, on an {machine.get('gpu', '?')}): microseconds per layer "
            f"replayed from CUDA graphs, median of {config.get('rounds')} rounds of {config.get('calls')} calls.")


def _forced_tokens(points) -> str:
    """A forced run's `--tokens` value: the token counts of its points (`_forced_times`)."""
    return ",".join(map(str, sorted({t for _, t, _ in points})))


def _forced_bound(source: Dict[str, Any], shape: str, tokens: int) -> Optional[float]:
    """A forced run's weight-streaming bound (µs) at a point."""
    return next((r["bound_us"] for r in source["results"] if (r["shape"], r["tokens"]) == (shape, tokens)
                 and r.get("bound_us")), None)


# W8_decode.json's forced variants
DECODE_FORMS = ("decode", "decode early prefetch", "decode unstaged", "one kernel default")


def region_w8_decode(results: Results) -> Optional[str]:
    """`W8_decode.json` (`--forced` DECODE_FORMS): the decode kernel against the one
    tensor-core kernel at a few tokens, graph replays, and the form `fused_moe` took at
    each point: the data for `DECODE_MAX_WEIGHT_BYTES`; and against itself without down
    rows staged in shared memory."""
    if "W8_decode" not in results:
        return None
    source = results["W8_decode"]
    points = _forced_times(source, ("fused_moe", "torch", *DECODE_FORMS))
    table = []
    for s, t, us in points:
        bound = _forced_bound(source, s, t)
        cells = _forced_cells(s, t, us, DECODE_FORMS)
        one, decode, unstaged = us.get("one kernel default"), us.get("decode"), us.get("decode unstaged")
        cells.append(ratio(one / decode) if one and decode else "-")
        cells.append(ratio(unstaged / decode) if unstaged and decode else "-")
        cells.append(pct(bound / us["decode"]) if bound and decode else "-")
        table.append(cells)
    return "\n".join([
        f"Command: `python benchmarks/w8_fused_moe.py --tokens {_forced_tokens(points)} --variants torch,fused_moe "
        "--forced "
        f"\"{','.join(DECODE_FORMS)}\" --json W8_decode`{_forced_replays(source)} "
        "*decode*: `fused_moe_decode`; *decode early prefetch*: the same with each CTA's down rows asked of L2 "
        "before its gate-up GEMVs; *decode unstaged*: the same with no down rows staged in shared memory "
        "(`staged_experts=0`); *one kernel default*: `fused_moe_megakernel` with its rules' configuration; "
        "*fused_moe*: the form `fused_moe` takes there. Ratios above 1: the decode kernel is faster than the one "
        "kernel, staging faster than none; HBM fraction of the decode kernel's layer:", "",
        md_table(["shape", "tokens", "torch", *DECODE_FORMS, "fused_moe", "one kernel / decode",
                  "unstaged / decode", "HBM fraction, decode"], table)])


# W8_streamed.json's forced variants: the decode kernel, its streamed build, the one kernel
STREAMED_FORMS = ("decode", "decode streamed", "one kernel default")


def region_w8_streamed(results: Results) -> Optional[str]:
    """`W8_streamed.json` (`--forced` STREAMED_FORMS): the decode kernel's streamed build
    against its default build and the one kernel, graph replays, and the HBM fraction of
    each decode build: the data for `fused_moe` to take the streamed build or not."""
    if "W8_streamed" not in results:
        return None
    source = results["W8_streamed"]
    points = _forced_times(source, ("torch", "fused_moe", *STREAMED_FORMS))
    table = []
    for s, t, us in points:
        bound, streamed = _forced_bound(source, s, t), us.get("decode streamed")
        cells = _forced_cells(s, t, us, STREAMED_FORMS)
        cells += [ratio(us[v] / streamed) if streamed and v in us else "-" for v in ("decode", "one kernel default")]
        cells += [pct(bound / us[v]) if bound and v in us else "-" for v in ("decode", "decode streamed")]
        table.append(cells)
    return "\n".join([
        f"Command: `python benchmarks/w8_fused_moe.py --tokens {_forced_tokens(points)} "
        f"--rounds {source['config'].get('rounds')} "
        f"--variants torch,fused_moe --forced \"{','.join(STREAMED_FORMS)}\" --json W8_streamed`"
        f"{_forced_replays(source)} *decode*: `fused_moe_decode`; *decode streamed*: the same with every weight "
        "row through its ring of shared-memory buffers (`streamed=True`); *one kernel default*: "
        "`fused_moe_megakernel` with its rules' configuration; *fused_moe*: the form `fused_moe` takes there. "
        "Ratios: each form's time over the streamed build's (above 1, the streamed build is faster):", "",
        md_table(["shape", "tokens", "torch", *STREAMED_FORMS, "fused_moe", "decode vs streamed",
                  "one kernel vs streamed", "HBM fraction, decode", "HBM fraction, streamed"], table)])


# The two-GEMM form with a GEMM forced to CTAs alone and to pairs (128 x 256 tiles):
# W8_swiglu_pairs.json (the gate-up GEMM at 512 and 4,096 tokens), W8_pairs_rule.json
# (both GEMMs, 512 to 2,048 tokens) and W8_pairs_rule_qwen.json (Qwen3-30B-A3B's gate-up GEMM)
CLUSTER_RUNS = ("W8_swiglu_pairs", "W8_pairs_rule", "W8_pairs_rule_qwen")
CLUSTER_FORMS = {gemm: tuple(f"pair {gemm} cooperative 256 {cluster}" for cluster in ("alone", "pairs"))
                 for gemm in ("up", "down")}


def region_w8_pairs(results: Results) -> Optional[str]:
    """The runs of CLUSTER_RUNS (`--forced` CLUSTER_FORMS): `fused_moe_pair` with its gate-up
    (SwiGLU) or down GEMM forced to CTAs alone and to pairs, beside the form as it picks
    and torch's layer where measured, graph replays: the data for the pairs rules."""
    runs = [name for name in CLUSTER_RUNS if name in results]
    if not runs:
        return None
    text = []
    for name in runs:
        source = results[name]
        measured = {r["variant"] for r in source["results"] if ok(r)}
        gemms = [gemm for gemm, forms in CLUSTER_FORMS.items() if set(forms) <= measured]
        forms = [form for gemm in gemms for form in CLUSTER_FORMS[gemm]]
        variants = [v for v in ("torch", "pair") if v in measured]
        points = _forced_times(source, (*variants, *forms))
        table = []
        for s, t, us in points:
            cells = [s, str(t)] + [f1(us[v]) if v in us else "-" for v in (*variants, *forms)]
            for gemm in gemms:
                alone, pairs = (us.get(v) for v in CLUSTER_FORMS[gemm])
                cells.append(ratio(alone / pairs) if alone and pairs else "-")
            table.append(cells)
        shapes = ",".join(dict.fromkeys(s for s, _, _ in points))
        text += [
            f"Command: `python benchmarks/w8_fused_moe.py --shapes {shapes} --tokens {_forced_tokens(points)} "
            f"--rounds {source['config'].get('rounds')} --variants {','.join(variants)} "
            f"--forced \"{','.join(forms)}\" --json {name}`{_forced_replays(source)}", "",
            md_table(["shape", "tokens", *variants, *(form[len("pair "):] for form in forms),
                      *(f"{gemm}: alone / pairs" for gemm in gemms)], table), ""]
    return "\n".join(text[:-1])


# fused_moe's two-GEMM form with both GEMMs' warpgroups running their WGMMAs on tiles where
# they have no rows (`GemmConfig.mma_without_rows`): W8_mma_without_rows*.json
MMA_WITHOUT_ROWS_FORM = "pair mma-without-rows"


def region_w8_mma_without_rows(results: Results) -> Optional[str]:
    """The runs of `--forced "pair mma-without-rows"` (W8_mma_without_rows*.json): the
    two-GEMM form with both GEMMs' warpgroups running their WGMMAs where they have no rows,
    beside the form as it runs and torch's layer, graph replays."""
    runs = sorted(name for name in results if name.startswith("W8_mma_without_rows"))
    if not runs:
        return None
    text = []
    for name in runs:
        source = results[name]
        variants = [v for v in ("torch", "pair", "fused_moe") if any(r["variant"] == v and ok(r)
                                                                       for r in source["results"])]
        points = _forced_times(source, (*variants, MMA_WITHOUT_ROWS_FORM))
        table = []
        for s, t, us in points:
            forced, pair, torch = (us.get(v) for v in (MMA_WITHOUT_ROWS_FORM, "pair", "torch"))
            table.append([s, str(t)] + [f1(us[v]) if v in us else "-" for v in (*variants, MMA_WITHOUT_ROWS_FORM)]
                         + [ratio(pair / forced) if pair and forced else "-",
                            ratio(torch / forced) if torch and forced else "-"])
        shapes = ",".join(dict.fromkeys(s for s, _, _ in points))
        text += [
            f"Command: `python benchmarks/w8_fused_moe.py --shapes {shapes} --tokens {_forced_tokens(points)} "
            f"--rounds {source['config'].get('rounds')} --variants {','.join(variants)} "
            f"--forced \"{MMA_WITHOUT_ROWS_FORM}\" --json {name}`{_forced_replays(source)} *pair*: "
            "`fused_moe_pair` as it runs; *mma-without-rows*: the same with every warpgroup of both GEMMs running "
            "its WGMMAs on tiles where it has no rows. Ratios: each time over that of *mma-without-rows* (above 1, "
            "running them is faster):", "",
            md_table(["shape", "tokens", *variants, "mma-without-rows", "pair / mma-without-rows",
                      "torch / mma-without-rows"], table), ""]
    return "\n".join(text[:-1])


# A/B runs of the decode layer, `w8_fused_moe.py` at two commits in turn, W8_ab_<form>_<n>.json:
# the layer launched as two kernels (the routing kernel, which zeroed the decode kernel's
# barrier counter, then the decode kernel) and as the decode kernel alone; then the decode
# kernel's barrier with a second count and a reset by its last CTA past it, and with
# shares that flip the counter's top bit
LAUNCH_FORMS = {"two kernels": "W8_ab_two_", "one kernel": "W8_ab_one_"}
BARRIER_FORMS = {"reset": "W8_ab_reset_", "flip": "W8_ab_flip_"}


def _ab_region(results: Results, forms: Dict[str, str], described: Dict[str, str]) -> Optional[str]:
    """Two forms of the decode layer (`forms`: name -> JSON prefix, the one before first),
    graph replays and eager calls, each form's median over its runs (with their spread)
    and torch's beside them; `described`: what each form is, for the command line."""
    runs = {form: [results[name] for name in sorted(results) if name.startswith(prefix)]
            for form, prefix in forms.items()}
    if not all(runs.values()):
        return None

    def us(sources, variant):
        by_point: Dict[Tuple, List[float]] = {}
        for source in sources:
            for r in source["results"]:
                if r["variant"] == variant and ok(r):
                    by_point.setdefault((r["shape"], r["tokens"], r["mode"]), []).append(r["us"])
        return by_point

    before, after = forms
    torch = us([s for sources in runs.values() for s in sources], "torch")
    times = {form: us(sources, "fused_moe") for form, sources in runs.items()}
    table = []
    for point in times[after]:
        old, new = times[before].get(point), times[after][point]
        if not old:
            continue
        cells = [point[0], str(point[1]), point[2], f1(statistics.median(torch.get(point, [float("nan")])))]
        cells += [f"{f1(statistics.median(v))} [{span(v, f1)}]" for v in (old, new)]
        table.append(cells + [ratio(statistics.median(old) / statistics.median(new))])
    first = {form: sources[0] for form, sources in runs.items()}
    config, machine = first[after]["config"], first[after]["machine"]
    return "\n".join([
        f"Command: `python benchmarks/w8_fused_moe.py --shapes qwen3-30b-a3b --tokens 1,2 --variants torch,fused_moe "
        f"--rounds {config.get('rounds')} --json W8_ab_<form>_<n>`, run at "
        f"`{first[before]['machine'].get('gcdsl_git', '?')}` (*{before}*: {described[before]}) and at "
        f"`{machine.get('gcdsl_git', '?')}` (*{after}*: {described[after]}), in turn, "
        f"{len(runs[after])} runs each, on an {machine.get('gpu', '?')}. Microseconds per layer, each run's "
        f"median of {config.get('rounds')} rounds of {config.get('calls')} calls; the median over a form's runs with their "
        f"spread in brackets, torch's over all runs. Ratio: the time of *{before}* over that of *{after}* (above 1, "
        f"*{after}* is faster):", "",
        md_table(["shape", "tokens", "mode", "torch", before, after, f"{before} / {after}"], table)])


def region_w8_decode_launches(results: Results) -> Optional[str]:
    """The decode layer as two kernels against the decode kernel alone."""
    return _ab_region(results, LAUNCH_FORMS, {
        "two kernels": "the routing kernel, which zeroed the decode kernel's barrier counter, then the decode kernel",
        "one kernel": "the decode kernel alone, its counter left zero by its last CTA past the barrier"})


def region_w8_decode_barrier(results: Results) -> Optional[str]:
    """The decode kernel's grid barrier reset by its last CTA past it against the one
    whose shares flip the counter's top bit."""
    return _ab_region(results, BARRIER_FORMS, {
        "reset": "each CTA past the barrier counted in a second word, an add whose result it waits for, the last "
                 "one zeroing both words",
        "flip": "shares that flip the counter's top bit, nothing after the barrier"})


def region_w8_decode_phases(results: Results) -> Optional[str]:
    """`W8_decode_phases.json` (`w8_phases.py --kernel decode`): the decode kernel's span
    at each point cut at the last CTA's gate-up GEMVs and at the last CTA past the
    barrier, and the rate at which it streamed its weights."""
    if "W8_decode_phases" not in results:
        return None
    source = results["W8_decode_phases"]
    config, machine = source["config"], source["machine"]
    table = []
    for r in source["results"]:
        if not ok(r):
            continue
        spans = r["spans_us"]
        table.append([r["shape"], str(r["tokens"]), str(r["active_experts"]), f1(r["kernel_us"]),
                      f1(spans["gate-up GEMVs"]), f1(spans["barrier"]), f1(spans["down GEMVs, combine"]),
                      f"{r['gbps']:.0f}", pct(r["gbps"] / config["copy_gbps"])])
    return "\n".join([
        f"Command: `python benchmarks/w8_phases.py --kernel decode --tokens "
        f"{','.join(map(str, sorted({r['tokens'] for r in source['results']})))}` (at "
        f"`{machine.get('gcdsl_git', '?')}`, on an {machine.get('gpu', '?')}): the decode kernel's stamped build "
        f"(`fused_moe.decode_phases`), the median of {config.get('calls')} calls' stamps, microseconds from the first "
        "CTA's start: to the last CTA's gate-up GEMVs, then to the last CTA past the barrier, then to the kernel's "
        f"end; GB/s: the active experts' weight bytes over the kernel's span, and its fraction of the device-to-device "
        f"copy bandwidth ({config['copy_gbps']:.0f} GB/s):", "",
        md_table(["shape", "tokens", "active experts", "kernel us", "gate-up GEMVs", "barrier", "down GEMVs, combine",
                  "GB/s", "of copy bandwidth"], table)])


def region_w8_decode_stream(results: Results) -> Optional[str]:
    """`W8_decode_stream.json`: the decode kernel's two ways of streaming weights alone,
    at its bytes a CTA at one token and at a long stream, each way's best setting."""
    if "W8_decode_stream" not in results:
        return None
    source = results["W8_decode_stream"]
    best: Dict[Tuple, Tuple[float, str]] = {}
    for r in source["results"]:
        if not ok(r):
            continue
        setting = (f"{r['in_flight']} in flight" if r["method"] == "loads"
                   else f"{r['stages']} x {r['chunk'] // 1024} KiB")
        key = (r["method"], r["ctas"], r["kib_per_cta"])
        if key not in best or r["gbps"] > best[key][0]:
            best[key] = (r["gbps"], setting)
    order = sorted(best, key=lambda key: (key[1], key[2], key[0]))  # (by CTAs, then bytes a CTA, then way)
    table = [[method, str(ctas), str(kib), best[(method, ctas, kib)][1], f"{best[(method, ctas, kib)][0]:.0f}"]
             for method, ctas, kib in order]
    machine = source["machine"]
    return "\n".join([
        f"Command: `python -m benchmarks.w8_decode_stream` (at `{machine.get('gcdsl_git', '?')}`, on an "
        f"{machine.get('gpu', '?')}): 512-thread CTAs that stream weights and add them up, nothing else; *loads*: "
        "per-thread 16-byte loads (the gate-up GEMVs' way), *bulk*: a ring of bulk copies into shared memory (the "
        f"staging's and the streamed build's way); each way's fastest setting; GB/s: bytes over the launch's device "
        f"time (CUDA events, median of {source['config'].get('reps')}):", "",
        md_table(["way", "CTAs", "KiB a CTA", "fastest setting", "GB/s"], table)])


# W8_lead.json's forced variants: the one kernel with its down tiles dealt round all the CTAs at
# once (lead 0) and with two or three rounds of them first to the CTAs a gate-up tile short
LEAD_FORMS = ("one kernel lead 0", "one kernel lead 2", "one kernel lead 3")


def region_w8_lead(results: Results) -> Optional[str]:
    """`W8_lead.json` (`--forced` LEAD_FORMS): the one kernel's down-tile deal at each
    lead against none, graph replays, where the one kernel runs: the data for
    `megakernel_down_lead`."""
    if "W8_lead" not in results:
        return None
    source = results["W8_lead"]
    points = _forced_times(source, ("torch", "fused_moe", *LEAD_FORMS))
    table = []
    for s, t, us in points:
        none = us.get(LEAD_FORMS[0])
        cells = _forced_cells(s, t, us, LEAD_FORMS)
        cells += [ratio(none / us[v]) if none and v in us else "-" for v in (*LEAD_FORMS[1:], "fused_moe")]
        table.append(cells)
    return "\n".join([
        f"Command: `python benchmarks/w8_fused_moe.py --tokens {_forced_tokens(points)} "
        f"--rounds {source['config'].get('rounds')} "
        f"--variants torch,fused_moe --forced \"{','.join(LEAD_FORMS)}\" --json W8_lead`{_forced_replays(source)} "
        "*one kernel lead n*: `fused_moe_megakernel(..., down_lead=n)`, its other choices its rules'; "
        "*fused_moe*: the form `fused_moe` takes there (at one token on Qwen3's experts, the decode kernel). "
        "Ratios: lead 0's time over each form's (above 1, faster than dealing the down tiles round all the CTAs "
        "at once):", "",
        md_table(["shape", "tokens", "torch", *(v[len("one kernel "):] for v in LEAD_FORMS), "fused_moe",
                  *(f"{v[len('one kernel '):]} vs lead 0" for v in LEAD_FORMS[1:]), "fused_moe vs lead 0"], table)])


# W8_phases.json: the phases whose spread over the CTAs the region shows (`hopper_grouped_gemm.PHASES`)
SHOWN_PHASES = ("gate-up tiles stored", "first down tile's wait over", "down tiles done")


def region_w8_phases(results: Results) -> Optional[str]:
    """`w8_phases.py`: per point, the stamped kernel's time, each GEMM's weight stream
    rate against the copy bandwidth, and when the CTAs reached the phases that bound
    the two GEMMs (first, median and last CTA)."""
    if "W8_phases" not in results:
        return None
    source = results["W8_phases"]
    copy_gbps = source["config"]["copy_gbps"]
    table = []
    for r in source["results"]:
        if not ok(r):
            continue
        cells = [r["shape"], str(r["tokens"]), str(r["active_experts"]), f1(r["kernel_us"]),
                 pct(r["gate_up_gbps"] / copy_gbps), pct(r["down_gbps"] / copy_gbps)]
        for phase in SHOWN_PHASES:
            seen = sorted(v for v in r["phases_us"][phase] if v == v)  # NaN: a CTA without the phase
            cells.append(f"{f1(seen[0])} / {f1(statistics.median(seen))} / {f1(seen[-1])}" if seen else "-")
        table.append(cells)
    commit = source["machine"].get("gcdsl_git", "?")
    return "\n".join([
        f"Command: `python benchmarks/w8_phases.py` (at `{commit}`): the one kernel built with phase stamps, "
        "batch 0 of W8's pool. Stream rates: each GEMM's weight bytes over its span (gate-up: from the start to "
        "its last stored tile; down: from the first down tile's wait's end to the last tile), as a fraction of "
        f"the copy bandwidth ({f1(copy_gbps)} GB/s). Phases: microseconds from the first CTA's start, first / "
        "median / last CTA:", "",
        md_table(["shape", "tokens", "experts", "kernel us", "gate-up stream", "down stream", *SHOWN_PHASES], table)])


def region_w8_instances(results: Results) -> Optional[str]:
    """`w8_instances.py`: per point and variant, one call captured again and again, the
    fastest, median and slowest capture, and the slowest over the fastest."""
    if "W8_instances" not in results:
        return None
    source = results["W8_instances"]
    table = [[r["shape"], str(r["tokens"]), r["variant"], f1(r["min_us"]), f1(r["us"]), f1(r["max_us"]),
              ratio(r["max_us"] / r["min_us"])] for r in source["results"] if ok(r)]
    commit = source["machine"].get("gcdsl_git", "?")
    config = source["config"]
    return "\n".join([
        f"Command: `python benchmarks/w8_instances.py` (at `{commit}`): W8's batch 0 captured "
        f"{config['instances']} times per variant on fresh copies of its inputs; each capture timed over "
        f"{config['calls']} replays in {config['rounds']} alternating rounds (a capture's time is the median "
        "of its rounds):", "",
        md_table(["shape", "tokens", "variant", "fastest us", "median us", "slowest us", "slowest / fastest"],
                 table)])


def region_w8_stream(results: Results) -> Optional[str]:
    """`w8_stream.py`: per weight, CTA count and tiles per CTA, the best rate of the weight
    boxes alone (its box and depth), and the expert kernel's box (128 x 64, 6 stages)
    alone and beside a 128-row A box of an 8-row A."""
    if "W8_stream" not in results:
        return None
    source = results["W8_stream"]
    rows = [r for r in source["results"] if ok(r)]
    table = []
    for key in dict.fromkeys((r["shape"], r["ctas"], r["tiles"]) for r in rows):
        same = [r for r in rows if (r["shape"], r["ctas"], r["tiles"]) == key]
        alone = [r for r in same if not r["a_rows"]]
        if not alone:
            continue
        best = max(alone, key=lambda r: r["gbps"])

        def kernel_box(a_rows: int) -> Optional[float]:
            found = [r["gbps"] for r in same if r["box"] == [128, 64] and r["stages"] == 6 and r["a_rows"] == a_rows]
            return found[0] if found else None

        plain, beside = kernel_box(0), kernel_box(8)
        table.append([key[0], str(key[1]), str(key[2]), f"{best['gbps']:.0f}",
                      f"{best['box'][0]}x{best['box'][1]}, {best['stages']}",
                      f"{plain:.0f}" if plain else "-", f"{beside:.0f}" if beside else "-",
                      ratio(plain / beside) if plain and beside else "-"])
    commit = source["machine"].get("gcdsl_git", "?")
    return "\n".join([
        f"Command: `python -m benchmarks.w8_stream` (at `{commit}`): each CTA streams its own tiles of 128 rows x K "
        "of a bf16 weight through a TMA ring, a consumer warp releasing each stage as it lands; every launch reads "
        f"other weights than the launches before it. GB/s of weights, median of {source['config']['reps']} launches:",
        "", md_table(["weight", "CTAs", "tiles a CTA", "alone, best", "its box, stages", "128x64, 6 stages",
                      "... beside a 128-row A box of 8 rows", "slowdown"], table)])


def readme_sentences(results: Results) -> List[str]:
    if "W8" not in results:
        return []
    torch_x, quack_x = ratios(results, "torch"), ratios(results, "quack")
    if not torch_x:
        return []
    text = ("`gcdsl.ops.fused_moe`, the expert layer after the router (Qwen3-30B-A3B, DeepSeek-V3 at 8-way EP and "
            f"Mixtral-8x7B, 1 to 4096 tokens, replayed from CUDA graphs), runs at {span(list(torch_x.values()), ratio)}"
            " the speed of the same layer on `torch._grouped_mm`")
    if quack_x:
        text += f" and {span(list(quack_x.values()), ratio)} that of quack-kernels' fused pieces"
    return [text + "."]
