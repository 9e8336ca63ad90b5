"""What holds for every list parameter gcdsl follows, whatever its entries."""
from __future__ import annotations

from typing import Any

from ..diagnostics import Diag, GcdslError, describe_value


def static_slice(items: Any, lower: Any, upper: Any, step: Any) -> Any:
    """`items[lower:upper:step]` for bounds known at trace time.

    A list parameter is a Python list while the kernel is traced, so its slice bounds
    must be Python ints; a runtime bound has no meaning there.
    """
    for bound in (lower, upper, step):
        if bound is not None and not isinstance(bound, int):
            raise GcdslError(
                Diag.BAD_INDEX_TYPE,
                f"a slice of `{getattr(items, 'param', 'a list parameter')}` has a bound that is "
                f"{describe_value(bound)}, known only at run time",
                param=getattr(items, "param", None),
                hint="slice with bounds known at compile time (literals, Constexpr parameters, "
                     "range_constexpr variables); for a runtime pick, index the parameter itself",
            )
    return items[lower:upper:step]
