"""Measured numbers in README.md and benchmarks/RESULTS.md come from benchmarks/results/.

`benchmarks/report.py` writes the marked regions of both files; here they are written
again in memory and compared. After a new benchmark run: `python benchmarks/report.py`.
"""
import copy
import os
import re

import pytest

from benchmarks import report
from benchmarks.reporting import descriptors, fmt, grouped_gemm, host, ncu, training

MEASURED = re.compile(r"\b\d+(?:\.\d+)?\s?(?:ns|us|µs|ms|GB/s|%)(?![\w/])|\b\d+\.\d+x\b")


@pytest.fixture(scope="module")
def results():
    return report.load()


@pytest.mark.parametrize("path", report.FILES, ids=os.path.basename)
def test_file_agrees_with_the_json(path, results):
    with open(path) as f:
        text = f.read()
    assert report.regions_in(text), f"{path} has no results regions"
    assert report.render(text, results) == text, (
        f"{os.path.relpath(path, report.ROOT)} disagrees with benchmarks/results/*.json: "
        "run `python benchmarks/report.py` (or fix the JSON)")


@pytest.mark.parametrize("path", report.FILES, ids=os.path.basename)
def test_no_measured_number_outside_the_regions(path):
    with open(path) as f:
        hand_written = report.outside_regions(f.read())
    assert not MEASURED.findall(hand_written), "hand-written measured numbers: move them into a region"


def test_every_region_is_used():
    used = []
    for path in report.FILES:
        with open(path) as f:
            used += report.regions_in(f.read())
    assert sorted(used) == sorted(report.REGIONS)


def test_a_changed_number_shows(results):
    with open(report.FILES[1]) as f:
        text = f.read()
    changed = copy.deepcopy(results)
    row = next(r for r in changed["W1"]["results"] if r["variant"] == "gcdsl" and r["n"] == 200)
    row["ns_per_load"]["median"] += 50.0
    assert report.render(text, changed) != text


def test_spread_wording_follows_the_ranges(results):
    changed = copy.deepcopy(results)
    for r in changed["W1"]["results"]:
        if r["variant"] in ("gcdsl", "cpp") and r.get("status") == "OK":
            r["ns_per_load"].update(min=100.0, max=1000.0)  # every range overlaps every other
    assert "overlap at every N" in descriptors.region_w1(changed)
    for r in changed["W1"]["results"]:
        if r["variant"] == "cpp" and r.get("status") == "OK":
            r["ns_per_load"].update(min=2000.0, max=3000.0)  # no range overlaps
    assert "disjoint at every N" in descriptors.region_w1(changed)


def test_helpers():
    assert fmt.overlap({"min": 1, "max": 2}, {"min": 2, "max": 3})
    assert not fmt.overlap({"min": 1, "max": 2}, {"min": 2.1, "max": 3})
    assert fmt.signed_pct(-0.0004) == "0.0%" and fmt.signed_pct(0.007) == "+0.7%"
    assert fmt.span([1.04, 1.041], fmt.ratio) == "1.04x" and fmt.span([1.0, 2.0], fmt.ratio) == "1.00x to 2.00x"
    assert MEASURED.findall("costs 21 ns, 4 / 15 us, 94.5% and 2.1x") == ["21 ns", "15 us", "94.5%", "2.1x"]
    assert not MEASURED.findall("64x64 tiles, 32,764 bytes, sm_90a, N = 200")


# ---------------------------------------------------------------------------------------
# Verdicts: the report's own, and the benchmark's where it records one
# ---------------------------------------------------------------------------------------
def test_limits_are_the_benchmarks():
    from benchmarks import w3_launch, w4_compile, w5_grouped_gemm

    assert (host.W3_FLAT_LIMIT, host.W3_PLAIN_LIMIT) == (w3_launch.FLAT_LIMIT, w3_launch.REFERENCE_LIMIT)
    assert [(num, den, limit) for _, num, den, limit in host.W4_TARGETS] == \
        [(num, den, limit) for _, num, den, limit in w4_compile.TARGETS]
    assert grouped_gemm.VARIANTS == w5_grouped_gemm.VARIANTS


def test_w3_verdicts_agree_with_the_benchmark(results):
    recorded = results["W3"]["config"]["verdicts"]
    mine = {(v["convention"], v["row"]): v for v in host.w3_verdicts(results)}
    assert recorded
    for r in recorded:
        if r["status"] == "NOT MEASURED":
            continue
        row, what = r["target"].split(": ")
        v = mine[(r["convention"], row)]
        value, limit = (v["growth"], host.W3_FLAT_LIMIT) if "N=64" in what else (v["vs_plain"], host.W3_PLAIN_LIMIT)
        assert value == pytest.approx(r["ratio"], abs=1e-3) and limit == r["limit"]
        assert (value <= limit) == (r["status"] == "MET"), r


def test_w4_verdicts_agree_with_the_benchmark(results):
    recorded = results["W4"]["config"]["verdicts"]
    mine = host.w4_verdicts(results)
    assert len(recorded) == len(mine)
    for r, v in zip(recorded, mine):
        assert v["ratio"] == pytest.approx(r["ratio"], abs=1e-3) and v["limit"] == r["limit"]
        assert v["met"] == (r["status"] == "MET"), (r, v)


def test_w5_targets_agree_with_the_benchmark(results):
    """The benchmark writes its verdicts into the JSON's notes, e.g.
    `S3 gcdsl fp16 vs upstream fp16 0.97x >= 1.00x MISSED`."""
    recorded = [n for n in results["W5"]["notes"] if n.endswith((" met", " MISSED"))]
    mine = grouped_gemm.targets(results)
    assert len(recorded) == len(mine)
    for note, t in zip(recorded, mine):
        assert note.startswith(t["shape"] + " ")
        assert f">= {t['limit_text']}" in note and t["text"] in note, (note, t)
        assert note.endswith(" met") == t["met"], (note, t)


def test_w5_verdicts_follow_the_numbers(results):
    changed = copy.deepcopy(results)
    before = {(t["shape"], t["kind"]): t["met"] for t in grouped_gemm.targets(changed)}
    for r in changed["W5"]["results"]:
        if r.get("variant") == "upstream_fp16" and r.get("status") == "OK":
            r["ms"]["median"] *= 10  # upstream ten times slower: every upstream target met
        if r.get("variant") == "gcdsl_bf16" and "hbm_fraction" in r:
            r["hbm_fraction"] = 0.5  # every bandwidth target missed
    after = {(t["shape"], t["kind"]): t["met"] for t in grouped_gemm.targets(changed)}
    assert set(before) == set(after)
    assert all(after[k] for k in after if k[1] == "upstream")
    assert not any(after[k] for k in after if k[1] == "hbm")
    text = grouped_gemm.region_w5_targets(changed)
    assert "against upstream" not in text.split("Missed:")[-1]
    assert all(f"**{s}, gcdsl bf16: bytes of B" in text for s, kind in after if kind == "hbm")


def test_every_met_target_says_so(results):
    changed = copy.deepcopy(results)
    for r in changed["W5"]["results"]:
        if r.get("variant") in ("upstream_fp16", "torch_bf16") and r.get("status") == "OK":
            r["ms"]["median"] *= 10
        if r.get("variant") == "gcdsl_bf16" and "hbm_fraction" in r:
            r["hbm_fraction"] = 0.99
    assert grouped_gemm.region_w5_targets(changed).endswith("Every target is met.")


# ---------------------------------------------------------------------------------------
# Before and after packing (git history)
# ---------------------------------------------------------------------------------------
def test_packing_region_keeps_its_text_without_git_history(results):
    with open(report.FILES[1]) as f:
        text = f.read()
    assert "packing" in report.regions_in(text)
    without = {k: v for k, v in results.items() if k != "previous"}
    assert descriptors.region_packing(without) is None

    def packing_body(t):
        return [m.group("body") for m in report.REGION.finditer(t) if m.group("name") == "packing"]

    marked = text.replace("Largest change:", "Largest change (as committed):")
    assert packing_body(report.render(marked, without)) == packing_body(marked)


def test_packing_compares_with_the_baseline_commit(results):
    if "previous" not in results:
        pytest.skip(f"commit {descriptors.PACKING_BASELINE[:7]} is not reachable through git here")
    text = descriptors.region_packing(results)
    assert f"`{descriptors.PACKING_BASELINE[:7]}`" in text
    changed = copy.deepcopy(results)
    row = next(r for r in changed["W1"]["results"] if r["variant"] == "gcdsl" and r["n"] == 64)
    row["ns_per_load"]["median"] *= 1.5
    largest = re.search(r"Largest change: \+(\d+\.\d)%", descriptors.region_packing(changed))
    assert largest and 45 <= float(largest.group(1)) <= 55  # +50% on a ratio that was within a few %


# ---------------------------------------------------------------------------------------
# Nsight Compute text reports
# ---------------------------------------------------------------------------------------
NCU_TEXT = """==PROF== Connected to process 1 (python)
  kernel_x (132, 1, 1)x(384, 1, 1), Context 1, Stream 7, Device 0, CC 9.0
    Section: GPU Speed Of Light Throughput
    ----------------------- ----------- ------------
    Metric Name             Metric Unit Metric Value
    ----------------------- ----------- ------------
    SM Frequency                    Ghz         1.53
    Elapsed Cycles                cycle    1,941,538
    Duration                         ms         1.25
    DRAM Throughput                   %        22.16
    ----------------------- ----------- ------------

    Section: Memory Workload Analysis
    -------------------------------------- ----------- ------------
    Local Memory Spilling Request Overhead           %      no data
    Memory Throughput                          Tbyte/s         4.07
    Cluster Scheduling Policy                           PolicySpread
"""


def test_ncu_text_is_read_with_its_units():
    r = ncu.parse(NCU_TEXT)
    assert r["kernel"] == "kernel_x"
    assert ncu.metric(r, "GPU Speed Of Light Throughput", "Elapsed Cycles") == ("cycle", 1941538.0)
    assert ncu.scaled(r, "GPU Speed Of Light Throughput", "Duration") == pytest.approx(1.25e-3)
    assert ncu.scaled(r, "GPU Speed Of Light Throughput", "SM Frequency") == pytest.approx(1.53e9)
    assert ncu.percent(r, "GPU Speed Of Light Throughput", "DRAM Throughput") == pytest.approx(0.2216)
    assert ncu.bytes_per_second(r, "Memory Workload Analysis", "Memory Throughput") == pytest.approx(4.07e12)
    with pytest.raises(KeyError, match="no data"):
        ncu.metric(r, "Memory Workload Analysis", "Local Memory Spilling Request Overhead")
    with pytest.raises(KeyError, match="Cluster Scheduling Policy"):
        ncu.metric(r, "Memory Workload Analysis", "Cluster Scheduling Policy")  # not a number
    with pytest.raises(ncu.NcuError):
        ncu.parse("==PROF== nothing profiled\n")


def test_committed_ncu_reports_are_read(results):
    for (shape, dtype), r in results["ncu"].items():
        assert shape in results["W5"]["config"]["shapes"] and dtype in ("bf16", "fp16")
        assert "grouped_gemm" in r["kernel"].lower()  # the profile is of gcdsl's kernel
        assert 0 < ncu.percent(r, grouped_gemm.SOL, "Compute (SM) Throughput") <= 1


def test_w7_ncu_rows_are_their_kept_reports_longest_kernels(results):
    """`W7_ncu*.json`: each row is `ncu_w7.summary` of its report in the run's own folder,
    the variant's longest kernel (torch's GEMM, not the setup kernel it launches first;
    gcdsl's one kernel), its bytes in bytes whatever prefix ncu printed; and the region
    shows each row."""
    from benchmarks import ncu_w7

    runs = {name: data for name, data in results.items() if name.startswith("W7_ncu")}
    assert runs
    for name, data in runs.items():
        text = training.region_w7_ncu({name: data})
        assert data["config"]["reports"] == ncu_w7.reports_folder(name)
        for row in data["results"]:
            path = os.path.join(os.path.dirname(report.RESULTS_DIR), data["config"]["reports"],
                                ncu_w7.report_name(row["shape"], row["tokens"], row["case"], row["variant"]))
            with open(path) as f:
                body = f.read()
            summary = ncu_w7.summary(body)
            assert summary == {k: row[k] for k in summary}
            kernels = ncu.kernels(body)
            if row["variant"] == "torch":
                assert len(kernels) == 2 and "device_kernel" in row["kernel"].lower()
            elif row["variant"] != "quack":
                assert len(kernels) == 1 and "grouped_gemm" in row["kernel"].lower()
            assert f"| {row['case']} | {row['variant']} | {fmt.f2(row['cycles'] / 1e6)} |" in text
    name, data = next((n, d) for n, d in runs.items() if d["config"].get("routing") != "even")
    # ... and a run with every expert's rows equal says so
    even = dict(data, config=dict(data["config"], routing="even"))
    text = training.region_w7_ncu({name: even})
    assert "<variant> even` each, every expert given the same number of rows," in text
    assert "`python -m benchmarks.ncu_w7 --routing even`" in text
    assert " even`" not in training.region_w7_ncu({name: data})
    tiles = dict(data, config=dict(data["config"], routing="whole-tiles"))
    text = training.region_w7_ncu({name: tiles})
    assert "<variant> whole-tiles` each, the router's counts rounded to whole 256-row M-steps," in text
    assert "`python -m benchmarks.ncu_w7 --routing whole-tiles`" in text
    assert ncu.byte_count({"sections": {"s": {"m": ("Mbyte", 1.5)}}}, "s", "m") == 1.5e6
    with pytest.raises(KeyError, match="not a byte count"):
        ncu.byte_count({"sections": {"s": {"m": ("cycle", 1.0)}}}, "s", "m")


def test_streamed_decode_region_reads_a_forced_run():
    """The region for `W8_streamed.json` keeps its text until the run exists, then shows
    each form's graph-replay time, their ratios to the streamed build's and the HBM
    fractions of both decode builds (from a forced run's rows as `w8_fused_moe` writes them)."""
    from benchmarks.reporting import fused_moe

    assert fused_moe.region_w8_streamed({}) is None
    times = {"torch": 86.0, "decode": 26.5, "decode streamed": 22.0, "one kernel default": 35.0, "fused_moe": 26.6}
    rows = [{"shape": "qwen3-30b-a3b", "tokens": 1, "variant": v, "mode": "graph", "us": us, "status": "OK",
             "bound_us": 17.6} for v, us in times.items()]
    rows.append({"shape": "qwen3-30b-a3b", "tokens": 1, "variant": "decode streamed", "mode": "eager", "us": 99.0,
                 "status": "OK"})
    source = {"results": rows, "config": {"rounds": 5, "calls": 20}, "machine": {"gcdsl_git": "abc"}}
    text = fused_moe.region_w8_streamed({"W8_streamed": source})
    row = next(line for line in text.splitlines() if line.startswith("| qwen3-30b-a3b"))
    assert row.split(" | ")[2:] == ["86.0", "26.5", "22.0", "35.0", "26.6", "1.20x", "1.59x", "66.4%", "80.0% |"]
    assert "at `abc`" in text and "median of 5 rounds of 20 calls" in text


def test_pairs_region_reads_each_forced_run():
    """The region for the alone-and-pairs runs keeps its text until one exists, then shows
    each run's command, the times of the forms it measured (graph replays; eager rows not
    read) and alone over pairs for each GEMM forced both ways."""
    from benchmarks.reporting import fused_moe

    assert fused_moe.region_w8_pairs({}) is None
    times = {"torch": 5800.0, "pair": 5000.0, "pair up cooperative 256 alone": 5600.0,
             "pair up cooperative 256 pairs": 4900.0}
    rows = [{"shape": "mixtral-8x7b", "tokens": 4096, "variant": v, "mode": "graph", "us": us, "status": "OK"}
            for v, us in times.items()]
    rows.append({"shape": "mixtral-8x7b", "tokens": 4096, "variant": "pair", "mode": "eager", "us": 1.0,
                 "status": "OK"})
    source = {"results": rows, "config": {"rounds": 3, "calls": 20}, "machine": {"gcdsl_git": "abc"}}
    down = {"pair down cooperative 256 alone": 900.0, "pair down cooperative 256 pairs": 1000.0, "pair": 950.0}
    rule = {"results": [{"shape": "qwen3-30b-a3b", "tokens": 2048, "variant": v, "mode": "graph", "us": us,
                         "status": "OK"} for v, us in down.items()],
            "config": {"rounds": 5, "calls": 20}, "machine": {"gcdsl_git": "def"}}
    text = fused_moe.region_w8_pairs({"W8_swiglu_pairs": source, "W8_pairs_rule": rule})
    lines = text.splitlines()
    row = next(line for line in lines if line.startswith("| mixtral-8x7b"))
    assert row.split(" | ")[2:] == ["5800.0", "5000.0", "5600.0", "4900.0", "1.14x |"]
    row = next(line for line in lines if line.startswith("| qwen3-30b-a3b"))
    assert row.split(" | ")[2:] == ["950.0", "900.0", "1000.0", "0.90x |"]
    assert "--shapes mixtral-8x7b --tokens 4096 --rounds 3 --variants torch,pair" in text and "at `abc`" in text
    assert "--variants pair --forced \"pair down cooperative 256 alone," in text and "at `def`" in text


def test_orders_region_shows_each_order_the_pick_and_the_ratios():
    """The tile-order runs' region keeps its text until one exists, then shows each case's
    N, K, the four times, the order gcdsl picked, M-steps over N-tiles fastest and torch over
    gcdsl; a case missing a variant is left out."""
    from benchmarks.reporting import training

    assert training.region_w7_orders({}) is None
    times = {"torch": 3000.0, "gcdsl": 2900.0, "gcdsl m-order": 3190.0, "gcdsl n-order": 2900.0}
    rows = [{"shape": "deepseek-v3-ep8", "tokens": 4096, "case": "w13 forward", "variant": v, "us": us,
             "status": "OK", "n": 4096, "k": 7168, "picked_order": "n"} for v, us in times.items()]
    rows.append({"shape": "deepseek-v3-ep8", "tokens": 4096, "case": "w2 forward", "variant": "torch", "us": 1.0,
                 "status": "OK"})
    source = {"results": rows, "config": {"rounds": 5},
              "machine": {"gcdsl_git": "abc", "gpu": "NVIDIA H100 80GB HBM3"}}
    text = training.region_w7_orders({"W7_orders": source})
    row = next(line for line in text.splitlines() if line.startswith("| deepseek-v3-ep8"))
    assert row.split(" | ")[1:] == ["4096", "w13 forward", "4096", "7168", "3000.0", "2900.0", "3190.0", "2900.0",
                                    "n", "1.10x", "1.03x |"]
    assert "w2 forward" not in text
    assert "--orders --shapes deepseek-v3-ep8 --tokens 4096 --rounds 5 --json W7_orders`" in text
    assert "NVIDIA H100 80GB HBM3 at `abc`" in text and "partial" not in text
    rows += [dict(rows[0], variant="gcdsl m_partial_last-order", us=2750.0)]  # a run with the third order
    text = training.region_w7_orders({"W7_orders3": dict(source, results=rows)})
    row = next(line for line in text.splitlines() if line.startswith("| deepseek-v3-ep8"))
    assert row.split(" | ")[5:] == ["3000.0", "2900.0", "3190.0", "2900.0", "2750.0", "n", "1.10x", "1.16x", "1.03x |"]
    assert "| partial step last | picked | m / n | m / partial last | torch / gcdsl |" in text
    rows += [dict(rows[0], variant="gcdsl m_blocks-order", us=2900.0)]  # ... and with the fourth
    text = training.region_w7_orders({"W7_orders4": dict(source, results=rows)})
    row = next(line for line in text.splitlines() if line.startswith("| deepseek-v3-ep8"))
    assert row.split(" | ")[9:] == ["2750.0", "2900.0", "n", "1.10x", "1.16x", "1.10x", "1.03x |"]
    assert "| M-steps fastest in blocks | picked | m / n | m / partial last | m / blocks |" in text


def test_policies_region_shows_each_policy_against_the_default_and_leaves_out_incomplete_cases():
    """The load-policy runs' region: each case's four times, gcdsl's default over each
    policy, torch over gcdsl; a case missing a variant is left out; the command names the
    cases where the run timed only some."""
    from benchmarks import w7_training
    from benchmarks.reporting import training

    assert training.region_w7_policies({}) is None
    times = {"torch": 3000.0, "gcdsl": 2900.0, "gcdsl evict_normal-policy": 2636.4,
             "gcdsl evict_last-policy": 3222.2}
    rows = [{"shape": "deepseek-v3-ep8", "tokens": 4096, "case": "w13 forward", "variant": v, "us": us,
             "status": "OK"} for v, us in times.items()]
    rows.append({"shape": "deepseek-v3-ep8", "tokens": 4096, "case": "w2 forward", "variant": "torch", "us": 1.0,
                 "status": "OK"})
    source = {"results": rows, "config": {"rounds": 3}, "machine": {"gcdsl_git": "abc", "gpu": "NVIDIA H100"}}
    text = training.region_w7_policies({"W7_policies_h100": source})
    row = next(line for line in text.splitlines() if line.startswith("| deepseek-v3-ep8"))
    assert row.split(" | ")[1:] == ["4096", "w13 forward", "3000.0", "2900.0", "2636.4", "3222.2", "1.10x", "0.90x",
                                    "1.03x |"]
    assert "w2 forward" not in text
    assert '--load-policies --shapes deepseek-v3-ep8 --tokens 4096 --cases "w13 forward" --rounds 3 ' \
        "--json W7_policies_h100`" in text  # (not every case: the run was given --cases)
    every_case = [dict(r, case=case) for case in w7_training.CASES for r in rows]
    text = training.region_w7_policies({"W7_policies_h100": dict(source, results=every_case)})
    assert "--load-policies --shapes deepseek-v3-ep8 --tokens 4096 --rounds 3 --json W7_policies_h100`" in text


def test_store_policies_region_shows_each_store_policy_against_the_default():
    """`--store-policies` runs (W7_store_policies*.json) render beside the load-policy runs,
    their columns the store policies'."""
    from benchmarks import w7_training
    from benchmarks.reporting import training

    times = {"torch": 3000.0, "gcdsl": 2900.0, "gcdsl evict_first-store": 2636.4, "gcdsl evict_normal-store": 3222.2}
    rows = [{"shape": "deepseek-v3-ep8", "tokens": 4096, "case": "w13 forward", "variant": v, "us": us,
             "status": "OK"} for v, us in times.items()]
    source = {"results": rows, "config": {"rounds": 3}, "machine": {"gcdsl_git": "abc", "gpu": "NVIDIA H100"}}
    text = training.region_w7_policies({"W7_store_policies_h100": source})
    assert '--store-policies --shapes deepseek-v3-ep8 --tokens 4096 --cases "w13 forward" --rounds 3 ' \
        "--json W7_store_policies_h100`" in text
    assert f"| {' | '.join(w7_training.TIMED_STORE_POLICIES)} |" in text
    row = next(line for line in text.splitlines() if line.startswith("| deepseek-v3-ep8"))
    assert row.split(" | ")[-3:] == ["1.10x", "0.90x", "1.03x |"]


@pytest.mark.parametrize("region, variant, prefix, flag, label", [
    ("region_w7_mma_without_rows", "MMA_WITHOUT_ROWS", "W7_mma_without_rows", "--mma-without-rows", "mma without rows"),
    ("region_w7_claimed_tiles", "CLAIMED_TILES", "W7_claimed", "--claimed-tiles", "claimed tiles")])
def test_variant_regions_show_the_default_over_the_variant_for_the_cases_they_timed(region, variant, prefix, flag,
                                                                                    label):
    """`--mma-without-rows` and `--claimed-tiles` runs (W7_mma_without_rows*.json,
    W7_claimed*.json): each case's times, gcdsl's default over the variant and torch over
    gcdsl; the command names the cases it timed."""
    from benchmarks import w7_training
    from benchmarks.reporting import training

    render = getattr(training, region)
    assert render({}) is None
    times = {"torch": 3000.0, "gcdsl": 2900.0, getattr(w7_training, variant): 2636.4}
    rows = [{"shape": "deepseek-v3-ep8", "tokens": 4096, "case": case, "variant": v, "us": us, "status": "OK"}
            for case in w7_training.RAGGED_ROWS_CASES for v, us in times.items()]
    source = {"results": rows, "config": {"rounds": 3}, "machine": {"gcdsl_git": "abc", "gpu": "NVIDIA H100"}}
    text = render({f"{prefix}_h100": source})
    assert f'{flag} --shapes deepseek-v3-ep8 --tokens 4096 --cases "w13 forward,w13 input grad,' \
        f'w2 forward,w2 input grad" --rounds 3 --json {prefix}_h100`' in text
    assert f"| {label} | default / {label} | torch / gcdsl |" in text
    row = next(line for line in text.splitlines() if line.startswith("| deepseek-v3-ep8"))
    assert row.split(" | ")[1:] == ["4096", "w13 forward", "3000.0", "2900.0", "2636.4", "1.10x", "1.03x |"]


def test_w8_mma_without_rows_region_shows_the_pair_over_the_forced_form():
    """W8_mma_without_rows*.json: each point's graph replays of torch, the pair as it runs
    and the forced form, the pair's and torch's time over the forced form's."""
    from benchmarks.reporting import fused_moe

    assert fused_moe.region_w8_mma_without_rows({}) is None
    times = {"torch": 5600.0, "pair": 5000.0, "fused_moe": 5000.0, fused_moe.MMA_WITHOUT_ROWS_FORM: 4000.0}
    rows = [{"shape": "mixtral-8x7b", "tokens": 4096, "variant": v, "mode": "graph", "us": us, "status": "OK"}
            for v, us in times.items()]
    source = {"results": rows, "config": {"rounds": 3, "calls": 20},
              "machine": {"gcdsl_git": "abc", "gpu": "NVIDIA H100"}}
    text = fused_moe.region_w8_mma_without_rows({"W8_mma_without_rows_h100": source})
    assert '--shapes mixtral-8x7b --tokens 4096 --rounds 3 --variants torch,pair,fused_moe ' \
        '--forced "pair mma-without-rows" --json W8_mma_without_rows_h100`' in text
    row = next(line for line in text.splitlines() if line.startswith("| mixtral-8x7b"))
    assert row.split(" | ")[1:] == ["4096", "5600.0", "5000.0", "5000.0", "4000.0", "1.25x", "1.40x |"]


def test_w8_region_shows_how_far_torch_is_from_the_bound_and_where_no_layer_can_meet_the_target():
    """*torch / bound* at T <= 64 (graph and eager), and the targets line names the points
    where it is below 1.50x; a run kept beside W8.json (`--json W8_h100`) renders alone,
    with its command, commit and GPU."""
    from benchmarks.reporting import fused_moe

    def row(shape, tokens, variant, us):
        return {"shape": shape, "tokens": tokens, "variant": variant, "mode": "graph", "us": us, "status": "OK",
                "bound_us": 100.0}

    rows = [row("a", 1, "torch", 140.0), row("a", 1, "fused_moe", 110.0),
            row("b", 1, "torch", 300.0), row("b", 1, "fused_moe", 150.0),
            row("b", 512, "torch", 900.0), row("b", 512, "fused_moe", 600.0)]
    source = {"results": rows, "config": {"rounds": 3, "calls": 20, "copy_gbps": 3000.0},
              "machine": {"gcdsl_git": "abc", "gpu": "NVIDIA H100 80GB HBM3"}}
    text = fused_moe.region_w8_h100({"W8_h100": source, "W8": {"results": []}})
    assert text.startswith("Command: `python benchmarks/w8_fused_moe.py --json W8_h100`, run at `abc` on an NVIDIA H100")
    graph = text.split("eager, new routing")[0]  # (the graph table: no eager rows here)
    cells = {line.split(" | ")[0] + line.split(" | ")[1]: line.split(" | ")[-1]
             for line in graph.splitlines() if line.startswith(("| a ", "| b "))}
    assert cells == {"| a1": "1.40x |", "| b1": "3.00x |", "| b512": "- |"}
    targets = text.splitlines()[-1]
    assert "no layer can meet the target against torch, at a, 1 tokens." in targets
    assert fused_moe.region_w8_h100({"W8": source}) is None


def test_runs_kept_beside_w6_and_w7_render_alone_with_their_command_commit_and_gpu():
    """`--json W6_h100` and `--json W7_h100`: the headline region's tables from the side run,
    its command naming the file, the commit and the GPU; nothing without the file."""
    from benchmarks.reporting import moe_layer

    machine = {"gcdsl_git": "abc", "gpu": "NVIDIA H100 80GB HBM3"}
    w6 = {"results": [{"shape": "a", "tokens": 1, "variant": v, "mode": m, "us": us, "status": "OK"}
                      for v, us in (("torch", 120.0), ("gcdsl", 100.0), ("quack", 90.0)) for m in ("eager", "graph")],
          "config": {"rounds": 5, "calls": 20, "quack": "q", "copy_gbps": 3000.0}, "machine": machine}
    text = moe_layer.region_w6_h100({"W6_h100": w6, "W6": {"results": []}})
    assert text.startswith("Command: `python benchmarks/w6_moe_layer.py --json W6_h100`, run at `abc` on an NVIDIA H100")
    assert "| a | 1 | 120.0 | 100.0 | 90.0 | 1.20x | 0.90x |" in text
    assert moe_layer.region_w6_h100({"W6": w6}) is None
    w7 = {"results": [{"shape": "a", "tokens": 4096, "case": "w2 forward", "variant": v, "us": us, "status": "OK"}
                      for v, us in (("torch", 300.0), ("gcdsl", 200.0), ("quack", 250.0))],
          "config": {"rounds": 3, "reps": 10, "steps": 3, "quack": "q"}, "machine": machine}
    text = training.region_w7_h100({"W7_h100": w7, "W7": {"results": []}})
    assert text.startswith("Command: `python benchmarks/w7_training.py --json W7_h100`, run at `abc` on an NVIDIA H100")
    assert "| 1.50x | 1.25x |" in text and "3 of 2 met" not in text and "2 of 2 met" in text
    assert training.region_w7_h100({"W7": w7}) is None


def test_w7_configs_region_gives_rows_an_expert_and_the_ping_pong_ratio():
    """`w7_training.py --every-config` runs kept as W7_configs_*.json: one table a run, the
    routed rows an expert from the layer's shape (tokens x top-k / experts), each forced
    configuration the run forced (its columns, by schedule, tile and cluster), the cooperative 256
    tile's time over ping-pong 192's, and the fastest forced configuration with the pick's
    time over its."""
    times = {"torch": 950.0, "quack": 700.0, "gcdsl": 900.0, "gcdsl cooperative 256": 900.0,
             "gcdsl pingpong 192": 720.0, "gcdsl cooperative 256 pairs": 710.0}
    rows = [{"shape": "deepseek-v3-ep8", "tokens": 512, "case": "w13 forward", "variant": v, "us": us, "status": "OK",
             "n": 4096, "k": 7168, "picked": "pingpong 128 x 192, single CTAs, m-order"} for v, us in times.items()]
    rows.append({"shape": "deepseek-v3-ep8", "tokens": 512, "case": "w13 weight grad", "variant": "torch",
                 "status": "OK", "us": 1.0})  # no forced configurations there: left out
    source = {"results": rows, "config": {"rounds": 3}, "machine": {"gcdsl_git": "abc", "gpu": "NVIDIA H100"}}
    text = training.region_w7_configs({"W7_configs_512": source, "W7": {"results": []}})
    assert text.startswith("Command: `python benchmarks/w7_training.py --forced \"cooperative 256,cooperative 256 "
                           "pairs,pingpong 192\" --no-step --shapes "
                           "deepseek-v3-ep8 --tokens 512 --cases \"w13 forward\" --rounds 3 --json W7_configs_512`")
    table = [line for line in text.splitlines() if line.startswith("| deepseek")]
    assert table == ["| deepseek-v3-ep8 | 512 | w13 forward | 128 | 4096 | 7168 | 950.0 | 700.0 | 900.0 | 900.0 | "
                     "710.0 | 720.0 | pingpong 128 x 192, single CTAs, m-order | 1.25x | cooperative 256 pairs (1.27x) |"]
    assert "| cooperative 256 | cooperative 256 pairs | pingpong 192 | picked |" in text
    assert training.region_w7_configs({"W7_configs": source}) is None  # the headline --every-config run


def test_decode_ab_regions_read_their_runs_in_turn():
    """An A/B region (`_ab_region`: the decode barrier's, the decode layer's launches) needs
    runs of both forms; each form's median over its runs with their spread, and the time of
    the first over the second's."""
    from benchmarks.reporting import fused_moe

    def run(commit, us):
        rows = [{"shape": "q", "tokens": 1, "variant": v, "mode": "graph", "us": t, "status": "OK"}
                for v, t in (("torch", 90.0), ("fused_moe", us))]
        return {"results": rows, "config": {"rounds": 5, "calls": 20}, "machine": {"gcdsl_git": commit, "gpu": "G"}}

    assert fused_moe.region_w8_decode_barrier({"W8_ab_reset_1": run("old", 33.0)}) is None
    results = {"W8_ab_reset_1": run("old", 33.0), "W8_ab_reset_2": run("old", 34.0), "W8_ab_reset_3": run("old", 35.0),
               "W8_ab_flip_1": run("new", 32.0), "W8_ab_flip_2": run("new", 31.0), "W8_ab_flip_3": run("new", 33.0)}
    text = fused_moe.region_w8_decode_barrier(results)
    assert "run at `old` (*reset*:" in text and "at `new` (*flip*:" in text and "3 runs each, on an G" in text
    row = next(line for line in text.splitlines() if line.startswith("| q "))
    assert row.split(" | ")[3:] == ["90.0", "34.0 [33.0 to 35.0]", "32.0 [31.0 to 33.0]", "1.06x |"]


def test_w6_layer_tables_name_their_rounds_and_batches(results):
    """The eager table names the batches' least length where the run recorded it (eager
    batches last at least `eager_batch_ms`), and only their calls where it did not."""
    from benchmarks.reporting import moe_layer

    w6 = copy.deepcopy(results["W6"])
    w6["config"].update(rounds=5, calls=20, eager_batch_ms=20.0)
    eager, graph = (moe_layer._layer_table({"W6": w6}, mode)[0] for mode in ("eager", "graph"))
    assert "(median of 5 rounds of at least 20 calls and 20 ms)" in eager
    assert "(median of 5 rounds of 20 calls)" in graph
    del w6["config"]["eager_batch_ms"]
    assert "(median of 5 rounds of 20 calls)" in moe_layer._layer_table({"W6": w6}, "eager")[0]


def test_a_w5_run_kept_beside_w5_renders_its_own_tables_and_targets():
    """`--json W5_h100`: W5's tables and targets drawn from the side run alone, under its
    command, commit and GPU; nothing without the file."""
    results = report.load()
    text = grouped_gemm.region_w5_h100(results)
    side = {"W5": results["W5_h100"]}
    machine = side["W5"]["machine"]
    assert text.startswith("Command: `python benchmarks/w5_grouped_gemm.py --json W5_h100`, run at "
                           f"`{machine['gcdsl_git']}` on an {machine['gpu']}.")
    s2 = f"| S2 | {fmt.f1(grouped_gemm.row(side, 'S2', 'gcdsl_bf16')['us'])} ("
    assert s2 in text and s2 not in grouped_gemm.region_w5(results)
    assert "\n\nTargets:\n\n| shape | target | measured | limit |  |" in text
    assert grouped_gemm.region_w5_h100({"W5": results["W5"]}) is None


def test_profile_host_region_shows_every_run_and_splits_the_host_time():
    """profile_host.json and each run kept beside it (`--json profile_host_<n>`): the layer,
    the host inside the GEMM calls and the host elsewhere, torch over gcdsl; nothing without
    a run."""
    from benchmarks.reporting import moe_layer

    def run(commit, torch_us, gcdsl_us):
        rows = [{"shape": "a", "tokens": 1, "variant": v, "status": "OK", "wall_us": wall, "host_us": host,
                 "gemm_host_us": gemm, "cprofile": None} for v, (wall, host, gemm) in (("torch", torch_us),
                                                                                       ("gcdsl", gcdsl_us))]
        return {"results": rows, "config": {"calls": 100, "rounds": 5},
                "machine": {"gcdsl_git": commit, "gpu": "NVIDIA H100 80GB HBM3"}}

    text = moe_layer.region_profile_host({"profile_host": run("abc", (440.0, 440.0, 40.0), (400.0, 400.0, 50.0)),
                                          "profile_host_2": run("def", (300.0, 300.0, 30.0), (300.0, 300.0, 30.0)),
                                          "W6": {"results": []}})
    first, second = text.split("\n\nCommand: ")
    assert first.startswith("Command: `python -m benchmarks.profile_host --calls 100`, run at `abc` on an NVIDIA H100")
    assert "| a | 1 | 440.0 | 400.0 | 1.10x | 40.0 | 50.0 | 0.80x | 400.0 | 350.0 | 1.14x |" in first
    assert second.startswith("`python -m benchmarks.profile_host --calls 100 --json profile_host_2`, run at `def`")
    assert moe_layer.region_profile_host({"W6": {"results": []}}) is None
