"""Fuzzing the front end with kernels generated from a small grammar.

Each example is a kernel's source text, written to its own .py file and imported,
so that `inspect.getsource` reads it as it would a user's kernel. The grammar
knows which of its statements break the rules of gcdsl/frontend/analysis.py, so
besides "desugars cleanly or raises a located GcdslError, never anything else",
the test checks the outcome itself: the first bad statement's Diag, parameter
and line, or, on success, exactly the runtime indices the kernel holds.
"""
import ast
import importlib.util
import io
import itertools
import os
import re
import sys
import tokenize
from dataclasses import dataclass, field
from typing import List, Optional, Tuple

import pytest
from hypothesis import HealthCheck, event, given, settings
from hypothesis import strategies as st

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "fake_cute"))

from gcdsl import Diag, GcdslError, frontend  # noqa: E402
from gcdsl.frontend.analysis import is_constant_index  # noqa: E402

LISTS = ("atoms", "other")
SIGNATURE = "def k(atoms: List[cute.CopyAtom], other: List[cute.CopyAtom], x: cute.Tensor, n: int):"
HEADER = "from __future__ import annotations\n\nimport typing\nfrom typing import List, Sequence\n\n\ndef deco(f):\n    return f\n\n\n"

# ---------------------------------------------------------------------------------------
# The grammar
# ---------------------------------------------------------------------------------------
Problem = Tuple[Diag, str]  # the first problem on a line: its id and parameter


@dataclass
class Line:
    text: str  # without indentation
    indent: int  # in levels of four spaces, relative to the kernel's body
    problem: Optional[Problem] = None
    sites: int = 0  # runtime-indexed subscripts of a list parameter on this line


@dataclass
class Context:
    depth: int = 0  # block nesting
    loop_vars: List[str] = field(default_factory=list)


LITERALS = ["0", "1", "-1", "2", "+1"]


@st.composite
def index(draw, ctx: Context) -> Tuple[str, bool]:
    """An index expression, and whether it is a runtime one (not an integer literal)."""
    names = ["n", "v_int"] + ctx.loop_vars
    kind = draw(st.sampled_from(["literal", "name", "arith", "call", "call"]))
    if kind == "literal":
        return draw(st.sampled_from(LITERALS)), False
    name = draw(st.sampled_from(names))
    if kind == "name":
        return name, True
    if kind == "arith":
        template = draw(st.sampled_from(["{a} + 1", "({a} * 2) % 3", "{a} - {b}", "-{a}", "{a} // 2 + {b}"]))
        return template.format(a=name, b=draw(st.sampled_from(names))), True
    other = draw(st.sampled_from(LISTS))
    template = draw(st.sampled_from(["int({a})", "cute.arch.block_idx()[0]", f"len({other}) - 1",
                                     "min({a}, 2)", "x[{a}]", "tasks[{a}, 0]"]))
    return template.format(a=name), True


def _sub(lst: str, idx: Tuple[str, bool]) -> Tuple[str, int]:
    return f"{lst}[{idx[0]}]", int(idx[1])


@st.composite
def simple(draw, ctx: Context) -> List[Line]:
    """One simple statement (or a nested def/lambda), good or bad."""
    lst = draw(st.sampled_from(LISTS))
    alt = [o for o in LISTS if o != lst][0]
    sub, sites = _sub(lst, draw(index(ctx)))
    bad = draw(st.integers(0, 99)) < 10
    if not bad:
        choice = draw(st.integers(0, 17))
        if choice == 0:
            return [Line(f"v = {sub}", 0, sites=sites)]
        if choice == 1:
            return [Line(f"cute.copy({sub}, x, x)", 0, sites=sites)]
        if choice == 2:
            return [Line(f"cpasync.prefetch_descriptor({sub})", 0, sites=sites)]
        if choice == 3:
            return [Line(f"m = len({lst})", 0)]
        if choice == 4:
            return [Line(f"s = len({lst}[1:]) + len({alt}[::2])", 0)]
        if choice == 5:
            lit = draw(st.sampled_from(LITERALS))
            return [Line(f"w = {lst}[1:][{lit}]", 0)]
        if choice == 6:
            return [Line(f"vs = [{lst}[c] for c in range(n)]", 0, sites=1)]
        if choice == 7:
            return [Line(f"vs = [a for a in {lst} if a is not None]", 0)]
        if choice == 8:
            return [Line(f"vs = {{c: {lst}[c + 1] for c in range(n)}}", 0, sites=1)]
        if choice == 9:
            return [Line(f"v_int = n * 2 + {len(ctx.loop_vars)}", 0)]
        if choice == 10:
            return [Line(f"x[n] = {sub}", 0, sites=sites)]
        if choice == 11:
            return [Line(f"return {sub}", 0, sites=sites)]
        if choice == 12:
            return [Line(f"if (w := {sub}) is not None: pass", 0, sites=sites)]
        if choice == 13:
            return [Line("def helper(t):", 0), Line("return t + n", 1)]
        if choice == 14:
            return [Line("def helper(atom, t=n):", 0), Line("cute.copy(atom, t, t)", 1),
                    Line(f"helper({sub})", 0, sites=sites)]
        if choice == 15:
            return [Line("scale = lambda t: t * 2", 0)]
        if choice == 16:
            return [Line(f"g = sum(1 for a in zip({lst}, {alt}))", 0)]
        return [Line(f"cute.copy({sub}, {sub.replace(lst, alt, 1)}, x)", 0, sites=2 * sites)]
    aliased, mutated = (Diag.LIST_ALIASED, lst), (Diag.LIST_MUTATED, lst)
    choice = draw(st.integers(0, 24))
    if choice == 0:
        return [Line(f"y = {lst}", 0, aliased)]
    if choice == 1:
        return [Line(f"foo({lst})", 0, aliased)]
    if choice == 2:
        return [Line(f"z = {lst} + {alt}", 0, aliased)]
    if choice == 3:
        return [Line(f"t = ({lst}, n)", 0, aliased)]
    if choice == 4:
        return [Line(f"cute.copy(*{lst})", 0, aliased)]
    if choice == 5:
        return [Line(f"r = {lst}[1:]", 0, aliased)]
    if choice == 6:
        idx, runtime = draw(index(ctx))
        return [Line(f"cute.copy({lst}[1:][{idx}], x, x)", 0, aliased if runtime else None)]
    if choice == 7:
        return [Line(f"q = {lst}.index(x)", 0, aliased)]
    if choice == 8:
        return [Line(f"{lst}.append(x)", 0, mutated)]
    if choice == 9:
        return [Line(f"return {lst}", 0, (Diag.LIST_RETURNED, lst))]
    if choice == 10:
        return [Line(f"{lst} = {alt}", 0, (Diag.LIST_REASSIGNED, lst))]
    if choice == 11:
        return [Line(f"{lst} += {alt}", 0, (Diag.LIST_REASSIGNED, lst))]
    if choice == 12:
        return [Line(f"del {lst}", 0, (Diag.LIST_REASSIGNED, lst))]
    if choice == 13:
        return [Line(f"{sub} = x", 0, mutated)]
    if choice == 14:
        return [Line(f"del {sub}", 0, mutated)]
    if choice == 15:
        return [Line(f"vs = [{lst} for {lst} in range(n)]", 0, (Diag.LIST_SHADOWED, lst))]
    if choice == 16:
        return [Line("def helper():", 0), Line(f"return {sub}", 1, (Diag.LIST_CAPTURED, lst))]
    if choice == 17:
        return [Line(f"def helper({lst}):", 0, (Diag.LIST_SHADOWED, lst)), Line(f"return {lst}[0]", 1)]
    if choice == 18:
        return [Line(f"h = lambda: {sub}", 0, (Diag.LIST_CAPTURED, lst))]
    if choice == 19:
        return [Line(f"h = lambda {lst}: {lst}", 0, (Diag.LIST_SHADOWED, lst))]
    if choice == 20:
        return [Line(f"v = x[{lst}]", 0, aliased)]
    if choice == 21:
        return [Line(f"yield {lst}[::2]", 0, (Diag.LIST_RETURNED, lst))]
    if choice == 22:
        return [Line(f"v = {lst}[n, 0]", 0, (Diag.BAD_INDEX_TYPE, lst))]
    if choice == 23:
        return [Line(f"cute.copy({lst}[:, {draw(index(ctx))[0]}], x, x)", 0, (Diag.BAD_INDEX_TYPE, lst))]
    return [Line("class Table:", 0), Line(f"entries = len({lst})", 1, (Diag.LIST_CAPTURED, lst))]


@st.composite
def block(draw, ctx: Context) -> List[Line]:
    """An if/for/while block holding 1..3 statements, nesting up to depth 3."""
    inner = Context(ctx.depth + 1, list(ctx.loop_vars))
    lst = draw(st.sampled_from(LISTS))
    kind = draw(st.sampled_from(["if", "for", "for-list", "while", "with"]))
    bad = draw(st.integers(0, 99)) < 8  # a header that breaks the rules
    header: Line
    if kind == "if":
        cond = lst if bad else draw(st.sampled_from(["n > 0", "x[n] > 0", f"len({lst}) > 1"]))
        header = Line(f"if {cond}:", 0, (Diag.LIST_ALIASED, lst) if bad else None)
    elif kind == "for":
        var = f"i{ctx.depth}"
        inner.loop_vars.append(var)
        target = lst if bad else var
        header = Line(f"for {target} in range(n):", 0, (Diag.LIST_REASSIGNED, lst) if bad else None)
    elif kind == "for-list":
        alt = [o for o in LISTS if o != lst][0]
        it = draw(st.sampled_from([lst, f"{lst}[1:]", f"reversed({lst})", f"enumerate({lst})",
                                   f"zip({lst}, {alt}[::-1])"]))
        header = Line(f"for a{ctx.depth} in {it}:", 0)
    elif kind == "while":
        header = Line(draw(st.sampled_from(["while n < 3:", "while v_int > 0:"])), 0)
    else:
        sub, sites = _sub(lst, draw(index(ctx)))
        header = Line(f"with cute.arch.elect_one({sub}) as w:", 0, sites=sites)
    lines = [header]
    for stmt in draw(body(inner, 1, 3)):
        lines.append(Line(stmt.text, stmt.indent + 1, stmt.problem, stmt.sites))
    if kind == "if" and draw(st.booleans()):
        lines.append(Line("else:", 0))
        for stmt in draw(body(inner, 1, 2)):
            lines.append(Line(stmt.text, stmt.indent + 1, stmt.problem, stmt.sites))
    return lines


@st.composite
def body(draw, ctx: Context, low: int, high: int) -> List[Line]:
    lines: List[Line] = []
    for _ in range(draw(st.integers(low, high))):
        nest = ctx.depth < 3 and draw(st.integers(0, 3)) == 0
        lines += draw(block(ctx) if nest else simple(ctx))
    return lines


@dataclass
class Kernel:
    text: str  # the whole module
    first: int  # the kernel's first line (its decorator, if any)
    def_line: int
    last: int
    lines: List[Tuple[int, Line]]  # (file line, statement) for each statement line
    where: str  # "module", "class" or "factory"

    @property
    def expected_problem(self) -> Optional[Tuple[int, Problem]]:
        return next(((number, line.problem) for number, line in self.lines if line.problem), None)

    @property
    def expected_sites(self) -> int:
        return sum(line.sites for _, line in self.lines)


ANNOTATIONS = ["List[cute.CopyAtom]", "list[cute.CopyAtom]", "typing.Sequence[cute.CopyAtom]", "Sequence[CopyAtom]"]


@st.composite
def kernels(draw) -> Kernel:
    """A kernel at module level, as a static method, or made by a function (a closure
    over `limit`, with a computed default)."""
    stmts = draw(body(Context(), 1, 8))
    where = draw(st.sampled_from(["module", "class", "factory"]))
    decorated = draw(st.booleans())
    docstring = draw(st.booleans())
    annotations = [draw(st.sampled_from(ANNOTATIONS)) for _ in LISTS]
    signature = SIGNATURE.replace("List[cute.CopyAtom]", "{}").format(*annotations)
    out = HEADER.splitlines()
    if where == "class":
        out.append("class Holder:")
    elif where == "factory":
        out.append("def make(limit):")
        signature = signature.replace("n: int)", "n: int, scale: float = limit * 2)")
    first = len(out) + 1
    pad = "    " * (where != "module")
    if where == "class":
        out.append(pad + "@staticmethod")
    if decorated:
        out.append(pad + "@deco")
    def_line = len(out) + 1
    out.append(pad + signature)
    if docstring:
        out.append(pad + '    """A generated kernel."""')
    if where == "factory":
        stmts = [Line("v_int = limit + n", 0)] + stmts
    numbered = []
    for stmt in stmts:
        out.append(pad + "    " * (1 + stmt.indent) + stmt.text)
        numbered.append((len(out), stmt))
    last = len(out)
    if where == "factory":
        out.append("    return k")
    return Kernel("\n".join(out) + "\n", first, def_line, last, numbered, where)


# ---------------------------------------------------------------------------------------
# The property
# ---------------------------------------------------------------------------------------
_counter = itertools.count()
OUTCOMES = {"ok": 0, "error": 0}


def load(kernel: Kernel, directory) -> Tuple[object, str]:
    name = f"gcdsl_fuzz_kernel_{os.getpid()}_{next(_counter)}"
    path = directory / f"{name}.py"
    path.write_text(kernel.text)
    spec = importlib.util.spec_from_file_location(name, path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    func = {"module": lambda: module.k, "class": lambda: module.Holder.k,
            "factory": lambda: module.make(4)}[kernel.where]()
    return func, str(path)


def strip_comments(text: str) -> List[str]:
    """The lines of `text` without comments, blank lines or trailing blanks."""
    lines = text.splitlines()
    for tok in reversed(list(tokenize.generate_tokens(io.StringIO(text).readline))):
        if tok.type == tokenize.COMMENT:
            row, col = tok.start
            lines[row - 1] = lines[row - 1][:col]
    return [line.rstrip() for line in lines if line.strip()]


def runtime_subscripts(tree: ast.AST) -> List[str]:
    return [ast.unparse(node) for node in ast.walk(tree)
            if isinstance(node, ast.Subscript) and isinstance(node.value, ast.Name) and node.value.id in LISTS
            and not isinstance(node.slice, ast.Slice) and not is_constant_index(node.slice)]


def check_success(kernel: Kernel, func, path: str, text: str) -> None:
    assert kernel.expected_problem is None, f"expected {kernel.expected_problem}, got success:\n{kernel.text}"
    source = frontend.capture(func)
    assert (source.tree.lineno, source.tree.end_lineno) == (kernel.def_line, kernel.last)
    desugared = frontend.desugar(frontend.analyze(source))
    assert frontend.render(desugared) == text

    reparsed = ast.parse(text)  # the output is Python ...
    assert ast.dump(reparsed) == ast.dump(desugared.module)  # ... of the same tree
    assert strip_comments(text) == strip_comments(ast.unparse(reparsed))  # and renders stably
    assert ast.unparse(ast.parse(ast.unparse(reparsed))) == ast.unparse(reparsed)

    for node in ast.walk(desugared.function):
        if hasattr(node, "lineno") and node is not desugared.function:
            assert kernel.first <= node.lineno <= kernel.last, (ast.dump(node)[:100], node.lineno)
            assert kernel.first <= node.end_lineno <= kernel.last, (ast.dump(node)[:100], node.end_lineno)

    assert runtime_subscripts(desugared.function) == []
    assert runtime_subscripts(reparsed) == []
    assert text.count("__gcdsl__.param_desc_ptr(") == kernel.expected_sites, text
    prologue = "__gcdsl__.descriptor_array("  # one per list with a non-literal index, at its parameter
    rewritten_lines = {int(m) for line in text.splitlines() if prologue not in line
                       for m in re.findall(r"  # " + re.escape(os.path.basename(path)) + r":(\d+)$", line)}
    assert rewritten_lines <= {number for number, line in kernel.lines
                               if line.sites or "prefetch_descriptor(" in line.text}, text


def check_error(kernel: Kernel, func, path: str, err: GcdslError) -> None:
    assert isinstance(err.diag, Diag)
    assert err.location is not None and err.location.filename == path, str(err)
    assert kernel.def_line <= err.location.line <= kernel.last, str(err)
    assert err.message and err.hint, str(err)
    expected = kernel.expected_problem
    assert expected is not None, f"unexpected error:\n{err}\n{kernel.text}"
    line, (diag, param) = expected
    assert (err.location.line, err.diag, err.param) == (line, diag, param), f"{err}\nexpected {expected}"
    source_line = kernel.text.splitlines()[line - 1]
    assert source_line[err.location.col:].startswith(param), (source_line, err.location.col)
    # The other entry point fails the same way.
    with pytest.raises(GcdslError) as again:
        frontend.desugar(frontend.analyze(frontend.capture(func)))
    assert (again.value.diag, again.value.location) == (err.diag, err.location)


@settings(max_examples=500, deadline=None,
          suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow,
                                 HealthCheck.data_too_large])
@given(kernel=kernels())
def test_front_end_desugars_or_reports_a_located_error(kernel, tmp_path):
    func, path = load(kernel, tmp_path)
    try:
        text = frontend.desugar_function(func)
    except GcdslError as err:
        event(f"error: {err.diag.value}")
        OUTCOMES["error"] += 1
        check_error(kernel, func, path, err)
        return
    event("desugared")
    OUTCOMES["ok"] += 1
    check_success(kernel, func, path, text)


def test_the_fuzzer_saw_both_outcomes():
    if not sum(OUTCOMES.values()):
        pytest.skip("run with the fuzz test")
    assert OUTCOMES["ok"] >= 50 and OUTCOMES["error"] >= 50, OUTCOMES


def test_fstring_in_a_kernel_renders(tmp_path):
    text = HEADER + SIGNATURE + '\n    print(f"{n}: {atoms[n]}")\n'
    kernel = Kernel(text, 11, 11, 12, [], "module")
    func, _ = load(kernel, tmp_path)
    assert "__gcdsl__.param_desc_ptr(atoms, n)" in frontend.desugar_function(func)
