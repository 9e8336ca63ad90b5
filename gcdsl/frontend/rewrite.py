"""AST rewriting: from the user's kernel to ordinary CuTe DSL code.

Rewrites are small source templates whose UPPERCASE placeholders are replaced by
the user's own nodes, so each one reads as the code it produces:

    atoms[i]   ->   __gcdsl__.runtime_atom(atoms, i, origin='k.py:12')

`__gcdsl__` is `gcdsl.lower.runtime`, bound in the kernel's globals. Everything
else in the kernel is left as written.
"""
from __future__ import annotations

import ast
import copy
from dataclasses import dataclass, field
from typing import Dict, List

from .analysis import KernelAnalysis, ParamKind

RUNTIME_NAME = "__gcdsl__"
BIND_NAME = "__gcdsl_bind__"

# The CuTe DSL recognises its decorators by attribute name (`kernel`, `jit`) when it
# re-reads a kernel's source, so the desugared text carries the real one.
DECORATOR_TEMPLATE = f"{RUNTIME_NAME}.cute.kernel"

INDEX_TEMPLATES = {
    ParamKind.DESCRIPTOR_LIST: f"{RUNTIME_NAME}.runtime_atom(PARAM, INDEX, origin=ORIGIN)",
    ParamKind.TENSOR_LIST: f"{RUNTIME_NAME}.runtime_tensor(PARAM, INDEX, origin=ORIGIN)",
}
# With bounds checks on (GCDSL_CHECK_BOUNDS=1 or @gcdsl.kernel(check_bounds=True)).
CHECKED_INDEX_TEMPLATES = {
    ParamKind.DESCRIPTOR_LIST: f"{RUNTIME_NAME}.runtime_atom(PARAM, INDEX, origin=ORIGIN, check_bounds=WHAT)",
    ParamKind.TENSOR_LIST: f"{RUNTIME_NAME}.runtime_tensor(PARAM, INDEX, origin=ORIGIN)",
}

# What the kernel really receives, where the annotation says otherwise: the DSL
# checks kernel arguments against their annotations.
ANNOTATION_TEMPLATES = {
    ParamKind.GRID_CONSTANT_TENSOR: f"{RUNTIME_NAME}.GridConstantParam",
    ParamKind.TENSOR_LIST: f"{RUNTIME_NAME}.TensorListParam",  # only where indexed at runtime
}

# Statements put at the top of the kernel body, one per parameter of the kind.
PROLOGUE_TEMPLATES = {
    ParamKind.GRID_CONSTANT_TENSOR: f"PARAM = {RUNTIME_NAME}.grid_constant_tensor(PARAM, param=NAME, origin=ORIGIN)",
}

# Calls that read an atom's descriptor directly instead of through `cute.copy`: in a
# kernel with runtime-indexed lists they go through gcdsl, which follows the pointer
# of a runtime-picked atom and forwards any other atom unchanged.
DESCRIPTOR_CALLS = {"prefetch_descriptor": f"{RUNTIME_NAME}.prefetch_descriptor"}


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
    closure_names: List[str] = field(default_factory=list)
    defaulted_params: List[str] = field(default_factory=list)  # computed defaults, in order


class _IndexRewriter(ast.NodeTransformer):
    def __init__(self, analysis: KernelAnalysis, check_bounds: bool) -> None:
        self.analysis = analysis
        self.templates = CHECKED_INDEX_TEMPLATES if check_bounds else INDEX_TEMPLATES
        self.sites = {id(s.node): s for p in analysis.runtime_indexed.values() for s in p.sites}
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
        origin = self.analysis.source.location(node).short
        new = from_template(
            self.templates[param.kind],
            at=node,
            PARAM=site.param,
            INDEX=node.slice,
            ORIGIN=ast.Constant(origin),
            WHAT=ast.Constant(f"`{site.param}` in kernel `{self.analysis.source.name}`"),
        )
        self.rewritten_stmts.add(id(self._stmt_stack[-1]))
        return new


def desugar(analysis: KernelAnalysis, *, check_bounds: bool = False) -> Desugared:
    source = analysis.source
    fn = copy.deepcopy(source.tree)
    rewriter = _IndexRewriter(analysis, check_bounds)
    # deepcopy breaks node identity; map the sites onto the copy by walking both trees.
    originals = list(ast.walk(source.tree))
    copies = list(ast.walk(fn))
    remap = {id(c): rewriter.sites[id(o)] for o, c in zip(originals, copies) if id(o) in rewriter.sites}
    rewriter.sites = remap
    fn = rewriter.visit(fn)

    params_by_name = {a.arg: a for a in fn.args.posonlyargs + fn.args.args + fn.args.kwonlyargs}
    for param in analysis.params.values():
        lowered = param.kind is not ParamKind.TENSOR_LIST or param.name in analysis.runtime_indexed
        if param.kind in ANNOTATION_TEMPLATES and lowered:
            arg = params_by_name[param.name]
            arg.annotation = from_template(ANNOTATION_TEMPLATES[param.kind], at=arg.annotation)
    prologue = []
    for param in analysis.params.values():
        template = PROLOGUE_TEMPLATES.get(param.kind)
        if template is None:
            continue
        prologue.append(from_template(
            template,
            at=param.node,
            PARAM=param.name,
            NAME=ast.Constant(param.name),
            ORIGIN=ast.Constant(source.location(param.node).short),
        ))
    fn.body = _after_docstring(fn.body, prologue)

    def_origin = source.location(source.tree).short
    fn.decorator_list = [from_template(DECORATOR_TEMPLATE, at=source.tree)]
    origins = {id(fn): f"{def_origin} (@gcdsl.kernel)"}
    for stmt in ast.walk(fn):
        if id(stmt) in rewriter.rewritten_stmts:
            origins[id(stmt)] = source.location(stmt).short
    for stmt in prologue:
        origins[id(stmt)] = source.location(stmt).short

    defaulted = _lift_defaults(fn)
    closure_names = list(source.func.__code__.co_freevars)
    body: List[ast.stmt] = [fn]
    if closure_names or defaulted:
        # Closures and computed defaults belong to the enclosing scope; a binding
        # function takes their values so the desugared def can be executed anew.
        bind_params = ", ".join(closure_names + [default_name(p) for p in defaulted])
        factory = _placed(ast.parse(f"def {BIND_NAME}({bind_params}):\n    return {fn.name}").body[0], source.tree)
        factory.body.insert(0, fn)
        body = [factory]
    module = ast.Module(body=body, type_ignores=[])
    ast.fix_missing_locations(module)
    return Desugared(module, fn, origins, closure_names, defaulted)


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
