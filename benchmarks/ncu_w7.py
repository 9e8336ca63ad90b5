"""W7's grouped GEMMs under Nsight Compute, torch's kernel beside gcdsl's, the SM clock fixed.

    python -m benchmarks.ncu_w7 [--points "deepseek-v3-ep8 4096 w13 forward,..."]
                                [--variants "torch,gcdsl,gcdsl evict_normal-policy"]
                                [--routing routed|even|whole-tiles] [--json NAME]

For each point and variant, `ncu --clock-control base` profiles one call of
`benchmarks.profile_w7` (its third: the first two compile and warm up), and the text
report is kept under results/ncu_w7/<the JSON's name>/. `--routing even` gives every
expert the same number of rows instead of the router's counts, `--routing whole-tiles`
the router's counts rounded to whole pair M-steps (`w7_training.ROUTINGS`). With every
kernel at the same SM clock, elapsed cycles compare the work the kernels do; DRAM bytes
read, L2 bytes and the L2 hit rate say how much each moves. Under the power limit that
compute-bound GEMMs run at, moving more draws more power and leaves the SMs a lower
clock, which cycles at a fixed clock do not show and W7's timed runs do. Variants are
`w7_training.grouped`'s; torch's call runs a setup kernel before its GEMM, and each row
is the variant's longest kernel.

Writes benchmarks/results/W7_ncu.json (with `--json NAME`, NAME.json).
"""
from __future__ import annotations

import argparse
import os
import subprocess
import sys
from typing import Any, Dict, List, Tuple

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
if ROOT not in sys.path:
    sys.path.insert(0, ROOT)

from benchmarks.harness import ERROR, OK, Report, add_json_flag, main_on_gpu, table  # noqa: E402
from benchmarks.reporting import ncu  # noqa: E402
from benchmarks.w7_training import CASES, ROUTINGS, SHAPES, check_routing  # noqa: E402  (imports no DSL)

POINTS = "deepseek-v3-ep8 4096 w13 forward,deepseek-v3-ep8 16384 w13 input grad"
VARIANTS = "torch,gcdsl"
SECTIONS = ("SpeedOfLight", "MemoryWorkloadAnalysis")
METRICS = ("dram__bytes_read.sum", "lts__t_bytes.sum")
SOL, MEMORY, COMMAND_LINE = "GPU Speed Of Light Throughput", "Memory Workload Analysis", "Command line profiler metrics"
HEADERS = ("shape", "tokens", "case", "variant", "Mcycles", "SM MHz", "DRAM read GB", "L2 GB", "L2 hit %")


def points(text: str) -> List[Tuple[str, int, str]]:
    """`--points`: (shape, tokens, case) for each comma-separated "shape tokens case"."""
    out = []
    for item in text.split(","):
        fields = item.strip().split(" ", 2)
        if len(fields) != 3 or fields[0] not in SHAPES or not fields[1].isdigit() or int(fields[1]) < 1 \
                or fields[2] not in CASES:
            raise argparse.ArgumentTypeError(f"{item.strip()!r}: expected \"shape tokens case\", a shape of "
                                             f"{', '.join(SHAPES)} and a case of {', '.join(CASES)}")
        out.append((fields[0], int(fields[1]), fields[2]))
    return out


def report_name(shape: str, tokens: int, case: str, variant: str) -> str:
    """The kept report's file name in its run's folder (`reports_folder`)."""
    return f"{shape}_{tokens}_{case}_{variant}".replace(" ", "-") + ".txt"


def summary(text: str) -> Dict[str, Any]:
    """What a row records of a report: its longest kernel's cycles, time, SM clock and
    memory traffic."""
    kernel = max(ncu.kernels(text), key=lambda k: ncu.scaled(k, SOL, "Duration"))
    return {"kernel": kernel["kernel"],
            "cycles": ncu.metric(kernel, SOL, "Elapsed Cycles")[1],
            "seconds": ncu.scaled(kernel, SOL, "Duration"),
            "sm_hz": ncu.scaled(kernel, SOL, "SM Frequency"),
            "dram_read_bytes": ncu.byte_count(kernel, COMMAND_LINE, "dram__bytes_read.sum"),
            "l2_bytes": ncu.byte_count(kernel, COMMAND_LINE, "lts__t_bytes.sum"),
            "l2_hit": ncu.percent(kernel, MEMORY, "L2 Hit Rate")}


def profile(shape: str, tokens: int, case: str, variant: str, routing: str = "routed") -> str:
    """ncu's text report of one call of `variant` (`routing`: `profile_w7`'s)."""
    cmd = ["ncu", "--profile-from-start", "off", "--clock-control", "base",
           *(arg for s in SECTIONS for arg in ("--section", s)), "--metrics", ",".join(METRICS),
           sys.executable, "-m", "benchmarks.profile_w7", shape, str(tokens), case, variant, routing]
    proc = subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True, timeout=900)
    if proc.returncode != 0:
        raise RuntimeError(f"ncu exited {proc.returncode}: {(proc.stdout + proc.stderr)[-2000:]}")
    return proc.stdout


def reports_folder(json_name: str) -> str:
    """Where a run kept as `json_name`.json keeps its reports, relative to benchmarks/: a
    folder of its own, so that runs of the same variants keep theirs apart."""
    return f"results/ncu_w7/{json_name}/"


def run(args, machine: Dict[str, Any]) -> Report:
    folder = reports_folder(args.json or "W7_ncu")
    report = Report("W7_ncu", "W7 GEMMs under Nsight Compute at the base SM clock: cycles and memory traffic",
                    config={"clock_control": "base", "sections": list(SECTIONS), "metrics": list(METRICS),
                            "reports": folder, "routing": args.routing})
    kept = os.path.join(HERE, folder)
    os.makedirs(kept, exist_ok=True)
    rows = []
    for shape, tokens, case in args.points:
        for variant in args.variants.split(","):
            point = dict(shape=shape, tokens=tokens, case=case, variant=variant)
            try:
                text = profile(shape, tokens, case, variant, args.routing)
                with open(os.path.join(kept, report_name(shape, tokens, case, variant)), "w") as f:
                    f.write(text)
                row = report.add(**point, status=OK, **summary(text))
            except Exception as exc:  # a variant that cannot be profiled: recorded, the others go on
                report.add(**point, status=ERROR, error=f"{type(exc).__name__}: {exc}")
                print(f"{shape} {tokens} {case} {variant}: {type(exc).__name__}: {exc}", flush=True)
                continue
            rows.append([shape, tokens, case, variant, f"{row['cycles'] / 1e6:.2f}", f"{row['sm_hz'] / 1e6:.0f}",
                         f"{row['dram_read_bytes'] / 1e9:.2f}", f"{row['l2_bytes'] / 1e9:.2f}",
                         f"{100 * row['l2_hit']:.1f}"])
            print(" ".join(map(str, rows[-1])), flush=True)
    print("\n" + table(HEADERS, rows))
    return report


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--points", default=POINTS, type=points, help='comma-separated "shape tokens case"')
    p.add_argument("--variants", default=VARIANTS, help="comma-separated w7_training.grouped variants")
    p.add_argument("--routing", default="routed", choices=ROUTINGS,
                   help="how the experts' rows are counted (w7_training.ROUTINGS): the router's, the same for "
                        "every expert, or the router's in whole tiles")
    add_json_flag(p, "W7_ncu")
    args = p.parse_args(argv)
    for shape, tokens, _ in args.points:
        try:
            check_routing(SHAPES[shape], tokens, args.routing)
        except ValueError as exc:
            p.error(f"--routing {args.routing}: {shape}: {exc}")
    return main_on_gpu("ncu_w7", run, args)


if __name__ == "__main__":
    sys.exit(main())
