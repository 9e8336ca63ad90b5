"""Rendering the desugared kernel, and making it the source Python and the DSL see.

The text is produced by `ast.unparse`'s own printer, with one addition: every
statement gcdsl rewrote carries a `# file.py:LINE` comment naming its origin.
The text is then compiled under a synthetic filename registered in `linecache`,
because the CuTe DSL re-reads a kernel's source through `inspect`: under the
user's filename it would silently read the original, un-rewritten code.
"""
from __future__ import annotations

import ast
import linecache
import os
import re
from typing import Dict

from .rewrite import Desugared

_COMPOUND = (ast.FunctionDef, ast.If, ast.For, ast.While, ast.With, ast.Try, ast.Match)


class _Printer(ast._Unparser):  # the printer behind ast.unparse
    def __init__(self, origins: Dict[int, str]) -> None:
        super().__init__()
        self._origins = origins

    def traverse(self, node):  # noqa: D401 - mirrors ast._Unparser
        origin = self._origins.get(id(node)) if isinstance(node, ast.stmt) else None
        if origin is None:
            return super().traverse(node)
        if isinstance(node, _COMPOUND):
            # A compound statement's header spans several lines with decorators; say it first.
            self.fill(f"# {origin}")
            return super().traverse(node)
        super().traverse(node)
        self.write(f"  # {origin}")


def render(desugared: Desugared) -> str:
    text = _Printer(desugared.origins).visit(desugared.module).lstrip("\n") + "\n"
    # The printer opens every decorated def with a blank line; keep the origin comment on it.
    return re.sub(r"(# [^\n]*\(@gcdsl\.kernel\)\n)\s*\n", r"\1", text)


def synthetic_filename(func_name: str, user_filename: str, line: int) -> str:
    # The angle brackets make linecache refuse to look for a real file of that name,
    # so a cleared cache fails loudly in `inspect` instead of reading the wrong text.
    return f"<gcdsl: {func_name} from {os.path.basename(user_filename)}:{line}>"


def register_source(filename: str, text: str) -> None:
    """Put `text` in linecache for `filename`; `mtime=None` keeps `checkcache` off it."""
    linecache.cache[filename] = (len(text), None, text.splitlines(keepends=True), filename)
