"""Source capture: the kernel's own text, parsed with line numbers of the user's file."""
from __future__ import annotations

import ast
import inspect
import textwrap
from dataclasses import dataclass
from typing import Callable

from ..diagnostics import Diag, GcdslError, SourceLocation


@dataclass(frozen=True)
class KernelSource:
    """A kernel's `def`, parsed so that every node's line is a line of `filename`."""

    func: Callable
    filename: str
    tree: ast.FunctionDef

    @property
    def name(self) -> str:
        return self.tree.name

    def location(self, node: ast.AST) -> SourceLocation:
        return SourceLocation(self.filename, node.lineno, getattr(node, "col_offset", 0))


def capture(func: Callable) -> KernelSource:
    """Read and parse `func`'s source; fail with a clear error where Python has none."""
    if not inspect.isfunction(func):
        raise GcdslError(
            Diag.NOT_A_FUNCTION,
            f"@gcdsl.kernel applies to a plain Python function, got {type(func).__name__}",
            hint="decorate the `def` of the kernel itself, with @gcdsl.kernel innermost",
        )
    code = func.__code__
    try:
        lines, first_line = inspect.getsourcelines(func)
    except (OSError, TypeError) as err:
        raise GcdslError(
            Diag.NO_SOURCE,
            f"the source of kernel `{func.__name__}` is not available ({err})",
            location=SourceLocation(code.co_filename, code.co_firstlineno),
            hint="gcdsl rewrites the kernel's source: define it with `def` in a .py file "
            "(not a lambda, exec() or an interactive prompt) and import it",
        ) from None
    raw = "".join(lines)
    dedented = textwrap.dedent(raw)
    indent = _indent_width(raw) - _indent_width(dedented)
    module = ast.parse(dedented, filename=code.co_filename)
    ast.increment_lineno(module, first_line - 1)
    if indent:
        for node in ast.walk(module):
            if hasattr(node, "col_offset"):
                node.col_offset += indent
                if getattr(node, "end_col_offset", None) is not None:
                    node.end_col_offset += indent
    tree = module.body[0]
    if not isinstance(tree, ast.FunctionDef):
        raise GcdslError(
            Diag.NOT_A_FUNCTION,
            f"`{func.__name__}` is not defined by a plain `def` (async kernels do not exist)",
            location=SourceLocation(code.co_filename, first_line),
        )
    return KernelSource(func=func, filename=code.co_filename, tree=tree)


def _indent_width(text: str) -> int:
    for line in text.splitlines():
        if line.strip():
            return len(line) - len(line.lstrip())
    return 0
