"""Misuse of descriptor lists and of `@gcdsl.kernel`, caught by the front end.

Each case is a kernel in tests/frontend_cases.py; the rules are in the docstring of
gcdsl/frontend/analysis.py. Every error must carry its stable id, the parameter,
the user's file and exact line (and column), a message and a hint.
"""
import ast
import os
import sys

import pytest

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "fake_cute"))

from gcdsl import Diag, GcdslError, frontend  # noqa: E402
from tests import frontend_cases as fc  # noqa: E402

SOURCE_LINES = open(fc.__file__).read().splitlines()

ALIAS_HINT = "index the parameter directly where the atom is used: {p}[i]"
CAPTURE_HINT = "nested functions are traced separately and cannot see the lowering; pass {p}[i] to them instead"

# (kernel, diag, parameter, text of the offending line, text at the reported column, hint text)
MISUSE = [
    (fc.aliased_by_name, Diag.LIST_ALIASED, "atoms", "xs = atoms", "atoms", ALIAS_HINT),
    (fc.aliased_by_call, Diag.LIST_ALIASED, "atoms", "pick_one(atoms, i)", "atoms, i)", ALIAS_HINT),
    (fc.aliased_by_operand, Diag.LIST_ALIASED, "atoms", "both = atoms + other", "atoms +", ALIAS_HINT),
    (fc.aliased_in_tuple, Diag.LIST_ALIASED, "atoms", "pair = (atoms, i)", "atoms, i)", ALIAS_HINT),
    (fc.aliased_by_star, Diag.LIST_ALIASED, "atoms", "cute.copy(*atoms)", "atoms)", ALIAS_HINT),
    (fc.aliased_by_attribute, Diag.LIST_ALIASED, "atoms", "where = atoms.index(i)", "atoms.index", ALIAS_HINT),
    (fc.aliased_slice, Diag.LIST_ALIASED, "atoms", "rest = atoms[1:]", "atoms[1:]", ALIAS_HINT),
    (fc.aliased_slice_runtime_index, Diag.LIST_ALIASED, "atoms", "cute.copy(atoms[1:][i], i, i)", "atoms[1:][i]",
     "{p}[start + i]"),
    (fc.returned, Diag.LIST_RETURNED, "atoms", "return atoms", "atoms", "indexing the parameter directly: {p}[i]"),
    (fc.yielded, Diag.LIST_RETURNED, "atoms", "yield atoms", "atoms", "indexing the parameter directly: {p}[i]"),
    (fc.captured_by_def, Diag.LIST_CAPTURED, "atoms", "cute.copy(atoms[j], j, j)", "atoms[j]", CAPTURE_HINT),
    (fc.captured_by_lambda, Diag.LIST_CAPTURED, "atoms", "load = lambda j: cute.copy(atoms[j], j, j)", "atoms[j]",
     CAPTURE_HINT),
    (fc.captured_by_class, Diag.LIST_CAPTURED, "atoms", "table = atoms", "atoms", CAPTURE_HINT),
    (fc.captured_in_default, Diag.LIST_CAPTURED, "atoms", "def load(atom=atoms[i]):", "atoms[i]", CAPTURE_HINT),
    (fc.captured_nonlocal, Diag.LIST_CAPTURED, "atoms", "nonlocal atoms", "nonlocal atoms", CAPTURE_HINT),
    (fc.shadowed_by_comprehension, Diag.LIST_SHADOWED, "atoms", "tiles = [atoms * 2 for atoms in range(i)]",
     "atoms in range", "rename the inner variable"),
    (fc.shadowed_by_parameter, Diag.LIST_SHADOWED, "atoms", "def load(atoms, j):", "atoms, j)",
     "rename the inner variable"),
    (fc.shadowed_in_nested_def, Diag.LIST_SHADOWED, "atoms", "atoms = 3", "atoms = 3", "rename the inner variable"),
    (fc.reassigns, Diag.LIST_REASSIGNED, "atoms", "atoms = atoms[1:]", "atoms = ", "bind the new value to another name"),
    (fc.deleted, Diag.LIST_REASSIGNED, "atoms", "del atoms", "atoms", "remove the `del`"),
    (fc.reassigned_by_for, Diag.LIST_REASSIGNED, "atoms", "for atoms in range(i):", "atoms in",
     "bind the new value to another name"),
    (fc.reassigned_by_walrus, Diag.LIST_REASSIGNED, "atoms", "if (atoms := i) > 0:", "atoms :=",
     "bind the new value to another name"),
    (fc.reassigned_by_import, Diag.LIST_REASSIGNED, "atoms", "import os as atoms", "os as atoms",
     "bind the new value to another name"),
    (fc.mutates, Diag.LIST_MUTATED, "atoms", "atoms[i] = None", "atoms[i]", "build the list on the host"),
    (fc.mutated_by_append, Diag.LIST_MUTATED, "atoms", "atoms.append(i)", "atoms.append", "build the list on the host"),
    (fc.mutated_by_del_item, Diag.LIST_MUTATED, "atoms", "del atoms[i]", "atoms[i]", "build the list on the host"),
    (fc.mutated_by_slice_assignment, Diag.LIST_MUTATED, "atoms", "atoms[1:] = []", "atoms[1:]",
     "build the list on the host"),
    (fc.indexed_by_tuple, Diag.BAD_INDEX_TYPE, "atoms", "cute.copy(atoms[:, i], i, i)", "atoms[:, i]",
     "index with one integer (cutlass.Int32) value: {p}[i]"),
    (fc.indexed_by_string, Diag.BAD_INDEX_TYPE, "atoms", 'cute.copy(atoms["first"], i, i)', "atoms[",
     "index with one integer (cutlass.Int32) value: {p}[i]"),
]


def _span(func):
    tree = frontend.capture(func).tree
    return tree.lineno, tree.end_lineno


def test_every_misuse_case_is_in_the_table_and_not_in_cases():
    tabled = {case[0].__name__ for case in MISUSE}
    assert not tabled & {f.__name__ for f in fc.CASES.values()}
    assert len(tabled) == len(MISUSE)
    new_ids = {Diag.LIST_ALIASED, Diag.LIST_CAPTURED, Diag.LIST_RETURNED, Diag.LIST_SHADOWED}
    assert new_ids <= {case[1] for case in MISUSE}


@pytest.mark.parametrize("func, diag, param, line_text, at, hint", MISUSE, ids=[c[0].__name__ for c in MISUSE])
def test_misuse_is_reported_at_the_users_line(func, diag, param, line_text, at, hint):
    with pytest.raises(GcdslError) as info:
        frontend.desugar_function(func)
    err = info.value
    assert err.diag is diag, str(err)
    assert err.param == param
    assert err.location.filename == fc.__file__
    first, last = _span(func)
    assert first <= err.location.line <= last, (err.location, first, last)
    line = SOURCE_LINES[err.location.line - 1]
    assert line.strip() == line_text, (line, str(err))
    assert line[err.location.col:].startswith(at), (line, err.location.col)
    assert err.message and err.hint
    assert hint.format(p=param) in err.hint, err.hint
    text = str(err)
    assert f"[gcdsl:{diag.value}]" in text and err.message in text
    assert f"  hint: {err.hint}" in text and f"  parameter: {param}" in text
    assert line_text in text and "^" in text  # the excerpt, with its caret
    assert text.startswith(f"{fc.__file__}:{err.location.line}:{err.location.col + 1}: ")


@pytest.mark.parametrize("func, diag, param, line_text, at, hint", MISUSE, ids=[c[0].__name__ for c in MISUSE])
def test_analyze_raises_before_desugaring(func, diag, param, line_text, at, hint):
    with pytest.raises(GcdslError) as info:
        frontend.analyze(frontend.capture(func))
    assert info.value.diag is diag


def test_first_problem_in_the_source_is_reported():
    # `atoms = atoms[1:]` both rebinds the parameter (column 5) and binds a slice (column 13).
    with pytest.raises(GcdslError) as info:
        frontend.desugar_function(fc.reassigns)
    assert info.value.diag is Diag.LIST_REASSIGNED and info.value.location.col == 4
    # aliased_by_name aliases on one line and indexes the alias on the next: the alias is reported.
    with pytest.raises(GcdslError) as info:
        frontend.desugar_function(fc.aliased_by_name)
    assert SOURCE_LINES[info.value.location.line - 1].strip() == "xs = atoms"


def test_constant_indices_and_len_stay_supported():
    text = frontend.desugar_function(fc.constants_only)
    assert "__gcdsl__" not in text.split("\n", 2)[2]  # only the decorator is gcdsl's
    assert "first = atoms[0]" in text and "last = atoms[-1]" in text
    assert "for k in range(len(atoms)):" in text
    analysis = frontend.analyze(frontend.capture(fc.constants_only))
    assert not analysis.indexed


def test_allowed_uses_keep_their_form_and_only_runtime_indices_are_rewritten():
    analysis = frontend.analyze(frontend.capture(fc.allowed_uses))
    sites = {name: [ast.unparse(s.node) for s in p.sites] for name, p in analysis.params.items()}
    assert sites == {"loads": ["loads[j % n]", "loads[k]"], "stores": ["stores[scale(k) - 1]"]}
    text = frontend.desugar_function(fc.allowed_uses)
    for kept in ["first = loads[0]", "last = stores[-1]", "n = len(loads) + len(stores[1:])",
                 "for atom in loads:", "for j, atom in enumerate(loads[1:]):",
                 "for load, store in zip(loads, reversed(stores)):", "every = [atom for atom in stores[::2]]",
                 "second = loads[1:][0]"]:
        assert kept in text, kept
    assert "helper(__gcdsl__.bind(loads[0], tma_desc_ptr=__gcdsl__.param_desc_ptr(loads, k)), src)" in text


# ---------------------------------------------------------------------------------------
# Kernel source that Python cannot show
# ---------------------------------------------------------------------------------------
WHAT_TO_DO = "define it with `def` in a .py file"


def _expect_no_source(func):
    with pytest.raises(GcdslError) as info:
        frontend.desugar_function(func)
    err = info.value
    assert err.diag is Diag.NO_SOURCE, str(err)
    assert err.hint and WHAT_TO_DO in err.hint
    assert func.__name__ in err.message and "not available" in err.message
    assert err.location is not None and err.location.line == func.__code__.co_firstlineno
    assert f"hint: {err.hint}" in str(err)
    return err


def test_no_source_for_a_lambda_made_by_eval():
    _expect_no_source(eval("lambda atoms, i: atoms[i]"))


def test_no_source_for_an_execd_function():
    namespace = {}
    exec("def k(atoms, i):\n    return atoms[i]\n", namespace)
    _expect_no_source(namespace["k"])


@pytest.mark.parametrize("filename", ["<generated kernel>", "no_such_kernel_file.py"])
def test_no_source_for_a_function_compiled_from_a_string(filename):
    namespace = {}
    code = compile("def k(atoms, i):\n    return atoms[i]\n", filename, "exec")
    exec(code, namespace)
    err = _expect_no_source(namespace["k"])
    assert err.location.filename == filename


def _file_lambda(tmp_path, text):
    path = tmp_path / "lambda_kernel_module.py"
    path.write_text(text)
    namespace = {"__name__": "lambda_kernel_module"}
    exec(compile(text, str(path), "exec"), namespace)
    return namespace["kernel"]


def test_lambda_in_a_file_is_a_clear_error(tmp_path):
    _expect_no_source(_file_lambda(tmp_path, "kernel = lambda atoms, i: atoms[i]\n"))


def test_lambda_on_a_continuation_line_is_a_clear_error(tmp_path):
    text = "def pick(a, b):\n    return b\n\n\nkernel = pick(0,\n    lambda atoms, i: atoms[i])\n"
    with pytest.raises(GcdslError):
        frontend.desugar_function(_file_lambda(tmp_path, text))
