"""W3, host launch cost: microseconds per call from Python, against N descriptors.

The kernels (`launch_kernels.py`) are one CTA loading one 64x32 fp32 tile by TMA from
source `k` of N: the GPU work is a few microseconds, the numbers are the host's. Side by
side, for N in NS:

- ``plain``: a `@cute.kernel` with one tensor argument, no descriptor: the reference;
- ``list``: `List[cute.CopyAtom]` built inside the jit function from N tensors (today's
  `@gcdsl.kernel` usage): the DSL marshals N tensors and encodes N descriptors per call;
- ``table``: `gcdsl.TensorMapTable.encode(srcs)` (cached, nothing changed) + the call, which
  carries the N descriptors as ONE by-value parameter and builds one template atom;
- ``table, encoded once``: the call alone, with the table encoded before the loop: what a
  caller pays who knows its tensors did not change (the launch itself, without the check);
- ``table, 1 changed``: the same as ``table`` with one source swapped before every call (one re-encode);
- ``encode only``: `TensorMapTable.encode` alone, unchanged, and fully re-encoded (per descriptor);
- ``graph replay``: the ``table`` (and ``plain``) call captured once with
  `gcdsl.launch.capture_graph`, replayed.

Calling conventions: ``dsl`` is the DSL's native call (`cute.compile(...)`, arguments
marshalled in Python through `__c_pointers__`); ``tvm-ffi`` compiles the same jit function
with `--enable-tvm-ffi` and passes torch tensors directly (``tvm-ffi raw`` calls the
underlying `tvm_ffi.Function`, skipping the DSL's keyword wrapper). TVM-FFI rows are
SKIPPED where `apache-tvm-ffi` is not installed.

Per row and N: `enqueue` = wall time of `calls` back-to-back calls / calls (the GPU is not
waited for); `end-to-end` adds the final synchronize. Median [min-max] over `reps`
repetitions. Every variant is first checked bit-exactly (output poisoned with NaN) and,
for the changed rows, checked again after timing with the last swapped-in tensor.

Targets (computed, per calling convention, for ``table`` and ``table, encoded once``): at
N = 64 at most 1.5x the same row at N = 1; at N = 1 at most 1.5x ``plain``.
"""
from __future__ import annotations

import time
import traceback
from typing import Any, Callable, Dict, List, Optional

from .harness import ERROR, FAILED, OK, SKIPPED, Report, fmt_range, print_header, summarize, table

NS = (1, 16, 64, 200)
CONVENTIONS = ("dsl", "tvm-ffi", "tvm-ffi raw")
ROWS = (  # (row name, conventions it is measured with)
    ("plain", CONVENTIONS),
    ("list", CONVENTIONS),
    ("table", CONVENTIONS),
    ("table, encoded once", CONVENTIONS),
    ("table, 1 changed", CONVENTIONS),
    ("encode only, unchanged", ("-",)),
    ("encode only, all changed, per descriptor", ("-",)),
    ("graph replay: plain", ("dsl",)),
    ("graph replay: table", ("dsl",)),
)
FLAT_LIMIT = 1.5  # table at N=64 / table at N=1
REFERENCE_LIMIT = 1.5  # table at N=1 / plain


def host_rate(call: Callable[[], Any], calls: int, reps: int, per: int = 1) -> Dict[str, Dict[str, Any]]:
    """Host microseconds per call (divided by `per` more, for per-descriptor rows)."""
    import torch

    for _ in range(3):
        call()
    torch.cuda.synchronize()
    enqueue, e2e = [], []
    for _ in range(reps):
        t0 = time.perf_counter()
        for _ in range(calls):
            call()
        t1 = time.perf_counter()
        torch.cuda.synchronize()
        t2 = time.perf_counter()
        enqueue.append((t1 - t0) / calls / per * 1e6)
        e2e.append((t2 - t0) / calls / per * 1e6)
    return {"enqueue_us": summarize(enqueue), "end_to_end_us": summarize(e2e)}


class Problem:
    """N sources (one tile each, distinct contents), the output, and what it must hold."""

    def __init__(self, n: int) -> None:
        import torch

        from . import launch_kernels as L

        g = torch.Generator(device="cuda").manual_seed(n)
        self.n = n
        self.srcs = [torch.randn(L.TILE, device="cuda", generator=g) for _ in range(n)]
        self.spares = [torch.randn(L.TILE, device="cuda", generator=g) for _ in range(2)]  # swapped in, one per call
        self.out = torch.empty(L.TILE, device="cuda")
        self.k = n - 1  # the last source: the one the changed rows swap

    def check(self, call: Callable[[], Any], want=None) -> bool:
        import torch

        self.out.fill_(float("nan"))
        call()
        torch.cuda.synchronize()
        want = self.srcs[self.k] if want is None else want
        # bit-exact, NaN where NaN is expected (the poison left by `plain`)
        return torch.equal(self.out.isnan(), want.isnan()) and torch.equal(self.out.nan_to_num(0.0), want.nan_to_num(0.0))


def _tvm_ffi_missing() -> Optional[str]:
    try:
        import tvm_ffi  # noqa: F401
    except ImportError as exc:
        return f"apache-tvm-ffi not installed ({exc})"
    return None


_COMPILED: Dict[tuple, Any] = {}


def _compile(variant: str, n: int, convention: str):
    """The compiled function; `tvm-ffi raw` is the `tvm_ffi.Function` inside the `tvm-ffi` one."""
    import cutlass.cute as cute

    from . import launch_kernels as L

    tvm = convention != "dsl"
    key = (variant, n, tvm)
    if key not in _COMPILED:
        fn, args = L.fake_args(variant, n, tvm_ffi=tvm)
        _COMPILED[key] = cute.compile(fn, *args, options="--enable-tvm-ffi") if tvm else cute.compile(fn, *args)
    compiled = _COMPILED[key]
    if convention == "tvm-ffi raw":
        return getattr(compiled, "__tvm_ffi_object__", lambda: compiled)()
    return compiled


class Calls:
    """The zero-argument call of each row for one N and one calling convention."""

    def __init__(self, p: Problem, convention: str, compiled: Dict[str, Any]) -> None:
        import gcdsl
        from . import common, launch_kernels as L

        self.p, self.convention, self.compiled = p, convention, compiled
        self.maps = gcdsl.TensorMapTable(box=L.TILE)
        self.maps.encode(p.srcs)
        if convention == "dsl":
            st = common.stream()
            self.out = common.wrap(p.out)
            self.first = common.wrap(p.srcs[0])
            self.srcs = [common.wrap(t) for t in p.srcs]
            self.k = common.i32(p.k)
            self.tail = (st,)
        else:  # torch tensors as they are; the launch goes to torch's current stream
            self.out, self.first, self.srcs, self.k, self.tail = p.out, p.srcs[0], p.srcs, p.k, ()

    def plain(self):
        c, out, tail = self.compiled["plain"], self.out, self.tail
        return lambda: c(out, *tail)

    def list(self):
        c, srcs, out, k, tail = self.compiled["list"], self.srcs, self.out, self.k, self.tail
        return lambda: c(srcs, out, k, *tail)

    def table(self):
        c, maps, srcs, first, out, k, tail = (self.compiled["table"], self.maps, self.p.srcs, self.first,
                                              self.out, self.k, self.tail)
        return lambda: c(maps.encode(srcs), first, out, k, *tail)

    def table_once(self):
        c, descs, first, out, k, tail = (self.compiled["table"], self.maps.encode(self.p.srcs), self.first,
                                         self.out, self.k, self.tail)
        return lambda: c(descs, first, out, k, *tail)

    def table_changed(self):
        """Each call puts the next spare in the last slot: one descriptor re-encoded per call."""
        call, srcs, spares, last, turn = self.table(), self.p.srcs, self.p.spares, self.p.n - 1, [0]

        def changed():
            turn[0] ^= 1
            srcs[last] = spares[turn[0]]
            call()

        return changed


def run(args, machine: Dict[str, Any]) -> Report:
    import torch

    import gcdsl.launch

    calls = 100 if args.quick else 300
    reps = args.reps
    report = Report("W3", "W3 host launch cost: microseconds per call from Python, against N descriptors")
    tvm_missing = _tvm_ffi_missing()
    report.config = {"ns": NS, "calls_per_rep": calls, "reps": reps, "clock": "time.perf_counter (host)",
                     "kernel": "1 CTA x 64 threads, one 64x32 fp32 TMA load from source k, plain stores",
                     "tvm_ffi": tvm_missing or _version("apache-tvm-ffi"),
                     "targets": {"table N=64 / table N=1": FLAT_LIMIT, "table N=1 / plain": REFERENCE_LIMIT}}
    print_header(f"W3 launch cost: 1-CTA TMA load, {calls} calls x {reps} reps per point")
    results: Dict[tuple, Dict[str, Any]] = {}

    def record(row: str, convention: str, n: int, measure: Callable[[], Dict[str, Any]]) -> None:
        entry = report.add(variant=row, convention=convention, n=n)
        results[(row, convention, n)] = entry
        try:
            entry.update(measure())
        except Exception as exc:  # noqa: BLE001 - reported as the result, never hidden
            entry.update(status=ERROR, detail=_short(exc))
            traceback.print_exc()
            torch.cuda.synchronize()
        print(f"  N={n:<4} {convention:<12} {row:<42} {_cell(entry)}", flush=True)

    for n in NS:
        p = Problem(n)
        for convention in CONVENTIONS:
            if convention != "dsl" and tvm_missing:
                for row, convs in ROWS:
                    if convention in convs:
                        record(row, convention, n, lambda: {"status": SKIPPED, "detail": tvm_missing})
                continue
            compiled: Dict[str, Any] = {}
            t0 = time.perf_counter()
            try:
                for variant in ("plain", "list", "table"):
                    compiled[variant] = _compile(variant, n, convention)
            except Exception as exc:  # noqa: BLE001
                traceback.print_exc()
                for row, convs in ROWS:
                    if convention in convs:
                        record(row, convention, n, lambda e=exc: {"status": ERROR, "detail": _short(e)})
                continue
            compile_s = time.perf_counter() - t0
            c = Calls(p, convention, compiled)
            for row, call, want in (("plain", c.plain(), "plain"), ("list", c.list(), None),
                                    ("table", c.table(), None), ("table, encoded once", c.table_once(), None),
                                    ("table, 1 changed", c.table_changed(), None)):
                def measure(call=call, want=want, row=row):
                    expected = _plain_expected(p) if want == "plain" else None
                    if not p.check(call, expected):
                        return {"status": FAILED, "detail": "output differs from the source before timing"}
                    out = {"status": OK, **host_rate(call, calls, reps)}
                    if row == "table, 1 changed" and not p.check(call):
                        return {"status": FAILED, "detail": "after timing: the last swapped-in source was not read"}
                    return out

                record(row, convention, n, measure)
            if convention == "dsl":
                _encode_rows(record, p, n, calls, reps)
                for row, launch in (("graph replay: plain", lambda s: compiled["plain"](c.out, s)),
                                    ("graph replay: table",
                                     lambda s: compiled["table"](c.maps.encode(p.srcs), c.first, c.out, c.k, s))):
                    def measure(launch=launch, row=row):
                        graph = gcdsl.launch.capture_graph(launch)
                        want = _plain_expected(p) if row.endswith("plain") else None
                        if not p.check(graph.replay, want):
                            return {"status": FAILED, "detail": "graph replay: output differs"}
                        return {"status": OK, **host_rate(graph.replay, calls, reps)}

                    record(row, "dsl", n, measure)
            report.config.setdefault("compile_s_plain_list_table", {})[f"{convention} N={n}"] = round(compile_s, 2)
    _print_tables(results)
    _verdicts(report, results)
    return report


def _encode_rows(record, p: Problem, n: int, calls: int, reps: int) -> None:
    import torch

    import gcdsl

    from . import launch_kernels as L

    maps = gcdsl.TensorMapTable(box=L.TILE)
    maps.encode(p.srcs)
    record("encode only, unchanged", "-", n, lambda: {"status": OK, **host_rate(lambda: maps.encode(p.srcs), calls, reps)})
    fresh = gcdsl.TensorMapTable(box=L.TILE)
    lists, turn = (list(p.srcs), [torch.empty_like(s) for s in p.srcs]), [0]  # every pointer differs

    def all_changed():
        turn[0] ^= 1
        fresh.encode(lists[turn[0]])

    def measure():
        before = fresh.encodes
        out = {"status": OK, **host_rate(all_changed, max(10, calls // 10), reps, per=n)}
        if fresh.encodes - before < n:
            return {"status": FAILED, "detail": "the all-changed row did not encode every descriptor"}
        return out

    record("encode only, all changed, per descriptor", "-", n, measure)


def _plain_expected(p: Problem):
    """What `plain` leaves in the poisoned output: column 0 set to 1, the rest NaN."""
    import torch

    want = torch.full_like(p.out, float("nan"))
    want[:, 0] = 1.0
    return want


def _median(results, row: str, convention: str, n: int, what: str = "enqueue_us") -> Optional[float]:
    r = results.get((row, convention, n), {})
    return r[what]["median"] if r.get("status") == OK else None


def _verdicts(report: Report, results) -> None:
    print("\nTargets (medians of host enqueue time):")
    verdicts = []
    for convention, row in [(c, r) for c in CONVENTIONS for r in ("table", "table, encoded once")]:
        t1, t64 = _median(results, row, convention, 1), _median(results, row, convention, 64)
        plain = _median(results, "plain", convention, 1)
        for name, num, den, limit in ((f"{row}: N=64 <= 1.5x N=1", t64, t1, FLAT_LIMIT),
                                      (f"{row}: N=1 <= 1.5x plain", t1, plain, REFERENCE_LIMIT)):
            if num is None or den is None:
                verdict = {"target": name, "convention": convention, "status": "NOT MEASURED"}
            else:
                ratio = num / den
                verdict = {"target": name, "convention": convention, "ratio": round(ratio, 3), "limit": limit,
                           "status": "MET" if ratio <= limit else "MISSED", "numerator_us": num, "denominator_us": den}
            verdicts.append(verdict)
            ratio_text = f"{verdict['ratio']:.2f}x ({num:.1f} / {den:.1f} us)" if "ratio" in verdict else ""
            print(f"  {convention:<12} {name:<42} {verdict['status']:<12} {ratio_text}")
    dsl64, tvm64 = _median(results, "table", "dsl", 64), _median(results, "table", "tvm-ffi", 64)
    if dsl64 is not None and tvm64 is not None:
        faster = "tvm-ffi" if tvm64 < dsl64 else "dsl"
        line = f"table call at N=64: dsl {dsl64:.1f} us, tvm-ffi {tvm64:.1f} us: {faster} is faster ({max(dsl64, tvm64) / min(dsl64, tvm64):.2f}x)"
        print("  " + line)
        report.notes.append(line)
    report.config["verdicts"] = verdicts


def _cell(entry: Dict[str, Any], what: str = "enqueue_us") -> str:
    if entry.get("status") != OK:
        return f"{entry.get('status')}: {entry.get('detail', '')}"
    return fmt_range(entry[what], digits=1)


def _print_tables(results) -> None:
    for what, label in (("enqueue_us", "host enqueue"), ("end_to_end_us", "end to end (with the final synchronize)")):
        headers = ["row", "convention"] + [f"N={n}" for n in NS]
        rows: List[List[str]] = []
        for row, convs in ROWS:
            for convention in convs:
                cells = [row, convention]
                for n in NS:
                    r = results.get((row, convention, n), {})
                    cells.append(fmt_range(r[what], digits=1) if r.get("status") == OK else str(r.get("status", "-")))
                rows.append(cells)
        print(f"\nus per call, {label}, median [min-max]")
        print(table(headers, rows))


def _short(exc: BaseException, limit: int = 300) -> str:
    text = f"{type(exc).__name__}: {exc}".strip().replace("\n", " ")
    return text if len(text) <= limit else text[: limit - 3] + "..."


def _version(dist: str) -> Optional[str]:
    import importlib.metadata

    try:
        return importlib.metadata.version(dist)
    except importlib.metadata.PackageNotFoundError:
        return None
