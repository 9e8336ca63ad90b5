"""The run (machine, versions, commits) and the README's "Measured" paragraph."""
from __future__ import annotations

from typing import Any, Dict, List, Optional

from . import descriptors, fused_moe, grouped_gemm, host, moe_layer, training
from .fmt import Results, f1, f2, gpu_name, listing, pct, ratio, span

WORKLOADS = ("W1", "W2", "W3", "W4", "W5", "W6", "W7", "W8", "grid_constant")


def machine_line(machine: Optional[Dict[str, Any]]) -> str:
    if not machine:
        return "machine not recorded"
    torch = machine.get("torch") or "-"
    if machine.get("torch_cuda") and "+" not in torch:
        torch += f" (CUDA {machine['torch_cuda']})"
    gpu = (f"{machine['gpu']} ({machine.get('sm_count', '?')} SMs)" if machine.get("gpu") else
           f"no GPU (compiled for {machine.get('cute_dsl_arch_env') or 'the default target'})")
    parts = [
        gpu,
        *([f"driver {machine.get('driver', '?')} (CUDA {machine.get('driver_cuda_version', '?')})"]
          if machine.get("gpu") else []),
        f"nvidia-cutlass-dsl {machine.get('nvidia_cutlass_dsl')}",
        f"torch {torch}",
        f"Python {machine.get('python')}",
    ]
    return ", ".join(parts)


def commit_text(machine: Optional[Dict[str, Any]]) -> str:
    commit = (machine or {}).get("gcdsl_git")
    if not commit:
        return "not recorded"
    return f"`{commit}`" + (" with uncommitted changes" if (machine or {}).get("gcdsl_git_dirty") else "")


def region_run(results: Results) -> str:
    present = [w for w in WORKLOADS if w in results]
    machine = results["W1"].get("machine")
    dates = sorted({(results[w].get("machine") or {}).get("date", "")[:10] for w in present} - {""})
    lines = [f"## {' to '.join(dict.fromkeys([dates[0], dates[-1]])) if dates else 'undated'}, {machine_line(machine)}",
             ""]
    commits: Dict[str, List[str]] = {}
    for w in present:
        commits.setdefault(commit_text(results[w].get("machine")), []).append(w.replace("_", "-"))
    if len(commits) == 1:
        lines.append(f"gcdsl commit: {next(iter(commits))}.")
    else:
        lines.append("gcdsl commits: " + "; ".join(f"{listing(ws)}: {c}" for c, ws in commits.items()) + ".")
    others = [w for w in present if results[w].get("machine")
              and machine_line(results[w]["machine"]) != machine_line(machine)]
    for w in others:
        lines.append(f"{w} ran on: {machine_line(results[w]['machine'])}.")
    lines.append("Medians with min-max in brackets; each workload says over how many repetitions.")
    return "\n".join(lines)


def speedup(times: Dict[int, float], what: str) -> str:
    """`times`: their time / gcdsl's, per N, as a phrase with the N of each end."""
    lo, hi = min(times, key=times.get), max(times, key=times.get)
    verb = "faster than" if times[lo] >= 1 else "the speed of"
    return f"{ratio(times[lo])} (N = {lo}) to {ratio(times[hi])} (N = {hi}) {verb} {what}"


def region_readme_measured(results: Results) -> str:
    ns = list(results["W1"]["config"]["ns"])
    vs = descriptors.w1_vs_cpp(results)
    floor = descriptors.w1_ratio(results, "gcdsl", "floor")
    chain = descriptors.w1_ratio(results, "chain", "gcdsl")
    gmem = descriptors.w1_ratio(results, "gmem", "gcdsl")
    if not (vs["diff"] and floor and chain and gmem):
        return "W1 has no complete gcdsl, floor, chain, gmem and C++ results in this run: see RESULTS.md."
    worst = max(vs["diff"].values(), key=abs)
    faster = [n for n, d in vs["diff"].items() if d < 0]
    if len(faster) == len(vs["diff"]):
        direction = "gcdsl faster at every N"
    elif not faster:
        direction = "gcdsl slower at every N"
    else:
        direction = f"gcdsl faster at N = {listing(faster)}"
    text = [
        f"On an {gpu_name(results['W1'].get('machine'))}, side by side "
        "([benchmarks/RESULTS.md](benchmarks/RESULTS.md)):",
        f"a TMA load whose descriptor is picked by a runtime index from grid-constant parameters costs "
        f"{span(list(floor.values()), ratio)} the floor (one stacked descriptor) at N = {ns[0]} to {ns[-1]}, within "
        f"{pct(abs(worst))} of CUDA C++ with `const __grid_constant__ CUtensorMap descs[N]` ({direction}),",
        f"{speedup(chain, 'an if/elif chain')} and "
        f"{speedup(gmem, 'descriptors in global memory with the acquire fence')}.",
    ]
    frac = descriptors.w2_of_ceiling(results)
    if frac:
        text.append(f"A grouped copy reaches {span(list(frac.values()), pct)} of the device-to-device copy bandwidth "
                    f"at N = {listing(list(frac))}.")
    if "W3" in results:
        text += _w3_sentence(results)
    if "W4" in results:
        text += _w4_sentence(results)
    if "W5" in results:
        text += grouped_gemm.readme_sentences(results)
    text += moe_layer.readme_sentences(results)
    text += training.readme_sentences(results)
    text += fused_moe.readme_sentences(results)
    return "\n".join(text)


def _w3_sentence(results: Results) -> List[str]:
    ns = list(results["W3"]["config"]["ns"])
    lst = {c: {n: u for n in ns if (u := host.w3_us(results, "list", c, n)) is not None} for c in ("dsl", "tvm-ffi")}
    once = {c: [u for n in ns if (u := host.w3_us(results, "table, encoded once", c, n)) is not None]
            for c in ("dsl", "tvm-ffi")}
    if len(lst["dsl"]) < 2 or not once["dsl"]:
        return []
    first, last = min(lst["dsl"]), max(lst["dsl"])
    text = (f"Calling a compiled kernel with a `List[cute.CopyAtom]` costs {f1(lst['dsl'][first])} us at N = {first} "
            f"and {f1(lst['dsl'][last])} us at N = {last} through the DSL's call")
    if first in lst["tvm-ffi"] and last in lst["tvm-ffi"]:
        text += f" ({f1(lst['tvm-ffi'][first])} and {f1(lst['tvm-ffi'][last])} us through TVM-FFI)"
    text += f"; a `TensorMapTable` encoded once keeps it at {span(once['dsl'], f1)} us at every N"
    text += f" ({span(once['tvm-ffi'], f1)} us through TVM-FFI)." if once["tvm-ffi"] else "."
    views = {c: [u for n in ns if (u := host.w3_us(results, "table, views of one tensor", c, n)) is not None]
             for c in ("dsl", "tvm-ffi")}
    if views["dsl"]:
        text += (f" Checked on every call, a table of a tuple of slices of one tensor costs {span(views['dsl'], f1)} us"
                 + (f" ({span(views['tvm-ffi'], f1)} us through TVM-FFI)" if views["tvm-ffi"] else "")
                 + " at every N.")
    return [text]


def _w4_sentence(results: Results) -> List[str]:
    ns = list(results["W4"]["config"]["ns"])
    first, last = ns[0], ns[-1]
    lc = {n: host.w4_value(results, "list", n, "compile_s") for n in (first, last)}
    lp = {n: host.w4_value(results, "list", n, "ptx_bytes") for n in (first, last)}
    atoms = host.w4_value(results, "atoms0", last, "compile_s")
    table = [t for n in ns if (t := host.w4_value(results, "table", n, "compile_s")) is not None]
    if None in lc.values() or None in lp.values() or not atoms or not table:
        return []
    return [f"Compiling a kernel with a runtime-indexed list takes {f2(lc[first])} s at N = {first} and "
            f"{f2(lc[last])} s at N = {last} "
            f"({ratio(lc[last] / atoms)} the DSL's own cost for {last} atom arguments) with PTX of "
            f"{lp[first]} and {lp[last]} bytes; a kernel taking a table compiles in {span(table, f2)} s at every N."]
