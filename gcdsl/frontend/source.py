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
    wrapper, func = func, inspect.unwrap(func)  # a decorator below ours: find the def, then refuse it
    if not inspect.isfunction(func):
        raise GcdslError(
            Diag.NOT_A_FUNCTION,
            f"@gcdsl.kernel applies to a plain Python function, got {type(func).__name__}",
            hint="decorate the `def` of the kernel itself, with @gcdsl.kernel innermost",
        )
    code = func.__code__

    def no_source(why: str) -> GcdslError:
        return GcdslError(
            Diag.NO_SOURCE,
            f"the source of kernel `{func.__name__}` is not available ({why})",
            location=SourceLocation(code.co_filename, code.co_firstlineno),
            hint="gcdsl rewrites the kernel's source: define it with `def` in a .py file "
            "(not a lambda, exec() or an interactive prompt) and import it",
        )

    if func.__name__ == "<lambda>":
        raise no_source("a lambda has no `def` to rewrite")
    try:
        lines, first_line = inspect.getsourcelines(func)
    except (OSError, TypeError) as err:
        raise no_source(str(err)) from None
    raw = "".join(lines)
    dedented = textwrap.dedent(raw)
    indent = _indent_width(raw) - _indent_width(dedented)
    try:
        module = ast.parse(dedented, filename=code.co_filename)
    except SyntaxError as err:
        raise no_source(f"the lines Python reports for it do not parse on their own: {err.msg}") from None
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
    source = KernelSource(func=func, filename=code.co_filename, tree=tree)
    _check_decorators(source)
    if wrapper is not func:
        raise GcdslError(
            Diag.UNSUPPORTED_DECORATOR,
            f"`{func.__name__}` reaches @gcdsl.kernel wrapped by another function",
            location=source.location(tree),
            hint="apply @gcdsl.kernel to the plain function; put other decorators above it",
        )
    return source


# Below @gcdsl.kernel these only say how the kernel binds as a class attribute.
_METHOD_KINDS = ("staticmethod", "classmethod")


def _decorator_name(node: ast.expr) -> str:
    target = node.func if isinstance(node, ast.Call) else node
    return ast.unparse(target)


def _resolve(node: ast.expr, func: Callable) -> object:
    """The object a decorator expression names (dotted names only), or None."""
    target = node.func if isinstance(node, ast.Call) else node
    attrs = []
    while isinstance(target, ast.Attribute):
        attrs.append(target.attr)
        target = target.value
    if not isinstance(target, ast.Name):
        return None
    closure = dict(zip(func.__code__.co_freevars, func.__closure__ or ()))
    if target.id in closure:
        try:
            obj = closure[target.id].cell_contents
        except ValueError:
            return None
    elif target.id in func.__globals__:
        obj = func.__globals__[target.id]
    else:
        return None
    for attr in reversed(attrs):
        obj = getattr(obj, attr, None)
    return obj


def _is_gcdsl_kernel(node: ast.expr, func: Callable) -> bool:
    obj = _resolve(node, func)
    if obj is None:  # unresolvable: go by the spelling
        return _decorator_name(node) in ("gcdsl.kernel", "kernel")
    return getattr(obj, "__module__", "") == "gcdsl.decorator" and getattr(obj, "__name__", "") == "kernel"


def _check_decorators(source: KernelSource) -> None:
    """@gcdsl.kernel replaces the DSL's decorators, and must be the one applied first.

    The DSL recognises `kernel` and `jit` decorators by name when it reads a
    source, so another of them on the same def would compile the original,
    un-rewritten code; a decorator below ours hands us a wrapper, whose source
    is not the code that would run.
    """
    decorators = source.tree.decorator_list
    ours = [i for i, d in enumerate(decorators) if _is_gcdsl_kernel(d, source.func)]
    for i, d in enumerate(decorators):
        name = _decorator_name(d)
        if i in ours:
            continue
        if name.split(".")[-1] in ("kernel", "jit"):
            raise GcdslError(
                Diag.UNSUPPORTED_DECORATOR,
                f"`@{name}` and `@gcdsl.kernel` on one kernel: @gcdsl.kernel already hands the "
                "desugared kernel to cute.kernel",
                location=source.location(d),
                hint=f"remove `@{name}`",
            )
        if ours and i > ours[-1] and name not in _METHOD_KINDS:
            raise GcdslError(
                Diag.UNSUPPORTED_DECORATOR,
                f"`@{name}` is applied before `@gcdsl.kernel`, which must see the plain function",
                location=source.location(d),
                hint=f"move `@{name}` above `@gcdsl.kernel`",
            )


def _indent_width(text: str) -> int:
    for line in text.splitlines():
        if line.strip():
            return len(line) - len(line.lstrip())
    return 0
