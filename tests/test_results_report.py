"""Measured numbers in README.md and benchmarks/RESULTS.md come from benchmarks/results/*.json.

`benchmarks/report.py` writes the marked regions of both files; here they are written
again in memory and compared. After a new benchmark run: `python benchmarks/report.py`.
"""
import copy
import os
import re

import pytest

from benchmarks import report

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
    assert "overlap at every N" in report.region_w1(changed)
    for r in changed["W1"]["results"]:
        if r["variant"] == "cpp" and r.get("status") == "OK":
            r["ns_per_load"].update(min=2000.0, max=3000.0)  # no range overlaps
    assert "disjoint at every N" in report.region_w1(changed)


def test_helpers():
    assert report.overlap({"min": 1, "max": 2}, {"min": 2, "max": 3})
    assert not report.overlap({"min": 1, "max": 2}, {"min": 2.1, "max": 3})
    assert report.slope([(1, 3.0), (2, 5.0), (4, 9.0)]) == pytest.approx(2.0)
    assert MEASURED.findall("costs 21 ns, 4 / 15 us, 94.5% and 2.1x") == ["21 ns", "15 us", "94.5%", "2.1x"]
    assert not MEASURED.findall("64x64 tiles, 32,764 bytes, sm_90a, N = 200")
