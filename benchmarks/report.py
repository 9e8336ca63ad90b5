"""Write every measured number in README.md and benchmarks/RESULTS.md from benchmarks/results/.

    python benchmarks/report.py            # rewrite the marked regions of both files
    python benchmarks/report.py --check    # exit 1 with a diff where a file disagrees with the results

A region is `<!-- gcdsl:results NAME -->` ... `<!-- /gcdsl:results -->`; NAME picks the
function in `REGIONS` that writes it. Text outside the regions is written by hand and
carries no measured number: comparisons ("faster", "met", "MISSED") are computed here
from the same data, which is:

- `results/<workload>.json` (W1 ... W8, W8_phases, W8_instances, W8_stream, grid_constant,
  profile_layer), written by the benchmarks, and
  `results/W8_configs.json`, `results/W7_configs.json` and `results/W7_reduction_configs.json`
  (the weight gradients alone, `--cases`), earlier `--every-config` runs of `w8_fused_moe.py`
  and `w7_training.py` kept beside W8.json and W7.json (`--json W8_configs`, ...), and
  `results/W6_h100.json`, `results/W7_h100.json` and `results/W8_h100.json`, W6, W7 and W8
  in full on an H100, `results/W7_configs_*.json`, `--every-config` runs of `w7_training.py`
  at other token counts, `results/W8_decode.json`, a forced run
  of the decode kernel against the one kernel, and `results/W8_lead.json`, one of the one kernel's down-tile deals, `results/W8_streamed.json`,
  the decode kernel's streamed build against its default one, `results/W8_swiglu_pairs.json`
  and `results/W8_pairs_rule*.json`, the two-GEMM form's GEMMs with CTAs alone and in pairs, and `results/W8_ab_*.json`,
  the decode layer as two kernels and as one, and with the decode kernel's two grid barriers, in
  alternating runs, `results/W8_decode_phases.json`
  and `results/W8_decode_stream.json`, the decode kernel phase by phase and its weight
  stream alone;
- `results/ncu_<shape>_<dtype>.txt`, Nsight Compute's text report of one W5 kernel;
- the W1/W2 JSON of the commit `reporting.descriptors.PACKING_BASELINE`, read with
  `git show` (the `packing` region keeps its text where git cannot reach it).

Standard library only; the same inputs give the same text.
"""
from __future__ import annotations

import argparse
import difflib
import json
import os
import re
import subprocess
import sys
from typing import Callable, Dict, List, Optional

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
if ROOT not in sys.path:  # run as a script
    sys.path.insert(0, ROOT)

from benchmarks.reporting import descriptors, fused_moe, grouped_gemm, host, moe_layer, ncu, summary, tables, training  # noqa: E402
from benchmarks.reporting.fmt import Results  # noqa: E402

RESULTS_DIR = os.path.join(HERE, "results")
FILES = (os.path.join(ROOT, "README.md"), os.path.join(HERE, "RESULTS.md"))

REGION = re.compile(r"(<!-- gcdsl:results (?P<name>[\w-]+) -->\n)(?P<body>.*?)(<!-- /gcdsl:results -->)", re.S)


# ---------------------------------------------------------------------------------------
# Reading the results
# ---------------------------------------------------------------------------------------
def load(results_dir: str = RESULTS_DIR) -> Results:
    """Every `<name>.json` under `results_dir` by name, its ncu reports under "ncu", and the
    W1/W2 results from before packing under "previous" (absent where git cannot show them)."""
    out: Results = {}
    for name in sorted(os.listdir(results_dir)):
        if name.endswith(".json"):
            with open(os.path.join(results_dir, name)) as f:
                out[name[:-5]] = json.load(f)
    out["ncu"] = ncu.load(results_dir)
    previous = load_previous()
    if previous:
        out["previous"] = previous
    return out


def load_previous(commit: str = descriptors.PACKING_BASELINE) -> Optional[Results]:
    """W1.json and W2.json as committed in `commit`, or None where git cannot show them."""
    out = {}
    for workload in ("W1", "W2"):
        try:
            proc = subprocess.run(["git", "-C", ROOT, "show", f"{commit}:benchmarks/results/{workload}.json"],
                                  capture_output=True, text=True, timeout=60)
        except (OSError, subprocess.TimeoutExpired):
            return None
        if proc.returncode != 0:
            return None
        out[workload] = json.loads(proc.stdout)
    return out


# ---------------------------------------------------------------------------------------
# The regions
# ---------------------------------------------------------------------------------------
REGIONS: Dict[str, Callable[[Results], Optional[str]]] = {
    "run": summary.region_run,
    "W1": descriptors.region_w1,
    "W2": descriptors.region_w2,
    "packing": descriptors.region_packing,
    "W3": host.region_w3,
    "W4": host.region_w4,
    "W5": grouped_gemm.region_w5,
    "W5-targets": grouped_gemm.region_w5_targets,
    "W5-h100": grouped_gemm.region_w5_h100,
    "W6": moe_layer.region_w6,
    "W6-h100": moe_layer.region_w6_h100,
    "profile-host": moe_layer.region_profile_host,
    "W7": training.region_w7,
    "W7-h100": training.region_w7_h100,
    "W7-configs": training.region_w7_configs,
    "W7-pairs": training.region_w7_pairs,
    "W7-band": training.region_w7_band,
    "profile-layer": training.region_profile_layer,
    "W7-ncu": training.region_w7_ncu,
    "W7-orders": training.region_w7_orders,
    "W7-policies": training.region_w7_policies,
    "W7-mma-without-rows": training.region_w7_mma_without_rows,
    "W7-claimed-tiles": training.region_w7_claimed_tiles,
    "W8": fused_moe.region_w8,
    "W8-h100": fused_moe.region_w8_h100,
    "W8-decode": fused_moe.region_w8_decode,
    "W8-lead": fused_moe.region_w8_lead,
    "W8-streamed": fused_moe.region_w8_streamed,
    "W8-pairs": fused_moe.region_w8_pairs,
    "W8-mma-without-rows": fused_moe.region_w8_mma_without_rows,
    "W8-decode-launches": fused_moe.region_w8_decode_launches,
    "W8-decode-barrier": fused_moe.region_w8_decode_barrier,
    "W8-decode-phases": fused_moe.region_w8_decode_phases,
    "W8-decode-stream": fused_moe.region_w8_decode_stream,
    "W8-phases": fused_moe.region_w8_phases,
    "W8-instances": fused_moe.region_w8_instances,
    "W8-stream": fused_moe.region_w8_stream,
    "grid-constant": tables.region_grid_constant,
    "readme-reads": tables.region_readme_reads,
    "readme-encode": tables.region_readme_encode,
    "readme-measured": summary.region_readme_measured,
}


def render(text: str, results: Results) -> str:
    """`text` with every marked region rewritten from `results` (a region whose writer returns
    None, for want of its data, keeps its text)."""
    def fill(m: "re.Match[str]") -> str:
        name = m.group("name")
        if name not in REGIONS:
            raise KeyError(f"unknown results region {name!r}; known: {', '.join(REGIONS)}")
        body = REGIONS[name](results)
        if body is None:
            return m.group(0)
        return m.group(1) + body.rstrip("\n") + "\n" + m.group(4)

    return REGION.sub(fill, text)


def regions_in(text: str) -> List[str]:
    return [m.group("name") for m in REGION.finditer(text)]


def outside_regions(text: str) -> str:
    return REGION.sub("", text)


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--check", action="store_true", help="change nothing; exit 1 where a file differs")
    p.add_argument("--results", default=RESULTS_DIR, help="directory of the JSON files and ncu reports")
    args = p.parse_args(argv)
    results = load(args.results)
    missing = [w for w in summary.WORKLOADS if w not in results]
    if missing:
        print(f"{args.results} lacks {', '.join(w + '.json' for w in missing)}: every region needs its workload")
        return 1
    if "previous" not in results:
        print(f"packing: the results of {descriptors.PACKING_BASELINE[:7]} are not reachable through git; "
              "that region keeps its text")
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
            sys.stdout.writelines(difflib.unified_diff(old.splitlines(True), new.splitlines(True), rel,
                                                       rel + " (results)"))
        else:
            with open(path, "w") as f:
                f.write(new)
            print(f"{rel}: rewritten ({len(regions_in(new))} regions)")
    return 1 if stale else 0


if __name__ == "__main__":
    sys.exit(main())
