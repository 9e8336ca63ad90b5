"""Every `GCDSL_*` environment variable, read in one place.

One rule for every flag: unset, empty, `0`, `false`, `no` and `off` (any case,
surrounding spaces ignored) mean off; any other value means on.

The environment is read once, on first use: `gcdsl.config.get()` returns a
frozen `Config`. `gcdsl.config.reload()` reads it again (tests that change a
variable in-process call it). `GCDSL_BENCH` is read by `.ci/gpu-host.sh` only.
"""
from __future__ import annotations

import dataclasses
import functools
import os
from dataclasses import dataclass, field
from typing import Dict, Mapping, Optional

FLAG_OFF = frozenset({"", "0", "false", "no", "off"})


def flag(value: Optional[str]) -> bool:
    """The one truthiness rule for `GCDSL_*` flags."""
    return value is not None and value.strip().lower() not in FLAG_OFF


def _var(name: str, kind: str, doc: str):
    return field(metadata={"env": name, "kind": kind, "doc": doc})


@dataclass(frozen=True)
class Config:
    check_bounds: bool = _var(
        "GCDSL_CHECK_BOUNDS", "flag",
        "bounds checks for every `@gcdsl.kernel` that does not pass `check_bounds=`")
    dump: bool = _var(
        "GCDSL_DUMP", "flag", "print each kernel's desugared source to stderr when it is first traced")
    dump_dir: Optional[str] = _var(
        "GCDSL_DUMP_DIR", "path", "write each kernel's desugared source to `DIR/<kernel>.<file>.<line>.py`")
    frontend_debug: bool = _var(
        "GCDSL_FRONTEND_DEBUG", "flag",
        "keep gcdsl's own frames and the full exception chain (through gcdsl and the DSL) on its errors")
    update_golden: bool = _var(
        "GCDSL_UPDATE_GOLDEN", "flag", "tests: rewrite `tests/golden/` from the current front end")
    test_decorator: str = _var(
        "GCDSL_TEST_DECORATOR", "text",
        "tests: `gcdsl` compiles the shared test kernels under `@gcdsl.kernel`, anything else (default `cute`) "
        "under `@cute.kernel`")
    upstream_examples: Optional[str] = _var(
        "GCDSL_UPSTREAM_EXAMPLES", "path",
        "tests: NVIDIA's CuTe DSL examples (`examples/python/CuTeDSL` of a CUTLASS checkout); tests that "
        "use them skip when unset")
    test_mutation: Optional[str] = _var(
        "GCDSL_TEST_MUTATION", "text",
        "tests: a seeded bug in the lowering, applied in the compile subprocesses (`python -m tests.mutations`)")
    git_commit: Optional[str] = _var(
        "GCDSL_GIT_COMMIT", "text",
        "benchmarks: the commit measured, recorded in every results JSON where `git` cannot tell "
        "(a copy of the tree without `.git`)")


DEFAULTS = {"test_decorator": "cute"}


def variables() -> Dict[str, dataclasses.Field]:
    """Environment name -> field of `Config`, in declaration order."""
    return {f.metadata["env"]: f for f in dataclasses.fields(Config)}


def read(environ: Mapping[str, str]) -> Config:
    """A `Config` from `environ` (normally `os.environ`)."""
    values = {}
    for name, f in variables().items():
        raw = environ.get(name)
        if f.metadata["kind"] == "flag":
            values[f.name] = flag(raw)
        elif raw is None or raw.strip() == "":
            values[f.name] = DEFAULTS.get(f.name)
        else:
            values[f.name] = raw.strip()
    return Config(**values)


@functools.lru_cache(maxsize=None)
def get() -> Config:
    """The process's configuration, read from the environment on first use."""
    return read(os.environ)


def reload() -> Config:
    """Read the environment again: for tests that change a variable in-process."""
    get.cache_clear()
    return get()
