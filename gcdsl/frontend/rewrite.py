"""AST rewriting: from the user's kernel to ordinary CuTe DSL code.

Rewrites are small source templates whose UPPERCASE placeholders are replaced by
the user's own nodes, so each one reads as the code it produces. A runtime pick
from a descriptor list names its three parts, the template atom, the descriptor's
address in parameter space and the binding of the two:

    loads[k]   ->   __gcdsl__.bind(loads[0], tma_desc_ptr=__gcdsl__.param_desc_ptr(loads, k))

`__gcdsl__` is `gcdsl.lower.runtime`, bound in the kernel's globals. Everything
else in the kernel is left as written.
"""
from __future__ import annotations

import ast
import copy
from dataclasses import dataclass, field
from typing import Any, Dict, List, Optional

from .analysis import KernelAnalysis, ParamKind

RUNTIME_NAME = "__gcdsl__"
BIND_NAME = "__gcdsl_bind__"

# The CuTe DSL recognises its decorators by attribute name (`kernel`, `jit`) when it
# re-reads a kernel's source, so the desugared text carries the real one.
DECORATOR_TEMPLATE = f"{RUNTIME_NAME}.cute.kernel"
# Options for `cute.kernel` itself (`@gcdsl.kernel(preprocess=False)`) are written out as
# keywords, since the DSL reads them from the source; a value that is not a literal
# comes from the binding function's `__gcdsl_kernel_options__`.
OPTIONS_NAME = "__gcdsl_kernel_options__"

# `PARAM[INDEX]` with a non-literal index. A Python `int` at trace time picks the
# entry itself, exactly as the DSL would.
SITE_TEMPLATES = {
    ParamKind.DESCRIPTOR_LIST:
        f"{RUNTIME_NAME}.bind(PARAM[0], tma_desc_ptr={RUNTIME_NAME}.param_desc_ptr(PARAM, INDEX))",
    ParamKind.TENSOR_LIST: f"{RUNTIME_NAME}.tensor_from_table(PARAM, INDEX)",
}
# With bounds checks on (GCDSL_CHECK_BOUNDS=1 or @gcdsl.kernel(check_bounds=True)),
# the index of every site is checked first.
CHECKED_INDEX_TEMPLATE = f"{RUNTIME_NAME}.in_bounds(INDEX, len(PARAM), WHAT)"

# `PARAM[LOWER:UPPER:STEP]` with a non-literal bound: the bounds must be trace-time ints.
SLICE_TEMPLATE = f"{RUNTIME_NAME}.static_slice(PARAM, LOWER, UPPER, STEP)"

# What the kernel really receives, where the annotation says otherwise: the DSL
# checks kernel arguments against their annotations.
ANNOTATION_TEMPLATES = {
    ParamKind.GRID_CONSTANT_TENSOR: f"{RUNTIME_NAME}.GridConstantParam",
}

# Statements put at the top of the kernel body: one per grid-constant table, and one
# per list parameter with a rewritten subscript (it names the list for the lowering).
PROLOGUE_TEMPLATES = {
    ParamKind.GRID_CONSTANT_TENSOR: f"PARAM = {RUNTIME_NAME}.table_view(PARAM, {RUNTIME_NAME}.param_space_ptr(PARAM))",
    ParamKind.DESCRIPTOR_LIST: f"PARAM = {RUNTIME_NAME}.descriptor_array(PARAM, NAME)",
    ParamKind.TENSOR_LIST: f"PARAM = {RUNTIME_NAME}.tensor_table(PARAM, NAME)",
}

# The last statement of a kernel whose lists the analysis expects a runtime index to
# reach (`KernelAnalysis.speculative`): lowered before the trace, each must have met one
# by the end of it, or the kernel is traced again with that list in the DSL's form.
END_OF_TRACE_TEMPLATE = f"{RUNTIME_NAME}.end_of_trace()"

# Calls that read an atom's descriptor directly instead of through `cute.copy`: in a
# kernel with indexed lists they go through gcdsl, which follows the pointer of a
# runtime-picked atom and forwards any other atom unchanged.
DESCRIPTOR_CALLS = {
    "prefetch_descriptor": f"{RUNTIME_NAME}.prefetch_descriptor",
    "copy_tensormap": f"{RUNTIME_NAME}.copy_tensormap",
}


def from_template(template: str, at: ast.AST, **holes) -> ast.AST:
    """Parse `template` (one expression or statement), place it at `at`'s position,
    and fill each UPPERCASE name: a `str` hole becomes that name (keeping its load or
    store context), an AST hole a copy of the node (which keeps its own position)."""

    class Fill(ast.NodeTransformer):
        def visit_Name(self, node: ast.Name) -> ast.AST:
            hole = holes.get(node.id)
            if hole is None:
                return node
            if isinstance(hole, str):
                return ast.copy_location(ast.Name(id=hole, ctx=node.ctx), node)
            return copy.deepcopy(hole)

    (node,) = ast.parse(template).body
    if isinstance(node, ast.Expr):
        node = node.value
    return Fill().visit(_placed(node, at))


def _placed(tree: ast.AST, at: ast.AST) -> ast.AST:
    for node in ast.walk(tree):
        if "lineno" in node._attributes:
            node.lineno, node.col_offset = at.lineno, at.col_offset
            node.end_lineno, node.end_col_offset = at.end_lineno, at.end_col_offset
    return tree


@dataclass
class Desugared:
    """The rewritten kernel: a module holding one `def` and where each change came from."""

    module: ast.Module
    function: ast.FunctionDef
    origins: Dict[int, str] = field(default_factory=dict)  # id(stmt) -> "file.py:LINE"
    defaulted_params: List[str] = field(default_factory=list)  # computed defaults, in order


class _IndexRewriter(ast.NodeTransformer):
    def __init__(self, analysis: KernelAnalysis, check_bounds: bool) -> None:
        self.analysis = analysis
        self.check_bounds = check_bounds
        self.sites = {id(s.node): s for p in analysis.params.values() for s in p.sites}
        self.rewritten_stmts: set = set()
        self._stmt_stack: List[ast.stmt] = []

    def visit(self, node: ast.AST) -> ast.AST:
        is_stmt = isinstance(node, ast.stmt)
        if is_stmt:
            self._stmt_stack.append(node)
        try:
            return super().visit(node)
        finally:
            if is_stmt:
                self._stmt_stack.pop()

    def visit_FunctionDef(self, node: ast.FunctionDef) -> ast.AST:
        # Rewrite the body only: annotations and defaults are host-side expressions.
        node.body = [self.visit(s) for s in node.body]
        return node

    def visit_Call(self, node: ast.Call) -> ast.AST:
        self.generic_visit(node)
        name = node.func.attr if isinstance(node.func, ast.Attribute) else getattr(node.func, "id", None)
        if name not in DESCRIPTOR_CALLS or not self.sites:
            return node
        node.func = from_template(DESCRIPTOR_CALLS[name], at=node.func)
        self.rewritten_stmts.add(id(self._stmt_stack[-1]))
        return node

    def visit_Subscript(self, node: ast.Subscript) -> ast.AST:
        site = self.sites.get(id(node))
        self.generic_visit(node)
        if site is None:
            return node
        param = self.analysis.params[site.param]
        if site.is_slice:
            bounds = node.slice
            new = from_template(SLICE_TEMPLATE, at=node, PARAM=site.param,
                                LOWER=bounds.lower or ast.Constant(None), UPPER=bounds.upper or ast.Constant(None),
                                STEP=bounds.step or ast.Constant(None))
        else:
            index = node.slice
            if self.check_bounds:
                what = f"`{site.param}` in kernel `{self.analysis.source.name}` at {self.analysis.source.location(node).short}"
                index = from_template(CHECKED_INDEX_TEMPLATE, at=node, INDEX=index, PARAM=site.param,
                                      WHAT=ast.Constant(what))
            new = from_template(SITE_TEMPLATES[param.kind], at=node, PARAM=site.param, INDEX=index)
        self.rewritten_stmts.add(id(self._stmt_stack[-1]))
        return new


def desugar(analysis: KernelAnalysis, *, check_bounds: bool = False,
            kernel_options: Optional[Dict[str, Any]] = None) -> Desugared:
    source = analysis.source
    copies: Dict[int, Any] = {}  # deepcopy's memo: id(original node) -> its copy
    fn = copy.deepcopy(source.tree, copies)
    rewriter = _IndexRewriter(analysis, check_bounds)
    # The analysis found its sites in the original tree: name them by their copies.
    rewriter.sites = {id(copies[original]): site for original, site in rewriter.sites.items()}
    fn = rewriter.visit(fn)

    params_by_name = {a.arg: a for a in fn.args.posonlyargs + fn.args.args + fn.args.kwonlyargs}
    for param in analysis.params.values():
        if param.kind in ANNOTATION_TEMPLATES:
            arg = params_by_name[param.name]
            arg.annotation = from_template(ANNOTATION_TEMPLATES[param.kind], at=arg.annotation)
    prologue = []
    for param in analysis.params.values():
        if param.kind is not ParamKind.GRID_CONSTANT_TENSOR and not param.sites:
            continue
        prologue.append(from_template(PROLOGUE_TEMPLATES[param.kind], at=param.node,
                                      PARAM=param.name, NAME=ast.Constant(param.name)))
    fn.body = _after_docstring(fn.body, prologue)
    if analysis.speculative:
        fn.body.append(_placed(ast.Expr(from_template(END_OF_TRACE_TEMPLATE, at=source.tree)), source.tree))

    def_origin = source.location(source.tree).short
    fn.decorator_list = [_decorator(kernel_options or {}, at=source.tree)]
    origins = {id(fn): f"{def_origin} (@gcdsl.kernel)"}
    for stmt in ast.walk(fn):
        if id(stmt) in rewriter.rewritten_stmts:
            origins[id(stmt)] = source.location(stmt).short
    for stmt in prologue:
        origins[id(stmt)] = source.location(stmt).short

    defaulted = _lift_defaults(fn)
    closure_names = list(source.func.__code__.co_freevars)
    body: List[ast.stmt] = [fn]
    options = [OPTIONS_NAME] if kernel_options else []
    if closure_names or defaulted or options:
        # Closures and computed defaults belong to the enclosing scope; a binding
        # function takes their values so the desugared def can be executed anew.
        bind_params = ", ".join(closure_names + [default_name(p) for p in defaulted] + options)
        factory = _placed(ast.parse(f"def {BIND_NAME}({bind_params}):\n    return {fn.name}").body[0], source.tree)
        factory.body.insert(0, fn)
        body = [factory]
    module = ast.Module(body=body, type_ignores=[])
    ast.fix_missing_locations(module)
    return Desugared(module, fn, origins, defaulted)


def _decorator(options: Dict[str, Any], at: ast.AST) -> ast.expr:
    decorator = from_template(DECORATOR_TEMPLATE, at=at)
    if not options:
        return decorator
    keywords = []
    for name, value in options.items():
        literal = value is None or isinstance(value, (bool, int, float, str))
        keywords.append(ast.keyword(arg=name, value=ast.Constant(value) if literal else
                                    ast.Subscript(ast.Name(OPTIONS_NAME, ast.Load()), ast.Constant(name), ast.Load())))
    return _placed(ast.Call(func=decorator, args=[], keywords=keywords), at)


def _after_docstring(body: List[ast.stmt], inserted: List[ast.stmt]) -> List[ast.stmt]:
    has_doc = body and isinstance(body[0], ast.Expr) and isinstance(getattr(body[0], "value", None), ast.Constant) \
        and isinstance(body[0].value.value, str)
    return body[:1] + inserted + body[1:] if has_doc else inserted + body


def default_name(param: str) -> str:
    return f"__default_{param}__"


def _lift_defaults(fn: ast.FunctionDef) -> List[str]:
    """Replace non-literal defaults with names the binding function supplies;
    return the parameters whose defaults were replaced."""
    params: List[str] = []
    positional = fn.args.posonlyargs + fn.args.args
    pairs = list(zip(positional[len(positional) - len(fn.args.defaults):], fn.args.defaults))
    pairs += [(a, d) for a, d in zip(fn.args.kwonlyargs, fn.args.kw_defaults) if d is not None]
    replacements = {}
    for arg, default in pairs:
        if isinstance(default, ast.Constant):
            continue
        params.append(arg.arg)
        replacements[id(default)] = ast.Name(id=default_name(arg.arg), ctx=ast.Load())
    fn.args.defaults = [replacements.get(id(d), d) for d in fn.args.defaults]
    fn.args.kw_defaults = [replacements.get(id(d), d) if d is not None else None for d in fn.args.kw_defaults]
    return params
