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


# ---------------------------------------------------------------------------------------
# Every allowed use of a descriptor list (see gcdsl/frontend/analysis.py), in one kernel.
# ---------------------------------------------------------------------------------------
def allowed_uses(loads: List[cute.CopyAtom], stores: list[cute.CopyAtom], src: cute.Tensor, k: int):
    first = loads[0]
    last = stores[-1]
    n = len(loads) + len(stores[1:])
    for atom in loads:
        cute.copy(atom, src, src)
    for j, atom in enumerate(loads[1:]):
        cute.copy(atom, src, src)
    for load, store in zip(loads, reversed(stores)):
        cute.copy(load, src, src)
    picked = [loads[j % n] for j in range(k)]
    every = [atom for atom in stores[::2]]
    second = loads[1:][0]

    def helper(atom, tensor):
        return cute.copy(atom, tensor, tensor)

    helper(loads[k], src)
    scale = lambda t: t * 2
    cute.copy(stores[scale(k) - 1], first, last)


# ---------------------------------------------------------------------------------------
# Misuse: each kernel fails in the front end (tests/test_misuse.py), so none is in CASES.
# The offending line of each holds the text the test looks for.
# ---------------------------------------------------------------------------------------
def aliased_by_name(atoms: List[cute.CopyAtom], i: int):
    xs = atoms
    cute.copy(xs[i], i, i)


def aliased_by_call(atoms: List[cute.CopyAtom], i: int):
    pick_one(atoms, i)


def aliased_by_operand(atoms: List[cute.CopyAtom], other: List[cute.CopyAtom], i: int):
    both = atoms + other
    cute.copy(both[i], i, i)


def aliased_in_tuple(atoms: List[cute.CopyAtom], i: int):
    pair = (atoms, i)


def aliased_by_star(atoms: List[cute.CopyAtom], i: int):
    cute.copy(*atoms)


def aliased_by_attribute(atoms: List[cute.CopyAtom], i: int):
    where = atoms.index(i)


def aliased_slice(atoms: List[cute.CopyAtom], i: int):
    rest = atoms[1:]
    cute.copy(rest[i], i, i)


def aliased_slice_runtime_index(atoms: List[cute.CopyAtom], i: int):
    cute.copy(atoms[1:][i], i, i)


def returned(atoms: List[cute.CopyAtom], i: int):
    return atoms


def yielded(atoms: List[cute.CopyAtom], i: int):
    yield atoms


def captured_by_def(atoms: List[cute.CopyAtom], i: int):
    def load(j):
        cute.copy(atoms[j], j, j)

    load(i)


def captured_by_lambda(atoms: List[cute.CopyAtom], i: int):
    load = lambda j: cute.copy(atoms[j], j, j)


def captured_by_class(atoms: List[cute.CopyAtom], i: int):
    class Loader:
        table = atoms


def captured_in_default(atoms: List[cute.CopyAtom], i: int):
    def load(atom=atoms[i]):
        return atom


def captured_nonlocal(atoms: List[cute.CopyAtom], i: int):
    def swap():
        nonlocal atoms


def shadowed_by_comprehension(atoms: List[cute.CopyAtom], i: int):
    tiles = [atoms * 2 for atoms in range(i)]


def shadowed_by_parameter(atoms: List[cute.CopyAtom], i: int):
    def load(atoms, j):
        return atoms[j]


def shadowed_in_nested_def(atoms: List[cute.CopyAtom], i: int):
    def count():
        atoms = 3
        return atoms


def deleted(atoms: List[cute.CopyAtom], i: int):
    del atoms


def reassigned_by_for(atoms: List[cute.CopyAtom], i: int):
    for atoms in range(i):
        pass


def reassigned_by_walrus(atoms: List[cute.CopyAtom], i: int):
    if (atoms := i) > 0:
        pass


def reassigned_by_import(atoms: List[cute.CopyAtom], i: int):
    import os as atoms


def mutated_by_append(atoms: List[cute.CopyAtom], i: int):
    atoms.append(i)


def mutated_by_del_item(atoms: List[cute.CopyAtom], i: int):
    del atoms[i]


def mutated_by_slice_assignment(atoms: List[cute.CopyAtom], i: int):
    atoms[1:] = []


CASES["allowed_uses"] = allowed_uses


def indexed_by_tuple(atoms: List[cute.CopyAtom], i: int):
    cute.copy(atoms[:, i], i, i)


def indexed_by_string(atoms: List[cute.CopyAtom], i: int):
    cute.copy(atoms["first"], i, i)


def grouped_tensors(coords: List[cute.Tensor], outs: Sequence[cute.Tensor], atoms: List[cute.CopyAtom], g: int):
    """Tensor lists indexed at runtime: non-literal subscripts go through the lowering."""
    tiles = cute.zipped_divide(coords[g], (64, 64))
    first = outs[0]
    out = outs[g]
    n = len(outs)
    cute.copy(atoms[g], tiles, out)


def constant_tensor_list(outs: List[cute.Tensor]):
    """Only literal indices: the list stays the DSL's own."""
    first = outs[0]
    return first


CASES["grouped_tensors"] = grouped_tensors
CASES["constant_tensor_list"] = constant_tensor_list
