"""Analysis: which parameters gcdsl lowers, and where they are indexed at runtime.

Annotations are read syntactically, so the front end needs no `cutlass` import:
`List[cute.CopyAtom]`, `list[CopyAtom]`, `typing.Sequence[cute.CopyAtom]` and the
like all name a list of copy atoms. An index is *constant* when it is an integer
literal; anything else may be a runtime value and goes through the lowering,
which still treats a Python `int` at trace time exactly as before.
"""
from __future__ import annotations

import ast
import enum
from dataclasses import dataclass, field
from typing import Dict, List, Optional

from ..diagnostics import Diag, GcdslError
from .source import KernelSource

_SEQUENCE_NAMES = {"List", "list", "Sequence"}


class ParamKind(enum.Enum):
    DESCRIPTOR_LIST = "List[cute.CopyAtom]"
    GRID_CONSTANT_TENSOR = "Annotated[cute.Tensor, GridConstant]"


@dataclass
class IndexSite:
    """One `param[index]` read whose index is not an integer literal."""

    param: str
    node: ast.Subscript


@dataclass
class LoweredParam:
    name: str
    kind: ParamKind
    node: ast.arg
    sites: List[IndexSite] = field(default_factory=list)


@dataclass
class KernelAnalysis:
    source: KernelSource
    params: Dict[str, LoweredParam]

    @property
    def runtime_indexed(self) -> Dict[str, LoweredParam]:
        """Lists with at least one runtime index: these change representation."""
        return {n: p for n, p in self.params.items() if p.sites}

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
    lists = {n: p for n, p in params.items() if p.kind is ParamKind.DESCRIPTOR_LIST}
    if lists:
        _collect_sites(source, lists)
    return KernelAnalysis(source, params)


def _collect_sites(source: KernelSource, params: Dict[str, LoweredParam]) -> None:
    for node in ast.walk(source.tree):
        if isinstance(node, ast.Name) and node.id in params and isinstance(node.ctx, ast.Store):
            raise GcdslError(
                Diag.LIST_REASSIGNED,
                f"`{node.id}` is a gcdsl list parameter and cannot be reassigned",
                location=source.location(node),
                param=node.id,
                hint="bind the new value to another name",
            )
        if not (isinstance(node, ast.Subscript) and isinstance(node.value, ast.Name)):
            continue
        param = params.get(node.value.id)
        if param is None:
            continue
        if not isinstance(node.ctx, ast.Load):
            raise GcdslError(
                Diag.LIST_MUTATED,
                f"`{param.name}` is read-only in the kernel: its entries live in "
                "grid-constant parameter space",
                location=source.location(node),
                param=param.name,
                hint="build the list on the host, before the launch",
            )
        if isinstance(node.slice, ast.Slice) or is_constant_index(node.slice):
            continue
        param.sites.append(IndexSite(param.name, node))
