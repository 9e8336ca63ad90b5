"""Representative kernels for front-end tests. Never traced: `cute` here is only a name.

`from __future__ import annotations` keeps annotations unevaluated, so this module
imports no DSL; gcdsl reads the annotations from the source text.
"""
from __future__ import annotations

import typing
from typing import Annotated, List, Sequence

import cute  # noqa: F401  (tests/fake_cute: a name for annotations, nothing more)


def copy_by_task(atoms: List[cute.CopyAtom], tasks: cute.Tensor, src: cute.Tensor, dst: cute.Tensor):
    bidx, _, _ = cute.arch.block_idx()
    task = tasks[bidx]
    cute.copy(atoms[task], src, dst, tma_bar_ptr=None)


def constants_only(atoms: list[cute.CopyAtom], src: cute.Tensor):
    first = atoms[0]
    last = atoms[-1]
    cute.copy(first, src, src)
    for k in range(len(atoms)):
        pass
    return last


def loads_and_stores(loads: typing.Sequence[cute.CopyAtom], stores: Sequence[cute.CopyAtom], g: int):
    s, d = cpasync.tma_partition(loads[g % 4], 0, cute.make_layout(1), None, None)
    if g > 0:
        cute.copy(loads[g], d, s, tma_bar_ptr=None)
    else:
        cute.copy(stores[g + 1], s, d)
    while g < 3:
        cpasync.prefetch_descriptor(stores[g])
        g = g + 1


def make_nested(limit):
    def nested(atoms: List[cute.CopyAtom], tile: int, scale: float = limit * 2):
        which = tile % limit
        atom = atoms[which]
        cute.copy(atom, tile, tile)

    return nested


class Holder:
    @staticmethod
    def method(atoms: List[cute.CopyAtom], i: int):
        cute.copy(atoms[i], i, i)


def task_table(tasks: Annotated[cute.Tensor, gcdsl.GridConstant], shapes: cutlass.GridConstant[cute.Tensor],
               atoms: List[cute.CopyAtom]):
    """A docstring stays first; the prologue follows it."""
    t = tasks[cute.arch.block_idx()[0], 0]
    cute.copy(atoms[t], shapes[t], shapes[t])


def reassigns(atoms: List[cute.CopyAtom], i: int):
    atoms = atoms[1:]
    cute.copy(atoms[i], i, i)


def mutates(atoms: List[cute.CopyAtom], i: int):
    atoms[i] = None


CASES = {
    "copy_by_task": copy_by_task,
    "constants_only": constants_only,
    "loads_and_stores": loads_and_stores,
    "nested_closure": make_nested(4),
    "static_method": Holder.method,
    "task_table": task_table,
}
