"""`Carried`: the CuTe DSL's protocol for objects that traced code carries as IR values, written once.

The DSL flattens an object into IR values with `__extract_mlir_values__` and builds
it again from new values with `__new_from_mlir_values__`: when it passes the
object to a kernel (whose body sees block arguments), and when a dynamic loop or
branch carries it. gcdsl's lowered objects are small records whose `parts` are IR
values or DSL objects (an atom, a pointer, a tensor view) and whose other fields
are compile-time (a spec, a count, a parameter name). `Carried` does both
directions from `parts`; the rebuilt object is a copy with new parts.
"""
from __future__ import annotations

import copy
from typing import Any, ClassVar, List, Tuple

from cutlass.cutlass_dsl import extract_mlir_values, new_from_mlir_values


class Carried:
    parts: ClassVar[Tuple[str, ...]] = ()  # attribute names, in the order their values are laid out

    def __extract_mlir_values__(self) -> List[Any]:
        return [value for name in self.parts for value in extract_mlir_values(getattr(self, name))]

    def __new_from_mlir_values__(self, values: List[Any]) -> Any:
        rebuilt = copy.copy(self)
        for name in self.parts:
            part = getattr(self, name)
            count = len(extract_mlir_values(part))
            setattr(rebuilt, name, new_from_mlir_values(part, values[:count]))
            values = values[count:]
        return rebuilt
