"""Grid-constant tables: dependent reads from parameter space against global memory, and the host
cost of `TensorMapTable.encode` (benchmarks/grid_constant.py)."""
from __future__ import annotations

from typing import Any, Dict, List, Tuple

from .fmt import Results, f1, gpu_name, md_table, than


def gc_reads(results: Results) -> Dict[Tuple[str, str], Dict[str, Any]]:
    return {(r["index"], r["table"]): r for r in results["grid_constant"]["reads"]}


def gc_encode(results: Results) -> Tuple[List[int], List[float], List[float]]:
    rows = results["grid_constant"]["host_encode"]
    return [r["descriptors"] for r in rows], [r["cached_us"] for r in rows], [r["uncached_us"] for r in rows]


def _gpu(results: Results) -> str:
    gc = results["grid_constant"]
    return gpu_name(gc.get("machine") or {"gpu": gc.get("gpu")})


def region_grid_constant(results: Results) -> str:
    gc = results["grid_constant"]
    cfg = gc.get("config", {})
    reads = gc_reads(results)
    rows = [[index, table, f1(r["ns_per_read"]),
             f"{f1(r['us_median'])} [{f1(r['us_min'])}-{f1(r['us_max'])}]", "yes" if r["verified"] else "**NO**"]
            for (index, table), r in reads.items()]
    uniform = reads[("uniform per CTA", "global memory")]["ns_per_read"] / \
        reads[("uniform per CTA", "parameter space")]["ns_per_read"]
    divergent = reads[("per thread", "parameter space")]["ns_per_read"] / \
        reads[("per thread", "global memory")]["ns_per_read"]
    n, cached, uncached = gc_encode(results)
    presleep = all(r.get("presleep") for r in reads.values())
    out = [
        (f"Median of {cfg['reps']} launches:" if "reps" in cfg else "Median of the launches:"),
        "",
        md_table(["index", "table", "ns per read", "median us [min-max]", "verified"], rows),
        "",
        f"A CTA-uniform read from parameter space is {than(uniform)} than from global memory; "
        f"with an index that differs per thread it is {than(1 / divergent)}.",
        "",
    ]
    if not presleep:
        out += ["These reads were timed without a busy stream before each launch: the times include the "
                "Python call.", ""]
    out.append("`TensorMapTable.encode` host cost"
               + (f" (median of {cfg['encode_reps']})" if "encode_reps" in cfg else " (median)") + ": "
               f"{' / '.join(f1(x) for x in cached)} us for {' / '.join(map(str, n))} unchanged tensors (cached), "
               f"{' / '.join(f1(x) for x in uncached)} us when every descriptor is encoded.")
    return "\n".join(out)


def region_readme_reads(results: Results) -> str:
    ns = {k: f1(r["ns_per_read"]) for k, r in gc_reads(results).items()}
    return (f"Measured on an {_gpu(results)} (`benchmarks/RESULTS.md`): a dependent read with a "
            f"CTA-uniform index costs {ns[('uniform per CTA', 'parameter space')]} ns against "
            f"{ns[('uniform per CTA', 'global memory')]} ns from global memory, but an index that differs per "
            f"thread costs {ns[('per thread', 'parameter space')]} ns against "
            f"{ns[('per thread', 'global memory')]} ns.")


def region_readme_encode(results: Results) -> str:
    n, cached, uncached = gc_encode(results)
    return (f"Host cost of `encode` on the {_gpu(results)} host: {' / '.join(f1(x) for x in cached)} us "
            f"for {' / '.join(map(str, n))} unchanged tensors, {' / '.join(f1(x) for x in uncached)} us when "
            "every descriptor is encoded.")
