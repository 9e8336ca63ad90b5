"""Lists lowered before the first trace when the analysis expects a runtime index.

A runtime index that meets a list in the DSL's form stops the trace, and the kernel
is traced again with the list lowered: the first compile of such a kernel used to
trace it twice. The analysis now guesses from the index expressions which lists a
runtime index will reach (`KernelAnalysis.speculative`) and lowers them up front; the
end of the trace checks the guess, and a list no runtime index reached is traced again
in the DSL's form, so its PTX stays the DSL's.

    python -m pytest -q tests/test_speculation.py
"""
from typing import List

import pytest

from gcdsl import frontend


# ---- the guess (front end only, nothing traced) --------------------------------------
def by_parameter(loads: "List[cute.CopyAtom]", k: "cutlass.Int32"):
    cute.copy(loads[k])


def by_block_index(loads: "List[cute.CopyAtom]", tasks: "cute.Tensor"):
    bidx, _, _ = cute.arch.block_idx()
    cute.copy(loads[tasks[bidx]])


def by_unrolled_loop(loads: "List[cute.CopyAtom]", n: "cutlass.Constexpr"):
    for i in cutlass.range_constexpr(n):
        cute.copy(loads[i])
    cute.copy(loads[n - 1])


def by_module_constant(loads: "List[cute.CopyAtom]"):
    cute.copy(loads[LAST])


def by_attribute_of_self(self, loads: "List[cute.CopyAtom]"):
    cute.copy(loads[self.stage])


def with_early_return(loads: "List[cute.CopyAtom]", k: "cutlass.Int32"):
    cute.copy(loads[k])
    return


def literal_only(loads: "List[cute.CopyAtom]"):
    cute.copy(loads[0])


LAST = 2


@pytest.mark.parametrize("func, guessed", [
    (by_parameter, True), (by_block_index, True),
    (by_unrolled_loop, False), (by_module_constant, False), (by_attribute_of_self, False),
    (with_early_return, False),  # the check at the end of the body might not run
    (literal_only, False),
])
def test_the_analysis_guesses_lists_a_runtime_index_reaches(func, guessed):
    analysis = frontend.analyze(frontend.capture(func))
    assert analysis.speculative == ({"loads"} if guessed else set())


def test_only_guessing_kernels_end_with_the_check():
    ends = {f.__name__: frontend.render(frontend.desugar(frontend.analyze(frontend.capture(f)))).rstrip()
            .endswith("__gcdsl__.end_of_trace()") for f in (by_parameter, by_unrolled_loop, literal_only)}
    assert ends == {"by_parameter": True, "by_unrolled_loop": False, "literal_only": False}


# ---- the trace (compiled for sm_90a, no GPU) --------------------------------------------
@pytest.fixture
def traces(monkeypatch):
    """How many times each gcdsl kernel was handed to the DSL to trace, by name."""
    import gcdsl.decorator

    counts = {}
    make = gcdsl.decorator.Kernel._dsl_launcher

    def counting(self, *args, **kwargs):
        counts[self.__name__] = counts.get(self.__name__, 0) + 1
        return make(self, *args, **kwargs)

    monkeypatch.setattr(gcdsl.decorator.Kernel, "_dsl_launcher", counting)
    monkeypatch.setenv("CUTE_DSL_NO_CACHE", "1")
    return counts


def _compile(variant: str, n: int) -> str:
    import cutlass.cute as cute

    from benchmarks import launch_kernels as L

    fn, args = L.fake_args(variant, n)
    return cute.compile(fn, *args, options="--keep-ptx").__ptx__


def test_a_runtime_index_is_lowered_before_the_first_trace(traces):
    from benchmarks import launch_kernels as L
    from benchmarks.common import descriptor_params

    L.list_kernel._learned.clear()  # as a kernel no launch has taught
    L.list_kernel._refuted.clear()
    ptx = _compile("list", 3)
    assert traces == {"list_kernel": 1}
    assert L.list_kernel._learned == {"loads"}  # traced, and the guess kept
    assert descriptor_params(ptx) == 1  # the template; the three descriptors are one blob


def test_a_wrong_guess_is_traced_again_in_the_dsl_form(traces):
    """`loads[j]` with `j = 1` reads like a runtime index but is a Python int: the list
    keeps the DSL's form, three descriptor parameters, as under @cute.kernel."""
    import cutlass.cute as cute

    from benchmarks.common import descriptor_params
    from tests.kernels import guessed_wrong as K

    K.kernel._learned.clear()
    K.kernel._refuted.clear()
    fn, args = K.fake_args(3)
    assert descriptor_params(cute.compile(fn, *args, options="--keep-ptx").__ptx__) == 3
    assert traces == {"kernel": 2}  # the guess, then the DSL's form
    assert K.kernel._refuted == {"loads"} and not K.kernel._learned
    fn, args = K.fake_args(3)
    assert descriptor_params(cute.compile(fn, *args, options="--keep-ptx").__ptx__) == 3
    assert traces == {"kernel": 3}  # refuted guesses are not made again


def test_a_wrong_guess_about_a_tensor_list_keeps_the_dsl_form(traces):
    """The same for `List[cute.Tensor]`: each tensor stays a parameter of its own (no table)."""
    import cutlass.cute as cute

    from gcdsl import ptx
    from tests.kernels import guessed_wrong as K

    K.tensor_kernel._learned.clear()
    K.tensor_kernel._refuted.clear()
    fn, args = K.fake_tensor_args(3)
    (entry,) = ptx.entries(cute.compile(fn, *args, options="--keep-ptx").__ptx__).values()
    assert traces == {"tensor_kernel": 2} and K.tensor_kernel._refuted == {"srcs"}
    assert [p.size for p in entry.params].count(8) >= 4  # three sources and out: a pointer each
