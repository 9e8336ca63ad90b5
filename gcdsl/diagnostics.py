"""Errors that point at the user's source.

Every error gcdsl raises is a `GcdslError`: it carries a stable id, the user's
file, line and column, the parameter involved and a hint saying what to do, and
renders them the way compilers do (location, excerpt, caret). This module is
free of `cutlass` imports: the front end raises these errors too.
"""
from __future__ import annotations

import enum
import functools
import itertools
import linecache
import os
import sys
from dataclasses import dataclass
from typing import Callable, Optional, Tuple


class Diag(enum.Enum):
    """Stable diagnostic ids. Tests and users match on these, never on wording."""

    NO_SOURCE = "no-source"
    NOT_A_FUNCTION = "not-a-function"
    UNSUPPORTED_DECORATOR = "unsupported-decorator"
    LIST_REASSIGNED = "list-reassigned"
    LIST_MUTATED = "list-mutated"
    NOT_A_LIST = "not-a-list"
    EMPTY_LIST = "empty-list"
    NOT_A_TMA_ATOM = "not-a-tma-atom"
    ATOM_TYPE_MISMATCH = "atom-type-mismatch"
    INDEX_OUT_OF_RANGE = "index-out-of-range"
    BAD_INDEX_TYPE = "bad-index-type"
    DESC_PTR_CONFLICT = "desc-ptr-conflict"
    BAD_GRID_CONSTANT = "bad-grid-constant"
    GRID_CONSTANT_ON_DEVICE = "grid-constant-on-device"
    PARAM_BUDGET = "param-budget"
    TENSOR_LIST_MISMATCH = "tensor-list-mismatch"
    LIST_ALIASED = "list-aliased"
    LIST_CAPTURED = "list-captured"
    LIST_RETURNED = "list-returned"
    LIST_SHADOWED = "list-shadowed"
    BAD_OP_INPUT = "bad-op-input"


@dataclass(frozen=True)
class SourceLocation:
    """A place in the user's file (1-based line, 0-based column as in `ast`)."""

    filename: str
    line: int
    col: int = 0

    def __str__(self) -> str:
        return f"{self.filename}:{self.line}:{self.col + 1}"

    @property
    def short(self) -> str:
        return f"{os.path.basename(self.filename)}:{self.line}"

    def excerpt(self) -> str:
        """The source line with a caret under the column, or '' if unreadable."""
        text = linecache.getline(self.filename, self.line).rstrip("\n")
        if not text:
            return ""
        gutter = f"{self.line:>5} | "
        return f"{gutter}{text}\n{' ' * (len(gutter) + self.col)}^"


class GcdslError(Exception):
    """A user-facing error: what went wrong, where, with which parameter, and what to do."""

    def __init__(
        self,
        diag: Diag,
        message: str,
        *,
        location: Optional[SourceLocation] = None,
        param: Optional[str] = None,
        hint: Optional[str] = None,
    ) -> None:
        self.diag = diag
        self.message = message
        self.location = location
        self.param = param
        self.hint = hint
        super().__init__(self._render())

    def __reduce__(self):
        # Exception pickles as cls(*self.args), and args holds only the rendered text:
        # rebuild from the fields instead (pytest-xdist, compile worker pools).
        return (_rebuild_error, (type(self), self.diag, self.message, self.location, self.param, self.hint),
                self.__dict__)

    def at(self, location: SourceLocation) -> "GcdslError":
        """The same error, located."""
        return GcdslError(self.diag, self.message, location=location, param=self.param, hint=self.hint)

    def _render(self) -> str:
        head = f"[gcdsl:{self.diag.value}] {self.message}"
        parts = [f"{self.location}: {head}" if self.location else head]
        if self.location is not None:
            excerpt = self.location.excerpt()
            if excerpt:
                parts.append(excerpt)
        if self.param is not None:
            parts.append(f"  parameter: {self.param}")
        if self.hint is not None:
            parts.append(f"  hint: {self.hint}")
        return "\n".join(parts)


def _rebuild_error(cls, diag, message, location, param, hint) -> GcdslError:
    return cls(diag, message, location=location, param=param, hint=hint)


def check_constant_index(index: int, count: int, noun: str) -> int:
    """A trace-time index into a list of `count` entries, normalised to [0, count)."""
    if not -count <= index < count:
        raise GcdslError(
            Diag.INDEX_OUT_OF_RANGE,
            f"index {index} is out of range for a list of {count} {noun}",
            hint=f"use an index in [{-count}, {count})" if count else "the list is empty",
        )
    return index % count


def describe_value(value: object) -> str:
    """`a Float32`, `a Tensor (Float16)`: what a user passed, in a few words."""
    name = type(value).__name__
    dtype = getattr(value, "dtype", None)
    dtype_name = getattr(dtype, "__name__", None) or (str(dtype) if dtype is not None else None)
    article = "an" if name[:1].lower() in "aeiou" else "a"
    return f"{article} {name}" + (f" ({dtype_name})" if dtype_name and dtype_name != name else "")


def located_at_caller(func: Callable) -> Callable:
    """For host-side API functions: a `GcdslError` they raise without a location names
    the line of the user's code that called them."""

    @functools.wraps(func)
    def wrapper(*args, **kwargs):
        try:
            return func(*args, **kwargs)
        except GcdslError as err:
            if err.location is not None:
                raise
            raise err.at(caller_location()) from None

    return wrapper


def caller_location(also_skip: Tuple[str, ...] = (), skip_generated: bool = False) -> Optional[SourceLocation]:
    """Where the user's code called into gcdsl: the innermost frame outside the package
    (and outside the folders `also_skip`, for a call that reached gcdsl through them;
    with `skip_generated`, outside code with no file too, as torch.fx's graphs), its
    column that of the call being made there."""
    inside = (_PACKAGE_DIR, *also_skip)
    frame = sys._getframe(1)
    while frame is not None and (frame.f_code.co_filename.startswith(inside)
                                 or skip_generated and frame.f_code.co_filename.startswith("<")):
        frame = frame.f_back
    if frame is None:
        return None
    return SourceLocation(frame.f_code.co_filename, frame.f_lineno, _call_column(frame))


def _call_column(frame) -> int:
    """The column where the expression of the frame's current call starts (Python 3.11's
    instruction positions), else the line's first non-blank one."""
    positions = getattr(frame.f_code, "co_positions", None)
    if positions is not None and frame.f_lasti >= 0:  # (an instruction a 2-byte code unit)
        line, _, col, _ = next(itertools.islice(positions(), frame.f_lasti // 2, None), (None,) * 4)
        if line == frame.f_lineno and col is not None:
            return col
    text = linecache.getline(frame.f_code.co_filename, frame.f_lineno)
    return len(text) - len(text.lstrip())


_PACKAGE_DIR = os.path.dirname(os.path.abspath(__file__)) + os.sep
