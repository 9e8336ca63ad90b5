"""`@gcdsl.kernel` as a drop-in for `@cute.kernel` (compile-only, no GPU needed).

Part 1: plain CuTe DSL in upstream's shapes (tests/kernels/dropin.py) compiles to
the same PTX under both decorators. Part 2: runtime indices inside dynamic control
flow (tests/kernels/dropin_runtime.py), which only gcdsl compiles, lower to the
expected parameter-space shape.

Cases that fail today are strict xfails: they are the specification of the fixes
they wait for, and turn into failures the day they pass, so that the mark goes.
"""
import re

import pytest

from gcdsl import ptx
from tests.compile_cases import DROPIN_CASES, RUNTIME_CASES
from tests.upstream.normalize import first_difference

ARCH = "sm_90a"


def _xfail(reason):
    return pytest.mark.xfail(strict=True, reason=reason)


# Every case passes today; a case that fails while its fix is awaited goes in here, with the
# reason, and becomes a strict xfail.
DROPIN_EXPECTED_FAILURES = {}
RUNTIME_EXPECTED_FAILURES = {}


def _cases(names, failures):
    return [pytest.param(n, marks=_xfail(failures[n])) if n in failures else n for n in names]


@pytest.fixture(scope="module")
def under(compile_cases):
    """under(decorator) -> the drop-in cases compiled with that decorator, each on its own."""
    return lambda decorator: compile_cases(ARCH, decorator, DROPIN_CASES, keep_going=True, sass=False)


@pytest.mark.parametrize("case", _cases(DROPIN_CASES, DROPIN_EXPECTED_FAILURES))
def test_same_ptx_under_both_decorators(under, case):
    under_cute = under("cute").ptx(case)
    under_gcdsl = under("gcdsl").ptx(case)
    assert under_gcdsl == under_cute, "PTX differs:\n" + first_difference(under_cute, under_gcdsl)


def test_the_drop_in_cases_exercise_what_they_claim(under):
    """Under @cute.kernel: the mixed atoms are TMA loads, the prefix names the kernel."""
    compiled = under("cute")
    every_atom = ptx.single_entry(compiled.ptx("dropin_atoms_range_constexpr"))
    assert every_atom.count("cp.async.bulk.tensor") == 2 and len(every_atom.descriptor_runs()[0]) == 2
    one_atom = ptx.single_entry(compiled.ptx("dropin_atoms_constexpr_param"))
    assert one_atom.count("cp.async.bulk.tensor") == 1
    assert ptx.single_entry(compiled.ptx("dropin_name_prefix")).name.startswith("dropin_named")
    # Three tensors in, one out: the DSL passes each tensor of a list as its own parameter.
    assert len(ptx.single_entry(compiled.ptx("dropin_flat_tensors_range_constexpr")).params) == 4


@pytest.fixture(scope="module")
def runtime(compile_cases):
    return compile_cases(ARCH, "gcdsl", RUNTIME_CASES, keep_going=True, sass=False)


RUNTIME_PARAM_LOAD = re.compile(r"ld\.param\.b64\s+%rd\d+,\s*\[%rd\d+(\+\d+)?\]")  # an address computed at run time


def _tensor_table_case(entry, entries):
    """One parameter holds the list: address, two extents and two strides (Int64) per entry."""
    assert entries * 5 * 8 in [p.size for p in entry.params]
    assert RUNTIME_PARAM_LOAD.search(entry.body), "no runtime-addressed load from parameter space"
    assert not entry.uses_local_memory()


@pytest.mark.parametrize("case", _cases(("runtime_tensors_in_loop", "runtime_tensors_in_if",
                                         "runtime_tensors_store_in_loop"), RUNTIME_EXPECTED_FAILURES))
def test_runtime_tensor_list_in_control_flow(runtime, case):
    entry = ptx.single_entry(runtime.ptx(case))
    _tensor_table_case(entry, 4)
    opcode = "st.global" if "store" in case else "ld.global"
    assert entry.count(opcode), f"no {opcode}"


def _assert_prefetches_from_param_space(entry, expected):
    from tests.test_lowering_ptx import _trace_back

    instructions = entry.instructions("prefetch.tensormap")
    assert len(instructions) == expected, instructions
    for instr in instructions:
        chain = _trace_back(entry, re.search(r"\[(%rd\d+)\]", instr).group(1))
        assert "cvta.param" in chain, f"descriptor does not come from parameter space:\n{chain}"


def test_runtime_atoms_in_nested_loops(runtime):
    from tests.test_lowering_ptx import _assert_runtime_descriptors

    entry = ptx.single_entry(runtime.ptx("runtime_atoms_in_loops"))
    for template, blob in (entry.params[0:2], entry.params[2:4]):  # loads, then stores: 6 atoms each
        assert (template.size, template.align) == (128, 64)
        assert (blob.size, blob.align) == (6 * 128, 128), "the list's descriptors are not one packed blob"
    _assert_runtime_descriptors(entry, "cp.async.bulk.tensor", 2)  # one load, one store: no branch over atoms
    _assert_prefetches_from_param_space(entry, 1)


@pytest.mark.parametrize("case", _cases(("runtime_atom_carried_by_loop",), RUNTIME_EXPECTED_FAILURES))
def test_runtime_atom_carried_by_a_loop(runtime, case):
    _assert_prefetches_from_param_space(ptx.single_entry(runtime.ptx(case)), 1)


def test_grid_constant_table_in_a_loop(runtime):
    entry = ptx.single_entry(runtime.ptx("grid_constant_in_loop"))
    assert 12 * 4 * 4 in [p.size for p in entry.params]  # the 12x4 Int32 table, by value
    assert re.search(r"ld\.param\.(?:b|u|s)32\s+%r\d+,\s*\[%rd\d+(\+\d+)?\]", entry.body)
    assert "ld.global" not in entry.body
