"""W3, host launch cost: microseconds per call from Python, against N descriptors.

The kernels (`launch_kernels.py`) are one CTA loading one 64x32 fp32 tile by TMA from
source `k` of N: the GPU work is a few microseconds, the numbers are the host's. Side by
side, for N in NS:

- ``plain``: a `@cute.kernel` with one tensor argument, no descriptor: the reference;
- ``list``: `List[cute.CopyAtom]` built inside the jit function from N tensors (today's
  `@gcdsl.kernel` usage): the DSL marshals N tensors and encodes N descriptors per call;
- ``table``: `gcdsl.TensorMapTable.encode(srcs)` (cached, nothing changed) + the call, which
  carries the N descriptors as ONE by-value parameter and builds one template atom; the N
  sources are N separate allocations, so the check reads each one's version and pointer;
- ``table, views of one tensor``: the same with the N sources slices of one (N, 64, 32)
  tensor, as a grouped GEMM's per-group weights or outputs are, passed as one tuple: the
  check tests no entry (a tuple cannot change) and reads one version and one pointer;
- ``table, encoded once``: the call alone, with the table encoded before the loop: what a
  caller pays who knows its tensors did not change (the launch itself, without the check);
- ``table, 1 changed``: the same as ``table`` with one source swapped before every call (one re-encode);
- ``encode only``: `TensorMapTable.encode` alone, unchanged (separate tensors, views of one
  tensor), and fully re-encoded (per descriptor);
- ``graph replay``: the ``table`` (and ``plain``) call captured once with
  `gcdsl.launch.capture_graph`, replayed.

Calling conventions: ``dsl`` is the DSL's native call (`cute.compile(...)`, arguments
marshalled in Python through `__c_pointers__`); ``tvm-ffi`` compiles the same jit function
with `--enable-tvm-ffi` and passes torch tensors directly (``tvm-ffi raw`` calls the
underlying `tvm_ffi.Function`, skipping the DSL's keyword wrapper). TVM-FFI rows are
SKIPPED where `apache-tvm-ffi` is not installed.

Per row and N: `enqueue` = wall time of `calls` back-to-back calls / calls (the GPU is not
waited for); `end-to-end` adds the final synchronize. Median [min-max] over `reps`
rounds; every round times every point once, in the same order, so a slow stretch of the
host falls on all points alike instead of on one N. Every variant is first checked bit-exactly (output poisoned with NaN) and,
for the changed rows, checked again after timing with the last swapped-in tensor.

Targets (computed, per calling convention, for ``table``, ``table, views of one tensor``
and ``table, encoded once``): at N = 64 at most 1.5x the same row at N = 1; at N = 1 at
most 1.5x ``plain``.
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
    ("table, views of one tensor", CONVENTIONS),
    ("table, encoded once", CONVENTIONS),
    ("table, 1 changed", CONVENTIONS),
    ("encode only, unchanged", ("-",)),
    ("encode only, unchanged, views of one tensor", ("-",)),
    ("encode only, all changed, per descriptor", ("-",)),
    ("graph replay: plain", ("dsl",)),
    ("graph replay: table", ("dsl",)),
)
TARGET_ROWS = ("table", "table, views of one tensor", "table, encoded once")  # judged below
FLAT_LIMIT = 1.5  # table at N=64 / table at N=1
REFERENCE_LIMIT = 1.5  # table at N=1 / plain


class Point:
    """One (row, convention, N): its zero-argument call and its samples, one per round."""

    def __init__(self, entry: Dict[str, Any], call: Callable[[], Any], calls: int, per: int = 1,
                 after: Optional[Callable[[], Optional[str]]] = None) -> None:
        self.entry, self.call, self.calls, self.per, self.after = entry, call, calls, per, after
        self.enqueue: List[float] = []
        self.e2e: List[float] = []

    def time_round(self) -> None:
        """`calls` back-to-back calls: host microseconds per call (and per `per`)."""
        import torch

        call, scale = self.call, 1e6 / self.calls / self.per
        t0 = time.perf_counter()
        for _ in range(self.calls):
            call()
        t1 = time.perf_counter()
        torch.cuda.synchronize()
        t2 = time.perf_counter()
        self.enqueue.append((t1 - t0) * scale)
        self.e2e.append((t2 - t0) * scale)


def interleaved_rounds(points: List[Point], reps: int) -> None:
    """Warm every point up, then `reps` rounds, each timing every point once, in order."""
    import torch

    for point in points:
        for _ in range(3):
            point.call()
    torch.cuda.synchronize()
    for _ in range(reps):
        for point in points:
            point.time_round()
    for point in points:
        problem = point.after() if point.after else None
        if problem:
            point.entry.update(status=FAILED, detail=problem)
        else:
            point.entry.update(status=OK, enqueue_us=summarize(point.enqueue), end_to_end_us=summarize(point.e2e))


class Problem:
    """N sources (one tile each, distinct contents), the output, and what it must hold."""

    def __init__(self, n: int) -> None:
        import torch

        from . import launch_kernels as L

        g = torch.Generator(device="cuda").manual_seed(n)
        self.n = n
        self.srcs = [torch.randn(L.TILE, device="cuda", generator=g) for _ in range(n)]
        self.views = torch.randn((n, *L.TILE), device="cuda", generator=g).unbind(0)  # a tuple
        self.spares = [torch.randn(L.TILE, device="cuda", generator=g) for _ in range(2)]  # swapped in, one per call
        self.out = torch.empty(L.TILE, device="cuda")
        self.k = n - 1  # the last source: the one the changed rows swap

    def check(self, call: Callable[[], Any], want=None) -> bool:
        import torch

        self.out.fill_(float("nan"))
        call()
        torch.cuda.synchronize()
        want = self.srcs[self.k] if want is None else want() if callable(want) else want
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

    def table(self, srcs=None, maps=None):
        c, first, out, k, tail = self.compiled["table"], self.first, self.out, self.k, self.tail
        maps = self.maps if maps is None else maps
        srcs = self.p.srcs if srcs is None else srcs
        return lambda: c(maps.encode(srcs), first, out, k, *tail)

    def table_views(self):
        import gcdsl
        from . import launch_kernels as L

        return self.table(self.p.views, gcdsl.TensorMapTable(box=L.TILE))

    def table_once(self):
        c, descs, first, out, k, tail = (self.compiled["table"], self.maps.encode(self.p.srcs), self.first,
                                         self.out, self.k, self.tail)
        return lambda: c(descs, first, out, k, *tail)

    def table_changed(self):
        """Each call puts the next spare in the last slot: one descriptor re-encoded per call.

        Its own table and list: the other rows' tables stay unchanged between rounds."""
        import gcdsl
        from . import launch_kernels as L

        srcs = self.changed_srcs = list(self.p.srcs)
        call, spares, last, turn = self.table(srcs, gcdsl.TensorMapTable(box=L.TILE)), self.p.spares, self.p.n - 1, [0]

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
                     "order": "interleaved: each round times every point once",
                     "kernel": "1 CTA x 64 threads, one 64x32 fp32 TMA load from source k, plain stores",
                     "tvm_ffi": tvm_missing or _version("apache-tvm-ffi"),
                     "targets": {"table N=64 / table N=1": FLAT_LIMIT, "table N=1 / plain": REFERENCE_LIMIT}}
    print_header(f"W3 launch cost: 1-CTA TMA load, {calls} calls x {reps} interleaved rounds per point")
    results: Dict[tuple, Dict[str, Any]] = {}
    points: List[Point] = []

    def add(row: str, convention: str, n: int, prepare: Callable[[Dict[str, Any]], Any]) -> None:
        """`prepare(entry)` checks the row's output and gives its Point, or a result (not timed)."""
        entry = report.add(variant=row, convention=convention, n=n)
        results[(row, convention, n)] = entry
        try:
            got = prepare(entry)
        except Exception as exc:  # noqa: BLE001 - reported as the result, never hidden
            got = {"status": ERROR, "detail": _short(exc)}
            traceback.print_exc()
            torch.cuda.synchronize()
        if isinstance(got, Point):
            points.append(got)
        else:
            entry.update(got)
            print(f"  N={n:<4} {convention:<12} {row:<46} {_cell(entry)}", flush=True)

    def checked(p: Problem, call: Callable[[], Any], want: Any = None, per: int = 1, n_calls: int = calls,
                after: Optional[Callable[[], Optional[str]]] = None):
        def prepare(entry):
            if not p.check(call, want):
                return {"status": FAILED, "detail": "output differs from the source before timing"}
            return Point(entry, call, n_calls, per, after)
        return prepare

    for n in NS:
        p = Problem(n)
        for convention in CONVENTIONS:
            if convention != "dsl" and tvm_missing:
                for row, convs in ROWS:
                    if convention in convs:
                        add(row, convention, n, lambda entry: {"status": SKIPPED, "detail": tvm_missing})
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
                        add(row, convention, n, lambda entry, e=exc: {"status": ERROR, "detail": _short(e)})
                continue
            report.config.setdefault("compile_s_plain_list_table", {})[f"{convention} N={n}"] = round(
                time.perf_counter() - t0, 2)
            c = Calls(p, convention, compiled)
            changed = c.table_changed()
            add("plain", convention, n, checked(p, c.plain(), _plain_expected(p)))
            add("list", convention, n, checked(p, c.list()))
            add("table", convention, n, checked(p, c.table()))
            add("table, views of one tensor", convention, n, checked(p, c.table_views(), p.views[p.k]))
            add("table, encoded once", convention, n, checked(p, c.table_once()))
            last_swapped_in = lambda c=c: c.changed_srcs[-1]  # noqa: E731 - read after the call
            add("table, 1 changed", convention, n, checked(
                p, changed, last_swapped_in,
                after=lambda p=p, changed=changed, want=last_swapped_in: None if p.check(changed, want)
                else "after timing: the last swapped-in source was not read"))
            if convention == "dsl":
                _encode_rows(add, checked, p, n, calls)
                for row, launch, want in (
                        ("graph replay: plain", lambda s, c=c: c.compiled["plain"](c.out, s), _plain_expected(p)),
                        ("graph replay: table",
                         lambda s, c=c, p=p: c.compiled["table"](c.maps.encode(p.srcs), c.first, c.out, c.k, s), None)):
                    def prepare(entry, launch=launch, want=want, p=p):
                        graph = gcdsl.launch.capture_graph(launch)
                        return checked(p, graph.replay, want)(entry)

                    add(row, "dsl", n, prepare)
    print(f"\ntiming {len(points)} points: {reps} rounds, each point {calls} calls per round", flush=True)
    interleaved_rounds(points, reps)
    for (row, convention, n), entry in results.items():
        print(f"  N={n:<4} {convention:<12} {row:<46} {_cell(entry)}")
    _print_tables(results)
    _verdicts(report, results)
    return report


def _encode_rows(add, checked, p: Problem, n: int, calls: int) -> None:
    import torch

    import gcdsl

    from . import launch_kernels as L

    for row, srcs in (("encode only, unchanged", p.srcs), ("encode only, unchanged, views of one tensor", p.views)):
        maps = gcdsl.TensorMapTable(box=L.TILE)
        maps.encode(srcs)
        add(row, "-", n, lambda entry, maps=maps, srcs=srcs: Point(entry, lambda: maps.encode(srcs), calls))
    fresh = gcdsl.TensorMapTable(box=L.TILE)
    lists, turn = (list(p.srcs), [torch.empty_like(s) for s in p.srcs]), [0]  # every pointer differs

    def all_changed():
        turn[0] ^= 1
        fresh.encode(lists[turn[0]])

    rounds_calls = max(10, calls // 10)

    def prepare(entry):
        before = fresh.encodes
        return Point(entry, all_changed, rounds_calls, per=n,
                     after=lambda: None if fresh.encodes - before >= n * rounds_calls
                     else "the all-changed row did not encode every descriptor")

    add("encode only, all changed, per descriptor", "-", n, prepare)


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
    for convention, row in [(c, r) for c in CONVENTIONS for r in TARGET_ROWS]:
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
