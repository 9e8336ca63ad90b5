"""Rendering the desugared kernel, and making it the source Python and the DSL see.

The text is `ast.unparse`'s, with one addition: every statement gcdsl rewrote
carries a `# file.py:LINE` comment naming its origin (a compound statement, the
kernel's `def` among them, on the line before it). The text is then compiled under
a synthetic filename registered in `linecache`, because the CuTe DSL re-reads a
kernel's source through `inspect`: under the user's filename it would silently read
the original, un-rewritten code.
"""
from __future__ import annotations

import ast
import linecache
import os
from dataclasses import dataclass
from typing import Any, Dict, List, Optional, Tuple

from .rewrite import Desugared

_COMPOUND = (ast.FunctionDef, ast.If, ast.For, ast.While, ast.With, ast.Try, ast.Match)


def render(desugared: Desugared) -> str:
    return render_with_line_map(desugared)[0]


def _statements_by_path(tree: ast.AST) -> Dict[Tuple, ast.stmt]:
    """Every statement of `tree` by its path from the root: the field names and list
    indices that reach it (`("body", 0, "body", 3, "orelse", 1)`)."""
    found: Dict[Tuple, ast.stmt] = {}

    def visit(node: ast.AST, path: Tuple) -> None:
        if isinstance(node, ast.stmt):
            found[path] = node
        for name, value in ast.iter_fields(node):
            if isinstance(value, ast.AST):
                visit(value, path + (name,))
            elif isinstance(value, list):
                for i, item in enumerate(value):
                    if isinstance(item, ast.AST):
                        visit(item, path + (name, i))

    visit(tree, ())
    return found


def render_with_line_map(desugared: Desugared) -> Tuple[str, Dict[int, int]]:
    """The desugared text, and for each of its lines that starts a statement the user's line.

    Statements are found in the text by parsing it again and pairing each statement of
    the desugared tree with the one at the same path in the parsed tree (`ast.unparse`
    round-trips, so every path leads to a statement of the same kind in both).
    """
    lines = ast.unparse(desugared.module).split("\n")
    ours = _statements_by_path(desugared.module)
    rendered = _statements_by_path(ast.parse("\n".join(lines)))
    if {p: type(n) for p, n in ours.items()} != {p: type(n) for p, n in rendered.items()}:
        raise TypeError("gcdsl internal error: the desugared text does not parse back into the "
                        "statements it was rendered from")
    starts: Dict[int, int] = {}          # index in `lines` -> the user's line
    comment_before: Dict[int, str] = {}  # index in `lines` -> origin, on a line of its own
    comment_after: Dict[int, str] = {}   # index in `lines` -> origin, at the end of the line
    for path, node in ours.items():
        shown = rendered[path]
        first = min([shown.lineno] + [d.lineno for d in getattr(shown, "decorator_list", [])]) - 1
        starts.setdefault(first, node.lineno)
        origin = desugared.origins.get(id(node))
        if origin is not None and isinstance(node, _COMPOUND):
            comment_before[first] = origin
        elif origin is not None:
            comment_after[shown.end_lineno - 1] = origin
    text, line_map = [], {}
    for index, line in enumerate(lines):
        if index in comment_before:
            if text and not text[-1].strip():  # the blank line unparse puts before a nested def
                text.pop()
            text.append(f"{line[:len(line) - len(line.lstrip())]}# {comment_before[index]}")
        if index in starts:
            line_map[len(text) + 1] = starts[index]
        text.append(f"{line}  # {comment_after[index]}" if index in comment_after else line)
    return "\n".join(text) + "\n", line_map


_RENDERINGS: Dict[str, List[str]] = {}  # per def: the distinct desugared texts seen, in order


def synthetic_filename(func_name: str, user_filename: str, line: int, text: str) -> str:
    """The linecache key of one rendering of a kernel: `<gcdsl: k from file.py:LINE>`, and
    ` #2`, ` #3` ... for other renderings of the same `def` (other options, other text),
    so that no two texts ever share a key."""
    # The angle brackets make linecache refuse to look for a real file of that name,
    # so a cleared cache fails loudly in `inspect` instead of reading the wrong text.
    base = f"gcdsl: {func_name} from {os.path.basename(user_filename)}:{line}"
    texts = _RENDERINGS.setdefault(base, [])
    if text not in texts:
        texts.append(text)
    number = texts.index(text) + 1
    return f"<{base}>" if number == 1 else f"<{base} #{number}>"


@dataclass(frozen=True)
class Rendered:
    """One rendering of a kernel: the desugared text, its name in linecache, and for each
    line that starts a statement the user's line it came from."""

    text: str
    filename: str
    line_map: Dict[int, int]

    def code(self) -> Any:
        """Registered in linecache (the DSL and tracebacks read it there), then compiled."""
        self.register()
        return compile(self.text, self.filename, "exec")

    def register(self) -> None:
        # linecache entries can be dropped by anyone; the DSL reads this one on every trace
        register_source(self.filename, self.text)

    def user_line(self, rendered_line: int) -> Optional[int]:
        """The user's line for a line of the text (a statement's continuation lines
        belong to the statement)."""
        starts = [n for n in self.line_map if n <= rendered_line]
        return self.line_map[max(starts)] if starts else None


def render_kernel(desugared: Desugared, func_name: str, user_filename: str, line: int) -> Rendered:
    text, line_map = render_with_line_map(desugared)
    return Rendered(text, synthetic_filename(func_name, user_filename, line, text), line_map)


def register_source(filename: str, text: str) -> None:
    """Put `text` in linecache for `filename`; `mtime=None` keeps `checkcache` off it."""
    linecache.cache[filename] = (len(text), None, text.splitlines(keepends=True), filename)
