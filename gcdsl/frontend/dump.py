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
from typing import Dict, Optional, Tuple

from .rewrite import Desugared

_COMPOUND = (ast.FunctionDef, ast.If, ast.For, ast.While, ast.With, ast.Try, ast.Match)


class _Printer(ast._Unparser):  # the printer behind ast.unparse
    def __init__(self, origins: Optional[Dict[int, str]] = None, **kwargs) -> None:
        # the base class builds nested printers of its own type (f-strings) with kwargs
        super().__init__(**kwargs)
        self._origins = origins or {}
        self.line_map: Dict[int, int] = {}  # rendered line -> the user's line

    def traverse(self, node):  # noqa: D401 - mirrors ast._Unparser
        if isinstance(node, ast.stmt) and hasattr(node, "lineno"):
            # `fill` starts each statement on a new line: the next one.
            self.line_map.setdefault("".join(self._source).count("\n") + 1, node.lineno)
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
    return render_with_line_map(desugared)[0]


def render_with_line_map(desugared: Desugared) -> Tuple[str, Dict[int, int]]:
    """The desugared text, and for each of its lines holding a statement the user's line."""
    printer = _Printer(desugared.origins)
    raw = printer.visit(desugared.module)
    # Drop the printer's leading newline, and the blank line it puts before each
    # decorated def, so the origin comment sits on the decorator; shift the map to match.
    lines = raw.split("\n")
    kept, line_map, removed = [], {}, 0
    for number, line in enumerate(lines):
        blank_after_comment = kept and "(@gcdsl.kernel)" in kept[-1] and not line.strip()
        if (number == 0 and not line) or blank_after_comment:
            removed += 1
            continue
        kept.append(line)
        if number in printer.line_map:
            line_map[number - removed + 1] = printer.line_map[number]
    return "\n".join(kept) + "\n", line_map


def synthetic_filename(func_name: str, user_filename: str, line: int) -> str:
    # The angle brackets make linecache refuse to look for a real file of that name,
    # so a cleared cache fails loudly in `inspect` instead of reading the wrong text.
    return f"<gcdsl: {func_name} from {os.path.basename(user_filename)}:{line}>"


def register_source(filename: str, text: str) -> None:
    """Put `text` in linecache for `filename`; `mtime=None` keeps `checkcache` off it."""
    linecache.cache[filename] = (len(text), None, text.splitlines(keepends=True), filename)
