"""W5: grouped GEMM, `gcdsl.ops.grouped_mm` beside torch and upstream CuTe DSL, MoE shapes.

Shapes (rows per group x G, N, K); `a` is (sum M, K), `b` is (G, K, N) K-major:

    S1   64 x 8     N 4096  K 7168     S4  128 x 64   N 2048  K 7168
    S2  256 x 8     N 4096  K 7168     S5   64 x 64   N 7168  K 2048
    S3 2048 x 8     N 4096  K 7168     S6  16 ragged groups (2916 rows), N 4096, K 4096

Variants: gcdsl bf16 and fp16 (`gcdsl.ops.grouped_mm`, offs on the GPU, its own choice
of schedule, tile and cluster; gcdsl bf16 also with each of the cooperative schedule's
128x128/128x256 tiles and single CTAs or pairs forced, and with the ping-pong schedule's
128x192 tiles, the data behind that choice); torch._grouped_mm
bf16 and fp16; a loop of torch.mm over the groups (bf16); upstream CuTe DSL's Hopper
grouped GEMM example, fp16, tensormap update mode SMEM, its best tile of 128x128 and
128x256 (cluster 1x1), imported at run time from $GCDSL_UPSTREAM_EXAMPLES (the
`examples/python/CuTeDSL` directory of a CUTLASS checkout); that column is skipped when
the variable is unset.

Method
- Every variant's output is checked against a float32 reference (relative error <= 1e-2:
  max |out - ref| / max |ref|) before it is timed; a failing variant is reported FAILED.
- Device time: CUDA events around one call with the stream held busy by a sleep for
  longer than the host needs to enqueue (benchmarks/harness.py: time_device_ms); median
  [min-max] of --reps calls. TFLOP/s = 2 sum(M) N K / time.
- Host: the whole `gcdsl.ops.grouped_mm` (and `torch._grouped_mm`) call from Python,
  time.perf_counter: `host` until the call returns (GPU idle before it), `wall` until the
  result is ready (the call plus torch.cuda.synchronize()).
- HBM: one device-to-device copy of 2 GiB gives the copy bandwidth (bytes read + written /
  time); for S1, S4 and S5 (B-streaming shapes) each variant's bytes of B / time is
  reported as a fraction of it.

    python benchmarks/w5_grouped_gemm.py [--reps 30] [--shapes S1,S5] [--upstream-tiles 128x256]
    python benchmarks/run.py --only W5                  # the same, within the suite

Writes benchmarks/results/W5.json (machine info, git commit, every sample) and W5.png
(TFLOP/s bars) where matplotlib is importable. Exit status 1 if a variant FAILED or raised.
"""
from __future__ import annotations

import argparse
import importlib.util
import os
import sys
import time
import traceback
from typing import Any, Callable, Dict, List, Optional, Tuple

HERE = os.path.dirname(os.path.abspath(__file__))
if os.path.dirname(HERE) not in sys.path:
    sys.path.insert(0, os.path.dirname(HERE))

from benchmarks.harness import (  # noqa: E402  (imports no DSL)
    ERROR, FAILED, OK, RESULTS, SKIPPED, Report, add_json_flag, fmt_range, print_header, summarize, table,
    time_device_ms,
)

RAGGED_S6 = [100, 37, 256, 512, 64, 300, 8, 129, 77, 400, 250, 33, 190, 64, 480, 16]
SHAPES = {  # name: (rows per group, N, K)
    "S1": ([64] * 8, 4096, 7168),
    "S2": ([256] * 8, 4096, 7168),
    "S3": ([2048] * 8, 4096, 7168),
    "S4": ([128] * 64, 2048, 7168),
    "S5": ([64] * 64, 7168, 2048),
    "S6": (RAGGED_S6, 4096, 4096),
}
HBM_SHAPES = ("S1", "S4", "S5")
VARIANTS = ("gcdsl_bf16", "gcdsl_fp16", "torch_bf16", "torch_fp16", "mm_loop_bf16", "upstream_fp16")
LABELS = {
    "gcdsl_bf16": "gcdsl bf16", "gcdsl_fp16": "gcdsl fp16", "torch_bf16": "torch._grouped_mm bf16",
    "torch_fp16": "torch._grouped_mm fp16", "mm_loop_bf16": "torch.mm loop bf16",
    "upstream_fp16": "upstream CuTe DSL fp16",
}
# gcdsl bf16 with each tile and cluster size of the cooperative schedule forced, and the
# ping-pong schedule's 128 x 192 tiles alone and in pairs (where N suits its pairs): the
# data behind the heuristics
EXPLORE = (*(f"gcdsl_bf16_t{t}_c{c}" for t in (128, 256) for c in (1, 2)), "gcdsl_bf16_pingpong_t192_c1",
           "gcdsl_bf16_pingpong_t192_c2")
UPSTREAM_FILE = os.path.join("cute", "hopper", "kernel", "grouped_gemm", "grouped_gemm.py")
TOLERANCE = 1e-2


# ---------------------------------------------------------------------------------------
# Problems
# ---------------------------------------------------------------------------------------
class Problem:
    """One shape's inputs in both dtypes, its offsets and the float32 reference."""

    def __init__(self, name: str, rows: List[int], n: int, k: int, seed: int = 0) -> None:
        import torch

        self.name, self.rows, self.n, self.k = name, rows, n, k
        self.groups, self.m = len(rows), sum(rows)
        self.offs = torch.tensor(rows).cumsum(0).to(torch.int32)  # CPU: no copy back per call
        self.offs_gpu = self.offs.cuda()
        self.starts = [0] + self.offs[:-1].tolist()
        g = torch.Generator(device="cuda").manual_seed(seed)
        a32 = torch.randn(self.m, k, device="cuda", generator=g)
        w32 = torch.randn(self.groups, n, k, device="cuda", generator=g) / k ** 0.5
        self.inputs = {}
        for name_, dtype in (("bf16", torch.bfloat16), ("fp16", torch.float16)):
            self.inputs[name_] = (a32.to(dtype), w32.to(dtype))
        del a32, w32
        self.ref = {}  # per dtype: from the values that dtype rounded the inputs to
        for name_ in self.inputs:
            a, w = self.inputs[name_]
            self.ref[name_] = torch.cat([a[s:e].float() @ w[i].float().t()
                                         for i, (s, e) in enumerate(zip(self.starts, self.offs.tolist()))])
        self.flops = 2 * self.m * n * k
        self.b_bytes = self.groups * n * k * 2

    def b(self, dtype: str):
        return self.inputs[dtype][1].transpose(-2, -1)  # (G, K, N), K-major

    def error(self, out, dtype: str) -> float:
        ref = self.ref[dtype]
        return ((out.float() - ref).abs().max() / ref.abs().max()).item()


def copy_bandwidth(reps: int, warmup: int) -> Dict[str, Any]:
    """Device-to-device copy of 2 GiB: bytes read + written per second."""
    import torch

    src = torch.empty(2**30, dtype=torch.int16, device="cuda").random_()
    dst = torch.empty_like(src)
    stats = time_device_ms(lambda: dst.copy_(src), reps, warmup)
    if not torch.equal(src, dst):
        raise RuntimeError("copy_ left the destination different from the source")
    moved = 2 * src.numel() * 2
    return {"ms": stats, "gbps": moved / stats["median"] / 1e6}


# ---------------------------------------------------------------------------------------
# Variants: each returns a zero-argument call producing the output
# ---------------------------------------------------------------------------------------
def _dtype_of(variant: str) -> str:
    return "bf16" if "bf16" in variant.split("_") else "fp16"


def make_call(variant: str, p: Problem, upstream: Any, upstream_tile) -> Callable[[], Any]:
    import torch

    dtype = _dtype_of(variant)
    a, w = p.inputs[dtype]
    b = p.b(dtype)
    if variant in EXPLORE:
        from gcdsl.ops.grouped_mm import grouped_mm_into

        schedule, tile_n, cluster_m = _explored(variant)
        out = torch.empty(p.m, p.n, device="cuda", dtype=a.dtype)
        return lambda: grouped_mm_into(a, b, p.offs_gpu, out, tile_n=tile_n, cluster_m=cluster_m, schedule=schedule)
    if variant.startswith("gcdsl"):
        import gcdsl.ops

        return lambda: gcdsl.ops.grouped_mm(a, b, p.offs_gpu)
    if variant.startswith("torch"):
        return lambda: torch._grouped_mm(a, b, offs=p.offs_gpu)
    if variant == "mm_loop_bf16":
        out = torch.empty(p.m, p.n, device="cuda", dtype=torch.bfloat16)
        pieces = [(a[s:e], b[i], out[s:e]) for i, (s, e) in enumerate(zip(p.starts, p.offs.tolist()))]

        def loop():
            for x, y, o in pieces:
                torch.mm(x, y, out=o)
            return out

        return loop
    if variant == "upstream_fp16":
        return upstream.call(p, upstream_tile)
    raise ValueError(variant)


class Upstream:
    """NVIDIA's CuTe DSL Hopper grouped GEMM example, loaded from $GCDSL_UPSTREAM_EXAMPLES."""

    def __init__(self, root: str) -> None:
        path = os.path.join(root, UPSTREAM_FILE)
        if not os.path.exists(path):
            path = os.path.join(root, "examples", "python", "CuTeDSL", UPSTREAM_FILE)
        spec = importlib.util.spec_from_file_location("upstream_hopper_grouped_gemm", path)
        self.mod = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(self.mod)
        self.path = path

    def call(self, p: Problem, tile) -> Callable[[], Any]:
        import torch

        import cutlass
        import cutlass.cute as cute
        import cutlass.torch as cutlass_torch
        import cutlass.utils as utils

        mod = self.mod
        a, w = p.inputs["fp16"]
        out = torch.empty(p.m, p.n, device="cuda", dtype=torch.float16)
        sizes, strides, ptrs = [], [], []
        for i, (s, e) in enumerate(zip(p.starts, p.offs.tolist())):
            sizes.append((e - s, p.n, p.k, 1))
            strides.append([(p.k, 1), (p.k, 1), (p.n, 1)])  # A (M, K), B (N, K), C (M, N): row-major
            ptrs.append([a[s:].data_ptr(), w[i].data_ptr(), out[s:].data_ptr()])

        alive = []  # the torch tensors behind the cute views must outlive every launch

        def device_table(values, dtype):
            view, tensor = cutlass_torch.cute_tensor_like(
                torch.tensor(values, dtype=getattr(torch, dtype)), getattr(cutlass, dtype.capitalize()),
                is_dynamic_layout=False, assumed_align=16)
            alive.append(tensor)
            return view

        sizes_t, strides_t, ptrs_t = device_table(sizes, "int32"), device_table(strides, "int32"), \
            device_table(ptrs, "int64")
        hw = utils.HardwareInfo()
        sms = hw.get_max_active_clusters(1)
        workspace = device_table([[[0] * 16] * 3] * sms, "int64")  # upstream's per-SM descriptor slots
        made = [mod.create_tensor_and_stride(1, 8, 8, False, cutlass.Float16) for _ in range(3)]
        alive.append(made)
        initial = [m[2] for m in made]  # dtype and majorness only
        clusters = sum(-(-m // tile[0]) * -(-p.n // tile[1]) for m, _, _, _ in sizes)
        gemm = mod.HopperGroupedGemmPersistentKernel(
            cutlass.Float32, tile, (1, 1), swizzle_size=1, raster_along_m=True,
            tensormap_update_mode=utils.TensorMapUpdateMode.SMEM,
        )
        stream = cutlass_torch.default_stream()
        compiled = cute.compile(gemm, *initial, p.groups, sizes_t, strides_t, ptrs_t, clusters, workspace,
                                sms, stream)

        def run():
            compiled(*initial, sizes_t, strides_t, ptrs_t, workspace, stream)
            alive  # noqa: B018 - held by the closure
            return out

        return run


# ---------------------------------------------------------------------------------------
# Measurement
# ---------------------------------------------------------------------------------------
def host_times(call: Callable[[], Any], reps: int) -> Dict[str, Any]:
    """One whole call from Python: until it returns (GPU idle before), and until its result is ready."""
    import torch

    host, wall = [], []
    for _ in range(reps):
        torch.cuda.synchronize()
        t0 = time.perf_counter()
        call()
        t1 = time.perf_counter()
        torch.cuda.synchronize()
        t2 = time.perf_counter()
        host.append((t1 - t0) * 1e6)
        wall.append((t2 - t0) * 1e6)
    return {"host_us": summarize(host), "wall_us": summarize(wall)}


def _explored(variant: str) -> Tuple[str, int, int]:
    """(schedule, tile_n, cluster_m) of an EXPLORE variant, "gcdsl_bf16_[pingpong_]t<tile_n>_c<cluster_m>"."""
    *_, tile_n, cluster_m = (x[1:] for x in variant.split("_"))
    return ("pingpong" if "_pingpong_" in variant else "cooperative"), int(tile_n), int(cluster_m)


def _fits(variant: str, n: int) -> bool:
    """Whether an EXPLORE configuration is built for N: pairs need each CTA's half of the
    last B tile to start inside B (`pairs_fit`)."""
    from gcdsl.ops.hopper_grouped_gemm import pairs_fit

    _, tile_n, cluster_m = _explored(variant)
    return cluster_m == 1 or pairs_fit(n, tile_n)


def picked_label(p: Problem, dtype) -> str:
    """What `grouped_mm` runs for `p`, named as the EXPLORE variant of that configuration."""
    from gcdsl.ops.grouped_mm import configuration

    c = configuration(p.inputs[dtype][0], p.b(dtype), p.offs_gpu)
    return f"{'pingpong_' if c.schedule == 'pingpong' else ''}t{c.tile_n}_c{c.cluster_m}"


def measure(variant: str, p: Problem, args, upstream: Optional[Upstream], copy_gbps: Optional[float]) -> Dict:
    import torch

    dtype = _dtype_of(variant)
    row: Dict[str, Any] = {"shape": p.name, "variant": variant}
    if variant in ("gcdsl_bf16", "gcdsl_fp16"):
        row["picked"] = picked_label(p, dtype)
    if variant == "upstream_fp16" and upstream is None:
        row.update(status=SKIPPED, detail="GCDSL_UPSTREAM_EXAMPLES is not set")
        return row
    tiles = [(128, 128), (128, 256)] if variant == "upstream_fp16" else [None]
    if variant == "upstream_fp16" and getattr(args, "upstream_tiles", ""):
        tiles = [tuple(int(x) for x in t.split("x")) for t in args.upstream_tiles.split(",")]
    best = None
    for tile in tiles:
        try:
            call = make_call(variant, p, upstream, tile)
            out = call()
            torch.cuda.synchronize()
            err = p.error(out, dtype)
            if not err <= TOLERANCE:
                row.setdefault("failed_tiles", []).append({"tile": tile, "rel_err": err})
                continue
            stats = time_device_ms(call, args.reps, args.warmup)
            candidate = {"ms": stats, "rel_err": err, "tile": tile, "call": call}
            if best is None or stats["median"] < best["ms"]["median"]:
                best = candidate
            row.setdefault("tiles_tried", []).append({"tile": tile, "median_ms": stats["median"]})
        except Exception as exc:  # noqa: BLE001 - one variant's failure must not hide the others
            if variant == "torch_fp16":  # torch's grouped GEMM may take bf16 only: a fact, not a failure
                row.update(status=SKIPPED, detail=f"torch._grouped_mm refused fp16: {str(exc)[:200]}")
                return row
            row.setdefault("errors", []).append(f"{tile}: {type(exc).__name__}: {str(exc)[:300]}")
            if getattr(args, "verbose", False):
                traceback.print_exc()
    if best is None:
        if row.get("failed_tiles"):
            row.update(status=FAILED, detail=f"relative error {row['failed_tiles'][0]['rel_err']:.3e} > {TOLERANCE}")
        else:
            row.update(status=ERROR, detail="; ".join(row.get("errors", ["no result"]))[:400])
        return row
    median_s = best["ms"]["median"] / 1e3
    row.update(status=OK, ms=best["ms"], us=best["ms"]["median"] * 1e3, rel_err=best["rel_err"],
               tflops=p.flops / median_s / 1e12)
    if best["tile"] is not None:
        row["tile"] = "x".join(map(str, best["tile"]))
    if p.name in HBM_SHAPES and copy_gbps:
        row["b_gbps"] = p.b_bytes / median_s / 1e9
        row["hbm_fraction"] = row["b_gbps"] / copy_gbps
    if variant in ("gcdsl_bf16", "torch_bf16"):
        row["host"] = host_times(best["call"], max(20, args.reps))
    return row


# ---------------------------------------------------------------------------------------
# Report
# ---------------------------------------------------------------------------------------
def run(args, machine: Dict[str, Any]) -> Report:
    import torch

    report = Report("W5", "W5 grouped GEMM: gcdsl.ops.grouped_mm against torch and upstream CuTe DSL")
    from gcdsl import config

    root = config.get().upstream_examples
    upstream = None
    if root:
        try:
            upstream = Upstream(root)
        except Exception as exc:  # noqa: BLE001
            print(f"upstream example not loadable from {root}: {type(exc).__name__}: {exc}")
    chosen = getattr(args, "shapes", "")  # run.py's args have no --shapes: all of them
    shapes = [s.strip().upper() for s in chosen.split(",")] if chosen else list(SHAPES)
    report.config = {"shapes": {s: {"rows": SHAPES[s][0], "n": SHAPES[s][1], "k": SHAPES[s][2]} for s in shapes},
                     "reps": args.reps, "warmup": args.warmup, "tolerance": TOLERANCE,
                     "upstream": getattr(upstream, "path", None), "timing": "time_device_ms (sleep-padded events)"}
    print_header("W5 grouped GEMM (bf16/fp16 in, same-type out, fp32 accumulation)")
    try:
        bw = copy_bandwidth(args.reps, args.warmup)
        copy_gbps = bw["gbps"]
        report.add(shape="copy", variant="hbm_copy_2GiB", status=OK, ms=bw["ms"], gbps=copy_gbps)
        print(f"  HBM copy bandwidth (2 GiB device-to-device, read + write): {copy_gbps:.0f} GB/s", flush=True)
    except Exception as exc:  # noqa: BLE001
        copy_gbps = None
        report.add(shape="copy", variant="hbm_copy_2GiB", status=ERROR, detail=str(exc)[:300])

    for name in shapes:
        rows, n, k = SHAPES[name]
        p = Problem(name, rows, n, k)
        print(f"\n{name}: {len(rows)} groups, {p.m} rows, N {n}, K {k} ({p.flops / 1e9:.0f} GFLOP, "
              f"B {p.b_bytes / 1e9:.2f} GB)", flush=True)
        explore = () if getattr(args, "no_explore", False) else tuple(v for v in EXPLORE if _fits(v, n))
        for variant in VARIANTS + explore:
            row = measure(variant, p, args, upstream, copy_gbps)
            report.rows.append(row)
            print(f"  {LABELS.get(variant, variant):<26} {_cell(row)}", flush=True)
        del p
        torch.cuda.empty_cache()

    _print_tables(report, shapes, copy_gbps)
    png = None if args.no_plots or args.json else _plot(report, shapes, machine)  # (a side run's plot would
    # replace the headline run's)
    if png:
        report.notes.append(f"plot: {os.path.relpath(png, os.path.dirname(RESULTS))}")
    return report


def _cell(row: Dict[str, Any]) -> str:
    if row.get("status") != OK:
        return f"{row.get('status')}: {row.get('detail', '')}"
    text = f"{fmt_range(row['ms'], scale=1e3, digits=1)} us  {row['tflops']:.0f} TFLOP/s  err {row['rel_err']:.1e}"
    if "tile" in row:
        text += f"  tile {row['tile']}"
    if "picked" in row:
        text += f"  [{row['picked']}]"
    if "hbm_fraction" in row:
        text += f"  B {row['b_gbps']:.0f} GB/s = {row['hbm_fraction']:.1%} of copy"
    if "host" in row:
        text += f"  call: host {row['host']['host_us']['median']:.0f} us, wall {row['host']['wall_us']['median']:.0f} us"
    return text


def _rows_by(report: Report) -> Dict[tuple, Dict[str, Any]]:
    return {(r["shape"], r["variant"]): r for r in report.rows if "variant" in r}


def _print_tables(report: Report, shapes: List[str], copy_gbps: Optional[float]) -> None:
    rows = _rows_by(report)

    def get(shape, variant, key):
        r = rows.get((shape, variant), {})
        return r.get(key) if r.get("status") == OK else None

    print("\nTFLOP/s (median device time)")
    print(table(["shape"] + [LABELS[v] for v in VARIANTS],
                [[s] + [f"{get(s, v, 'tflops'):.0f}" if get(s, v, "tflops") else
                        str(rows.get((s, v), {}).get("status", "-")) for v in VARIANTS] for s in shapes]))
    print("\nmicroseconds (median device time)")
    print(table(["shape"] + [LABELS[v] for v in VARIANTS],
                [[s] + [f"{get(s, v, 'us'):.1f}" if get(s, v, "us") else "-" for v in VARIANTS] for s in shapes]))

    explored = [v for v in EXPLORE if any((s, v) in rows for s in shapes)]
    if explored:
        print("\ngcdsl bf16 with the schedule, tile (t) and CTAs per cluster (c) forced: microseconds; [picked] by the "
              "heuristics")
        print(table(["shape"] + explored + ["picked"],
                    [[s] + [f"{get(s, v, 'us'):.1f}" if get(s, v, "us") else "-" for v in explored]
                     + [rows.get((s, "gcdsl_bf16"), {}).get("picked", "-")] for s in shapes]))

    print("\ntargets")
    checks = []
    for s in shapes:
        ours, up = get(s, "gcdsl_fp16", "us"), get(s, "upstream_fp16", "us")
        need = 1.10 if s in ("S5", "S6") else 1.00
        if ours and up:
            checks.append([s, "gcdsl fp16 vs upstream fp16", f"{up / ours:.2f}x", f">= {need:.2f}x",
                           "met" if up / ours >= need else "MISSED"])
        ours, theirs = get(s, "gcdsl_bf16", "us"), get(s, "torch_bf16", "us")
        if ours and theirs:
            checks.append([s, "gcdsl bf16 vs torch._grouped_mm bf16", f"{theirs / ours:.2f}x", ">= 1.00x",
                           "met" if theirs / ours >= 1.0 else "MISSED"])
        frac = get(s, "gcdsl_bf16", "hbm_fraction")
        if frac:
            checks.append([s, "gcdsl bf16 bytes of B / HBM copy bandwidth", f"{frac:.1%}", ">= 90%",
                           "met" if frac >= 0.9 else "MISSED"])
    print(table(["shape", "what", "measured", "target", ""], checks))
    report.notes += [" ".join(c) for c in checks]
    if copy_gbps:
        print(f"\n(HBM copy bandwidth measured in this run: {copy_gbps:.0f} GB/s, read + write)")


def _plot(report: Report, shapes: List[str], machine: Dict[str, Any]) -> Optional[str]:
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        return None
    rows = _rows_by(report)
    fig, ax = plt.subplots(figsize=(10, 4.5))
    width = 0.8 / len(VARIANTS)
    for i, v in enumerate(VARIANTS):
        ys = [rows.get((s, v), {}).get("tflops", 0) if rows.get((s, v), {}).get("status") == OK else 0
              for s in shapes]
        ax.bar([x + i * width for x in range(len(shapes))], ys, width, label=LABELS[v])
    ax.set_xticks([x + 0.4 - width / 2 for x in range(len(shapes))])
    ax.set_xticklabels(shapes)
    ax.set_ylabel("TFLOP/s (median)")
    ax.set_title(f"W5 grouped GEMM ({machine.get('gpu', 'GPU')})", fontsize=10)
    ax.legend(fontsize=7, ncol=3)
    ax.grid(True, axis="y", alpha=0.3)
    fig.tight_layout()
    path = os.path.join(RESULTS, "W5.png")
    os.makedirs(RESULTS, exist_ok=True)
    fig.savefig(path, dpi=120)
    plt.close(fig)
    return path


def parse_args(argv=None):
    p = argparse.ArgumentParser(description="W5 grouped GEMM benchmark (see the module docstring)")
    p.add_argument("--reps", type=int, default=30)
    p.add_argument("--warmup", type=int, default=5)
    p.add_argument("--shapes", default="", help="comma-separated subset of S1..S6")
    p.add_argument("--upstream-tiles", default="", help="e.g. 128x256 (default: best of 128x128 and 128x256)")
    p.add_argument("--no-plots", action="store_true")
    p.add_argument("--no-explore", action="store_true", help="skip gcdsl bf16 with each schedule, tile and cluster forced")
    p.add_argument("--verbose", action="store_true", help="print tracebacks of failing variants")
    add_json_flag(p, "W5")
    return p.parse_args(argv)


def main(argv=None) -> int:
    from benchmarks import harness

    return harness.main_on_gpu("W5", run, parse_args(argv))


if __name__ == "__main__":
    sys.exit(main())
