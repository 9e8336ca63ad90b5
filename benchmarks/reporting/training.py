"""W7: the grouped GEMMs of an MoE training step, and the step; their targets."""
from __future__ import annotations

from typing import Any, Dict, List, Optional, Sequence, Tuple

from .fmt import Results, f0, f1, f2, kept_run, listing, md_table, ok, pct, ratio, span

VARIANTS = ("torch", "gcdsl", "quack", "cooperative")  # cooperative: gcdsl held to its cooperative schedule
PEERS = ("torch", "quack")
STEP = "training step"
STEP_AIM = 1.15  # the training step's aim against torch (its target is 1.00x)


def _rows(results: Results) -> Dict[Tuple, Dict[str, Any]]:
    return {(r["shape"], r["tokens"], r["case"], r["variant"]): r for r in results["W7"]["results"]}


def points(results: Results) -> List[Tuple[str, int]]:
    return list(dict.fromkeys((r["shape"], r["tokens"]) for r in results["W7"]["results"]))


def cases(results: Results) -> List[str]:
    return list(dict.fromkeys(r["case"] for r in results["W7"]["results"]))


def _us(results: Results, shape: str, tokens: int, case: str, variant: str) -> Optional[float]:
    r = _rows(results).get((shape, tokens, case, variant))
    return r["us"] if ok(r) else None


def ratios(results: Results, peer: str, case_filter=lambda case: True) -> Dict[Tuple[str, int, str], float]:
    """Peer time / gcdsl time per (shape, tokens, case): above 1, gcdsl is faster."""
    out = {}
    for s, t in points(results):
        for case in cases(results):
            if case_filter(case):
                ours, theirs = _us(results, s, t, case, "gcdsl"), _us(results, s, t, case, peer)
                if ours and theirs:
                    out[(s, t, case)] = theirs / ours
    return out


def targets(results: Results) -> List[Dict[str, Any]]:
    return [{"what": f"{s}, {t} tokens, {case}: gcdsl against {peer}", "ratio": x, "met": x >= 1.0}
            for peer in PEERS for (s, t, case), x in ratios(results, peer).items()]


def outside_gemms(results: Results, shape: str, tokens: int, variant: str) -> Optional[float]:
    """The step's time less its six GEMMs' times as measured alone: what it spends elsewhere."""
    step = _us(results, shape, tokens, STEP, variant)
    gemms = [_us(results, shape, tokens, case, variant) for case in cases(results) if case != STEP]
    return step - sum(gemms) if step and gemms and all(gemms) else None


def region_w7(results: Results, name: str = "W7") -> Optional[str]:
    """W7's tables and targets from `name`.json: W7.json, or a run of it kept beside it
    (`--json name`, read alone)."""
    kept = kept_run(results, name, "W7", "w7_training.py")
    if kept is None:
        return None
    results, command, where = kept
    config = results["W7"]["config"]
    lines = [f"Command: `{command}`{where}. The six grouped GEMMs of the W6 layer's training step "
             "(forward, input gradient and weight gradient of the gate-up weights `w13` and the down weights `w2`), "
             "on the layer's own routing, then the step itself (forward and backward by autograd). quack-kernels "
             f"runs its default configuration (`{config.get('quack')}`) and has no part in the step. Every result was "
             "checked against a float32 reference before it was timed, and the two steps' weight gradients against "
             "each other. *gcdsl cooperative* is gcdsl held to its cooperative consumer schedule: where the default "
             "picks ping-pong (`pick_schedule`) it shows what that gains; elsewhere both columns run the same "
             "kernel, and their difference is the measurement's spread.", "",
             f"Device microseconds (TFLOP/s in brackets), median of {config.get('rounds')} rounds of "
             f"{config.get('reps')} calls; the step: eager, {config.get('steps')} steps between CUDA events. "
             "Ratio = peer / gcdsl:", ""]
    rows_ = _rows(results)
    table = []
    for s, t in points(results):
        for case in cases(results):
            cells = [s, str(t), case]
            for v in VARIANTS:
                r = rows_.get((s, t, case, v))
                cells.append(f1(r["us"]) + (f" ({f0(r['tflops'])})" if r.get("tflops") else "") if ok(r)
                             else (r or {}).get("status", "-"))
            for p in PEERS:
                x = ratios(results, p).get((s, t, case))
                cells.append(ratio(x) if x else "-")
            table.append(cells)
    lines += [md_table(["shape", "tokens", "case", "torch", "gcdsl", "quack", "gcdsl cooperative", "torch / gcdsl",
                        "quack / gcdsl"], table), ""]
    checks = targets(results)
    missed = [c["what"] for c in checks if not c["met"]]
    lines.append(f"Targets: gcdsl at or above each peer in every case; {len(checks) - len(missed)} of {len(checks)} "
                 "met." + (f" Missed: {listing(missed)}." if missed else ""))
    step = ratios(results, "torch", lambda case: case == STEP)
    if step:
        lines.append(f"The training step runs at {span(list(step.values()), ratio)} torch's speed "
                     f"(aim: {ratio(STEP_AIM)}).")
        outside = [(s, t, outside_gemms(results, s, t, "torch"), outside_gemms(results, s, t, "gcdsl"))
                   for s, t in points(results)]
        outside = [f"{s}, {t} tokens: {f0(theirs)} us with torch against {f0(ours)} with gcdsl"
                   for s, t, theirs, ours in outside if theirs is not None and ours is not None]
        if outside:
            lines.append("What the step spends outside its six GEMMs (its time less theirs, each measured alone): "
                         f"{listing(outside)}.")
    return "\n".join(lines)


ORDERS = {o: f"gcdsl {o}-order" for o in ("m", "n", "m_partial_last", "m_blocks")}  # `w7_training.py --orders`
ORDER_COLUMNS = {"m": "M-steps fastest", "n": "N-tiles fastest", "m_partial_last": "partial step last",
                 "m_blocks": "M-steps fastest in blocks"}
ORDER_RATIOS = {"m_partial_last": "partial last", "m_blocks": "blocks"}  # *m / <this>*, the orders past m and n
ORDER_SENTENCES = {
    "m_partial_last": "the order taking a group's partial M-step's tiles after its full steps'",
    "m_blocks": "the order taking a group's M-steps fastest in blocks of M_BLOCK_STEPS of them"}


def region_w7_h100(results: Results) -> Optional[str]:
    """W7 in full on an H100 (`--json W7_h100`), beside the headline run."""
    return region_w7(results, "W7_h100")


def _forced(source: Dict[str, Any]) -> List[str]:
    """The configurations a run of `w7_training.py --every-config` forced gcdsl to ("<schedule>
    <tile_n>[ pairs]"): its variants "gcdsl <configuration>" but the tile orders, by schedule,
    tile width, then single CTAs before pairs."""
    forced = {r["variant"][len("gcdsl "):] for r in source["results"]
              if r["variant"].startswith("gcdsl ") and not r["variant"].endswith("-order")}
    return sorted(forced, key=lambda v: (v.split()[0], int(v.split()[1]), v.endswith(" pairs")))


def _side_runs(results: Results, prefix: str) -> List[Tuple[str, Dict[str, Any], Dict[Tuple, Dict[str, Any]]]]:
    """(name, run, its OK rows by (shape, tokens, case, variant)) for each `prefix`*.json."""
    return [(name, source, {(r["shape"], r["tokens"], r["case"], r["variant"]): r for r in source["results"] if ok(r)})
            for name, source in results.items() if name.startswith(prefix)]


def _side_run_command(name: str, source: Dict[str, Any], flags: str, table: List[List[str]],
                      cases: bool = False) -> str:
    """"Command: `...`, on an <GPU> at `<commit>`." for a side run of w7_training.py kept as
    `name`.json: `flags`, then the shapes, tokens (and with `cases`, the cases) its table shows."""
    def column(i: int) -> str:
        return ",".join(dict.fromkeys(row[i] for row in table))

    shown = f"--shapes {column(0)} --tokens {column(1)}" + (f' --cases "{column(2)}"' if cases else "")
    machine = source.get("machine", {})
    return (f"Command: `python benchmarks/w7_training.py {flags} {shown} --rounds {source['config'].get('rounds')} "
            f"--json {name}`, on an {machine.get('gpu', 'unknown GPU')} at `{machine.get('gcdsl_git', '?')}`.")


def _rows_per_expert(shape: str, tokens: int) -> int:
    """The routed rows an expert of the W6 layer `shape` averages at `tokens`."""
    from ..moe_layer import SHAPES

    return tokens * SHAPES[shape].top_k // SHAPES[shape].experts


def region_w7_configs(results: Results) -> Optional[str]:
    """The runs of `w7_training.py --every-config` at other token counts (W7_configs_*.json
    but the pairs runs): gcdsl forced to each schedule, tile width and cluster beside its
    pick, torch and quack, with each point's routed rows an expert; the data for
    PINGPONG_ANY_N_MAX_ROWS_PER_GROUP."""
    return _configs_region([run for run in _side_runs(results, "W7_configs_")
                            if not run[0].startswith("W7_configs_pairs_")])


# (pairs, single CTAs) compared by `region_w7_pairs`, each a pair of forced configurations
PAIR_COMPARISONS = (("pingpong 192 pairs", "pingpong 192"), ("cooperative 256 pairs", "cooperative 256"),
                    ("pingpong 192 pairs", "cooperative 256 pairs"))


def region_w7_pairs(results: Results) -> Optional[str]:
    """The runs of `w7_training.py --forced` with both schedules in pairs
    (W7_configs_pairs_*.json), then each comparison of PAIR_COMPARISONS by the routed rows
    an expert averages: the data for PAIR_ROWS_PER_GROUP and PINGPONG_PAIR_ROWS_PER_GROUP."""
    runs = _side_runs(results, "W7_configs_pairs_")
    text = _configs_region(runs)
    if text is None:
        return None
    return "\n".join([text, "", _by_rows(runs, PAIR_COMPARISONS)])


def _by_rows(runs, comparisons: Sequence[Tuple[str, str]], which: str = "these runs") -> str:
    """A table of each (first, second) forced configuration's time ratio second / first over
    the GEMMs of `runs` (`which` names them), by the routed rows an expert averages."""
    by_rows: Dict[Tuple[int, int], List[float]] = {}
    for _, source, rows in runs:
        for s, t, case in dict.fromkeys((r["shape"], r["tokens"], r["case"]) for r in source["results"]):
            for i, (first, second) in enumerate(comparisons):
                a, b = rows.get((s, t, case, f"gcdsl {first}")), rows.get((s, t, case, f"gcdsl {second}"))
                if a and b:
                    by_rows.setdefault((_rows_per_expert(s, t), i), []).append(b["us"] / a["us"])
    table = []
    for rows_per_expert in sorted({r for r, _ in by_rows}):
        cells = []
        for i in range(len(comparisons)):
            got = by_rows.get((rows_per_expert, i))
            cells.append(f"{span(got, ratio)} ({sum(x > 1 for x in got)} of {len(got)} above 1)" if got else "-")
        table.append([str(rows_per_expert), *cells])
    return "\n".join([f"The second's time over the first's at the forward and input-gradient GEMMs of {which}, "
                      "by the routed rows an expert averages (above 1, the first is faster):", "",
                      md_table(["rows", *(f"{b} / {a}" for a, b in comparisons)], table)])


# (pairs, single CTAs) compared by `region_w7_band`
BAND_COMPARISONS = (("cooperative 256 pairs", "pingpong 192"),)


def region_w7_band(results: Results) -> Optional[str]:
    """The runs of `w7_training.py --forced "cooperative 256 pairs,pingpong 192"` between one
    and four M-tiles of routed rows an expert (W7_band_*.json), then the two compared by
    rows an expert over these runs and the pairs runs, which time both at 128 to 4,096."""
    runs = _side_runs(results, "W7_band_")
    text = _configs_region(runs)
    if text is None:
        return None
    every = runs + _side_runs(results, "W7_configs_pairs_")
    return "\n".join([text, "", _by_rows(every, BAND_COMPARISONS, "these runs and those of W7-pairs (above)")])


# the two forced configurations `_configs_region` compares where a run has both
COMPARED = ("gcdsl cooperative 256", "gcdsl pingpong 192")


def _configs_region(runs) -> Optional[str]:
    """One table a run of forced configurations (`region_w7_configs`, `region_w7_pairs`,
    `region_w7_band`); where a run forced both the cooperative 128 x 256 tile and
    ping-pong 128 x 192 alone, a column compares them."""
    if not runs:
        return None
    text = []
    for name, source, rows in runs:
        table, forced = [], _forced(source)
        both = {v[len("gcdsl "):] for v in COMPARED} <= set(forced)
        for s, t, case in dict.fromkeys((r["shape"], r["tokens"], r["case"]) for r in source["results"]):
            got = {v: rows.get((s, t, case, v)) for v in ("torch", "quack", "gcdsl", *(f"gcdsl {f}" for f in forced))}
            if not all(got[v] for v in ("torch", "gcdsl", *(COMPARED if both else ()))):
                continue
            us = {v: (r["us"] if r else None) for v, r in got.items()}
            fastest = min((u, v[len("gcdsl "):]) for v, u in us.items() if u and v.startswith("gcdsl "))
            compared = [ratio(us[COMPARED[0]] / us[COMPARED[1]])] if both else []
            table.append([s, str(t), case, str(_rows_per_expert(s, t)), str(got["gcdsl"].get("n", "-")),
                          str(got["gcdsl"].get("k", "-")), *(f1(u) if u else "-" for u in us.values()),
                          got["gcdsl"].get("picked", "-"), *compared,
                          f"{fastest[1]} ({ratio(us['gcdsl'] / fastest[0])})"])
        text += [_side_run_command(name, source, f'--forced "{",".join(forced)}" --no-step', table, cases=True) + " "
                 "Device microseconds, median of the round medians; *rows* is the routed rows an expert averages; "
                 "*gcdsl* is the configuration picked at that commit (*picked*, where the run recorded it); "
                 + ("the next to last column is the cooperative 128 x 256 tile's time over ping-pong 128 x 192's "
                    "(above 1, ping-pong is faster); " if both else "")
                 + "the last column, the fastest forced configuration there and the pick's "
                 "time over its (the pick runs one of them: below 1.00x is the spread of the measurement):", "",
                 md_table(["shape", "tokens", "case", "rows", "N", "K", "torch", "quack", "gcdsl", *forced, "picked",
                           *(["cooperative 256 / pingpong 192"] if both else []), "fastest"], table), ""]
    return "\n".join(text[:-1])


def region_w7_orders(results: Results) -> Optional[str]:
    """The runs of `w7_training.py --orders` (W7_orders*.json): gcdsl with each tile order
    forced (a group's M-steps fastest, its N-tiles fastest, and the other orders a run
    has), beside gcdsl as it picks and torch: the data for `pick_tile_order`."""
    runs = _side_runs(results, "W7_orders")
    if not runs:
        return None
    text = []
    for name, source, rows in runs:
        orders = [o for o, v in ORDERS.items() if o in "mn" or any(r["variant"] == v for r in source["results"])]
        extra = [o for o in orders if o not in "mn"]
        variants = ("torch", "gcdsl", *(ORDERS[o] for o in orders))
        table = []
        for s, t, case in dict.fromkeys((r["shape"], r["tokens"], r["case"]) for r in source["results"]):
            got = {v: rows.get((s, t, case, v)) for v in variants}
            if not all(got.values()):
                continue
            us = {v: r["us"] for v, r in got.items()}
            gcdsl = got["gcdsl"]
            table.append([s, str(t), case, str(gcdsl.get("n", "-")), str(gcdsl.get("k", "-")),
                          *(f1(us[v]) for v in variants), gcdsl.get("picked_order", "-"),
                          *(ratio(us[ORDERS["m"]] / us[ORDERS[o]]) for o in ("n", *extra)),
                          ratio(us["torch"] / us["gcdsl"])])
        text += [_side_run_command(name, source, "--orders", table) + " "
                 "Device microseconds, median of the round medians; *m / n* is the M-step order's time over "
                 "the N-tile order's (above 1, N-tiles fastest is faster)"
                 + "".join(f"; *m / {ORDER_RATIOS[o]}* the M-step order's over that of {ORDER_SENTENCES[o]}"
                           for o in extra) + ":", "",
                 md_table(["shape", "tokens", "case", "N", "K", "torch", "gcdsl", *(ORDER_COLUMNS[o] for o in orders),
                           "picked", "m / n", *(f"m / {ORDER_RATIOS[o]}" for o in extra), "torch / gcdsl"], table), ""]
    return "\n".join(text[:-1])


def region_w7_policies(results: Results) -> Optional[str]:
    """The runs of `w7_training.py --load-policies` (W7_policies*.json) and
    `--store-policies` (W7_store_policies*.json): gcdsl with its loads of A and B, or its
    stores of the output, asking L2 for each policy, beside its default and torch."""
    from .. import w7_training as w7

    what = ("*default / <policy>* is gcdsl's time with the default over its time with that policy (above 1, the "
            "policy is faster)")
    return _against_default(results, {
        "W7_policies": ("--load-policies", w7.TIMED_LOAD_POLICIES, w7.LOAD_POLICY_VARIANTS, what),
        "W7_store_policies": ("--store-policies", w7.TIMED_STORE_POLICIES, w7.STORE_POLICY_VARIANTS, what)})


def region_w7_mma_without_rows(results: Results) -> Optional[str]:
    """The runs of `w7_training.py --mma-without-rows` (W7_mma_without_rows*.json): gcdsl
    with its warpgroups running their WGMMAs on tiles where they have no rows, beside gcdsl
    as it runs and torch."""
    from .. import w7_training as w7

    return _against_default(results, {"W7_mma_without_rows": (
        "--mma-without-rows", ("mma without rows",), (w7.MMA_WITHOUT_ROWS,),
        "*default / mma without rows* is gcdsl's time as it runs over its time with every warpgroup running its "
        "WGMMAs (above 1, running them is faster)")})


def region_w7_claimed_tiles(results: Results) -> Optional[str]:
    """The runs of `w7_training.py --claimed-tiles` (W7_claimed*.json): gcdsl with its
    clusters claiming their tiles from a counter, beside gcdsl as it runs and torch."""
    from .. import w7_training as w7

    return _against_default(results, {"W7_claimed": (
        "--claimed-tiles", ("claimed tiles",), (w7.CLAIMED_TILES,),
        "*default / claimed tiles* is gcdsl's time as it runs over its time with its clusters claiming their tiles "
        "(above 1, claiming is faster)")})


def _against_default(results: Results, kinds) -> Optional[str]:
    """The side runs of w7_training.py named by `kinds` (JSON name prefix: (flag, column
    labels, variants, what the ratios say)): each case's times of torch, gcdsl and the
    variants, gcdsl's time over each variant's, torch's over gcdsl's; a case missing a
    variant is left out."""
    from .. import w7_training as w7

    runs = [(run, kind) for prefix, kind in kinds.items() for run in _side_runs(results, prefix)]
    if not runs:
        return None
    text = []
    runs.sort(key=lambda run: run[0][1].get("machine", {}).get("date", ""))  # oldest first
    for (name, source, rows), (flag, labels, against, what) in runs:
        variants = ("torch", "gcdsl", *against)
        table = []
        for s, t, case in dict.fromkeys((r["shape"], r["tokens"], r["case"]) for r in source["results"]):
            got = {v: rows.get((s, t, case, v)) for v in variants}
            if not all(got.values()):
                continue
            us = [got[v]["us"] for v in variants]
            table.append([s, str(t), case, *map(f1, us), *(ratio(us[1] / u) for u in us[2:]), ratio(us[0] / us[1])])
        some_cases = {case for _, _, case, _ in rows} != set(w7.CASES)  # (a run given --cases)
        text += [_side_run_command(name, source, flag, table, cases=some_cases) + " Device microseconds, median "
                 f"of the round medians; {what}:", "",
                 md_table(["shape", "tokens", "case", "torch", "gcdsl", *labels,
                           *(f"default / {label}" for label in labels), "torch / gcdsl"], table), ""]
    return "\n".join(text[:-1])


def readme_sentences(results: Results) -> List[str]:
    if "W7" not in results:
        return []
    gemms = {p: ratios(results, p, lambda case: case != STEP) for p in PEERS}
    step = ratios(results, "torch", lambda case: case == STEP)
    if not gemms["torch"]:
        return []
    text = (f"The grouped GEMMs of an MoE training step (forward, input and weight gradients; Qwen3-30B-A3B and "
            f"DeepSeek-V3 at 8-way EP, 4096 and 16384 tokens) run at {span(list(gemms['torch'].values()), ratio)} "
            "the speed of `torch._grouped_mm`")
    if gemms["quack"]:
        text += f" and {span(list(gemms['quack'].values()), ratio)} that of quack-kernels"
    text += "."
    if step:
        text += f" The whole step runs at {span(list(step.values()), ratio)} the speed of torch's."
    return [text]


def median(row: Dict[str, Any], key: str) -> str:
    """The median of a row's per-round samples under `key`, or "-" without any."""
    values = sorted(row.get(key) or [])
    return f0(values[len(values) // 2]) if values else "-"


def region_profile_layer(results: Results) -> Optional[str]:
    """`profile_layer.json`: W6 layers and a W7 step kernel by kernel, torch's grouped GEMM
    against gcdsl's; the GEMMs' kernels, every other kernel, and the clocks they ran at."""
    if "profile_layer" not in results:
        return None
    data = results["profile_layer"]
    commit = data["machine"].get("gcdsl_git", "?")
    rows = {(r["shape"], r["tokens"], r["case"], r["variant"]): r for r in data["results"] if ok(r)}
    points = list(dict.fromkeys((r["shape"], r["tokens"], r["case"]) for r in data["results"]))
    table = []
    for s, t, case in points:
        theirs, ours = rows.get((s, t, case, "torch")), rows.get((s, t, case, "gcdsl"))
        if not (theirs and ours):
            continue
        table.append([s, str(t), case,
                      f0(theirs["gemm_us"]), f0(ours["gemm_us"]), ratio(theirs["gemm_us"] / ours["gemm_us"]),
                      f0(theirs["other_us"]), f0(ours["other_us"]), ratio(theirs["other_us"] / ours["other_us"]),
                      median(theirs, "sm_mhz_rounds"), median(ours, "sm_mhz_rounds"),
                      median(theirs, "power_w_rounds"), median(ours, "power_w_rounds")])
    config = data["config"]
    return "\n".join([
        f"Command: `python -m benchmarks.profile_layer --clocks {config.get('clock_seconds')}` (at `{commit}`): "
        "device microseconds per call under `torch.profiler`, the layer's or step's grouped GEMM kernels and every "
        f"other kernel summed, median of {config.get('rounds')} rounds of {config.get('calls')} calls, the variants "
        "in a rotated order; the SM clock and the board's power are nvidia-smi's medians over each variant's "
        "rounds (each round's median while the variant ran its calls again). Ratio = torch / gcdsl:", "",
        md_table(["shape", "tokens", "what", "GEMMs, torch", "GEMMs, gcdsl", "ratio", "other kernels, torch",
                  "other kernels, gcdsl", "ratio", "MHz, torch", "MHz, gcdsl", "W, torch", "W, gcdsl"], table)])


# How a profile's experts' rows were counted (`w7_training.ROUTINGS`), said after its command
ROUTING_WORDS = {"even": ", every expert given the same number of rows",
                 "whole-tiles": ", the router's counts rounded to whole 256-row M-steps"}


def region_w7_ncu(results: Results) -> Optional[str]:
    """Every `W7_ncu*.json` (`benchmarks/ncu_w7.py`): W7 GEMMs under Nsight Compute at the
    base SM clock, torch's kernel beside gcdsl's: cycles, DRAM and L2 traffic."""
    runs = sorted(_side_runs(results, "W7_ncu"), key=lambda run: run[1]["machine"].get("date", ""))  # oldest first
    if not runs:
        return None
    lines = []
    for name, data, rows in runs:
        table = []
        for r in rows.values():
            theirs = rows.get((r["shape"], r["tokens"], r["case"], "torch"))
            against = [ratio(r[k] / theirs[k]) if theirs else "-" for k in ("cycles", "dram_read_bytes")]
            table.append([r["shape"], str(r["tokens"]), r["case"], r["variant"], f2(r["cycles"] / 1e6),
                          f0(r["sm_hz"] / 1e6), f2(r["dram_read_bytes"] / 1e9), f2(r["l2_bytes"] / 1e9),
                          pct(r["l2_hit"]), *against])
        machine = data["machine"]
        routing = data["config"].get("routing", "routed")
        routed = routing == "routed"
        lines += [f"Nsight Compute at the base SM clock (`ncu --clock-control base`), one call of `python -m "
                  f"benchmarks.profile_w7 <shape> <tokens> <case> <variant>{'' if routed else ' ' + routing}` each"
                  f"{ROUTING_WORDS.get(routing, '')}, its longest kernel, at "
                  f"`{machine.get('gcdsl_git', '?')}` on an {machine.get('gpu', '?')} (`{name}.json`; the reports "
                  f"in `{data['config'].get('reports')}`; `python -m benchmarks.ncu_w7"
                  f"{'' if routed else ' --routing ' + routing}` runs the same). Ratios: "
                  "the variant's over torch's:", "",
                  md_table(["shape", "tokens", "case", "variant", "Mcycles", "SM MHz", "DRAM read, GB", "L2, GB",
                            "L2 hit rate", "cycles / torch's", "DRAM read / torch's"], table), ""]
        if data.get("notes"):
            lines += [" ".join(data["notes"]), ""]
    return "\n".join(lines)
