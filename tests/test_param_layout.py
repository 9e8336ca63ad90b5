"""The parameter budget sizes arguments exactly as the compiled kernel lays them out.

For every compile-only case (one argument of every kind in `param_kinds`), the bytes
the budget check computed on the host equal the end of the kernel's parameter
buffer in the PTX. A kind sized wrongly, or given up on, fails here.
"""
import pytest

from gcdsl import ptx
from tests.test_ptx_fingerprints import ARCH_CASES


@pytest.mark.parametrize("case", ARCH_CASES["sm_90a"])
def test_budget_equals_the_ptx_parameter_buffer(compile_cases, case):
    compiled = compile_cases("sm_90a", "gcdsl", ARCH_CASES["sm_90a"])
    entries = ptx.entries(compiled.ptx(case)).values()
    budgets = compiled.param_bytes(case)
    if not budgets:
        pytest.skip("no @gcdsl.kernel in this case")
    for kernel, nbytes in budgets.items():
        (entry,) = [e for e in entries if e.name.startswith(f"kernel_cutlass_{kernel}_")]
        assert nbytes == entry.param_bytes, (kernel, [(p.size, p.align) for p in entry.params])
