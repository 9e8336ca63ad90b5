"""Analysis: which parameters gcdsl lowers, and where they are indexed at runtime.

Annotations are read syntactically, so the front end needs no `cutlass` import:
`List[cute.CopyAtom]`, `list[CopyAtom]`, `typing.Sequence[cute.CopyAtom]` and the
like all name a list of copy atoms. Every subscript of a list parameter whose index is
not an integer literal is rewritten: whether the index is a runtime value is known only
while the kernel is traced (a `range_constexpr` variable or a `Constexpr` parameter is a
Python `int` then), and the lowering decides there.

What a kernel may do with a descriptor list
-------------------------------------------
The lowering follows the parameter itself and nothing else: only a subscript
written directly on the parameter, `P[i]`, is rewritten. So inside the kernel's
own code (its body, comprehensions and generator expressions included) a
descriptor-list parameter `P` may appear only as:

    P[0], P[-1]       an integer literal index: the DSL's own atom, left as written
    P[expr]           any other index: rewritten to pick through the lowering
                      (`__gcdsl__.bind(P[0], tma_desc_ptr=__gcdsl__.param_desc_ptr(P, expr))`)
    P[a:b]            a slice, consumed where it stands: iterated, passed to `len()`,
                      indexed with an integer literal or sliced again
                      (`for a in P[1:]`, `len(P[::2])`, `P[1:][0]`)
    len(P)            the number of descriptors, a compile-time `int`
    for a in P        iteration, in a `for` or a comprehension, directly or through
                      `enumerate(P)`, `zip(P, Q)` or `reversed(P)` iterated on the spot:
                      unrolled at compile time, each element a real atom

Every other use is an error, raised before anything is traced, at the user's
file, line and column, naming the parameter, with a hint:

    LIST_ALIASED     `P` (or a slice of it) as a plain value: bound to another name
                     (`xs = P`, `rest = P[1:]`), an argument of any call but `len`
                     (`foo(P)`, `f(*P)`, `sorted(P)`), an operand (`P + Q`, `a in P`,
                     `if P:`), put in a tuple, list, set, dict or f-string, an
                     attribute (`P.index(a)`); and a slice indexed by a non-literal
                     (`P[1:][i]`). A runtime index through any of these would not be
                     lowered and would fail in the DSL ("Cannot use a dynamic value as
                     a list index"), or silently pick from the host-side list.
    LIST_RETURNED    `return P`, `yield P`, `yield from P` (or a slice of it): the
                     list cannot leave the kernel. It has its own id because the fix
                     differs (use the atoms in the kernel).
    LIST_CAPTURED    `P` written anywhere in a `def`, `lambda` or `class` nested in the
                     kernel, its header (decorators, defaults, bases) included, or
                     declared `nonlocal` there: nested functions are traced separately
                     and do not see the lowering. Pass `P[i]` to them instead.
    LIST_SHADOWED    a nested scope binds the name `P` (a parameter of a nested `def`
                     or `lambda`, a comprehension variable, a name assigned or
                     declared `global` in a nested `def` or `class`). gcdsl refuses
                     rather than guess which uses mean the parameter; uses of the
                     inner name are not reported again.
    LIST_REASSIGNED  the kernel binds `P` again: assignment, augmented assignment,
                     `del P`, a `for`/`with`/`except`/`match` target, `:=`, an
                     `import ... as P`, a `def P` or `class P`.
    LIST_MUTATED     `P[i] = v`, `P[a:b] = v`, `del P[i]`, `P[i] += v`, and the list's
                     mutating methods (`P.append(a)`, `P.pop()`, ...).
    BAD_INDEX_TYPE   an index that is a tuple (`P[i, j]`, `P[:, 0]`) or a literal that
                     is not an integer (`P["a"]`, `P[1.0]`, `P[None]`): a list takes one
                     integer. (Other non-integer values are caught while tracing.)

When a kernel has several problems, the first one in the source is reported.
The kernel's own decorators and its parameters' annotations and defaults are
evaluated outside the kernel: a name `P` there is not the parameter, and is not
examined. `len`, `enumerate`, `zip` and `reversed` are taken to be the builtins.
"""
from __future__ import annotations

import ast
import enum
from dataclasses import dataclass, field
from typing import Dict, FrozenSet, List, Optional, Set, Tuple

from ..diagnostics import Diag, GcdslError
from .source import KernelSource

_SEQUENCE_NAMES = {"List", "list", "Sequence"}


class ParamKind(enum.Enum):
    DESCRIPTOR_LIST = "List[cute.CopyAtom]"
    TENSOR_LIST = "List[cute.Tensor]"
    GRID_CONSTANT_TENSOR = "Annotated[cute.Tensor, GridConstant]"


@dataclass
class IndexSite:
    """One read of a list parameter that the lowering rewrites: `param[index]` with a
    non-literal index, or `param[a:b]` with a non-literal bound (`is_slice`)."""

    param: str
    node: ast.Subscript
    is_slice: bool = False


@dataclass
class LoweredParam:
    name: str
    kind: ParamKind
    node: ast.arg
    sites: List[IndexSite] = field(default_factory=list)
    literals: List[Tuple[ast.Subscript, int]] = field(default_factory=list)  # `P[3]`, checked on the host


@dataclass(frozen=True)
class TemplatePair:
    """`gcdsl.tma_desc_ptr(table, i, template=atom)` with both names kernel parameters:
    the host checks, when the kernel is called, what the kernel's trace cannot see
    (the template's swizzle against the table's)."""

    table: str
    template: str
    node: ast.Call


@dataclass
class KernelAnalysis:
    source: KernelSource
    params: Dict[str, LoweredParam]
    template_pairs: List[TemplatePair] = field(default_factory=list)
    # Lists a runtime index will likely reach (`runtime_looking`): lowered before the first
    # trace, which then need not stop at the index and start again. A guess, checked at
    # the end of that trace (`__gcdsl__.end_of_trace`): a list no runtime index reached is
    # traced again in the DSL's form, so that it keeps the DSL's PTX.
    speculative: FrozenSet[str] = frozenset()

    @property
    def indexed(self) -> Dict[str, LoweredParam]:
        """Lists with at least one non-literal index: a runtime pick may reach them."""
        return {n: p for n, p in self.params.items() if any(not s.is_slice for s in p.sites)}

    def of_kind(self, kind: ParamKind) -> Dict[str, LoweredParam]:
        return {n: p for n, p in self.params.items() if p.kind is kind}


def _terminal_name(node: ast.AST) -> Optional[str]:
    if isinstance(node, ast.Name):
        return node.id
    if isinstance(node, ast.Attribute):
        return node.attr
    return None


def classify_annotation(annotation: Optional[ast.AST]) -> Optional[ParamKind]:
    if isinstance(annotation, ast.Constant) and isinstance(annotation.value, str):
        try:  # string annotations, as under `from __future__ import annotations`
            annotation = ast.parse(annotation.value, mode="eval").body
        except SyntaxError:
            return None
    if not isinstance(annotation, ast.Subscript):
        return None
    outer, inner = _terminal_name(annotation.value), annotation.slice
    if outer in _SEQUENCE_NAMES and _terminal_name(inner) == "CopyAtom":
        return ParamKind.DESCRIPTOR_LIST
    if outer in _SEQUENCE_NAMES and _terminal_name(inner) == "Tensor":
        return ParamKind.TENSOR_LIST
    if outer == "GridConstant" and _terminal_name(inner) == "Tensor":  # cutlass.GridConstant[cute.Tensor]
        return ParamKind.GRID_CONSTANT_TENSOR
    if outer == "Annotated" and isinstance(inner, ast.Tuple) and inner.elts:
        markers = {_terminal_name(m) for m in inner.elts[1:]}
        if _terminal_name(inner.elts[0]) == "Tensor" and "GridConstant" in markers:
            return ParamKind.GRID_CONSTANT_TENSOR
    return None


def is_constant_index(index: ast.AST) -> bool:
    """An integer literal, possibly negated: indexing it needs no lowering."""
    if isinstance(index, ast.UnaryOp) and isinstance(index.op, (ast.USub, ast.UAdd)):
        index = index.operand
    return isinstance(index, ast.Constant) and type(index.value) is int


def analyze(source: KernelSource) -> KernelAnalysis:
    fn = source.tree
    args = fn.args
    params: Dict[str, LoweredParam] = {}
    for arg in args.posonlyargs + args.args + args.kwonlyargs:
        kind = classify_annotation(arg.annotation)
        if kind is not None:
            params[arg.arg] = LoweredParam(arg.arg, kind, arg)
    lists = {n: p for n, p in params.items() if p.kind in (ParamKind.DESCRIPTOR_LIST, ParamKind.TENSOR_LIST)}
    if lists:
        _collect_sites(source, lists)
    names = {a.arg for a in args.posonlyargs + args.args + args.kwonlyargs}
    speculative: FrozenSet[str] = frozenset()
    if lists and not _leaves_early(fn):  # the check at the end of the body must run
        trace_time = _trace_time_names(fn)
        speculative = frozenset(n for n, p in lists.items()
                                if any(not s.is_slice and runtime_looking(s.node.slice, trace_time) for s in p.sites))
    return KernelAnalysis(source, params, _template_pairs(fn, names), speculative)


def _trace_time_names(fn: ast.FunctionDef) -> Set[str]:
    """Names that hold Python values while the kernel is traced: parameters annotated
    `Constexpr`, targets of `for` loops over `range_constexpr(...)` (the DSL unrolls
    them), and names the body never binds (globals and closure values)."""
    params = fn.args.posonlyargs + fn.args.args + fn.args.kwonlyargs
    constexpr = {a.arg for a in params if a.annotation is not None and "Constexpr" in ast.unparse(a.annotation)}
    bound = {a.arg for a in params}
    unrolled: Set[str] = set()
    for node in ast.walk(fn):
        if isinstance(node, ast.Name) and isinstance(node.ctx, (ast.Store, ast.Del)):
            bound.add(node.id)
        elif isinstance(node, (ast.For, ast.comprehension)) and isinstance(node.iter, ast.Call) \
                and _terminal_name(node.iter.func) == "range_constexpr":
            unrolled |= {n.id for n in ast.walk(node.target) if isinstance(n, ast.Name)}
    used = {n.id for n in ast.walk(fn) if isinstance(n, ast.Name)}
    return constexpr | unrolled | (used - bound)


def runtime_looking(index: ast.AST, trace_time: Set[str]) -> bool:
    """Whether an index expression looks like a runtime value: it reads a name not known
    to be a Python value at trace time, calls something or subscripts something.
    Attributes of `self` (a kernel object's configuration) count as Python values."""
    for node in ast.walk(index):
        if isinstance(node, (ast.Call, ast.Subscript, ast.Await, ast.NamedExpr)):
            return True
        if isinstance(node, ast.Name) and node.id not in trace_time and node.id != "self":
            return True
    return False


def _leaves_early(fn: ast.FunctionDef) -> bool:
    """A `return` (or `yield`) in the kernel's own body, not in a nested function."""
    pending = list(fn.body)
    while pending:
        node = pending.pop()
        if isinstance(node, (ast.Return, ast.Yield, ast.YieldFrom)):
            return True
        if not isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda, ast.ClassDef)):
            pending.extend(ast.iter_child_nodes(node))
    return False


def _template_pairs(fn: ast.AST, names: Set[str]) -> List[TemplatePair]:
    """Every `tma_desc_ptr(P, ..., template=Q)` call with P and Q parameter names."""
    pairs = []
    for node in ast.walk(fn):
        if not (isinstance(node, ast.Call) and _terminal_name(node.func) == "tma_desc_ptr" and node.args):
            continue
        table = node.args[0]
        template = next((k.value for k in node.keywords if k.arg == "template"), None)
        if isinstance(table, ast.Name) and isinstance(template, ast.Name) and {table.id, template.id} <= names:
            pairs.append(TemplatePair(table.id, template.id, node))
    return pairs


_FUNCTIONS = (ast.FunctionDef, ast.AsyncFunctionDef)
_COMPREHENSIONS = (ast.ListComp, ast.SetComp, ast.DictComp, ast.GeneratorExp)
_ITERATING_CALLS = {"enumerate": False, "reversed": False, "zip": True}  # name -> any argument iterated
_MUTATING_METHODS = {
    "append", "extend", "insert", "pop", "remove", "clear", "sort", "reverse",
    "__setitem__", "__delitem__", "__iadd__", "__imul__",
}


@dataclass
class _Scope:
    """A Python scope inside the kernel: which list-parameter names it binds itself."""

    kind: str  # "kernel", "function", "lambda", "class" or "comprehension"
    parent: Optional["_Scope"]
    binds: Set[str]
    what: str  # how messages name it

    def resolves_to_param(self, name: str) -> bool:
        """Whether `name` read in this scope is the kernel's parameter."""
        scope, innermost = self, True
        while scope.kind != "kernel":
            # A class body's names are invisible to the scopes nested in it.
            if name in scope.binds and (innermost or scope.kind != "class"):
                return False
            scope, innermost = scope.parent, False
        return True

    def binding_scope(self) -> "_Scope":
        """Where `:=` binds: the nearest scope that is not a comprehension."""
        scope = self
        while scope.kind == "comprehension":
            scope = scope.parent
        return scope


def _describe(node: ast.AST) -> str:
    if isinstance(node, _FUNCTIONS):
        return f"function `{node.name}`"
    if isinstance(node, ast.ClassDef):
        return f"class `{node.name}`"
    if isinstance(node, ast.Lambda):
        return "lambda"
    return "comprehension"


def _alias_binding(alias: ast.alias) -> Optional[str]:
    if alias.name == "*":
        return None
    return alias.asname or alias.name.split(".")[0]


def _pattern_binding(node: ast.AST) -> Optional[str]:
    if isinstance(node, (ast.MatchAs, ast.MatchStar)):
        return node.name
    if isinstance(node, ast.MatchMapping):
        return node.rest
    return None


def _arg_nodes(args: ast.arguments) -> List[ast.arg]:
    nodes = args.posonlyargs + args.args + args.kwonlyargs
    return nodes + [a for a in (args.vararg, args.kwarg) if a is not None]


def _header_parts(node: ast.AST) -> List[ast.AST]:
    """The parts of a nested def, lambda or class evaluated in the enclosing scope."""
    parts: List[ast.AST] = []
    if isinstance(node, (_FUNCTIONS + (ast.Lambda,))):
        parts += node.args.defaults + [d for d in node.args.kw_defaults if d is not None]
    if isinstance(node, _FUNCTIONS):
        parts += node.decorator_list
        parts += [a.annotation for a in _arg_nodes(node.args) if a.annotation is not None]
        parts += [node.returns] if node.returns is not None else []
    if isinstance(node, ast.ClassDef):
        parts += node.decorator_list + node.bases + node.keywords
    return parts


def _bound_names(scope_node: ast.AST) -> Set[str]:
    """The names a def, lambda or class body binds in its own scope."""
    names: Set[str] = set()
    outer: Set[str] = set()  # declared nonlocal: they bind the enclosing scope's name

    def region(node: ast.AST, in_comprehension: bool) -> None:
        if isinstance(node, (_FUNCTIONS + (ast.ClassDef, ast.Lambda))):
            if not isinstance(node, ast.Lambda):
                names.add(node.name)
            for part in _header_parts(node):
                region(part, in_comprehension)
            return
        if isinstance(node, _COMPREHENSIONS):
            region(node.generators[0].iter, in_comprehension)
            for gen in node.generators:
                for part in ([gen.iter] if gen is not node.generators[0] else []) + gen.ifs:
                    region(part, True)
            for part in (node.key, node.value) if isinstance(node, ast.DictComp) else (node.elt,):
                region(part, True)
            return
        if isinstance(node, ast.NamedExpr):  # binds outside comprehensions too
            if isinstance(node.target, ast.Name):
                names.add(node.target.id)
            region(node.value, in_comprehension)
            return
        if isinstance(node, ast.Name) and not isinstance(node.ctx, ast.Load) and not in_comprehension:
            names.add(node.id)
        elif isinstance(node, ast.Global):
            names.update(node.names)
        elif isinstance(node, ast.Nonlocal):
            outer.update(node.names)
        elif isinstance(node, ast.alias):
            bound = _alias_binding(node)
            if bound:
                names.add(bound)
        elif isinstance(node, ast.ExceptHandler) and node.name:
            names.add(node.name)
        elif _pattern_binding(node):
            names.add(_pattern_binding(node))
        for child in ast.iter_child_nodes(node):
            region(child, in_comprehension)

    if isinstance(scope_node, (_FUNCTIONS + (ast.Lambda,))):
        names.update(a.arg for a in _arg_nodes(scope_node.args))
    body = scope_node.body if isinstance(scope_node.body, list) else [scope_node.body]
    for stmt in body:
        region(stmt, False)
    return names - outer


class _ListUses:
    """Checks every use of the descriptor-list parameters in a kernel's own code
    against the rules in the module docstring, and collects the runtime indices."""

    def __init__(self, source: KernelSource, params: Dict[str, LoweredParam]) -> None:
        self.source = source
        self.params = params
        self.parents: Dict[int, ast.AST] = {}
        self.problems: List[Tuple[Tuple[int, int, int], tuple]] = []  # (where, what): made on raising
        self.sites: List[IndexSite] = []
        self.literals: List[Tuple[str, ast.Subscript, int]] = []

    def run(self) -> None:
        fn = self.source.tree
        for stmt in fn.body:
            for node in ast.walk(stmt):
                for child in ast.iter_child_nodes(node):
                    self.parents[id(child)] = node
        kernel = _Scope("kernel", None, set(), f"kernel `{fn.name}`")
        for stmt in fn.body:
            self.visit(stmt, kernel, None)
        if self.problems:
            _, (diag, location, param, message, hint) = min(self.problems, key=lambda p: p[0])
            raise GcdslError(diag, message, location=location, param=param, hint=hint)
        for site in self.sites:
            self.params[site.param].sites.append(site)
        for name, node, index in self.literals:
            self.params[name].literals.append((node, index))

    # -- reporting ---------------------------------------------------------------------

    def report(self, diag: Diag, node: ast.AST, param: str, message: str, hint: str) -> None:
        location = self.source.location(node)
        where = (location.line, location.col, len(self.problems))
        self.problems.append((where, (diag, location, param, message, hint)))

    def rebound(self, name: str, node: ast.AST, scope: _Scope, how: str) -> None:
        """`node` binds `name` (a list parameter's name) in `scope`."""
        if name not in self.params:
            return
        if scope.kind == "kernel":
            if how == "del":
                self.report(Diag.LIST_REASSIGNED, node, name,
                            f"`{name}` is a gcdsl list parameter and cannot be deleted",
                            hint=f"remove the `del`: `{name}` lives in parameter space for the whole kernel")
            else:
                self.report(Diag.LIST_REASSIGNED, node, name,
                            f"`{name}` is a gcdsl list parameter and cannot be reassigned{how}",
                            hint="bind the new value to another name")
            return
        where = "a comprehension variable is named" if scope.kind == "comprehension" \
            else f"the nested {scope.what} binds"
        self.report(Diag.LIST_SHADOWED, node, name,
                    f"{where} `{name}`, like a gcdsl list parameter; gcdsl does not follow "
                    "a name that means different things in different scopes",
                    hint=f"rename the inner variable, so that `{name}` always means the parameter")

    # -- the walk ----------------------------------------------------------------------

    def visit(self, node: ast.AST, scope: _Scope, nested: Optional[str]) -> None:
        """`nested`: the innermost nested def, lambda or class `node` is part of, if any."""
        if isinstance(node, (_FUNCTIONS + (ast.ClassDef, ast.Lambda))):
            self.visit_nested(node, scope, nested)
        elif isinstance(node, _COMPREHENSIONS):
            self.visit_comprehension(node, scope, nested)
        elif isinstance(node, ast.Name):
            if node.id not in self.params:
                return
            if isinstance(node.ctx, ast.Load):
                self.used(node, scope, nested)
            else:
                self.rebound(node.id, node, scope, "del" if isinstance(node.ctx, ast.Del) else "")
        elif isinstance(node, ast.NamedExpr):
            self.visit(node.value, scope, nested)
            if isinstance(node.target, ast.Name):
                self.rebound(node.target.id, node.target, scope.binding_scope(), " with `:=`")
        else:
            self.check_binding(node, scope, nested)
            for child in ast.iter_child_nodes(node):
                self.visit(child, scope, nested)

    def check_binding(self, node: ast.AST, scope: _Scope, nested: Optional[str]) -> None:
        if isinstance(node, (ast.Global, ast.Nonlocal)):
            for name in node.names:
                if name not in self.params:
                    continue
                if isinstance(node, ast.Nonlocal) and scope.kind != "kernel":
                    self.captured(name, node, nested or scope.what)
                else:
                    self.rebound(name, node, scope, " by `global`")
        elif isinstance(node, ast.alias):
            bound = _alias_binding(node)
            if bound:
                self.rebound(bound, node, scope, " by an import")
        elif isinstance(node, ast.ExceptHandler) and node.name:
            self.rebound(node.name, node, scope, " by `except ... as`")
        elif _pattern_binding(node):
            self.rebound(_pattern_binding(node), node, scope, " by a `case` pattern")

    def visit_nested(self, node: ast.AST, scope: _Scope, nested: Optional[str]) -> None:
        what = _describe(node)
        if not isinstance(node, ast.Lambda):
            kind = "class" if isinstance(node, ast.ClassDef) else "def"
            self.rebound(node.name, node, scope, f" by a nested `{kind}`")
        for part in _header_parts(node):  # evaluated in `scope`, but part of the nested code
            self.visit(part, scope, what)
        kind = "class" if isinstance(node, ast.ClassDef) else \
            "lambda" if isinstance(node, ast.Lambda) else "function"
        inner = _Scope(kind, scope, _bound_names(node) & set(self.params), what)
        if not isinstance(node, ast.ClassDef):
            for arg in _arg_nodes(node.args):
                self.rebound(arg.arg, arg, inner, "")
        body = node.body if isinstance(node.body, list) else [node.body]
        for stmt in body:
            self.visit(stmt, inner, what)

    def visit_comprehension(self, node: ast.AST, scope: _Scope, nested: Optional[str]) -> None:
        first = node.generators[0]
        self.visit(first.iter, scope, nested)  # evaluated in the enclosing scope
        targets = {n.id for g in node.generators for n in ast.walk(g.target)
                   if isinstance(n, ast.Name) and isinstance(n.ctx, ast.Store)}
        inner = _Scope("comprehension", scope, targets & set(self.params), "comprehension")
        for gen in node.generators:
            self.visit(gen.target, inner, nested)  # a stored name binds in the comprehension
            for part in ([] if gen is first else [gen.iter]) + gen.ifs:
                self.visit(part, inner, nested)
        for part in (node.key, node.value) if isinstance(node, ast.DictComp) else (node.elt,):
            self.visit(part, inner, nested)

    # -- one read of a list parameter --------------------------------------------------

    def captured(self, name: str, node: ast.AST, what: str) -> None:
        self.report(Diag.LIST_CAPTURED, node, name,
                    f"`{name}` is used inside the nested {what}, which gcdsl does not rewrite",
                    hint=f"nested functions are traced separately and cannot see the lowering; "
                         f"pass {name}[i] to them instead")

    def used(self, node: ast.Name, scope: _Scope, nested: Optional[str]) -> None:
        name = node.id
        if not scope.resolves_to_param(name):
            return  # an inner variable of the same name, reported where it is bound
        if nested is not None:
            self.captured(name, node, nested)
            return
        expr: ast.AST = node
        parent = self.parents.get(id(expr))
        while isinstance(parent, ast.Subscript) and parent.value is expr:
            if not isinstance(parent.ctx, ast.Load):
                self.report(Diag.LIST_MUTATED, parent, name,
                            f"`{name}` is read-only in the kernel: its entries live in "
                            "grid-constant parameter space",
                            hint="build the list on the host, before the launch")
                return
            if isinstance(parent.slice, ast.Slice):  # still a list: look at what takes it
                bounds = [b for b in (parent.slice.lower, parent.slice.upper, parent.slice.step) if b is not None]
                if expr is node and not all(is_constant_index(b) for b in bounds):
                    self.sites.append(IndexSite(name, parent, is_slice=True))
                expr, parent = parent, self.parents.get(id(parent))
                continue
            if is_constant_index(parent.slice):
                if expr is node:
                    self.literals.append((name, parent, ast.literal_eval(parent.slice)))
                return
            if isinstance(parent.slice, ast.Tuple) or (
                    isinstance(parent.slice, ast.Constant) and type(parent.slice.value) not in (int, bool)):
                self.report(Diag.BAD_INDEX_TYPE, parent, name,
                            f"`{ast.unparse(parent)}` indexes a list with "
                            f"{'a tuple' if isinstance(parent.slice, ast.Tuple) else repr(parent.slice.value)}: "
                            "a list of atoms takes one integer index (or a slice)",
                            hint=f"index with one integer (cutlass.Int32) value: {name}[i]")
                return
            if expr is node:
                self.sites.append(IndexSite(name, parent))
                return
            self.report(Diag.LIST_ALIASED, node, name,
                        f"`{ast.unparse(expr)}` is a slice of `{name}`, a plain compile-time list: "
                        "gcdsl lowers a non-literal index only on the parameter itself",
                        hint=f"index the parameter directly where the atom is used, adding the "
                             f"slice's start: {name}[start + i]")
            return
        if self.is_len(expr, parent) or self.is_iterated(expr, parent):
            return
        what = f"`{name}`" if expr is node else f"`{ast.unparse(expr)}` (a slice of `{name}`)"
        if isinstance(parent, (ast.Return, ast.Yield, ast.YieldFrom)):
            verb = "returned" if isinstance(parent, ast.Return) else "yielded"
            self.report(Diag.LIST_RETURNED, node, name,
                        f"{what} is {verb} from the kernel: a gcdsl list parameter cannot leave it",
                        hint=f"use the atoms inside the kernel, indexing the parameter directly: {name}[i]")
            return
        if isinstance(parent, ast.Attribute) and parent.value is expr and parent.attr in _MUTATING_METHODS:
            self.report(Diag.LIST_MUTATED, node, name,
                        f"`{name}` is read-only in the kernel (`.{parent.attr}`): its entries live in "
                        "grid-constant parameter space",
                        hint="build the list on the host, before the launch")
            return
        self.report(Diag.LIST_ALIASED, node, name,
                    f"{what} is {self.how_used(expr, parent)}; gcdsl lowers only subscripts written "
                    f"on the parameter itself, so a runtime index through anything else is not lowered",
                    hint=f"index the parameter directly where the atom is used: {name}[i]")

    @staticmethod
    def is_len(expr: ast.AST, parent: Optional[ast.AST]) -> bool:
        return (isinstance(parent, ast.Call) and isinstance(parent.func, ast.Name)
                and parent.func.id == "len" and len(parent.args) == 1
                and parent.args[0] is expr and not parent.keywords)

    def is_iterated(self, expr: ast.AST, parent: Optional[ast.AST]) -> bool:
        if isinstance(parent, (ast.For, ast.AsyncFor, ast.comprehension)):
            return parent.iter is expr
        if isinstance(parent, ast.Call) and isinstance(parent.func, ast.Name) \
                and parent.func.id in _ITERATING_CALLS:
            any_arg = _ITERATING_CALLS[parent.func.id]
            positions = parent.args if any_arg else parent.args[:1]
            if any(a is expr for a in positions):
                return self.is_iterated(parent, self.parents.get(id(parent)))
        return False

    @staticmethod
    def how_used(expr: ast.AST, parent: Optional[ast.AST]) -> str:
        if isinstance(parent, (ast.Assign, ast.AnnAssign, ast.AugAssign, ast.NamedExpr)):
            return "bound to another name"
        if isinstance(parent, ast.keyword) or (isinstance(parent, ast.Call) and parent.func is not expr):
            return "passed to a call as a value"
        if isinstance(parent, ast.Starred):
            return "unpacked with `*`"
        if isinstance(parent, (ast.BinOp, ast.BoolOp, ast.Compare, ast.UnaryOp)):
            return "an operand"
        if isinstance(parent, (ast.Tuple, ast.List, ast.Set, ast.Dict)):
            return "put in a container"
        if isinstance(parent, ast.Attribute):
            return f"used through its attribute `.{parent.attr}`"
        if isinstance(parent, ast.FormattedValue):
            return "formatted into a string"
        if isinstance(parent, (ast.If, ast.While, ast.IfExp, ast.Assert)):
            return "tested as a value"
        return "used as a value"


def _collect_sites(source: KernelSource, params: Dict[str, LoweredParam]) -> None:
    """Record each runtime-indexed read `P[i]` of a descriptor list; raise the first
    use that the module docstring's rules forbid."""
    _ListUses(source, params).run()
