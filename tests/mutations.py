"""Seeded bugs in the lowering, and which tests catch each.

    python -m tests.mutations                 # every mutation: runs the CPU tests that should fail
    python -m tests.mutations index_plus_one  # one

Each mutation is a monkeypatch applied inside the compile subprocesses
(tests/compile_cases.py reads GCDSL_TEST_MUTATION), so the source tree is never
edited. A mutation that leaves every test green is a hole in the tests: the run
exits non-zero.
"""
from __future__ import annotations

import argparse
import os
import subprocess
import sys
from typing import Callable, Dict

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
TESTS = ["tests/test_lowering_ptx.py", "tests/test_ptx_fingerprints.py"]


def _offset_index(transform: Callable) -> None:
    from gcdsl.lower import _dsl

    descriptor_at = _dsl.descriptor_at
    _dsl.descriptor_at = lambda base, index: descriptor_at(base, transform(index))


def _stride(nbytes: int) -> None:
    import cutlass

    from gcdsl.lower import _dsl

    def descriptor_at(base, index):
        address = base.toint() + cutlass.Int64(index) * nbytes
        aligned = _dsl._cute_ir.assume(_dsl._cute_ir.ConstrainedIntType.get(64, 64), address.ir_value())
        return _dsl._cute_ir.inttoptr(_dsl._descriptor_pointer_type(), aligned)

    _dsl.descriptor_at = descriptor_at


def _base_from_entry_one() -> None:
    from gcdsl.lower import _dsl, descriptors

    desc_ptr = descriptors.DescriptorListView.desc_ptr
    descriptors.DescriptorListView.desc_ptr = lambda self, index: _dsl.descriptor_at(desc_ptr(self, 1), index)


def _lists_swapped() -> None:
    """Every runtime pick takes its descriptor from the kernel's other descriptor list."""
    from gcdsl.lower import descriptors, runtime

    arrays: Dict[str, object] = {}
    descriptor_array = descriptors.descriptor_array
    param_desc_ptr = descriptors.param_desc_ptr

    def named(atoms, param):
        arrays[param] = descriptor_array(atoms, param)
        return arrays[param]

    def other(atoms, index):
        others = [a for name, a in arrays.items() if name != atoms.param]
        return param_desc_ptr(others[0] if others else atoms, index)

    runtime.descriptor_array, runtime.param_desc_ptr = named, other


MUTATIONS: Dict[str, Callable[[], None]] = {
    "index_plus_one": lambda: _offset_index(lambda i: i + 1),
    "index_xor_one": lambda: _offset_index(lambda i: i ^ 1),
    "base_from_entry_one": _base_from_entry_one,
    "stride_64_bytes": lambda: _stride(64),
    "loads_and_stores_swapped": _lists_swapped,
}


def apply(name: str) -> None:
    MUTATIONS[name]()


def main(names) -> int:
    holes = []
    for name in names or MUTATIONS:
        env = dict(os.environ, GCDSL_TEST_MUTATION=name)
        proc = subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", *TESTS],
                              cwd=ROOT, env=env, capture_output=True, text=True)
        failed = [line.split()[1] for line in proc.stdout.splitlines() if line.startswith("FAILED")]
        print(f"{name:<26} {len(failed):>3} tests fail" + (f": {', '.join(failed[:4])}" if failed else ""))
        if not failed:
            holes.append(name)
    if holes:
        print(f"not caught: {', '.join(holes)}")
    return 1 if holes else 0


def parse(argv) -> list:
    parser = argparse.ArgumentParser(prog="python -m tests.mutations",
                                     description="Seed each named bug into the lowering and check that a CPU test fails.")
    parser.add_argument("names", nargs="*", metavar="NAME",
                        help=f"mutations to run (default: all of {', '.join(MUTATIONS)})")
    names = parser.parse_args(argv).names
    unknown = [name for name in names if name not in MUTATIONS]
    if unknown:
        parser.error(f"unknown mutation(s) {', '.join(unknown)}; they are {', '.join(MUTATIONS)}")
    return names


if __name__ == "__main__":
    sys.exit(main(parse(sys.argv[1:])))
