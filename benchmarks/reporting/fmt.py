"""Number formats (one rule per unit, everywhere), tables, and access to the loaded results."""
from __future__ import annotations

from typing import Any, Callable, Dict, List, Optional, Sequence, Tuple

Results = Dict[str, Any]  # "W1" ... "W5", "grid_constant": the JSON; "ncu", "previous": see report.load


# ---------------------------------------------------------------------------------------
# Rows of a workload's JSON
# ---------------------------------------------------------------------------------------
def ok(row: Optional[Dict[str, Any]]) -> bool:
    return bool(row) and row.get("status") == "OK"


def rows_by(results: Results, workload: str, *keys: str) -> Dict[Tuple, Dict[str, Any]]:
    """The workload's result rows by the values of `keys` (a missing key is None)."""
    return {tuple(r.get(k) for k in keys): r for r in results[workload]["results"]}


def ns_of(results: Results, workload: str) -> List[int]:
    return list(results[workload]["config"]["ns"])


def status_of(row: Optional[Dict[str, Any]]) -> str:
    """What a table shows where a row has no number."""
    return (row or {}).get("status", "-")


# ---------------------------------------------------------------------------------------
# Formats
# ---------------------------------------------------------------------------------------
def f0(x: float) -> str:
    return f"{x:.0f}"


def f1(x: float) -> str:
    return f"{x:.1f}"


def f2(x: float) -> str:
    return f"{x:.2f}"


def ratio(x: float) -> str:
    return f"{x:.2f}x"


def pct(x: float) -> str:
    """A fraction as a percentage, one decimal."""
    return f"{100 * x:.1f}%"


def signed_pct(x: float) -> str:
    """+0.7%, -1.2%; 0.0% where it rounds to nothing (never "-0.0%")."""
    text = f"{abs(100 * x):.1f}%"
    return text if text == "0.0%" else ("+" if x > 0 else "-") + text


def than(speedup: float) -> str:
    """`speedup` (their time / ours) as "1.29x faster" or "6.82x slower"."""
    return f"{ratio(speedup)} faster" if speedup >= 1 else f"{ratio(1 / speedup)} slower"


def spread(stats: Dict[str, float], fmt: Callable[[float], str] = f1) -> str:
    return f"{fmt(stats['median'])} [{fmt(stats['min'])}-{fmt(stats['max'])}]"


def span(values: Sequence[float], fmt: Callable[[float], str]) -> str:
    """"a to b" over the values, or one value when they format alike."""
    lo, hi = fmt(min(values)), fmt(max(values))
    return lo if lo == hi else f"{lo} to {hi}"


def per_n(values: Sequence[str], ns: Sequence[Any], unit: str = "") -> str:
    """"1.0 / 2.0 us at N = 1 / 8"."""
    return f"{' / '.join(values)}{' ' + unit if unit else ''} at N = {' / '.join(map(str, ns))}"


def listing(items: Sequence[Any]) -> str:
    items = [str(i) for i in items]
    return items[0] if len(items) == 1 else ", ".join(items[:-1]) + " and " + items[-1]


def verdict(met: bool) -> str:
    return "met" if met else "**MISSED**"


def md_table(headers: Sequence[str], rows: Sequence[Sequence[str]]) -> str:
    lines = ["| " + " | ".join(headers) + " |", "|" + "---|" * len(headers)]
    lines += ["| " + " | ".join(row) + " |" for row in rows]
    return "\n".join(lines)


# ---------------------------------------------------------------------------------------
# Small statistics
# ---------------------------------------------------------------------------------------
def overlap(a: Dict[str, float], b: Dict[str, float]) -> bool:
    """Do two [min, max] ranges share any value?"""
    return a["min"] <= b["max"] and b["min"] <= a["max"]


def gpu_name(machine: Optional[Dict[str, Any]]) -> str:
    return ((machine or {}).get("gpu") or "GPU").replace("NVIDIA ", "")


def kept_run(results: Results, name: str, workload: str, script: str) -> Optional[Tuple[Results, str, str]]:
    """A workload's region drawn from `name`.json: the workload's own JSON (with every other
    file), or a run of it kept beside it (`--json name`), read alone under `workload`'s name.
    (Those results; the run's command; for a kept run ", run at `<commit>` on an <GPU>",
    else ""), or None without the file."""
    if name not in results:
        return None
    if name == workload:
        return results, f"python benchmarks/{script}", ""
    machine = results[name]["machine"]
    return ({workload: results[name]}, f"python benchmarks/{script} --json {name}",
            f", run at `{machine.get('gcdsl_git', '?')}` on an {machine.get('gpu', '?')}")
