"""Nsight Compute's text report (`ncu` without `--csv`): the metric tables of one profiled kernel.

    results/ncu_<shape>_<dtype>.txt     e.g. ncu_s4_bf16.txt: gcdsl.ops.grouped_mm on W5's S4 in bf16

A report is read into {section: {metric name: (unit, value)}}; a value is a float
(thousands separators dropped) or None for "no data". Durations and frequencies are
returned in seconds and hertz by `seconds` and `hertz`.
"""
from __future__ import annotations

import os
import re
from typing import Dict, List, Optional, Tuple

FILE = re.compile(r"^ncu_(?P<shape>s\d+)_(?P<dtype>bf16|fp16)\.txt$", re.I)
SECTION = re.compile(r"^\s*Section: (?P<name>.+?)\s*$")
# "    DRAM Throughput                   %        84.68" / "    Grid Size              132"
METRIC = re.compile(r"^\s+(?P<name>\S(?:.*?\S)?)\s{2,}(?:(?P<unit>\S+)\s+)?(?P<value>-?[\d,]+(?:\.\d+)?|no data)\s*$")
KERNEL = re.compile(r"^\s+(?P<name>\S+) \((?P<grid>[\d, ]+)\)x\((?P<block>[\d, ]+)\), Context")

Report = Dict[str, Dict[str, Tuple[str, Optional[float]]]]

SCALE = {"s": 1.0, "ms": 1e-3, "us": 1e-6, "ns": 1e-9, "hz": 1.0, "khz": 1e3, "mhz": 1e6, "ghz": 1e9}


class NcuError(ValueError):
    pass


def parse(text: str) -> Dict[str, object]:
    """{"kernel": name, "sections": Report}; NcuError where the text holds no metric table."""
    sections: Report = {}
    current = None
    kernel = None
    for line in text.splitlines():
        m = KERNEL.match(line)
        if m and kernel is None:
            kernel = m.group("name")
            continue
        m = SECTION.match(line)
        if m:
            current = sections.setdefault(m.group("name"), {})
            continue
        if current is None or set(line.strip()) <= set("- "):
            continue
        m = METRIC.match(line)
        if m and m.group("name") != "Metric Name":
            value = None if m.group("value") == "no data" else float(m.group("value").replace(",", ""))
            current[m.group("name")] = (m.group("unit") or "", value)
    if not sections or not any(sections.values()):
        raise NcuError("no `Section:` metric table found: is this ncu's text report?")
    return {"kernel": kernel, "sections": sections}


# A profiled kernel's header: "  <name, spaces allowed> (132, 1, 1)x(384, 1, 1), Context 1, ..."
KERNEL_HEADER = re.compile(r"^  \S.*\(\d+, \d+, \d+\)x\(\d+, \d+, \d+\), Context \d+")


def kernels(text: str) -> List[Dict[str, object]]:
    """`parse` of each kernel of a report that profiled several (torch's grouped GEMM runs
    a setup kernel before its GEMM), in launch order."""
    chunks, current = [], None
    for line in text.splitlines():
        if KERNEL_HEADER.match(line):
            current = [line]
            chunks.append(current)
        elif current is not None:
            current.append(line)
    out = []
    for chunk in chunks:
        report = parse("\n".join(chunk))
        report["kernel"] = chunk[0].strip().split(" (")[0] if report["kernel"] is None else report["kernel"]
        out.append(report)
    if not out:
        raise NcuError("no profiled kernel found: is this ncu's text report?")
    return out


def load(results_dir: str) -> Dict[Tuple[str, str], Dict[str, object]]:
    """Every `ncu_<shape>_<dtype>.txt` under `results_dir`, by ("S4", "bf16")."""
    out = {}
    for name in sorted(os.listdir(results_dir)):
        m = FILE.match(name)
        if m:
            with open(os.path.join(results_dir, name)) as f:
                try:
                    out[(m.group("shape").upper(), m.group("dtype").lower())] = parse(f.read())
                except NcuError as exc:
                    raise NcuError(f"{name}: {exc}") from None
    return out


def metric(report: Dict[str, object], section: str, name: str) -> Tuple[str, float]:
    """(unit, value) of one metric; KeyError naming what is missing."""
    sections = report["sections"]
    if section not in sections or name not in sections[section]:
        raise KeyError(f"ncu report has no {name!r} in section {section!r}")
    unit, value = sections[section][name]
    if value is None:
        raise KeyError(f"ncu report: {name!r} has no data")
    return unit, value


def scaled(report: Dict[str, object], section: str, name: str) -> float:
    """A duration in seconds or a frequency in hertz, whatever unit ncu chose."""
    unit, value = metric(report, section, name)
    if unit.lower() not in SCALE:
        raise KeyError(f"ncu report: unit {unit!r} of {name!r} is neither a time nor a frequency")
    return value * SCALE[unit.lower()]


def bytes_per_second(report: Dict[str, object], section: str, name: str) -> float:
    unit, value = metric(report, section, name)
    prefix = unit.lower().split("byte/s")[0] if unit.lower().endswith("byte/s") else None
    factor = {"": 1.0, "k": 1e3, "m": 1e6, "g": 1e9, "t": 1e12}.get(prefix) if prefix is not None else None
    if factor is None:
        raise KeyError(f"ncu report: unit {unit!r} of {name!r} is not bytes per second")
    return value * factor


def byte_count(report: Dict[str, object], section: str, name: str) -> float:
    """A size in bytes, whatever prefix ncu chose (byte, Kbyte, ... Tbyte)."""
    unit, value = metric(report, section, name)
    factor = {"byte": 1.0, "kbyte": 1e3, "mbyte": 1e6, "gbyte": 1e9, "tbyte": 1e12}.get(unit.lower())
    if factor is None:
        raise KeyError(f"ncu report: unit {unit!r} of {name!r} is not a byte count")
    return value * factor


def percent(report: Dict[str, object], section: str, name: str) -> float:
    """A `%` metric as a fraction."""
    unit, value = metric(report, section, name)
    if unit != "%":
        raise KeyError(f"ncu report: {name!r} is in {unit!r}, not %")
    return value / 100
