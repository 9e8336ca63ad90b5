"""Front end only: desugaring without the DSL.

Golden files under tests/golden/ hold the desugared text of representative
kernels; `GCDSL_UPDATE_GOLDEN=1 pytest tests/test_frontend.py` rewrites them
after an intended change (review the diff).
"""
import ast
import os
import re
import subprocess
import sys

import pytest

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "fake_cute"))

from gcdsl import Diag, GcdslError, config, frontend  # noqa: E402
from tests import frontend_cases  # noqa: E402

GOLDEN = os.path.join(os.path.dirname(__file__), "golden")


@pytest.mark.parametrize("case", sorted(frontend_cases.CASES))
def test_golden(case):
    text = frontend.desugar_function(frontend_cases.CASES[case])
    path = os.path.join(GOLDEN, f"{case}.py")
    if config.get().update_golden:
        with open(path, "w") as f:
            f.write(text)
    with open(path) as f:
        assert text == f.read()


@pytest.mark.parametrize("case", sorted(frontend_cases.CASES))
def test_rewritten_nodes_keep_lines_inside_the_function(case):
    func = frontend_cases.CASES[case]
    source = frontend.capture(func)
    first = min([source.tree.lineno] + [d.lineno for d in source.tree.decorator_list])
    last = source.tree.end_lineno
    desugared = frontend.desugar(frontend.analyze(source))
    for node in ast.walk(desugared.function):
        if hasattr(node, "lineno") and node is not desugared.function:
            assert first <= node.lineno <= last, (ast.dump(node)[:80], node.lineno, first, last)


@pytest.mark.parametrize("case", sorted(frontend_cases.CASES))
def test_line_map_points_each_statement_at_its_origin(case):
    from gcdsl.frontend.dump import render_with_line_map

    desugared = frontend.desugar(frontend.analyze(frontend.capture(frontend_cases.CASES[case])))
    text, line_map = render_with_line_map(desugared)
    checked = 0
    for number, line in enumerate(text.splitlines(), start=1):
        origin = re.search(r"\S  # frontend_cases\.py:(\d+)$", line)  # a rewritten simple statement
        if origin:
            assert line_map[number] == int(origin.group(1)), (number, line)
            checked += 1
    assert checked or "__gcdsl__.param_desc_ptr" not in text


@pytest.mark.parametrize("case", sorted(frontend_cases.CASES))
def test_output_reparses_to_the_same_tree(case):
    source = frontend.capture(frontend_cases.CASES[case])
    desugared = frontend.desugar(frontend.analyze(source))
    text = frontend.render(desugared)
    assert ast.dump(ast.parse(text)) == ast.dump(desugared.module)


def test_runtime_subscripts_rewritten_constant_ones_kept():
    text = frontend.desugar_function(frontend_cases.constants_only)
    assert "__gcdsl__" not in text.split("\n", 2)[2]  # below the decorator: as written
    assert "atoms[0]" in text and "atoms[-1]" in text
    text = frontend.desugar_function(frontend_cases.copy_by_task)
    # the three parts of a runtime pick: template, descriptor address, binding
    assert "cute.copy(__gcdsl__.bind(atoms[0], tma_desc_ptr=__gcdsl__.param_desc_ptr(atoms, task))" in text
    assert "atoms[task]" not in text


def test_bounds_checks_wrap_the_index_of_every_site():
    from gcdsl.frontend import analyze, capture, desugar, render

    text = render(desugar(analyze(capture(frontend_cases.grouped_tensors)), check_bounds=True))
    line = next(n for n, t in enumerate(open(frontend_cases.__file__).read().splitlines(), 1)
                if "out = outs[g]" in t)
    assert (f"__gcdsl__.tensor_from_table(outs, __gcdsl__.in_bounds(g, len(outs), "
            f"'`outs` in kernel `grouped_tensors` at frontend_cases.py:{line}'))") in text
    assert "__gcdsl__.param_desc_ptr(atoms, __gcdsl__.in_bounds(g, len(atoms)," in text


def test_each_rewritten_statement_names_its_origin():
    func = frontend_cases.loads_and_stores
    text = frontend.desugar_function(func)
    source_lines = open(frontend_cases.__file__).read().splitlines()
    for line in text.splitlines():
        if "__gcdsl__.bind" in line:
            origin = line.rsplit("# frontend_cases.py:", 1)[1]
            assert "[" in source_lines[int(origin) - 1], (line, source_lines[int(origin) - 1])


@pytest.mark.parametrize(
    "func, diag, line_text",
    [
        (frontend_cases.reassigns, Diag.LIST_REASSIGNED, "atoms = atoms[1:]"),
        (frontend_cases.mutates, Diag.LIST_MUTATED, "atoms[i] = None"),
    ],
)
def test_misuse_is_reported_at_the_users_line(func, diag, line_text):
    with pytest.raises(GcdslError) as info:
        frontend.desugar_function(func)
    err = info.value
    assert err.diag is diag and err.param == "atoms"
    assert err.location.filename == frontend_cases.__file__
    assert line_text in open(frontend_cases.__file__).read().splitlines()[err.location.line - 1]
    assert line_text in str(err) and "^" in str(err)


def test_source_unavailable_is_a_clear_error():
    namespace = {}
    exec("def k(atoms):\n    return atoms[0]\n", namespace)
    with pytest.raises(GcdslError) as info:
        frontend.desugar_function(namespace["k"])
    assert info.value.diag is Diag.NO_SOURCE
    assert "define it with `def` in a .py file" in str(info.value)


def test_frontend_imports_no_cutlass():
    code = "import sys, gcdsl.frontend; assert not [m for m in sys.modules if m.startswith('cutlass')]"
    subprocess.run([sys.executable, "-c", code], check=True,
                   cwd=os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def test_statements_pair_by_their_path_in_the_tree():
    """The line map pairs each desugared statement with the parsed one at the same path,
    not by the order of a walk."""
    from gcdsl.frontend.dump import _statements_by_path

    tree = ast.parse("def k(a):\n    if a:\n        x = 1\n    else:\n        for i in a:\n            y = i\n    return 2\n")
    paths = {path: type(node).__name__ for path, node in _statements_by_path(tree).items()}
    assert paths == {
        ("body", 0): "FunctionDef",
        ("body", 0, "body", 0): "If",
        ("body", 0, "body", 0, "body", 0): "Assign",
        ("body", 0, "body", 0, "orelse", 0): "For",
        ("body", 0, "body", 0, "orelse", 0, "body", 0): "Assign",
        ("body", 0, "body", 1): "Return",
    }
