"""Compile upstream CuTe DSL examples under `@cute.kernel` and `@gcdsl.kernel`; compare their PTX.

    GCDSL_UPSTREAM_EXAMPLES=.../examples/python/CuTeDSL \\
        python -m tests.upstream_compat sweep [--jobs 2] [--report FILE] [NAME_OR_PATTERN...]
    python -m tests.upstream_compat list
    python -m tests.upstream_compat compile --decorator gcdsl --out DIR NAME   # one process, one compile

The DSL reads `CUTE_DSL_*` when `cutlass` is imported, so every (example,
decorator) pair compiles in its own process: `compile` writes DIR/result.json
and the PTX it produced; `sweep` runs those processes (`--jobs` at a time),
compares the normalised PTX and prints one row per example.
"""
from __future__ import annotations

import argparse
import concurrent.futures
import fnmatch
import glob
import importlib.util
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time
import traceback
from dataclasses import asdict, dataclass, field
from typing import Dict, List, Optional

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
ENV_VAR = "GCDSL_UPSTREAM_EXAMPLES"
TIMEOUT_S = 900


def examples_root() -> Optional[str]:
    from gcdsl import config

    return config.get().upstream_examples


# ---------------------------------------------------------------- one compile (child process)


def compile_one(name: str, decorator: str, out: str) -> int:
    """Import example `name` with `decorator` in place of `@cute.kernel`, compile it, keep its PTX."""
    from tests.upstream.catalogue import load_all

    ex = load_all()[name]
    os.makedirs(out, exist_ok=True)
    dump = tempfile.mkdtemp(prefix="upstream-dump-")
    os.environ.update(CUTE_DSL_ARCH=ex.arch, CUTE_DSL_KEEP="ptx", CUTE_DSL_DUMP_DIR=dump, CUTE_DSL_NO_CACHE="1")
    result = {"example": name, "arch": ex.arch, "decorator": decorator, "ok": False}
    start = time.monotonic()
    try:
        import cutlass.cute as cute  # only now: the DSL reads the variables above on import

        from tests.upstream.machine import no_gpu
        from tests.upstream.switch import kernel_decorator

        with no_gpu(ex.arch), kernel_decorator(decorator):
            module = _import_example(os.path.join(examples_root(), ex.path))
            job = ex.build(module)
            cute.compile(job.fn, *job.args, **job.kwargs)
        ptx = sorted(glob.glob(os.path.join(dump, "**", "*.ptx"), recursive=True))
        if not ptx:
            raise RuntimeError("cute.compile produced no PTX")
        result["ptx"] = []
        for i, path in enumerate(ptx):
            kept = f"{i}.ptx"
            shutil.copy(path, os.path.join(out, kept))
            result["ptx"].append(kept)
        result["ok"] = True
    except BaseException as err:  # noqa: BLE001  (a report, not a crash: SystemExit from argparse included)
        result.update(error_type=f"{type(err).__module__}.{type(err).__qualname__}".removeprefix("builtins."),
                      error=first_line(err), where=innermost_frames(err), traceback=traceback.format_exc()[-8000:])
    result["seconds"] = round(time.monotonic() - start, 1)
    with open(os.path.join(out, "result.json"), "w") as f:
        json.dump(result, f, indent=1)
    shutil.rmtree(dump, ignore_errors=True)
    return 0


def _import_example(path: str):
    """Import an example as its own `__main__` would see it: its folder and the examples root
    (and the root's `cute/` folder, which some examples add) on `sys.path`."""
    root = examples_root()
    for folder in (os.path.join(root, "cute"), root, os.path.dirname(path)):
        if folder not in sys.path:
            sys.path.insert(0, folder)
    name = "upstream_" + re.sub(r"\W", "_", os.path.splitext(os.path.relpath(path, root))[0])
    spec = importlib.util.spec_from_file_location(name, path)
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module  # dataclasses and pickling look the module up by name
    spec.loader.exec_module(module)
    return module


def innermost_frames(err: BaseException) -> str:
    """Where it failed: the innermost frame in gcdsl and the innermost in the examples."""
    import gcdsl

    frames = traceback.extract_tb(err.__traceback__)
    places = []
    for folder, shown_from in ((os.path.dirname(gcdsl.__file__), os.path.dirname(os.path.dirname(gcdsl.__file__))),
                               (examples_root(), examples_root())):
        inside = [f for f in frames if f.filename.startswith(folder + os.sep)]
        if inside:
            f = inside[-1]
            places.append(f"{os.path.relpath(f.filename, shown_from)}:{f.lineno} {f.name}")
    return "; ".join(places)


_ANSI = re.compile(r"\x1b\[[0-9;]*m")


def first_line(err: BaseException) -> str:
    """The first line of an exception's message that says something (two where the first is
    only the DSL's banner for an internal error)."""
    lines = [line.strip() for line in _ANSI.sub("", str(err)).splitlines()]
    lines = [line for line in lines if line and not set(line) <= set("-=*_ ^|")]
    if not lines:
        return repr(err)[:300]
    if lines[0].startswith("error[INTERNAL]") and len(lines) > 1:
        return f"{lines[0]} {lines[1]}"[:300]
    return lines[0][:300]


# ---------------------------------------------------------------- both decorators (parent process)


@dataclass
class Outcome:
    name: str
    arch: str
    cute: Optional[dict] = None
    gcdsl: Optional[dict] = None
    identical: Optional[bool] = None
    same_names: Optional[bool] = None  # are the kernels' and functions' names the same too?
    difference: str = ""
    skip: str = ""
    seconds: float = 0.0
    ptx_lines: int = 0
    details: Dict[str, str] = field(default_factory=dict)


def run_pair(name: str, work: str) -> Outcome:
    """Compile `name` under both decorators (two processes, concurrently) and compare."""
    from tests.upstream.catalogue import load_all
    from tests.upstream.normalize import first_difference, normalize, symbol_names

    ex = load_all()[name]
    outcome = Outcome(name, ex.arch)
    if ex.build is None or ex.skip:
        outcome.skip = ex.skip or "no driver"
        return outcome
    start = time.monotonic()
    outs = {d: os.path.join(work, re.sub(r"\W", "_", name), d) for d in ("cute", "gcdsl")}
    env = {k: v for k, v in os.environ.items() if not k.startswith("CUTE_DSL_")}
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [ROOT, env.get("PYTHONPATH")]))
    procs = {
        d: subprocess.Popen([sys.executable, "-m", "tests.upstream_compat", "compile", "--decorator", d,
                             "--out", out, name], cwd=ROOT, env=env,
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
        for d, out in outs.items()
    }
    for d, proc in procs.items():
        try:
            log, _ = proc.communicate(timeout=TIMEOUT_S)
        except subprocess.TimeoutExpired:
            proc.kill()
            log, _ = proc.communicate()
        result_path = os.path.join(outs[d], "result.json")
        if os.path.exists(result_path):
            with open(result_path) as f:
                result = json.load(f)
        else:
            result = {"ok": False, "error_type": "crash", "seconds": None,
                      "error": f"compile process exited with {proc.returncode}", "traceback": log[-8000:]}
        setattr(outcome, d, result)
    outcome.seconds = round(time.monotonic() - start, 1)
    if not outcome.cute["ok"]:
        outcome.skip = f"does not compile under @cute.kernel: {outcome.cute['error_type']}: {outcome.cute['error']}"
        return outcome
    if outcome.gcdsl["ok"]:
        texts = {d: [_read(outs[d], p) for p in getattr(outcome, d)["ptx"]] for d in outs}
        normal = {d: "".join(sorted(normalize(t) for t in ts)) for d, ts in texts.items()}
        outcome.identical = normal["cute"] == normal["gcdsl"]
        names = {d: sorted(n for t in ts for n in symbol_names(t)) for d, ts in texts.items()}
        outcome.same_names = names["cute"] == names["gcdsl"]
        outcome.ptx_lines = normal["cute"].count("\n")
        if not outcome.identical:
            outcome.difference = first_difference(normal["cute"], normal["gcdsl"])
    return outcome


def _read(folder: str, name: str) -> str:
    with open(os.path.join(folder, name)) as f:
        return f.read()


# ---------------------------------------------------------------- report


def status(o: Outcome) -> str:
    if o.skip:
        return "skip"
    if not o.gcdsl["ok"]:
        return "gcdsl fails"
    return "identical" if o.identical else "PTX differs"


def markdown(outcomes: List[Outcome]) -> str:
    """One row per example, then the counts."""
    rows = ["| example | arch | cute | gcdsl | PTX identical | s | gcdsl failure / skip reason |",
            "|---|---|---|---|---|---|---|"]
    for o in outcomes:
        cute_ok = "-" if o.cute is None else ("yes" if o.cute["ok"] else "no")
        gcdsl_ok = "-" if o.gcdsl is None or not (o.cute or {}).get("ok") else ("yes" if o.gcdsl["ok"] else "**no**")
        same = {True: "yes", False: "**no**", None: "-"}[o.identical]
        if o.identical and not o.same_names:
            same += " (names differ)"
        if o.skip:
            why = o.skip
        elif not o.gcdsl["ok"]:
            why = f"`{o.gcdsl['error_type']}`: {o.gcdsl['error']} ({o.gcdsl.get('where', '')})"
        elif not o.identical:
            why = "first difference: " + o.difference.splitlines()[0] if o.difference else ""
        else:
            why = ""
        why = why.replace("|", "\\|")
        rows.append(f"| {o.name} | {o.arch} | {cute_ok} | {gcdsl_ok} | {same} | {o.seconds:g} | {why} |")
    counts: Dict[str, int] = {}
    for o in outcomes:
        counts[status(o)] = counts.get(status(o), 0) + 1
    summary = ", ".join(f"{v} {k}" for k, v in sorted(counts.items()))
    return "\n".join(rows) + f"\n\n{len(outcomes)} examples: {summary}.\n"


def select(names: List[str], patterns: List[str]) -> List[str]:
    if not patterns:
        return names
    return [n for n in names if any(fnmatch.fnmatch(n, p) or p in n for p in patterns)]


def sweep(args) -> int:
    from tests.upstream.catalogue import load_all

    if not examples_root():
        print(f"set {ENV_VAR} to the examples/python/CuTeDSL folder of a cutlass checkout", file=sys.stderr)
        return 2
    names = select(list(load_all()), args.patterns)
    work = args.work or tempfile.mkdtemp(prefix="upstream-compat-")
    start = time.monotonic()
    outcomes: Dict[str, Outcome] = {}
    # Each pair already runs two processes; `jobs` pairs at a time.
    with concurrent.futures.ThreadPoolExecutor(max_workers=args.jobs) as pool:
        futures = {pool.submit(run_pair, n, work): n for n in names}
        for fut in concurrent.futures.as_completed(futures):
            o = fut.result()
            outcomes[o.name] = o
            print(f"[{len(outcomes)}/{len(names)}] {o.name}: {status(o)} ({o.seconds:g} s)", flush=True)
    ordered = [outcomes[n] for n in names]
    report = markdown(ordered) + f"Wall time {time.monotonic() - start:.0f} s, {args.jobs} example(s) at a time.\n"
    print(report)
    if args.report:
        with open(args.report, "w") as f:
            f.write(report)
    if args.json:
        with open(args.json, "w") as f:
            json.dump([asdict(o) for o in ordered], f, indent=1)
    print(f"logs and PTX under {work}")
    return 0


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = parser.add_subparsers(dest="command", required=True)
    one = sub.add_parser("compile", help="compile one example under one decorator (a child process)")
    one.add_argument("--decorator", choices=["cute", "gcdsl"], required=True)
    one.add_argument("--out", required=True)
    one.add_argument("name")
    many = sub.add_parser("sweep", help="compile examples under both decorators and compare")
    many.add_argument("--jobs", type=int, default=1, help="examples at a time (each runs two processes)")
    many.add_argument("--report", help="write the markdown table here")
    many.add_argument("--json", help="write every outcome (errors and tracebacks included) here")
    many.add_argument("--work", help="keep PTX and results here (default: a temporary folder)")
    many.add_argument("patterns", nargs="*", help="example names or glob patterns (default: all)")
    sub.add_parser("list", help="list the catalogue")
    args = parser.parse_args()
    if args.command == "compile":
        return compile_one(args.name, args.decorator, args.out)
    if args.command == "sweep":
        return sweep(args)
    from tests.upstream.catalogue import load_all

    for ex in load_all().values():
        print(f"{ex.name:55s} {ex.arch:8s} {ex.path}" + (f"   [skip: {ex.skip}]" if ex.skip else ""))
    return 0


if __name__ == "__main__":
    sys.exit(main())
