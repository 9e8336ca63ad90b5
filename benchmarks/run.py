"""gcdsl benchmark suite: one entry point.

    python benchmarks/run.py                    # everything this machine can run
    python benchmarks/run.py --quick            # smaller K, fewer compiles, same coverage
    python benchmarks/run.py --only W1,W4       # a subset
    python benchmarks/run.py --compile-check    # compile every kernel variant (fake tensors), run nothing

W1 latency (dependent TMA loads), W2 bandwidth (grouped copy), W3 host launch overhead need
an NVIDIA GPU (Hopper); W4 compile cost runs anywhere (for sm_90a without a GPU). Tables go
to the terminal, JSON (with machine info) to benchmarks/results/<workload>.json, plots of
W1 and W2 to benchmarks/results/W1.png and W2.png where matplotlib is importable.
See benchmarks/README.md.
"""
from __future__ import annotations

import argparse
import atexit
import os
import shutil
import sys
import tempfile
import time
import traceback

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
if ROOT not in sys.path:
    sys.path.insert(0, ROOT)

from benchmarks import harness  # noqa: E402  (imports no DSL)

WORKLOADS = ("W1", "W2", "W3", "W4", "W5")
NEEDS_GPU = {"W1", "W2", "W3", "W5"}


def parse_args(argv=None):
    p = argparse.ArgumentParser(description="gcdsl benchmark suite (see benchmarks/README.md)")
    p.add_argument("--quick", action="store_true", help="smaller W1 chain, fewer W3 calls, one compile per W4 point")
    p.add_argument("--only", default=",".join(WORKLOADS), help="comma-separated subset of W1,W2,W3,W4,W5")
    p.add_argument("--compile-check", action="store_true",
                   help="compile every kernel variant with fake tensors and report OK/FAILED; run nothing")
    p.add_argument("--ptx-dir", metavar="DIR",
                   help="with --compile-check: also write each variant's PTX to DIR (compare two with compare_ptx.py)")
    p.add_argument("--reps", type=int, default=None, help="timed repetitions (default 30, --quick 20; minimum 20)")
    p.add_argument("--warmup", type=int, default=5, help="untimed launches before timing")
    p.add_argument("--no-cpp", action="store_true", help="skip the CUDA C++ anchor in W1")
    p.add_argument("--no-plots", action="store_true", help="write no PNG")
    args = p.parse_args(argv)
    args.reps = max(20, args.reps if args.reps is not None else (20 if args.quick else 30))
    args.only = [w.strip().upper() for w in args.only.split(",") if w.strip()]
    unknown = [w for w in args.only if w not in WORKLOADS]
    if unknown:
        p.error(f"unknown workload(s) {unknown}; choose from {','.join(WORKLOADS)}")
    return args


def configure_dsl(gpu: bool) -> str:
    """Set the CuTe DSL's environment: it is read once, when `cutlass` is first imported."""
    if not gpu:
        os.environ.setdefault("CUTE_DSL_ARCH", "sm_90a")
    os.environ["CUTE_DSL_NO_CACHE"] = "1"  # W4 times real compiles; nothing stale is reused
    os.environ["CUTE_DSL_KEEP"] = "ptx"  # compiled.__ptx__ for W4 and the compile check
    dump = tempfile.mkdtemp(prefix="gcdsl-bench-dump-")
    os.environ["CUTE_DSL_DUMP_DIR"] = dump
    atexit.register(shutil.rmtree, dump, True)
    return dump


def main(argv=None) -> int:
    args = parse_args(argv)
    started = time.perf_counter()
    gpu = harness.has_hopper_gpu()
    configure_dsl(gpu)
    machine = harness.machine_info()
    print(f"gcdsl benchmarks on {machine.get('gpu', 'no GPU')} | driver {machine.get('driver', '-')} | "
          f"nvidia-cutlass-dsl {machine.get('nvidia_cutlass_dsl')} | torch {machine.get('torch')} | "
          f"python {machine.get('python')} | {machine['date']}")
    if not gpu:
        print(f"No Hopper GPU: only W4 (compile cost) and --compile-check run here, for "
              f"CUTE_DSL_ARCH={os.environ['CUTE_DSL_ARCH']}.")

    if args.compile_check:
        from benchmarks import compile_check

        report = compile_check.run(args, machine)
        path = report.write(machine)
        print(f"\nwrote {os.path.relpath(path, ROOT)} ({time.perf_counter() - started:.0f} s)")
        return 0 if all(r.get("status") in (harness.OK, harness.SKIPPED) for r in report.rows) else 1

    modules = {"W1": "w1_latency", "W2": "w2_bandwidth", "W3": "w3_launch", "W4": "w4_compile",
               "W5": "w5_grouped_gemm"}
    bad = 0
    for workload in args.only:
        if workload in NEEDS_GPU and not gpu:
            print(f"\n{workload}: skipped (needs a Hopper GPU)")
            continue
        t0 = time.perf_counter()
        try:
            module = __import__(f"benchmarks.{modules[workload]}", fromlist=["run"])
            report = module.run(args, machine)
        except Exception as exc:  # noqa: BLE001 - one workload's failure must not hide the others
            traceback.print_exc()
            report = harness.Report(workload, f"{workload} crashed")
            report.rows.append({"status": harness.ERROR, "detail": f"{type(exc).__name__}: {exc}"})
        report.config["wall_s"] = round(time.perf_counter() - t0, 1)
        path = report.write(machine)
        statuses = [r.get("status") for r in report.rows]
        bad += sum(s in (harness.FAILED, harness.ERROR) for s in statuses)
        print(f"\n{workload}: {report.config['wall_s']} s, wrote {os.path.relpath(path, ROOT)}"
              + "".join(f"; {n}" for n in report.notes), flush=True)
    print(f"\ndone in {time.perf_counter() - started:.0f} s"
          + (f"; {bad} FAILED/ERROR result(s), see above" if bad else ""))
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
